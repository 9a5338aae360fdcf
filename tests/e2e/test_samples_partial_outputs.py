"""Samples and recipes stopped mid-run through the command line: a seeded sample's output so far is kept
like any other, the rerun continues it under the sample's own seed token-exact, each (id, sample) ends
up once, and the row records the seed of every segment. A recipe whose continuation would be another
distribution (an output-side penalty) is not kept: the stop says so and waits for it. Waits are on the
simulator's decode steps, not on time."""

from __future__ import annotations

import signal

import orjson
from simharness import sigterm_in_flight, wait_until
from workspace import chat

from synthgen.data.samples import sample_seed, split_key

# Scheduler mode: one decode step gives every running request one token.
SIM = ("--max-total-tokens", "60000", "--step-time", "0.002", "--output-len-dist", "fixed:120")
COMMON = ("--max-tokens", "400", "--concurrency", "4", "--status-interval", "0.5", "--temperature", "0.8")


def stop_with_tokens_in_flight(ws, sim, *args: str) -> str:
    """Start a run, let its first four requests make a few tokens each, SIGTERM it; its output."""
    sigterm_in_flight(sim, ws.start("--server-url", sim.url, *COMMON, *args))
    return (ws.root / "nohup.out").read_text()


def kept_partials(ws, dataset: str) -> dict[tuple[str, int], dict]:
    lines = [orjson.loads(line) for line in ws.raw_lines(dataset, "partial_outputs.jsonl")]
    return {split_key(line["id"]): line for line in lines}


def whole_answer(sim, row: dict) -> list[int]:
    """One uninterrupted request of the row's prompt under its sample's seed."""
    params = {"max_new_tokens": 400, "skip_special_tokens": False, "temperature": 0.8}
    params["sampling_seed"] = row["sampling_seed"]
    return sim.client.post("/generate", json={"input_ids": row["input_ids"], "sampling_params": params}).json()[
        "output_ids"
    ]


def assert_continued_under_its_seed(sim, row: dict, partial: dict) -> None:
    seed = sample_seed(0, row["id"], row["sample"])
    assert row["sampling_seed"] == seed and row["sampling_params"]["sampling_seed"] == seed
    assert row["segments"] == [len(partial["output_ids"]), 120 - len(partial["output_ids"])]
    assert row["segment_seeds"] == [seed, seed]
    assert row["output_ids"] == whole_answer(sim, row)


def test_a_stop_under_samples_keeps_each_samples_output_and_the_rerun_continues_it_under_its_seed(ws, make_sim):
    sim = make_sim("chatml", *SIM)
    ids = ws.dataset("short", "d", 3)
    out = stop_with_tokens_in_flight(ws, sim, "--samples-per-prompt", "2", "--drain-timeout", "600")
    assert "ending the 4 in flight through /abort_request, their output so far kept" in out
    kept = kept_partials(ws, "d")
    assert len(kept) == 4 and all(0 < len(p["output_ids"]) < 120 for p in kept.values()), kept
    assert any(sample > 0 for _, sample in kept)  # the second sample of a prompt is kept too
    generated = sim.stats()["tokens_generated"]

    rerun = ws.run("--server-url", sim.url, *COMMON, "--samples-per-prompt", "2")
    assert rerun.returncode == 0, rerun.stderr
    assert "continuing 4 partial outputs" in rerun.stderr
    rows = {(r["id"], r["sample"]): r for r in ws.results("d")}
    assert sorted(rows) == sorted((i, k) for i in ids for k in range(2)) and len(ws.results("d")) == 6
    assert not ws.raw_lines("d", "partial_outputs.jsonl")
    assert sim.stats()["tokens_generated"] - generated + sum(len(p["output_ids"]) for p in kept.values()) == 6 * 120
    for key, partial in kept.items():
        assert_continued_under_its_seed(sim, rows[key], partial)
    for key in set(rows) - set(kept):
        assert rows[key]["segments"] is None and "segment_seeds" not in rows[key]


PENALTY_MIX = '[{"weight": 1}, {"weight": 1, "sampling_params": {"presence_penalty": 0.5}}]'


def test_a_stop_under_a_mix_keeps_the_plain_recipes_and_waits_for_a_penalty_recipe_saying_so(ws, make_sim):
    sim = make_sim("chatml", *SIM)
    ws.dataset("short", "d", 4)
    mix = ("--sampling-mix", PENALTY_MIX)
    out = stop_with_tokens_in_flight(ws, sim, *mix, "--drain-timeout", "600")
    assert "note: samples of recipe 1 restart instead of continuing when ended early (presence_penalty 0.5" in out
    kept = kept_partials(ws, "d")
    first = [orjson.loads(line) for line in ws.raw_lines("d")]
    penalised = {(r["id"], r["sample"]) for r in first if r["recipe"]["index"] == 1}
    # The four in flight: the plain recipe's ended and kept, the penalty recipe's drained into rows.
    assert kept and penalised and len(kept) + len(penalised) == 4, (kept, penalised)
    assert f"ending the {len(kept)} in flight whose output is kept through /abort_request" in out
    assert f"waiting up to 10m00s for the other {len(penalised)}, whose output would not be kept (their recipe" in out
    assert all(r["segments"] is None for r in first)

    rerun = ws.run("--server-url", sim.url, *COMMON, *mix)
    assert rerun.returncode == 0, rerun.stderr
    assert f"continuing {len(kept)} partial outputs" in rerun.stderr
    rows = {(r["id"], r["sample"]): r for r in ws.results("d")}
    assert len(ws.results("d")) == len(rows) == 4
    for key, partial in kept.items():
        assert rows[key]["recipe"]["index"] == 0
        assert_continued_under_its_seed(sim, rows[key], partial)


