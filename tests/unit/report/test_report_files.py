"""The report's files: the timeline appended and read back (a torn line skipped, a link never written
through), the output folder read incrementally, the page written atomically, and the live report a run
keeps beside its requests."""

from __future__ import annotations

import asyncio
import os
from types import SimpleNamespace

import orjson
from report_page import make_rows, page_stats, write_jsonl

from synthgen.report.folder import FolderReport, LiveReport, token_budgets, write_page
from synthgen.report.timeline import TimelineWriter, read_timeline, sample_of


def test_the_timeline_is_appended_and_read_back_skipping_a_torn_line(tmp_path):
    path = tmp_path / "timeline.jsonl"
    writer = TimelineWriter(path, "run-1")
    writer.event("start", now=10.0)
    writer.sample({"tok_s": 5.0, "in_flight": 2}, now=11.0)
    writer.event("outage", "connection refused", now=12.0)
    writer.close()
    with open(path, "ab") as fh:
        fh.write(b'{"t": 13.0, "run": "run-1", "tok_')  # a run killed mid-line
    timeline = read_timeline(path)
    assert timeline.samples == [{"t": 11.0, "run": "run-1", "tok_s": 5.0, "in_flight": 2}]
    assert [(e["event"], e["detail"]) for e in timeline.events] == [("start", ""), ("outage", "connection refused")]
    assert timeline.runs == ["run-1"]


def test_a_link_in_place_of_the_timeline_is_said_once_and_never_written_through(tmp_path):
    kept = tmp_path / "keep.txt"
    kept.write_text("mine\n")
    (tmp_path / "timeline.jsonl").symlink_to(kept)
    told: list[str] = []
    writer = TimelineWriter(tmp_path / "timeline.jsonl", "r", told.append)
    writer.event("start")
    writer.sample({"tok_s": 1.0})
    assert kept.read_text() == "mine\n"
    assert len(told) == 1 and "is a symbolic link" in told[0] and "not recorded from here on" in told[0]


def test_a_sample_holds_the_status_lines_figures():
    tally = SimpleNamespace(done=7, failed=1, skipped=2, tokens=900, in_flight=3)
    progress = SimpleNamespace(tally=tally, outage_since=None, rates=lambda: (12.34, 10.0))
    monitor = SimpleNamespace(latest=SimpleNamespace(running=5, waiting=1), limit=SimpleNamespace(target=16))
    assert sample_of(progress, monitor, 2) == {
        "tok_s": 12.3, "in_flight": 3, "running": 5, "waiting": 1, "target": 16, "done": 7, "failed": 1,
        "skipped": 2, "tokens": 900, "restarts": 2, "down": False,
    }  # fmt: skip
    no_load = sample_of(progress, SimpleNamespace(latest=None, limit=SimpleNamespace(target=16)), 0)
    assert (no_load["running"], no_load["waiting"]) == (None, None)


def test_the_folder_is_read_incrementally_and_again_when_a_file_is_replaced(tmp_path):
    results = tmp_path / "d" / "raw_responses.jsonl"
    rows = make_rows("d", 30)
    write_jsonl(results, rows[:20])
    folder = FolderReport(tmp_path)
    (d,) = folder.refresh()
    assert d.rows == 20
    with open(results, "ab") as fh:
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in rows[20:25]))
        fh.write(orjson.dumps(rows[25])[:30])  # a row being written: waits for its newline
    (d,) = folder.refresh()
    assert (d.rows, d.unreadable, d.samples[-1].output) == (25, 0, rows[24]["completion_tokens"])
    with open(results, "ab") as fh:
        fh.write(orjson.dumps(rows[25])[30:] + b"\n")
    assert folder.refresh()[0].rows == 26
    write_jsonl(results, rows[:3])  # rewritten (a resume's repair, a changed-rows rewrite): read from the start
    assert folder.refresh()[0].rows == 3


def test_a_large_results_file_is_read_a_block_at_a_time_never_held_whole(tmp_path, monkeypatch):
    """A resume over a 5 GB results file once took 5 GB of memory for its first page (every line held in
    a list before one was parsed). The file here is over 100 blocks of 64 KiB: the page may hold a few blocks
    and the figures, never the file, nor a row's token ids as ints."""
    import tracemalloc

    from synthgen.report import folder as folder_module

    monkeypatch.setattr(folder_module, "READ_CHUNK", 64 << 10)
    results = tmp_path / "d" / "raw_responses.jsonl"
    rows = make_rows("d", 1200, ids=True)
    write_jsonl(results, rows)
    size = results.stat().st_size
    assert size > 100 * (64 << 10)
    tracemalloc.start()
    try:
        (d,) = FolderReport(tmp_path).refresh()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (d.rows, d.unreadable) == (1200, 0)
    assert d.output_tokens == sum(r["completion_tokens"] for r in rows)
    assert peak < size / 10, (peak, size)


def test_a_row_the_tool_wrote_with_ascii_escapes_is_counted_not_unreadable(tmp_path):
    """A lone surrogate in a tool call's arguments makes the row a standard-library line of escapes
    (records.json_line), which orjson refuses: the page counts it as the row it is."""
    from synthgen.data.records import json_line

    results = tmp_path / "d" / "raw_responses.jsonl"
    rows = make_rows("d", 3)
    rows[1]["tool_calls"] = [{"type": "function", "function": {"name": "f", "arguments": '{"q": "\ud83d"}'}}]
    results.parent.mkdir(parents=True)
    results.write_bytes(b"".join(json_line(r) for r in rows))
    assert b"\\ud83d" in results.read_bytes()
    (d,) = FolderReport(tmp_path).refresh()
    assert (d.rows, d.unreadable, d.tool_calls) == (3, 0, sum(bool(r["tool_calls"]) for r in rows))


