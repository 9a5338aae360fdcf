"""The run report through the command line, against the simulator: <output-dir>/report.html is written
while the run goes (the simulator paused, so the run cannot have ended), rewritten at the end, named by the
run's last line, and every number on it equals what the rows, errors.jsonl and the run's own log say.
``export_training.py --report --html FILE`` writes the page for a selection of datasets.

One run serves the module (a simulator start and a run cost seconds on two cores)."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from report_page import expected_stats, page_stats, read_rows
from simharness import sigterm_in_flight, start_sim, wait_until
from workspace import Workspace

EXPORT = Path(__file__).resolve().parents[2] / "export_training.py"


class Done:
    def __init__(self, ws: Workspace, log: str, live_page: str, code: int):
        self.ws, self.log, self.live_page, self.code = ws, log, live_page, code


@pytest.fixture(scope="module")
def done(tokenizers, tmp_path_factory) -> Done:
    ws = Workspace(tmp_path_factory.mktemp("report"))
    # Answers grow with the prompt; at --max-tokens 24 the longer ones are cut ("length").
    ws.dataset("short", "alpha", [{"id": f"a{i}", "prompt": "tell me " + "more " * (i % 9)} for i in range(24)])
    rows = [{"id": f"b{i}", "prompt": f"q{i}"} for i in range(10)] + [{"id": "huge", "prompt": "word " * 400}]
    ws.dataset("short", "beta", rows)
    with start_sim(tokenizers["chatml"], "--context-length", "256") as sim:
        sim.pause()
        log = ws.root / "run.log"
        proc = ws.start(
            "--server-url", sim.url, "--partition", "short", "--max-tokens", "24", "--concurrency", "4",
            "--status-interval", "0.2", "--report-interval", "0.3", log=log,
        )  # fmt: skip
        page = ws.outputs / "report.html"
        try:
            wait_until(lambda: page.exists() and "Run in progress" in page.read_text(), what="the live page")
            live = page.read_text()
            assert proc.poll() is None  # the simulator holds every request: the run is still going
        finally:
            sim.resume()
        code = proc.wait(timeout=120)
    return Done(ws, log.read_text(), live, code)


def test_the_page_is_written_while_the_run_goes_and_says_so(done):
    assert '<meta http-equiv="refresh" content="5">' in done.live_page  # an open tab follows the run
    assert "rewritten at least every 0 s" not in done.live_page
    assert "Run in progress" in done.live_page


def test_the_runs_last_line_names_the_final_page(done):
    assert done.code == 0, done.log
    last = done.log.rstrip("\n").splitlines()[-1]
    # The last line names the rows, the page and the export command.
    assert last.startswith("rows: ") and "; report: outputs/report.html; export them with: " in last, last
    final = (done.ws.outputs / "report.html").read_text()
    assert "Final." in final and "Run in progress" not in final and 'http-equiv="refresh"' not in final
    assert not list(done.ws.outputs.glob(".report.html.*"))  # no temporary file left behind


def test_every_number_on_the_page_equals_the_rows_the_errors_and_the_runs_log(done):
    out = done.ws.outputs
    stats = page_stats((out / "report.html").read_text())
    expected: dict[str, str] = {}
    for name in ("alpha", "beta"):
        expected |= expected_stats(
            name, read_rows(out / name / "raw_responses.jsonl"), read_rows(out / name / "errors.jsonl")
        )
    assert {k: stats.get(k) for k in expected} == expected
    # The data are what the test meant to make: some cut, one skip.
    assert expected["alpha/length"] != "0" and expected["alpha/stop"] != "0"
    assert expected["beta/errors/skipped/prompt_too_long"] == "1"
    # The run's own summary table (TOTAL line: done, total, this run, stop, length, repetition, failed, skipped,
    # generated): nothing was lost, so every token generated is in a row.
    total = re.search(r"^TOTAL" + r"\s+(\S+)" * 9, done.log, re.M)
    assert total is not None, done.log
    assert stats["total/rows"] == total[1]
    assert (stats["total/length"], stats["total/repetition"]) == (total[5], total[6])
    assert stats["total/output_tokens"] == total[9]
    assert (stats["total/failed"], stats["total/skipped"]) == (total[7], total[8])


def test_the_timeline_has_the_runs_samples_and_the_page_its_rate(done):
    lines = [orjson.loads(line) for line in (done.ws.outputs / "timeline.jsonl").read_bytes().splitlines()]
    samples = [s for s in lines if "event" not in s]
    assert [e["event"] for e in lines if "event" in e] == ["start", "end"]
    assert len(samples) >= 2 and samples[-1]["done"] == 34  # 24 + 10; the huge prompt is skipped
    assert {"tok_s", "in_flight", "running", "waiting", "restarts"} <= samples[-1].keys()
    shown = page_stats((done.ws.outputs / "report.html").read_text())["run/tok_s"]
    span = samples[-1]["t"] - samples[0]["t"]  # stamps are to 0.1 s: a fast run can fit in one
    if span > 0:
        assert shown == f"{(samples[-1]['tokens'] - samples[0]['tokens']) / span:,.0f}"
    else:
        assert shown == "-"  # no time between the samples: no rate rather than a made-up one


def test_export_writes_the_page_of_the_chosen_datasets(done):
    ws = done.ws
    target = ws.root / "beta.html"
    result = ws.run("--dataset", "beta", "--report", "--html", str(target), script=EXPORT)
    assert result.returncode == 0, result.stderr
    assert f"wrote {target} (the report as a page)" in result.stderr
    stats = page_stats(target.read_text())
    out = ws.outputs
    expected = expected_stats(
        "beta", read_rows(out / "beta" / "raw_responses.jsonl"), read_rows(out / "beta" / "errors.jsonl")
    )
    assert {k: stats.get(k) for k in expected} == expected
    assert "alpha/rows" not in stats and stats["total/rows"] == expected["beta/rows"]


def test_export_html_without_report_is_one_line_and_exit_2(done):
    result = done.ws.run("--html", "x.html", script=EXPORT)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "export_training.py: error: --html FILE goes with --report (e.g. --report --html outputs/report.html)"
    ]


def test_a_rerun_with_nothing_to_do_writes_the_page_too(done):
    # No server is needed (nor running) when every prompt is done; the page is written all the same.
    result = done.ws.run("--server-url", "http://127.0.0.1:9", "--dataset", "alpha", "--max-tokens", "24")
    assert result.returncode == 0, result.stderr
    assert "nothing to do" in result.stderr
    last = result.stderr.rstrip("\n").splitlines()[-1]
    # The last line names the rows, the page and the export command.
    assert last.startswith("rows: ") and "; report: outputs/report.html; export them with: " in last, last
    assert page_stats((done.ws.outputs / "report.html").read_text())["total/rows"] == "34"  # the whole folder


def test_a_resumed_runs_page_counts_every_row_once_after_a_missing_newline_and_a_torn_line(tokenizers, tmp_path):
    """A resume's first page goes on from the figures its resume scan made (no second read of the rows):
    after a run whose last row lost its newline, and one whose last line was torn by a kill, the page of
    each rerun still equals the rows on disk."""
    ws = Workspace(tmp_path)
    ws.dataset("short", "gamma", [{"id": f"g{i}", "prompt": "tell me " + "more " * (i % 7)} for i in range(12)])
    results = ws.outputs / "gamma" / "raw_responses.jsonl"
    with start_sim(tokenizers["chatml"]) as sim:
        common = ("--server-url", sim.url, "--partition", "short", "--max-tokens", "16", "--concurrency", "2")

        def run_and_check(*extra: str) -> None:
            result = ws.run(*common, *extra)
            assert result.returncode == 0, result.stderr
            page = (ws.outputs / "report.html").read_text()
            stats = page_stats(page)
            expected = expected_stats("gamma", read_rows(results), read_rows(ws.outputs / "gamma" / "errors.jsonl"))
            assert {k: stats.get(k) for k in expected} == expected
            assert "not counted:" not in page  # no row read twice (a duplicate id), no line misread (unreadable)

        run_and_check("--max-samples", "4")
        results.write_bytes(results.read_bytes().rstrip(b"\n"))  # the last row whole, its newline lost
        run_and_check("--max-samples", "8")
        with open(results, "ab") as fh:
            fh.write(b'{"id": "g99", "content": "cut by a ki')  # a kill mid-write
        run_and_check()
    assert len(read_rows(results)) == 12


def test_a_stop_and_the_rerun_continuing_its_partial_outputs_are_marked_on_the_pages_timeline(ws, make_sim):
    # Scheduler mode: a decode step gives every running request a token; the stop comes with 4 in flight.
    sim = make_sim("chatml", "--max-total-tokens", "60000", "--step-time", "0.002", "--output-len-dist", "fixed:120")
    ws.dataset("short", "d", 6)
    common = ("--server-url", sim.url, "--max-tokens", "400", "--concurrency", "4", "--status-interval", "0.5")
    sigterm_in_flight(sim, ws.start(*common, "--drain-timeout", "600"))
    rerun = ws.run(*common)
    assert rerun.returncode == 0 and "continuing 4 partial outputs" in rerun.stderr, rerun.stderr
    events = [e for e in read_rows(ws.outputs / "timeline.jsonl") if e.get("event") in ("start", "end")]
    assert [(e["event"], e["detail"], e.get("continuing")) for e in events] == [
        ("start", "", 0),
        ("end", "stopped by SIGTERM", None),
        ("start", "continues 4 partial outputs", 4),
        ("end", "", None),
    ]
    page = (ws.outputs / "report.html").read_text()
    assert page.count('<line class="m-stop"') == 2 and page.count('<line class="m-continue"') == 2
    runs = re.search(r'<table class="runs">(.*?)</table>', page, re.S).group(1)
    assert "stopped by SIGTERM" in runs and "continues 4 partial outputs" in runs
