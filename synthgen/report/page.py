"""The page itself, pure: dataset figures and the run's timeline in, one HTML document out.

What comes first is what a person checking last night's run wants first: is it running or done, how many
rows, how much was cut or empty or failed, and whether the server stayed busy (the timeline). Then each
dataset: its budget, finish reasons, the length histograms split by finish reason, errors, tool calls, turns.

Self-contained: no script, no file from anywhere else (a Content-Security-Policy in the page forbids any),
the charts inline SVG (``svg``). Every figure has its numbers beside it as text. Numbers a test checks carry
``data-stat="<key>"`` (``total/rows``, ``<dataset>/cut``, ...).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from typing import Any

from synthgen.data.rowread import LENGTH, LOOPED
from synthgen.fmt import fmt_duration
from synthgen.report import svg
from synthgen.report.examples import examples_section
from synthgen.report.figures import STOP, DatasetFigures, bins, quantile, share
from synthgen.report.markup import legend_of, stat, utc
from synthgen.report.mix import mix_section
from synthgen.report.overtime import last_run, last_run_line, outages, restarts, run_rate, timeline_section
from synthgen.report.teacher import teacher_section
from synthgen.report.timeline import Timeline

# A folder of thousands of datasets: charts and sections for those with the most output tokens, every one in
# the table.
MAX_CHARTED = 24
LENGTHS = (
    ("output", "output tokens", "Output tokens per row (every generated turn)"),
    ("reasoning", "reasoning tokens (estimated)", "Reasoning tokens per row (estimated from characters)"),
    ("answer", "answer tokens (estimated)", "Answer tokens per row (estimated from characters)"),
    ("prompt", "prompt tokens", "Prompt tokens per row (the last turn's prompt)"),
)


@dataclass
class PageData:
    title: str  # the output folder, or what the export read
    datasets: list[DatasetFigures]
    timeline: Timeline = field(default_factory=Timeline)
    written_at: float = 0.0  # Unix time
    live_every: float | None = None  # the run is going and rewrites the page this often (seconds)
    source: str = "run_inference.py"
    teacher: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (dataset, its teacher.json)


# --- the top of the page ------------------------------------------------------------------------------
def card(label: str, key: str, value: str, note: str = "", warn: bool = False) -> str:
    cls = "card warn" if warn else "card"
    return (
        f'<div class="{cls}"><div class="label">{escape(label)}</div><div class="big">{stat(key, value)}</div>'
        + (f'<div class="note">{note}</div>' if note else "")
        + "</div>"
    )


def _over(names: list[str]) -> str:
    return "over budget: " + ", ".join(escape(n) for n in names) if names else ""


def glance(data: PageData) -> str:
    ds = data.datasets
    rows = sum(d.rows for d in ds)
    tokens = sum(d.output_tokens for d in ds)
    cut, empty = sum(d.cut for d in ds), sum(d.empty for d in ds)
    length, loops = sum(d.finish[LENGTH] for d in ds), sum(d.looped for d in ds)
    failed, skipped = sum(d.failed for d in ds), sum(d.skipped for d in ds)
    over = [d.name for d in ds if d.budget and d.output_tokens > d.budget]
    run, runs = last_run(data.timeline), len(data.timeline.runs)
    rate = run_rate(run)
    bands, marks = outages(data.timeline), restarts(data.timeline)
    down = sum(b - a for a, b in bands)
    cards = [
        card("rows", "total/rows", f"{rows:,}", f"in {len(ds)} dataset{'s' if len(ds) != 1 else ''}"),
        card("output tokens", "total/output_tokens", f"{tokens:,}", _over(over), bool(over)),
        card(
            "cut at max tokens",
            "total/cut_share",
            share(cut, rows),
            stat("total/cut", f"{cut:,}") + f" {_rows(cut)}",
            cut > 0,
        ),
        card(
            "finish: length",
            "total/length_share",
            share(length, rows),
            stat("total/length", f"{length:,}") + f" {_rows(length)} ended at --max-tokens",
            length > 0,
        ),
        card(
            "ended by the loop guard",
            "total/repetition_share",
            share(loops, rows),
            stat("total/repetition", f"{loops:,}") + f" {_rows(loops)} (finish: repetition), left out of exports",
            loops > 0,
        ),
        card(
            "empty answer",
            "total/empty_share",
            share(empty, rows),
            stat("total/empty", f"{empty:,}") + f" {_rows(empty)}",
            empty > 0,
        ),
        card(
            "failed / skipped prompts",
            "total/failed",
            f"{failed:,}",
            f"{stat('total/skipped', f'{skipped:,}')} skipped (errors.jsonl)",
            failed > 0,
        ),
        card(
            "output tokens/s",
            "run/tok_s",
            "-" if rate is None else f"{rate:,.0f}",
            "mean over the last run" + (f" ({runs} runs recorded)" if runs > 1 else ""),
        ),
        card(
            "server restarts / outages",
            "run/restarts",
            f"{len(marks)}",
            f"{stat('run/outages', str(len(bands)))} outage(s), {down:,.0f} s down",
            bool(marks or bands),
        ),
    ]
    return f'<section id="glance" aria-label="At a glance"><div class="cards">{"".join(cards)}</div></section>'


def _rows(n: int) -> str:
    return "row" if n == 1 else "rows"


def _seconds(value: float) -> str:
    return fmt_duration(value) if value >= 1 else f"{value:g} s"


def header(data: PageData) -> str:
    if data.live_every is not None:
        status = (
            f'<p class="status live"><strong>Run in progress.</strong> Page written {escape(utc(data.written_at))}; '
            f"rewritten at least every {_seconds(data.live_every)} while the run goes.</p>"
        )
    else:
        status = (
            f'<p class="status"><strong>Final.</strong> Written {escape(utc(data.written_at))} '
            f"by {escape(data.source)}.</p>"
        )
    return f"<header><h1>Run report: {escape(data.title)}</h1>{status}{last_run_line(data.timeline)}</header>"


# --- servers ------------------------------------------------------------------------------------------
SERVER_KINDS = (STOP, LENGTH, LOOPED)


def servers_section(ds: Sequence[DatasetFigures]) -> str:
    """A line per server that answered (a worker: the server URL, or a gateway's worker id), over every
    dataset, when more than one did: its rows, output tokens, finish reasons and failed prompts."""
    rows: Counter[str] = Counter()
    kinds: Counter[tuple[str, str]] = Counter()
    tokens: Counter[str] = Counter()
    for d in ds:
        tokens.update(d.worker_tokens)
        for (worker, kind), n in d.by_worker.items():
            kind = "failed" if kind.startswith("error ") else kind if kind in SERVER_KINDS else "other"
            kinds[worker, kind] += n
            rows[worker] += 0 if kind == "failed" else n
    workers = sorted({w for w, _ in kinds})
    if len(workers) < 2:
        return ""
    total = sum(rows.values())
    cols = [*SERVER_KINDS, *(["other"] if any(k == "other" for _, k in kinds) else []), "failed"]
    body = "".join(
        f"<tr><td>{escape('(not recorded)' if w == '-' else w)}</td>"
        f"<td>{stat(f'server/{w}/rows', f'{rows[w]:,}')}</td><td>{share(rows[w], total)}</td>"
        f"<td>{stat(f'server/{w}/output_tokens', f'{tokens[w]:,}')}</td>"
        + "".join(f"<td>{stat(f'server/{w}/{k}', f'{kinds[w, k]:,}')}</td>" for k in cols)
        + "</tr>"
        for w in workers
    )
    head = "".join(f"<th>{escape(k)}</th>" for k in cols)
    chart = svg.bars(
        "srv-tokens",
        [svg.Bar("(not recorded)" if w == "-" else w, tokens[w]) for w in workers],
        "Output tokens by server",
        "Output tokens of the rows each server wrote: " + "; ".join(f"{w}: {tokens[w]:,}" for w in workers),
    )
    return (
        '<section id="servers"><h2>Servers</h2><p>Which server (or gateway worker) wrote each row, from the '
        "rows' <code>worker</code> field; failed prompts by the server of their last failure.</p>"
        f'<figure class="wide"><figcaption>Output tokens by server</figcaption>'
        f"{legend_of(('s-stop', 'output tokens of its rows'))}{chart}</figure>"
        f'<div class="scroll"><table class="servers"><thead><tr><th>server</th><th>rows</th><th>share</th>'
        f"<th>output tokens</th>{head}</tr></thead><tbody>{body}</tbody></table></div></section>"
    )


# --- datasets -----------------------------------------------------------------------------------------
def charted(ds: Sequence[DatasetFigures]) -> list[DatasetFigures]:
    """The datasets with charts and a section: all, or the MAX_CHARTED with the most output tokens (in order)."""
    if len(ds) <= MAX_CHARTED:
        return list(ds)
    top = {id(d) for d in sorted(ds, key=lambda d: d.output_tokens, reverse=True)[:MAX_CHARTED]}
    return [d for d in ds if id(d) in top]


def overview(ds: Sequence[DatasetFigures]) -> str:
    shown = charted(ds)
    items = [svg.Bar(d.name, d.output_tokens, d.budget, bool(d.budget and d.output_tokens > d.budget)) for d in shown]
    more = f" The {len(shown)} of {len(ds)} datasets with the most output tokens." if len(shown) < len(ds) else ""
    chart = svg.bars(
        "ds-tokens",
        items,
        "Output tokens by dataset",
        f"Output tokens each dataset's rows hold; a tick marks a dataset's token budget where it has one.{more} "
        + "; ".join(f"{d.name}: {d.output_tokens:,}" + (f" of {d.budget:,}" if d.budget else "") for d in shown),
    )
    note = (
        f"<p>Charts and sections below: the {len(shown)} of {len(ds):,} datasets with the most output tokens; "
        "the table has every one.</p>"
        if more
        else ""
    )
    head = (
        "<tr><th>dataset</th><th>rows</th><th>stop</th><th>length</th><th>cut</th><th>empty</th>"
        "<th>output tokens</th><th>budget</th><th>failed</th><th>skipped</th></tr>"
    )
    body = "".join(
        f'<tr><th scope="row">{_link(d, shown)}</th>'
        f"<td>{stat(d.name + '/rows', f'{d.rows:,}')}</td><td>{stat(d.name + '/stop', f'{d.finish[STOP]:,}')}</td>"
        f"<td>{stat(d.name + '/length', f'{d.finish[LENGTH]:,}')}</td>"
        f"<td>{stat(d.name + '/cut_share', share(d.cut, d.rows))}</td>"
        f"<td>{stat(d.name + '/empty_share', share(d.empty, d.rows))}</td>"
        f"<td>{stat(d.name + '/output_tokens', f'{d.output_tokens:,}')}</td>"
        f"<td>{_budget(d)}</td><td>{stat(d.name + '/failed', f'{d.failed:,}')}</td>"
        f"<td>{stat(d.name + '/skipped', f'{d.skipped:,}')}</td></tr>"
        for d in ds
    )
    keys = [("s-stop", "output tokens")]
    keys += [("s-length", "over its budget")] if any(i.over for i in items) else []
    keys += [("mark", "the dataset's budget")] if any(i.mark is not None for i in items) else []
    legend = legend_of(*keys)
    return (
        f'<section id="datasets"><h2>Datasets</h2>{note}<figure class="wide">'
        f"<figcaption>Output tokens by dataset</figcaption>{legend}{chart}</figure>"
        f'<div class="scroll"><table><thead>{head}</thead><tbody>{body}</tbody></table></div></section>'
    )


def _link(d: DatasetFigures, shown: list[DatasetFigures]) -> str:
    return f'<a href="#ds-{escape(d.name)}">{escape(d.name)}</a>' if any(s is d for s in shown) else escape(d.name)


def _budget(d: DatasetFigures) -> str:
    if not d.budget:
        return "-"
    kind = "cap" if d.budget_kind == "cap" else "plan"
    return f"{stat(d.name + '/budget_share', share(d.output_tokens, d.budget))} of {d.budget:,} ({kind})"


def lengths_table(d: DatasetFigures) -> str:
    head = "<tr><th>per row</th><th>finish</th><th>rows</th><th>p50</th><th>p90</th><th>max</th></tr>"
    body = []
    for attr, label, _ in LENGTHS:
        for finish, values in sorted(d.by_finish(attr).items()):
            key = f"{d.name}/{attr}/{finish}"
            body.append(
                f"<tr><td>{escape(label)}</td><td>{escape(finish)}</td><td>{stat(key + '/n', f'{len(values):,}')}</td>"
                f"<td>{stat(key + '/p50', f'{quantile(values, 0.5):,}')}</td>"
                f"<td>{stat(key + '/p90', f'{quantile(values, 0.9):,}')}</td>"
                f"<td>{stat(key + '/max', f'{max(values):,}')}</td></tr>"
            )
    return f'<div class="scroll"><table><thead>{head}</thead><tbody>{"".join(body)}</tbody></table></div>'


def dataset_section(d: DatasetFigures, index: int) -> str:
    order = [STOP, LENGTH]
    figs = []
    for attr, label, title in LENGTHS:
        split = d.by_finish(attr)
        desc = f"{title} in {d.name}, stacked by finish reason: " + "; ".join(
            f"{finish} {len(v):,} rows, median {quantile(v, 0.5):,}" for finish, v in sorted(split.items())
        )
        chart = svg.histogram(f"h{index}-{attr}", bins(split), order, title, desc, label)
        figs.append(f"<figure><figcaption>{escape(title)}</figcaption>{chart}</figure>")
    finish = ", ".join(f"{stat(f'{d.name}/finish/{k}', f'{n:,}')} {escape(k)}" for k, n in d.finish.most_common())
    facts = [
        f"<li>{stat(d.name + '/rows_n', f'{d.rows:,}')} rows: {finish or 'none yet'}</li>",
        f"<li>cut at max tokens: {stat(d.name + '/cut', f'{d.cut:,}')} ({share(d.cut, d.rows)}); empty answer: "
        f"{stat(d.name + '/empty', f'{d.empty:,}')} ({share(d.empty, d.rows)})</li>",
        f"<li>output tokens: {d.output_tokens:,}" + (f", {_budget(d)}" if d.budget else "") + "</li>",
        f"<li>tool calls made: {stat(d.name + '/tool_calls', f'{d.tool_calls:,}')} in "
        f"{stat(d.name + '/rows_with_tool_calls', f'{d.rows_with_tool_calls:,}')} rows</li>",
        f"<li>turns generated: {stat(d.name + '/turns', f'{d.turns:,}')}"
        + (
            " (" + ", ".join(f"{n:,} rows with {k}" for k, n in sorted(d.turns_per_row.items())) + ")"
            if len(d.turns_per_row) > 1 or (d.turns_per_row and 1 not in d.turns_per_row)
            else ""
        )
        + "</li>",
    ]
    if d.duplicates or d.unreadable or d.malformed:
        facts.append(
            f"<li>not counted: {stat(d.name + '/duplicates', f'{d.duplicates:,}')} duplicate rows (an id and sample "
            f"already counted), {stat(d.name + '/malformed', f'{d.malformed:,}')} malformed rows, "
            f"{stat(d.name + '/unreadable', f'{d.unreadable:,}')} unreadable lines</li>"
        )
    examples = examples_section(d.examples.chosen(quantile([s.output for s in d.samples], 0.5)))
    return (
        f'<section class="dataset" id="ds-{escape(d.name)}"><h3>{escape(d.name)}</h3>'
        f'<ul class="facts">{"".join(facts)}</ul>'
        f'{finish_legend(list(d.finish))}<div class="figs">{"".join(figs)}</div>{lengths_table(d)}'
        f"{mix_section(d.name, d.mix)}{workers_table(d)}{errors_table(d)}{examples}</section>"
    )


# Every finish reason a histogram can draw, with its colour's class and its words in the legend.
FINISH_KEYS = {
    STOP: "stop (ended on its own)",
    LENGTH: "length (cut at --max-tokens)",
    LOOPED: "repetition (ended by the loop guard)",
    "abort": "abort",
}


def finish_legend(reasons: Sequence[str]) -> str:
    """A key for every finish reason the dataset's charts draw (stop and length always)."""
    shown = [STOP, LENGTH, *sorted(r for r in reasons if r not in (STOP, LENGTH))]
    return legend_of(*((f"s-{r}", FINISH_KEYS.get(r, r)) for r in shown), lead="finish reason:")


def workers_table(d: DatasetFigures) -> str:
    """Finish reasons and failures by the worker that answered, when more than one did."""
    workers = sorted({w for w, _ in d.by_worker})
    if len(workers) < 2:
        return ""
    kinds = sorted({k for _, k in d.by_worker})
    head = "".join(f"<th>{escape(k)}</th>" for k in kinds)
    body = "".join(
        f"<tr><td>{escape(w)}</td>"
        + "".join(f"<td>{stat(f'{d.name}/worker/{w}/{k}', f'{d.by_worker[w, k]:,}')}</td>" for k in kinds)
        + "</tr>"
        for w in workers
    )
    return (
        f'<div class="scroll"><table class="workers"><thead><tr><th>worker</th>{head}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def errors_table(d: DatasetFigures) -> str:
    if not d.errors:
        return "<p>No failed or skipped prompts.</p>"
    body = "".join(
        f"<tr><td>{escape(status)}</td><td>{escape(kind)}</td>"
        f"<td>{stat(f'{d.name}/errors/{status}/{kind}', f'{n:,}')}</td>"
        f'<td class="example">{escape(d.error_example.get((status, kind), "")[:300])}</td></tr>'
        for (status, kind), n in sorted(d.errors.items())
    )
    return (
        '<div class="scroll"><table class="errors"><thead><tr><th>status</th><th>kind</th><th>prompts</th>'
        f"<th>first example</th></tr></thead><tbody>{body}</tbody></table></div>"
    )


# --- the document -------------------------------------------------------------------------------------
CSS = """
:root{--fg:#1a202c;--muted:#4a5568;--line:#e2e8f0;--bg:#fff;--card:#f7fafc;--warn:#c05621}
*{box-sizing:border-box}body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
background:var(--bg);margin:0 auto;max-width:78rem;padding:1rem}
h1{font-size:1.4rem;margin:.2rem 0;overflow-wrap:anywhere}
h2{font-size:1.15rem;margin:1.6rem 0 .5rem;border-bottom:1px solid var(--line)}
h3{font-size:1.05rem;margin:1.4rem 0 .3rem}.status{margin:.2rem 0;color:var(--muted)}.status.live strong{color:#2f855a}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(9.5rem,1fr));gap:.6rem}
.card{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:.5rem .7rem}
.card .label{font-size:.8rem;color:var(--muted);text-transform:uppercase;letter-spacing:.03em}
.card .big{font-size:1.6rem;font-weight:600}.card .note{font-size:.8rem;color:var(--muted)}
.card.warn{border-color:var(--warn)}.card.warn .big{color:var(--warn)}
.figs{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,26rem),1fr));gap:.8rem}
figure{margin:0}figure.wide{max-width:46rem}figcaption{font-size:.85rem;color:var(--muted)}.chart{width:100%;height:auto;display:block}
.grid{stroke:var(--line)}.tick,.value,.label,.empty{font-size:11px;fill:var(--muted)}
:where(rect[class^="s-"]){fill:#718096}.s-stop{fill:#2b6cb0}.s-length{fill:#dd6b20}.s-repetition{fill:#9b2c2c}
.line{fill:none;stroke-width:1.8}.s-rate{stroke:#2b6cb0;fill:#2b6cb0}.s-inflight{stroke:#2f855a;fill:#2f855a}
.s-running{stroke:#6b46c1;fill:#6b46c1}.s-waiting{stroke:#dd6b20;fill:#dd6b20}.line.s-rate,.line.s-inflight,
.line.s-running,.line.s-waiting{fill:none}.outage{fill:#e53e3e;fill-opacity:.18}
.restart{stroke:#c53030;stroke-width:2;stroke-dasharray:4 3}
.m-stop{stroke:#1a202c;stroke-width:2}.m-killed{stroke:#718096;stroke-width:2;stroke-dasharray:2 2}
.m-resume{stroke:#319795;stroke-width:2;stroke-dasharray:6 3}.m-continue{stroke:#d53f8c;
stroke-width:2;stroke-dasharray:6 3}.mark{stroke:var(--fg);stroke-width:2}
.legend{font-size:.85rem;color:var(--muted)}.legend .item{white-space:nowrap}
.key{display:inline-block;width:.9em;height:.9em;margin:0 .25em 0 .8em;
vertical-align:-.1em;border-radius:2px;background:#718096}.key.s-rate{background:#2b6cb0}.key.s-inflight{background:#2f855a}
.key.s-running{background:#6b46c1}.key.s-waiting{background:#dd6b20}.key.outage{background:#fbd5d5}.key.restart{background:#c53030}.key.m-stop{background:#1a202c}
.key.m-killed{background:#718096}.key.m-resume{background:#319795}.key.m-continue{background:#d53f8c}
.key.mark{background:var(--fg);width:.25em}.key.s-stop{background:#2b6cb0}.key.s-length{background:#dd6b20}.key.s-repetition{background:#9b2c2c}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0;font-variant-numeric:tabular-nums}
th,td{border-bottom:1px solid var(--line);padding:.2rem .5rem;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}.runs td,.runs th{text-align:left}.runs td{white-space:normal}
td.example{text-align:left;white-space:normal;min-width:16rem}
.facts{margin:.2rem 0 .6rem;padding-left:1.2rem}a{color:#2b6cb0}
h4{font-size:.95rem;margin:1rem 0 .2rem}details.example{border:1px solid var(--line);border-radius:6px;
margin:.4rem 0;padding:.3rem .6rem}details.example summary{cursor:pointer;overflow-wrap:anywhere}
.example .why{font-weight:600}.example dt{font-size:.8rem;color:var(--muted);margin-top:.4rem}.example dd{margin:0}
.example pre{white-space:pre-wrap;overflow-wrap:anywhere;unicode-bidi:isolate;max-height:24rem;overflow:auto;
margin:.1rem 0;padding:.4rem;background:var(--card);font-size:.8rem}.example .none{margin:0;color:var(--muted)}
@media (max-width:40rem){body{padding:.5rem;font-size:14px}.card .big{font-size:1.3rem}h1{font-size:1.15rem}}
@media print{body{max-width:none;padding:0;font-size:10pt}.scroll{overflow:visible}
table{font-size:8pt}th,td{white-space:normal;padding:.1rem .3rem}.key,.card{print-color-adjust:exact;
-webkit-print-color-adjust:exact}.card{break-inside:avoid}figure,table,tr{break-inside:avoid}
.dataset{break-before:auto}details{display:none}a{color:inherit;text-decoration:none}
.figs{grid-template-columns:1fr 1fr}}
"""


def build_page(data: PageData) -> str:
    refresh = (
        f'<meta http-equiv="refresh" content="{max(5, round(data.live_every))}">' if data.live_every is not None else ""
    )
    sections = [
        header(data),
        glance(data),
        timeline_section(data.timeline, data.live_every is not None),
        servers_section(data.datasets),
        overview(data.datasets),
        teacher_section(data.teacher),
        *(dataset_section(d, i) for i, d in enumerate(charted(data.datasets))),
    ]
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'\">"
        f"{refresh}<title>Run report: {escape(data.title)}</title><style>{CSS}</style></head>\n<body>\n"
        + "\n".join(sections)
        + f'\n<footer><p class="status">{escape(data.source)}; numbers from the rows of each '
        "dataset's raw_responses.jsonl and errors.jsonl and the run's timeline.jsonl. Reasoning and answer "
        "tokens are estimates (rows record output tokens, not how many were reasoning): each turn's output "
        "tokens split by the characters of its reasoning and answer.</p></footer>\n</body></html>\n"
    )
