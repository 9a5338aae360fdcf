"""``run_inference.py --status`` from another shell: what the report's first cards say about an output folder
(rows, failed, skipped, cut, loops, empty answers, tokens generated and kept, the live run's pid), read from the
files without changing any of them, neither a torn last line nor the lock, while a run holds the folder and
after it ended."""

from __future__ import annotations

from pathlib import Path

import pytest
from simharness import start_sim, wait_until
from workspace import Workspace

COLUMNS = ("dataset", "rows", "failed", "skipped", "cut", "loops", "empty", "generated", "kept")
COMMON = ("--partition", "short", "--max-tokens", "24", "--concurrency", "2", "--status-interval", "0.2")


def snapshot(outputs: Path) -> dict[Path, tuple[int, bytes]]:
    """Every file under ``outputs`` (hidden ones too: the lock table and each dataset's .lock): mtime, bytes."""
    return {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(outputs.rglob("*")) if p.is_file()}


def table(stdout: str) -> dict[str, dict[str, str]]:
    """The status table by dataset: each column's text (the run column is the rest of the line)."""
    out = {}
    for line in stdout.splitlines()[1:-1]:  # between the head and the closing line
        cells = line.split(maxsplit=len(COLUMNS))
        if len(cells) == len(COLUMNS) + 1:
            out[cells[0]] = dict(zip((*COLUMNS, "run"), cells, strict=True))
    return out


def expected(rows: list[dict], errors: list[dict]) -> dict[str, str]:
    """The figures, counted here from the rows: every row is unique (one run, no samples)."""

    def unanswered(r: dict) -> bool:  # cut before an answer: reasoning open or nothing written
        return r["finish_reason"] == "length" and (not r["reasoning_complete"] or not r["content"].strip())

    tokens = sum(r["completion_tokens"] for r in rows)
    dropped = sum(r["completion_tokens"] for r in rows if unanswered(r) or r["finish_reason"] == "repetition")
    figures = {
        "rows": len(rows),
        "failed": sum(e["status"] == "failed" for e in errors),
        "skipped": sum(e["status"] == "skipped" for e in errors),
        "cut": sum(r["finish_reason"] == "length" for r in rows),
        "loops": sum(r["finish_reason"] == "repetition" for r in rows),
        "generated": tokens,
        "kept": tokens - dropped,
    }
    return {k: f"{v:,}" for k, v in figures.items()}


@pytest.fixture(scope="module")
def sim(tokenizers):
    with start_sim(tokenizers["chatml"], "--context-length", "256") as running:
        yield running


def test_the_status_of_a_finished_folder_says_what_the_rows_say_and_changes_no_file(tokenizers, sim, tmp_path):
    ws = Workspace(tmp_path)
    # Answers grow with the prompt: at --max-tokens 24 the longer ones are cut; the huge prompt is skipped.
    ws.dataset("short", "alpha", [{"id": f"a{i}", "prompt": "tell me " + "more " * (i % 9)} for i in range(12)])
    ws.dataset(
        "short",
        "beta",
        [{"id": f"b{i}", "prompt": f"q{i}"} for i in range(4)] + [{"id": "huge", "prompt": "word " * 400}],
    )
    run = ws.run("--server-url", sim.url, *COMMON)
    assert run.returncode == 0, run.stderr
    alpha, beta = ws.results("alpha"), ws.results("beta")
    assert any(r["finish_reason"] == "length" for r in alpha)  # the data are what the test meant to make
    # A kill's torn last line: the status neither repairs it nor counts it.
    with open(ws.outputs / "alpha" / "raw_responses.jsonl", "ab") as fh:
        fh.write(b'{"id": "torn", "messages": [{"role": "us')
    before = snapshot(ws.outputs)

    result = ws.run("--status", "--output-dir", "outputs")
    assert result.returncode == 0, result.stderr
    assert snapshot(ws.outputs) == before
    shown = table(result.stdout)
    assert {k: shown["alpha"][k] for k in expected(alpha, [])} == expected(alpha, [])
    assert {k: shown["beta"][k] for k in expected(beta, ws.errors("beta"))} == expected(beta, ws.errors("beta"))
    assert shown["beta"]["skipped"] == "1" and shown["alpha"]["run"] == shown["beta"]["run"] == "-"
    assert shown["TOTAL"]["rows"] == f"{len(alpha) + len(beta):,}"
    assert "no run is writing" in result.stdout

    # The usual selection: --dataset, or a partition's datasets.
    one = ws.run("--status", "--dataset", "beta")
    assert one.returncode == 0 and set(table(one.stdout)) == {"beta"}, one.stdout + one.stderr
    assert set(table(ws.run("--status", "--partition", "short").stdout)) == {"alpha", "beta", "TOTAL"}
    assert snapshot(ws.outputs) == before


def test_the_status_beside_a_live_run_names_its_pid_and_changes_no_file(tokenizers, sim, tmp_path):
    ws = Workspace(tmp_path)
    ws.dataset("short", "alpha", 6)
    first = ws.run("--server-url", sim.url, *COMMON, "--max-samples", "4")
    assert first.returncode == 0, first.stderr
    sim.pause()  # the simulator holds every request: the second run stays live, holding the lock
    proc = ws.start("--server-url", sim.url, *COMMON)
    try:
        wait_until(lambda: sim.stats()["http_in_flight"] > 0, timeout=120, what="the live run's requests")
        # The dataset's files and the lock table (the live run rewrites the page and the timeline meanwhile).
        locks = ws.outputs / ".locks"
        before = snapshot(ws.outputs / "alpha") | {locks: (locks.stat().st_mtime_ns, locks.read_bytes())}
        result = ws.run("--status")
        after = snapshot(ws.outputs / "alpha") | {locks: (locks.stat().st_mtime_ns, locks.read_bytes())}
        assert proc.poll() is None
    finally:
        sim.resume()
    assert proc.wait(timeout=120) == 0
    assert result.returncode == 0, result.stderr
    assert after == before
    shown = table(result.stdout)["alpha"]
    assert (shown["rows"], shown["run"]) == ("4", f"live, pid {proc.pid}")
    assert "a run is writing" in result.stdout
    # The run went on as if nothing had looked: every prompt once, and now no run holds the folder.
    ws.assert_exactly_once("alpha", [f"alpha-{i:04d}" for i in range(6)])
    again = table(ws.run("--status").stdout)["alpha"]
    assert (again["rows"], again["run"]) == ("6", "-")