def test_figures_seeded_by_the_resume_scan_equal_a_full_read_and_the_page_reads_on_from_there(tmp_path):
    """A resume's first page goes on from the figures the resume scan made of the rows it read; the rows
    appended since are read, the ones before are not read again, and the figures equal a fresh read's.
    A file replaced meanwhile (rows moved out) is read again from its start."""
    from synthgen.data.store import scan_results
    from synthgen.report.figures import DatasetFigures

    results = tmp_path / "d" / "raw_responses.jsonl"
    rows = make_rows("d", 60)
    write_jsonl(results, rows[:40])
    with open(results, "ab") as fh:
        fh.write(b"torn line\n" + orjson.dumps(rows[3]) + b"\n")  # an unreadable line and a duplicate
    seeded = DatasetFigures("d")
    state = scan_results(results, "will", seeded.add)
    assert state.read is not None
    with open(results, "ab") as fh:  # the run's own rows, after the scan
        fh.write(b"".join(orjson.dumps(r) + b"\n" for r in rows[40:]))
    folder = FolderReport(tmp_path, budgets={"d": (1000, "cap")})
    folder.seed(seeded, state.read)
    (d,) = folder.refresh()
    (fresh,) = FolderReport(tmp_path, budgets={"d": (1000, "cap")}).refresh()
    assert d is seeded and d == fresh
    assert (d.rows, d.unreadable, d.duplicates, d.budget) == (60, 1, 1, 1000)
    write_jsonl(results, rows[:5])  # replaced: read again
    assert folder.refresh()[0].rows == 5


def test_the_page_replaces_a_link_never_writing_through_it_and_leaves_no_temporary_file(tmp_path):
    kept = tmp_path / "keep.html"
    kept.write_text("mine")
    page = tmp_path / "report.html"
    page.symlink_to(kept)
    write_page(page, "<p>new</p>")
    assert kept.read_text() == "mine" and not page.is_symlink() and page.read_text() == "<p>new</p>"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.html", "report.html"]


def test_budgets_come_from_the_token_cap_else_the_plans_samples_times_their_expected_tokens():
    assert token_budgets(["a", "b"], 1000, {"a": 5}, {"a": 10.0}) == {"a": (1000, "cap"), "b": (1000, "cap")}
    assert token_budgets(["a", "b"], None, {"a": 5, "b": 3}, {"a": 10.4}) == {"a": (52, "plan")}


def test_the_live_report_writes_the_page_at_once_and_the_final_one_names_itself(tmp_path):
    write_jsonl(tmp_path / "d" / "raw_responses.jsonl", make_rows("d", 10))
    live = LiveReport(tmp_path, interval=3600, sample_every=3600)
    samples = iter(range(100))

    async def go() -> str:
        task = asyncio.create_task(live.run(lambda: {"done": next(samples), "tokens": 0}))
        while not (tmp_path / "report.html").exists():  # the first page is written at once, in a thread
            await asyncio.sleep(0.01)
        task.cancel()
        return (tmp_path / "report.html").read_text()

    first = asyncio.run(go())
    assert "Run in progress" in first and page_stats(first)["total/rows"] == "10"
    assert live.finish({"done": 10, "tokens": 0}) == f"report: {tmp_path / 'report.html'}"
    final = (tmp_path / "report.html").read_text()
    assert "Final." in final
    lines = [orjson.loads(line) for line in (tmp_path / "timeline.jsonl").read_bytes().splitlines()]
    assert [line.get("event") or line["done"] for line in lines] == ["start", 0, 10, "end"]


def test_a_page_that_cannot_be_written_is_said_once_and_the_run_goes_on(tmp_path):
    (tmp_path / "report.html").mkdir()
    told: list[str] = []
    live = LiveReport(tmp_path, interval=300, sample_every=10, on_message=told.append)
    assert live.write(live=True) is False and live.write(live=True) is False
    assert live.finish(None) == ""
    assert len(told) == 1 and "the run report is not written" in told[0] and "the run goes on" in told[0]
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_a_periodic_write_after_the_final_page_changes_nothing(tmp_path):
    write_jsonl(tmp_path / "d" / "raw_responses.jsonl", make_rows("d", 3))
    live = LiveReport(tmp_path, interval=300, sample_every=10)
    assert live.finish(None) == f"report: {tmp_path / 'report.html'}"
    assert live.write(live=True) is False  # a rewrite that was under way in its thread when the run ended
    assert "Final." in (tmp_path / "report.html").read_text()


def test_the_runs_outages_reach_the_timeline_as_events(tmp_path):
    import io

    from synthgen.run.progress import Progress
    from synthgen.run.runner import outage_hooks

    live = LiveReport(tmp_path, interval=0, sample_every=10)
    progress = Progress(1, io.StringIO(), tty=False)
    down, up = outage_hooks(progress, live, "http://127.0.0.1:1", 600)  # as the run's Pool makes them
    down("connection refused")
    up(42.0)
    live.finish(None)
    events = read_timeline(tmp_path / "timeline.jsonl").events
    assert [(e["event"], e["detail"]) for e in events] == [
        ("start", ""), ("outage", "connection refused"), ("recovered", "after 42 s"), ("end", "")
    ]  # fmt: skip
