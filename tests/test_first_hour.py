"""The first hour of a new user (issue 19, issue 17 items 17-18): mistakes answered in one line with the
fix, hints that run as printed, runs that end by saying what to do next. Through the real CLI."""

from __future__ import annotations

import pytest
from workspace import BUDGET

COMMON = ("--max-tokens", "256", "--concurrency", "4", "--status-interval", "0.2")


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--regenerate", "al"), "invalid choice: 'al' (choose from 'last', 'each', 'all'); did you mean all?"),
        (("--partiton", "short"), "unrecognized arguments: --partiton short; did you mean --partition?"),
        (("--max-tokns=64",), "unrecognized arguments: --max-tokns=64; did you mean --max-tokens?"),
    ],
)
def test_a_mistyped_flag_or_value_of_run_inference_is_one_line_with_the_closest_valid_one(ws, args, expected):
    result = ws.run(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0] and lines[0].startswith("run_inference.py: error: ")
    assert lines[0].endswith("(see run_inference.py --help)")


def test_a_mistyped_flag_of_compute_budget_names_the_closest_flag(ws):
    result = ws.run("--tokens-per-datset", "5M", script=BUDGET)
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        "compute_budget.py: error: unrecognized arguments: --tokens-per-datset 5M; did you mean "
        "--tokens-per-dataset? (see compute_budget.py --help)"
    )


@pytest.mark.parametrize("flag", ["--server-wait", "--drain-timeout"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_non_finite_wait_is_refused_in_one_line(ws, flag, value):
    ws.dataset("short", "d", 1)
    result = ws.run(flag, value)
    assert result.returncode == 2, result.stderr
    assert last_line(result.stderr) == (
        f"run_inference.py: error: {flag} must be a number of seconds, 0 or more, got {value}"
    )


def test_a_log_file_inside_an_output_dir_that_does_not_exist_yet_is_created(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 3)
    result = ws.run("--server-url", sim.url, "--output-dir", "fresh/out", "--log-file", "fresh/out/run.log", *COMMON)
    assert result.returncode == 0, result.stderr
    log = (ws.root / "fresh" / "out" / "run.log").read_text()
    assert "done 3/3" in log
    ws.outputs = ws.root / "fresh" / "out"
    ws.assert_exactly_once("d", ids)