def test_continue_cut_extends_a_cut_sample_under_its_own_seed(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 2)
    flags = ("--max-tokens", "6", "--continue-cut", "200", "--samples-per-prompt", "2", "--temperature", "0.8")
    result = ws.run("--server-url", sim.url, *flags)
    assert result.returncode == 0, result.stderr
    assert "4 cut answers continued by --continue-cut" in result.stderr
    rows = ws.results("d")
    assert sorted((r["id"], r["sample"]) for r in rows) == sorted((i, k) for i in ids for k in range(2))
    for row in rows:
        seed = sample_seed(0, row["id"], row["sample"])
        assert row["extended_by"] == 200 and row["segments"][0] == 6 and row["segment_seeds"] == [seed, seed]
        assert row["finish_reason"] == "stop" and row["output_ids"] == whole_answer(sim, row)


def test_a_kill_9_under_samples_keeps_each_samples_checkpoints_with_its_seed_and_the_rerun_continues_them(ws, make_sim):
    sim = make_sim("chatml", *SIM)
    ids = ws.dataset("short", "d", 2)
    args = (*COMMON, "--samples-per-prompt", "2", "--checkpoint-tokens", "16")
    proc = ws.start("--server-url", sim.url, *args)
    try:
        wait_until(lambda: sim.stats()["running"] >= 4, timeout=120, what="4 running")
        steps = sim.stats()["decode_steps"]
        wait_until(lambda: sim.stats()["decode_steps"] >= steps + 40, timeout=120, what="40 more steps")
        proc.kill()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [orjson.loads(line) for line in ws.raw_lines("d", "partial_outputs.jsonl")]
    assert {split_key(line["id"]) for line in lines} == {(i, k) for i in ids for k in range(2)}
    for line in lines:
        prompt, sample = split_key(line["id"])
        assert line["segment_seeds"] == [sample_seed(0, prompt, sample)]
    rerun = ws.run("--server-url", sim.url, *args)
    assert rerun.returncode == 0, rerun.stderr
    rows = ws.results("d")
    assert sorted((r["id"], r["sample"]) for r in rows) == sorted((i, k) for i in ids for k in range(2))
    for row in rows:
        seed = sample_seed(0, row["id"], row["sample"])
        assert len(row["segments"]) == 2 and row["segments"][0] >= 32 and row["segment_seeds"] == [seed, seed]
        assert row["output_ids"] == whole_answer(sim, row)


def later_sample_turn(ws) -> bool:
    """A finished turn of a conversation's sample 1 waits in partial_turns.jsonl."""
    lines = [line for line in ws.raw_lines("conv", "partial_turns.jsonl") if line.endswith(b"\n")]  # whole lines
    return any(split_key(orjson.loads(line)["id"])[1] for line in lines)


def test_a_stopped_conversation_under_samples_continues_from_each_samples_own_finished_turns(ws, make_sim):
    sim = make_sim("chatml", *SIM)
    ws.dataset("short", "conv", [chat(f"c{i}", f"c{i} t0", "old 0", f"c{i} t1", "old 1", f"c{i} t2") for i in range(2)])
    args = ("--server-url", sim.url, *COMMON, "--samples-per-prompt", "2", "--regenerate", "all")
    proc = ws.start(*args)
    try:
        wait_until(lambda: later_sample_turn(ws), timeout=120, what="a finished turn of sample 1")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
    done = len(ws.raw_lines("conv"))
    kept = [split_key(orjson.loads(line)["id"]) for line in ws.raw_lines("conv", "partial_turns.jsonl")]
    assert any(sample for _, sample in kept), kept
    before = sim.stats()["generate_requests"]
    rerun = ws.run(*args)
    assert rerun.returncode == 0, rerun.stderr
    # Each sample's kept turns are taken up, none sent again: 3 turns of 4 conversations in all.
    assert sim.stats()["generate_requests"] - before == 4 * 3 - 3 * done - len(kept)
    rows = ws.results("conv")
    assert sorted((r["id"], r["sample"]) for r in rows) == [(f"c{i}", k) for i in range(2) for k in range(2)]
    assert all(len(r["turns"]) == 3 and r["sampling_seed"] == sample_seed(0, r["id"], r["sample"]) for r in rows)
