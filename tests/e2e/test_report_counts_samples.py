"""The report of a run with several samples per prompt counts every sample as a row: each row's key is
(id, sample), for the run's report.html, ``export_training.py --report --html`` and its text report alike, read
back from the page's source and from the DOM headless Chromium renders. One run serves the module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import rendered_dom
from report_page import expected_stats, page_stats, read_rows
from simharness import start_sim
from workspace import Workspace

EXPORT = Path(__file__).resolve().parents[2] / "export_training.py"
PROMPTS, SAMPLES = 7, 3


class Run:
    def __init__(self, ws: Workspace, rows: list[dict]):
        self.ws, self.rows = ws, rows
        self.tokens = sum(r["completion_tokens"] for r in rows)


@pytest.fixture(scope="module")
def run(tokenizers, tmp_path_factory) -> Run:
    ws = Workspace(tmp_path_factory.mktemp("samples"))
    ws.dataset("short", "mixd", PROMPTS)
    with start_sim(tokenizers["kimi"]) as sim:
        result = ws.run(
            "--server-url", sim.url, "--samples-per-prompt", str(SAMPLES), "--temperature", "0.8",
            "--max-tokens", "64", "--concurrency", "4", "--status-interval", "0.2",
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = ws.results("mixd")
    assert len({(r["id"], r["sample"]) for r in rows}) == len(rows) == PROMPTS * SAMPLES
    return Run(ws, rows)


def check_counts(stats: dict[str, str], run: Run) -> None:
    """Every sample is a row: none is taken for a duplicate of its prompt's other samples."""
    assert stats["total/rows"] == stats["mixd/rows"] == f"{PROMPTS * SAMPLES:,}"
    assert stats["total/output_tokens"] == stats["mixd/output_tokens"] == f"{run.tokens:,}"
    assert "mixd/duplicates" not in stats  # the page says "not counted" only when there is something
    out = run.ws.outputs / "mixd"
    expected = expected_stats("mixd", read_rows(out / "raw_responses.jsonl"), read_rows(out / "errors.jsonl"))
    assert {k: stats.get(k) for k in expected} == expected


def test_the_runs_page_counts_every_sample_as_a_row(run):
    page = (run.ws.outputs / "report.html").read_text()
    check_counts(page_stats(page), run)
    assert "duplicate" not in page


def test_the_exports_page_and_its_text_report_count_every_sample_as_a_row(run, tmp_path):
    target = tmp_path / "mixd.html"
    result = run.ws.run("--dataset", "mixd", "--report", "--html", str(target), script=EXPORT)
    assert result.returncode == 0, result.stderr
    check_counts(page_stats(target.read_text()), run)
    n = PROMPTS * SAMPLES
    assert re.search(rf"rows read +{n}\n", result.stdout), result.stdout  # the text report, beside the page
    assert re.search(rf"share cut at max tokens .*\(\d+ of {n}\)", result.stdout), result.stdout
    assert "duplicate" not in result.stdout


def test_the_page_chromium_renders_shows_every_sample_as_a_row(run, tmp_path):
    dom = rendered_dom(run.ws.outputs / "report.html", tmp_path)
    check_counts(page_stats(dom), run)
    assert "duplicate" not in dom
