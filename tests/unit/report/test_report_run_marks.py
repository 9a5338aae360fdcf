"""Each run on the page's timeline: a stop by a signal, a run that ended with no end recorded (killed), a rerun
that resumed the folder and one that continues earlier partial outputs are marked where they happened, keyed
in the legend, and listed in the runs table."""

from __future__ import annotations

import re

import orjson

from synthgen.report.overtime import run_marks, run_spans
from synthgen.report.page import PageData, build_page
from synthgen.report.timeline import parse_timeline

T = 1_764_630_000.0


def sample(run: str, t: float, done: int) -> dict:
    return {"t": t, "run": run, "tok_s": 100.0, "in_flight": 4, "running": 4, "waiting": 0, "done": done,
            "tokens": done * 10, "restarts": 0, "down": False}  # fmt: skip


def night(last_ended: bool) -> bytes:
    lines = [
        {"t": T, "run": "r1", "event": "start", "detail": "", "rows_before": 0, "continuing": 0, "continue_cut": 0},
        sample("r1", T + 10, 5),
        {"t": T + 20, "run": "r1", "event": "end", "detail": "stopped by SIGTERM"},
        {"t": T + 100, "run": "r2", "event": "start", "detail": "", "rows_before": 5, "continuing": 4},
        sample("r2", T + 110, 3),  # then a kill -9: no end line
        {"t": T + 200, "run": "r3", "event": "start", "detail": "", "rows_before": 8},
        sample("r3", T + 210, 2),
    ]
    if last_ended:
        lines.append({"t": T + 220, "run": "r3", "event": "end", "detail": ""})
    return b"\n".join(orjson.dumps(line) for line in lines)


def test_stops_kills_resumes_and_continuations_are_marked_where_they_happened():
    spans = run_spans(parse_timeline(night(last_ended=True)))
    assert [(s.run, s.ended, s.rows_before, s.continuing) for s in spans] == [
        ("r1", "stopped by SIGTERM", 0, 0),
        ("r2", None, 5, 4),
        ("r3", "", 8, 0),
    ]
    assert [(t - T, css) for t, css, _ in run_marks(spans, live=False)] == [
        (20, "m-stop"),
        (100, "m-continue"),
        (110, "m-killed"),
        (200, "m-resume"),
    ]


def test_the_last_run_of_a_live_page_is_going_not_killed():
    spans = run_spans(parse_timeline(night(last_ended=False)))
    assert [css for _, css, _ in run_marks(spans, live=True)] == ["m-stop", "m-continue", "m-killed", "m-resume"]
    assert "m-killed" in [css for t, css, _ in run_marks(spans, live=False) if t == T + 210]


def test_a_timeline_from_before_start_figures_marks_a_rerun_all_the_same():
    old = [{"t": T, "run": "a", "event": "start", "detail": ""}, sample("a", T + 1, 1),
           {"t": T + 2, "run": "a", "event": "end", "detail": ""},
           {"t": T + 9, "run": "b", "event": "start", "detail": ""}, sample("b", T + 10, 1),
           {"t": T + 11, "run": "b", "event": "end", "detail": ""}]  # fmt: skip
    marks = run_marks(run_spans(parse_timeline(b"\n".join(orjson.dumps(x) for x in old))), live=False)
    assert [(t - T, css, words) for t, css, words in marks] == [(9, "m-resume", "run started: a rerun")]


def test_the_page_draws_each_mark_on_both_charts_keys_it_and_lists_the_runs():
    page = build_page(PageData("o", [], parse_timeline(night(last_ended=True)), T + 300))
    for css in ("m-stop", "m-continue", "m-killed", "m-resume"):
        assert page.count(f'<line class="{css}"') == 2, css  # tokens/s and requests in flight
        assert f'<span class="key {css}"></span>' in page, css
    runs = re.search(r'<table class="runs">(.*?)</table>', page, re.S).group(1)
    assert runs.count("<tr>") == 4  # the head and three runs
    assert "stopped by SIGTERM" in runs and "no end recorded (killed?)" in runs
    assert "resumed over 5 rows; continues 4 partial outputs" in runs
    assert "marked: 1 run resumed, 1 run continues partial outputs, 1 run stopped (signal)" in page


def test_the_live_report_records_what_a_run_goes_on_from_and_why_it_stopped(tmp_path):
    from synthgen.report.folder import LiveReport
    from synthgen.report.timeline import read_timeline

    report = LiveReport(tmp_path, 0, 1, start={"rows_before": 12, "continuing": 3, "continue_cut": 0})
    report.finish(None, "stopped by SIGTERM")
    events = read_timeline(tmp_path / "timeline.jsonl").events
    assert [(e["event"], e["detail"]) for e in events] == [
        ("start", "resumes over 12 rows; continues 3 partial outputs"),
        ("end", "stopped by SIGTERM"),
    ]
    assert (events[0]["rows_before"], events[0]["continuing"], events[0]["continue_cut"]) == (12, 3, 0)
