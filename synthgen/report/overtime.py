"""The page's "Over time" section (pure): the run's timeline drawn, its outages shaded, restarts of a launched
server marked, and each run's start and end marked: a rerun that resumed a folder, one that continues
earlier partial outputs (or extends cut answers, --continue-cut), one stopped by a signal, and one that
ended with no end recorded (killed). A table lists the runs recorded and another the plotted samples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from synthgen.fmt import fmt_duration
from synthgen.report import svg
from synthgen.report.markup import cell, legend_of, utc
from synthgen.report.timeline import Timeline

MAX_POINTS = 400  # per chart line: a day of 10 s samples is thinned to this


def last_run(timeline: Timeline) -> list[dict[str, Any]]:
    runs = timeline.runs
    return [s for s in timeline.samples if runs and s.get("run") == timeline.samples[-1].get("run")]


def run_rate(samples: Sequence[dict[str, Any]]) -> float | None:
    """Output tokens per second over a run: its tokens between its first and last sample."""
    if len(samples) < 2 or samples[-1]["t"] <= samples[0]["t"]:
        return None
    tokens = float(samples[-1].get("tokens") or 0) - float(samples[0].get("tokens") or 0)
    return tokens / float(samples[-1]["t"] - samples[0]["t"])


def outages(timeline: Timeline) -> list[tuple[float, float]]:
    """(down, back) of every outage: an ``outage`` event to the next ``recovered`` or end of its run."""
    bands: list[tuple[float, float]] = []
    down: dict[str, float] = {}
    last_t = timeline.samples[-1]["t"] if timeline.samples else 0.0
    for event in timeline.events:
        run = str(event.get("run"))
        if event["event"] == "outage":
            down.setdefault(run, event["t"])
        elif event["event"] in ("recovered", "end") and run in down:
            bands.append((down.pop(run), event["t"]))
    bands += [(t, max(last_t, t)) for t in down.values()]
    return sorted(bands)


def restarts(timeline: Timeline) -> list[float]:
    """When the launched server was restarted: the samples where its restart count went up."""
    marks: list[float] = []
    seen: dict[str, int] = {}
    for s in timeline.samples:
        run, count = str(s.get("run")), int(s.get("restarts") or 0)
        if count > seen.get(run, 0):
            marks += [s["t"]] * (count - seen.get(run, 0))
        seen[run] = max(seen.get(run, 0), count)
    return marks


def thin(samples: Sequence[dict[str, Any]], limit: int = MAX_POINTS) -> list[dict[str, Any]]:
    step = max(1, -(-len(samples) // limit))
    picked = list(samples[::step])
    if samples and picked[-1] is not samples[-1]:
        picked.append(samples[-1])
    return picked


def _points(samples: Sequence[dict[str, Any]], key: str) -> list[tuple[float, float | None]]:
    """(t, value) with a break (None) where the run changes."""
    out: list[tuple[float, float | None]] = []
    run = None
    for s in samples:
        if run is not None and s.get("run") != run:
            out.append((s["t"], None))
        run = s.get("run")
        value = s.get(key)
        out.append((s["t"], float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None))
    return out


@dataclass(frozen=True)
class RunSpan:
    """One run as its timeline recorded it: its start event's figures and how it ended."""

    run: str
    start: float
    last: float  # its end event, else the last line it wrote
    ended: str | None  # None: no end recorded; "": ended; else why it stopped ("stopped by SIGTERM")
    rows_before: int  # rows already in the folder when it started (a resume)
    continuing: int  # earlier runs' partial outputs and turns it continues
    continue_cut: int  # --continue-cut N
    done: Any  # prompts done in it (its last sample's count)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def run_spans(timeline: Timeline) -> list[RunSpan]:
    """Every run of the timeline, in the order they started."""
    lines: dict[str, list[dict[str, Any]]] = {}
    for line in sorted([*timeline.samples, *timeline.events], key=lambda x: x["t"]):
        lines.setdefault(str(line.get("run", "")), []).append(line)
    spans = []
    for run, seen in lines.items():
        start = next((e for e in seen if e.get("event") == "start"), {})
        end = next((e for e in reversed(seen) if e.get("event") == "end"), None)
        samples = [x for x in seen if "event" not in x]
        detail = end.get("detail") if end is not None else None
        spans.append(
            RunSpan(
                run=run,
                start=seen[0]["t"],
                last=(end or seen[-1])["t"],
                ended=None if end is None else detail if isinstance(detail, str) else "",
                rows_before=_count(start.get("rows_before")),
                continuing=_count(start.get("continuing")),
                continue_cut=_count(start.get("continue_cut")),
                done=samples[-1].get("done") if samples else None,
            )
        )
    return spans


def _begun(span: RunSpan, first: bool) -> str:
    """What a run's start continued, in words ("" for a first run on an empty folder)."""
    parts = [f"resumed over {span.rows_before:,} rows" if span.rows_before else "" if first else "a rerun"]
    if span.continuing:
        parts.append(f"continues {span.continuing:,} partial outputs")
    if span.continue_cut:
        parts.append(f"--continue-cut {span.continue_cut:,}")
    return "; ".join(p for p in parts if p)


def _how(span: RunSpan, live: bool) -> str:
    if span.ended is None:
        return "running" if live else "no end recorded (killed?)"
    return span.ended or "ended"


