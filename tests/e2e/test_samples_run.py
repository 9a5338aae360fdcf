"""Several samples per prompt and weighted recipes: run_inference.py as a user runs it, against the simulator."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from simharness import start_sim, wait_until
from workspace import chat

from synthgen.data.mix import load_mix
from synthgen.data.samples import sample_seed

EXPORT = Path(__file__).resolve().parents[2] / "export_training.py"
COMMON = ("--max-tokens", "256", "--concurrency", "8", "--status-interval", "0.2")
MIX = (
    '[{"weight": 3, "temperature": 0.0}, '
    '{"weight": 1, "temperature": 0.8, "chat_template_kwargs": {"thinking": false}}]'
)


@pytest.fixture(scope="module")
def sim(tokenizers):
    with start_sim(tokenizers["kimi"]) as running:
        yield running


def answer(sim, params: dict) -> list[int]:
    body = {"input_ids": [1, 100, 101, 102], "sampling_params": {"max_new_tokens": 64, **params}}
    reply = sim.client.post("/generate", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()["output_ids"]


def sent(sim) -> int:
    return sim.stats()["generate_requests"]


def test_the_simulator_gives_a_seeded_sample_the_same_answer_every_time_and_other_seeds_other_answers(sim):
    seeds = [sample_seed(0, "p", k) for k in range(8)]
    first = [answer(sim, {"temperature": 0.8, "sampling_seed": s}) for s in seeds]
    assert first == [answer(sim, {"temperature": 0.8, "sampling_seed": s}) for s in seeds]
    assert len({len(ids) for ids in first}) > 1


def test_the_simulator_answers_greedy_or_unseeded_requests_as_before(sim):
    plain = answer(sim, {})
    assert answer(sim, {"temperature": 0.0, "sampling_seed": 5}) == plain
    assert answer(sim, {"sampling_seed": 5}) == plain  # temperature not sent: the model's default
    assert answer(sim, {"temperature": 0.8}) == plain


def test_each_sample_is_its_own_row_drawn_from_the_mix_with_its_seed_and_recipe(ws, sim):
    ids = ws.dataset("short", "mixd", 10)
    before = sent(sim)
    run = ws.run("--server-url", sim.url, "--samples-per-prompt", "3", "--sampling-mix", MIX, *COMMON)
    assert run.returncode == 0, run.stderr
    rows = ws.results("mixd")
    assert sorted((r["id"], r["sample"]) for r in rows) == sorted((i, k) for i in ids for k in range(3))
    assert sent(sim) - before == 30
    mix = load_mix(MIX)
    for row in rows:
        recipe = mix.draw(0, row["id"], row["sample"])
        assert row["sampling_seed"] == sample_seed(0, row["id"], row["sample"])
        assert row["recipe"]["index"] == recipe.index
        assert row["sampling_params"]["temperature"] == recipe.params["temperature"]
        assert row["recipe"]["sampling_params"]["temperature"] == recipe.params["temperature"]
        thinking_off = recipe.kwargs.get("thinking") is False
        assert (row["reasoning_content"] == "") is thinking_off, row  # rendered with the recipe's kwargs
    assert {r["recipe"]["index"] for r in rows} == {0, 1}
    settings = json.loads((ws.outputs / "mixd" / "settings.jsonl").read_text().splitlines()[-1])["settings"]
    assert settings["sampling_mix"] == mix.as_json()
    assert (settings["samples_per_prompt"], settings["sample_seed"]) == (3, 0)

    # The export: a row per sample with a unique id, and the validation split keeps a prompt's samples together.
    export = ws.run(
        "--dataset", "mixd", "--format", "messages", "--out", "mix.jsonl", "--val-fraction", "0.5", script=EXPORT
    )
    assert export.returncode == 0, export.stderr
    train = [json.loads(line) for line in (ws.root / "mix.jsonl").read_text().splitlines()]
    val = [json.loads(line) for line in (ws.root / "mix.val.jsonl").read_text().splitlines()]
    exported = [r["id"] for r in train + val]
    assert sorted(exported) == sorted(f"mixd/{i}@s{k}" for i in ids for k in range(3))
    # Token rows made elsewhere join a tokens export, their source named by the id.
    pretok = ws.root / "pretok.jsonl"
    pretok.write_text('{"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]}\n{"input_ids": [8, 9], "loss_mask": [0, 1]}\n')
    merged = ws.run(
        "--dataset",
        "mixd",
        "--format",
        "tokens",
        "--out",
        "t.jsonl",
        "--existing",
        f"A1_deepswekimi={pretok}",
        script=EXPORT,
    )
    assert merged.returncode == 0, merged.stderr
    assert "A1_deepswekimi: 2 existing token rows (3 trained tokens) merged" in merged.stderr
    tokens = [json.loads(line) for line in (ws.root / "t.jsonl").read_text().splitlines()]
    assert len(tokens) == 32
    assert tokens[-2:] == [
        {"id": "A1_deepswekimi/1", "input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]},
        {"id": "A1_deepswekimi/2", "input_ids": [8, 9], "loss_mask": [0, 1]},
    ]
    refused = ws.run("--dataset", "mixd", "--out", "m.jsonl", "--existing", f"A1={pretok}", script=EXPORT)
    assert refused.returncode == 2 and "add --format tokens" in refused.stderr
    sides = {r["id"].rpartition("@")[0]: "train" for r in train} | {r["id"].rpartition("@")[0]: "val" for r in val}
    assert len(sides) == 10 and {r["id"].rpartition("@")[0] for r in train}.isdisjoint(
        {r["id"].rpartition("@")[0] for r in val}
    )


def test_raising_n_adds_only_the_missing_samples_and_lowering_it_sends_nothing(ws, sim):
    ids = ws.dataset("short", "grow", 6)
    args = ("--server-url", sim.url, "--temperature", "0.8", *COMMON)
    assert ws.run(*args, "--samples-per-prompt", "2").returncode == 0
    before = sent(sim)
    more = ws.run(*args, "--samples-per-prompt", "4")
    assert more.returncode == 0, more.stderr
    assert sent(sim) - before == 12
    # The plan counts samples where it counts samples: 12 of the 24 are done, 12 to run.
    assert "grow (short): 6 prompts x 4 samples, no cap, 12 samples already done, 12 to run" in more.stderr
    rows = ws.results("grow")
    assert sorted((r["id"], r["sample"]) for r in rows) == sorted((i, k) for i in ids for k in range(4))
    assert len({(r["id"], r["sampling_seed"]) for r in rows}) == 24
    assert any(len({len(r["output_ids"]) for r in rows if r["id"] == i}) > 1 for i in ids)
    report = ws.run("--dataset", "grow", "--report", script=EXPORT)
    assert report.returncode == 0, report.stderr
    assert "prompts by samples                     6   (4 samples: 6)" in report.stdout
    assert "samples differ" in report.stdout and "of 6 prompts with 2+ samples)" in report.stdout
    assert "no recipe                             24   completion tokens p10" in report.stdout
    before = sent(sim)
    fewer = ws.run(*args, "--samples-per-prompt", "2")
    assert fewer.returncode == 0, fewer.stderr
    assert sent(sim) == before
    assert len(ws.results("grow")) == 24


def test_max_samples_counts_prompts_and_every_one_of_them_gets_all_its_samples(ws, sim):
    ws.dataset("short", "capped", 8)
    run = ws.run("--server-url", sim.url, "--max-samples", "3", "--samples-per-prompt", "2", *COMMON)
    assert run.returncode == 0, run.stderr
    assert "capped (short): 8 prompts x 2 samples, cap 3 prompts, 0 samples already done, 6 to run" in run.stderr
    rows = ws.results("capped")
    assert sorted((r["id"], r["sample"]) for r in rows) == [(f"capped-{i:04d}", k) for i in range(3) for k in range(2)]


def test_another_mix_or_seed_is_refused_naming_the_flag_and_nothing_changes(ws, sim):
    ws.dataset("short", "fixed", 3)
    args = ("--server-url", sim.url, "--samples-per-prompt", "2", "--sampling-mix", MIX, *COMMON)
    assert ws.run(*args).returncode == 0
    folder = ws.outputs / "fixed"
    files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != ".lock"}
    other = ws.run(*args[: -len(COMMON)], "--sampling-mix", '[{"temperature": 1.0}]', *COMMON)
    assert other.returncode == 2
    assert "--sampling-mix [" in other.stderr and "settings differ" in other.stderr
    seeded = ws.run(*args, "--seed", "7")
    assert seeded.returncode == 2
    assert "--seed (the samples' seeds and recipe draws) 0 -> 7" in seeded.stderr
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file() and p.name != ".lock"} == files


def test_the_dry_run_shows_the_draw_per_recipe_and_the_first_request_with_its_seed(ws, sim):
    ws.dataset("short", "dry", 20)
    run = ws.run("--server-url", sim.url, "--samples-per-prompt", "2", "--sampling-mix", MIX, "--dry-run", *COMMON)
    assert run.returncode == 0, run.stderr
    out = run.stdout + run.stderr
    assert "samples: 40 to send, 2 per prompt, --seed 0" in out
    assert "recipe 0 (weight 3, 75.0%):" in out and "recipe 1 (weight 1, 25.0%):" in out
    assert '"sampling_seed":' in out and "-s00000." in out
    assert not (ws.outputs / "dry" / "raw_responses.jsonl").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--sampling-mix", "[{"), "run_inference.py: error: --sampling-mix: not valid JSON"),
        (("--sampling-mix", '[{"temprature": 1}]'), "did you mean 'temperature'?"),
        (("--samples-per-prompt", "0"), "--samples-per-prompt must be between 1 and 100,000, got 0"),
    ],
)
def test_a_bad_mix_is_one_line_before_anything_is_sent(ws, sim, flags, message):
    ws.dataset("short", "bad", 2)
    run = ws.run("--server-url", sim.url, *flags, *COMMON)
    assert run.returncode == 2
    assert message in run.stderr and "Traceback" not in run.stderr


def test_a_prompt_line_of_input_ids_is_sent_as_it_is_and_ids_outside_the_vocabulary_never_go_out(ws, sim):
    ws.dataset("short", "src", 1)
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    rendered = ws.results("src")[0]["input_ids"]
    ws.dataset("long", "pre", [{"id": "r1", "input_ids": rendered}, {"id": "far", "input_ids": [1, 10**7]}])
    before = sent(sim)
    run = ws.run("--partition", "long", "--server-url", sim.url, "--samples-per-prompt", "2", *COMMON)
    assert run.returncode == 0, run.stderr  # the out-of-vocabulary line is skipped (errors.jsonl), as a bad render is
    rows = ws.results("pre")
    assert sorted((r["id"], r["sample"]) for r in rows) == [("r1", 0), ("r1", 1)]
    assert all(r["input_ids"] == rendered and r["content"].startswith("Answer: ") for r in rows)
    assert sent(sim) - before == 2
    errors = ws.errors("pre")
    assert {e["error_type"] for e in errors} == {"token_out_of_vocab"} and "outside the model's vocabulary" in errors[
        0
    ]["error"]


def test_conversations_run_per_sample_in_each_and_all_modes_and_a_kill_loses_and_repeats_nothing(ws, sim):
    convs = [chat(f"c{i}", f"c{i} t0", "old 0", f"c{i} t1", "old 1", f"c{i} t2") for i in range(6)]
    ws.dataset("short", "conv", convs)
    each = ws.run("--server-url", sim.url, "--regenerate", "each", "--samples-per-prompt", "2", *COMMON)
    assert each.returncode == 0, each.stderr
    keys = sorted((r["id"], r["sample"]) for r in ws.results("conv"))
    assert keys == sorted((f"c{i}#{k}", s) for i in range(6) for k in range(3) for s in range(2))

    ws.dataset("short", "whole", convs)
    args = ("--server-url", sim.url, "--regenerate", "all", "--samples-per-prompt", "2", "--temperature", "0.8")
    proc = ws.start(*args, "--dataset", "whole", *COMMON)
    wait_until(lambda: len(ws.raw_lines("whole")) >= 2 or proc.poll() is not None, timeout=120, what="rows")
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    rerun = ws.run(*args, "--dataset", "whole", *COMMON)
    assert rerun.returncode == 0, rerun.stderr
    rows = ws.results("whole")
    assert sorted((r["id"], r["sample"]) for r in rows) == sorted((f"c{i}", s) for i in range(6) for s in range(2))
    for row in rows:
        assert len(row["turns"]) == 3 and row["stopped_early"] is None, row["id"]
        assert row["sampling_seed"] == sample_seed(0, row["id"], row["sample"])
