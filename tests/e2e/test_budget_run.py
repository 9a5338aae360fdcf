"""The budget loop closed: compute_budget.py's plan consumed by run_inference.py, the precise
--max-tokens-per-dataset cap, and --sample random, against the simulator."""

from __future__ import annotations

import orjson
from workspace import BUDGET

COMMON = ("--max-tokens", "256", "--concurrency", "4")


def test_the_budget_file_caps_each_dataset_and_is_read_back_by_the_runner(ws, make_sim):
    sim = make_sim("chatml")
    a = ws.dataset("short", "a", 30)
    b = ws.dataset("short", "b", 30)
    plan = ws.run(
        "--partition",
        "short",
        "--tokens-per-dataset",
        "1000",
        "--avg-tokens",
        "a=100",
        "--avg-tokens",
        "b=250",
        "--out",
        "budget.json",
        script=BUDGET,
    )
    assert plan.returncode == 0, plan.stderr
    budget = orjson.loads((ws.root / "budget.json").read_bytes())
    assert budget["datasets"]["a"]["max_samples"] == 10 and budget["datasets"]["b"]["max_samples"] == 4
    result = ws.run("--partition", "short", "--server-url", sim.url, "--budget", "budget.json", *COMMON)
    assert result.returncode == 0, result.stderr
    ws.assert_exactly_once("a", a[:10])
    ws.assert_exactly_once("b", b[:4])


def test_max_samples_overrides_the_budget_file_for_every_dataset(ws, make_sim):
    sim = make_sim("chatml")
    a = ws.dataset("short", "a", 10)
    (ws.root / "budget.json").write_bytes(orjson.dumps({"datasets": {"a": {"max_samples": 8}}}))
    result = ws.run("--server-url", sim.url, "--budget", "budget.json", "--max-samples", "2", *COMMON)
    assert result.returncode == 0, result.stderr
    ws.assert_exactly_once("a", a[:2])


def test_a_dataset_missing_from_the_budget_is_a_clear_error_unless_max_samples_covers_it(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "a", 3)
    ws.dataset("short", "b", 3)
    (ws.root / "budget.json").write_bytes(orjson.dumps({"datasets": {"a": {"max_samples": 1}}}))
    result = ws.run("--server-url", sim.url, "--budget", "budget.json", *COMMON)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "run_inference.py: error: budget.json: no entry for dataset 'b'; rerun compute_budget.py for it, "
        "or pass --max-samples N"
    )
    assert sim.stats()["generate_requests"] == 0
    covered = ws.run("--server-url", sim.url, "--budget", "budget.json", "--max-samples", "1", *COMMON)
    assert covered.returncode == 0, covered.stderr


def test_a_missing_or_broken_budget_file_is_one_line(ws):
    ws.dataset("short", "a", 1)
    missing = ws.run("--budget", "nope.json")
    assert missing.returncode == 2 and missing.stderr.strip().endswith(
        "nope.json: budget file not found; create it with compute_budget.py --out nope.json"
    )
    (ws.root / "bad.json").write_text("{")
    broken = ws.run("--budget", "bad.json")
    assert broken.returncode == 2 and "bad.json: not valid JSON" in broken.stderr and "Traceback" not in broken.stderr


def test_max_tokens_per_dataset_stops_near_the_budget_and_reports_the_overshoot(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 60)
    budget = 400
    result = ws.run(
        "--server-url", sim.url, "--max-tokens-per-dataset", str(budget), "--max-tokens", "64", "--concurrency", "2"
    )
    assert result.returncode == 0, result.stderr
    rows = ws.assert_exactly_once("d", [r["id"] for r in ws.results("d")])
    tokens = sum(r["completion_tokens"] for r in rows)
    biggest = max(r["completion_tokens"] for r in rows)
    assert budget <= tokens <= budget + 2 * biggest  # at most the in-flight requests overshoot
    assert len(rows) < len(ids)
    assert "token budget 400 reached" in result.stderr
    # The in-flight answers overshoot it, unless they happen to end on it exactly.
    assert ("overshot by" if tokens > budget else "(exactly the budget)") in result.stderr
    # Earlier runs count: a rerun with the same budget sends nothing.
    sent = sim.stats()["generate_requests"]
    again = ws.run("--server-url", sim.url, "--max-tokens-per-dataset", str(budget), "--max-tokens", "64")
    assert again.returncode == 0, again.stderr
    assert sim.stats()["generate_requests"] == sent


def test_random_sampling_is_stable_across_reordered_files_and_raised_caps(ws, make_sim):
    sim = make_sim("chatml")
    rows = [{"id": f"r{i}", "prompt": f"q{i}"} for i in range(40)]
    ws.dataset("short", "d", rows)
    assert (
        ws.run("--server-url", sim.url, "--sample", "random", "--seed", "7", "--max-samples", "5", *COMMON).returncode
        == 0
    )
    first = {r["id"] for r in ws.results("d")}
    assert len(first) == 5 and first != {f"r{i}" for i in range(5)}
    ws.dataset("short", "d", rows[::-1])  # the same prompts, re-ordered
    assert (
        ws.run("--server-url", sim.url, "--sample", "random", "--seed", "7", "--max-samples", "8", *COMMON).returncode
        == 0
    )
    second = {r["id"] for r in ws.results("d")}
    assert len(second) == 8 and first < second