def run_marks(spans: Sequence[RunSpan], live: bool) -> list[tuple[float, str, str]]:
    """(time, css class, words) of each run's start that resumed or continued, and of each end that was a stop
    or was never recorded (the last run of a live page is still going)."""
    marks = []
    for i, span in enumerate(spans):
        begun = _begun(span, i == 0)
        if begun:
            css = "m-continue" if span.continuing or span.continue_cut else "m-resume"
            marks.append((span.start, css, f"run started: {begun}"))
        going = live and i == len(spans) - 1
        if span.ended is None and not going:
            marks.append((span.last, "m-killed", "run's last line: no end recorded (killed?)"))
        elif span.ended:
            marks.append((span.last, "m-stop", span.ended))
    return marks


MARK_KEYS = {
    "restart": "server restart",
    "m-resume": "run resumed",
    "m-continue": "run continues partial outputs",
    "m-stop": "run stopped (signal)",
    "m-killed": "run ended unrecorded (killed?)",
}


def runs_table(spans: Sequence[RunSpan], live: bool) -> str:
    body = "".join(
        f"<tr><td>{escape(s.run)}</td><td>{escape(utc(s.start))}</td><td>{escape(utc(s.last))}</td>"
        f"<td>{escape(_how(s, live and i == len(spans) - 1))}</td><td>{escape(_begun(s, i == 0) or '-')}</td>"
        f"<td>{cell(s.done)}</td></tr>"
        for i, s in enumerate(spans)
    )
    return (
        f"<details open><summary>{len(spans):,} run{'s' if len(spans) != 1 else ''} recorded</summary>"
        '<div class="scroll"><table class="runs"><thead><tr><th>run</th><th>started</th><th>last heard of</th>'
        "<th>how it ended</th><th>what it went on from</th><th>prompts done</th></tr></thead>"
        f"<tbody>{body}</tbody></table></div></details>"
    )


def timeline_section(timeline: Timeline, live: bool = False) -> str:
    samples = thin(timeline.samples)
    if not samples:
        return (
            '<section id="timeline"><h2>Over time</h2>'
            "<p>No timeline yet (the run records one as it goes).</p></section>"
        )
    span = (samples[0]["t"], samples[-1]["t"])
    spans = run_spans(timeline)
    bands = outages(timeline)
    marks = [(t, "restart", "server restart") for t in restarts(timeline)] + run_marks(spans, live)
    marks = [(min(max(t, span[0]), span[1]), css, words) for t, css, words in marks]  # an end after the last sample
    kinds = [css for css in MARK_KEYS if any(m[1] == css for m in marks)]
    told = f"{len(bands)} outage(s) shaded; marked: " + (
        ", ".join(f"{sum(m[1] == css for m in marks)} {MARK_KEYS[css]}" for css in kinds) or "nothing"
    )
    rate = svg.lines(
        "tl-rate",
        [svg.Series("output tokens/s (last minute)", "s-rate", _points(samples, "tok_s"))],
        span,
        "Output tokens per second over time",
        f"Output tokens per second over the last minute, sampled from {utc(span[0])} to {utc(span[1])}; {told}.",
        bands,
        marks,
    )
    load = svg.lines(
        "tl-load",
        [
            svg.Series("requests in flight", "s-inflight", _points(samples, "in_flight")),
            svg.Series("server running", "s-running", _points(samples, "running")),
            svg.Series("server queued", "s-waiting", _points(samples, "waiting")),
        ],
        span,
        "Requests in flight and the server's running and queued requests over time",
        f"Requests this run had in flight, and the server's own running and queued counts, from {utc(span[0])} "
        f"to {utc(span[1])}; {told}. A server that stays busy keeps running near its limit and a short queue.",
        bands,
        marks,
    )
    legend = legend_of(
        ("s-rate", "output tokens/s"),
        ("s-inflight", "in flight"),
        ("s-running", "server running"),
        ("s-waiting", "server queued"),
        ("outage", "server down"),
        *((css, MARK_KEYS[css]) for css in dict.fromkeys(["restart", *kinds])),
    )
    rows = "".join(
        f"<tr><td>{escape(utc(s['t']))}</td><td>{cell(s.get('tok_s'))}</td><td>{cell(s.get('in_flight'))}</td>"
        f"<td>{cell(s.get('running'))}</td><td>{cell(s.get('waiting'))}</td><td>{cell(s.get('done'))}</td>"
        f"<td>{'down' if s.get('down') else ''}</td></tr>"
        for s in samples
    )
    table = (
        f'<details><summary>The {len(samples):,} plotted samples as a table</summary><div class="scroll">'
        "<table><thead><tr><th>time</th><th>tok/s</th><th>in flight</th><th>running</th><th>queued</th>"
        f"<th>done</th><th>server</th></tr></thead><tbody>{rows}</tbody></table></div></details>"
    )
    return (
        f'<section id="timeline"><h2>Over time</h2>{legend}<div class="figs">'
        f"<figure><figcaption>Output tokens per second (last minute)</figcaption>{rate}</figure>"
        f"<figure><figcaption>Requests in flight; the server's running and queued</figcaption>{load}</figure>"
        f"</div>{runs_table(spans, live)}{table}</section>"
    )


def last_run_line(timeline: Timeline) -> str:
    """When the last run started, and when it ended or was last heard of."""
    run = last_run(timeline)
    if not run:
        return ""
    ended = [e for e in timeline.events if e.get("run") == run[-1].get("run") and e["event"] == "end"]
    start, last = run[0]["t"], (ended[-1]["t"] if ended else run[-1]["t"])
    how = "ended" if ended else "last sample"
    done = run[-1].get("done")
    return (
        f'<p class="status">Last run: started {escape(utc(start))}, {how} {escape(utc(last))} '
        f"({fmt_duration(last - start)}); {cell(done)} prompts done in it.</p>"
    )
