"""The render check of export_training.py (issue 18) on rows of real runs against the simulator with real chat
templates: it tells exact rows from drifting ones by kind, names the first example, and --fail-on-drift stops
the export; specforge rows are one per generated turn, history renders back to the prompt the model saw."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import orjson
import pyarrow.json as paj
import pytest
from model_tokenizers import build_model_tokenizer
from test_export_e2e import COMMON, EXPORT, LOOKUP_TOOL, agent, answers, chat


@pytest.fixture
def qwen3(tmp_path_factory):
    return build_model_tokenizer(tmp_path_factory.getbasetemp() / "model-tokenizers" / "qwen3", "qwen3")


def qwen3_run(ws, qwen3, log: Path, dataset: str, rows: list[dict], *args: str, style: str = "think") -> None:
    from simharness import start_sim

    ws.dataset("short", dataset, rows)
    with start_sim(
        qwen3,
        "--request-log",
        str(log),
        "--output-style",
        style,
        "--tool-call-parser",
        "qwen25",
        "--reasoning-parser",
        "qwen3",
    ) as sim:
        done = ws.run("--server-url", sim.url, "--dataset", dataset, *COMMON, *args)
        assert done.returncode == 0, done.stderr


def test_specforge_rows_are_one_per_generated_turn_each_ending_at_it_with_the_history_the_model_saw(
    ws, tmp_path, qwen3
):
    log = tmp_path / "requests.jsonl"
    thinking_off = ("--chat-template-kwargs", '{"enable_thinking": false}')
    conversation = chat("c", "Name a prime.", "old one", "Another?", "old two", "And a third?")
    qwen3_run(ws, qwen3, log, "d", [conversation], "--regenerate", "all", *thinking_off)
    [record] = ws.results("d")
    done = ws.run("--dataset", "d", "--out", "sf.jsonl", "--tokenizer", str(qwen3), script=EXPORT)
    assert done.returncode == 0, done.stderr
    rows = paj.read_json(ws.root / "sf.jsonl").to_pylist()
    assert [r["id"] for r in rows] == ["d/c#0", "d/c#1", "d/c#2"]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(qwen3))
    sent = answers(log)
    for k, (row, turn) in enumerate(zip(rows, record["turns"], strict=True)):
        assert row["status"] == "success" and row["enable_thinking"] is False
        assert row["conversations"][-1]["role"] == "assistant"
        assert row["conversations"][-1]["content"] == turn["content"]
        assert len([m for m in row["conversations"] if m["role"] == "user"]) == k + 1
        assert row["synthgen_meta"]["generated_turns"] == [2 * i + 1 for i in range(k + 1)]
        # the history renders back to the prompt of this turn, exactly as it was sent
        history = [{key: v for key, v in m.items() if v is not None} for m in row["conversations"][:-1]]
        prompt = tokenizer.apply_chat_template(
            history, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        assert tokenizer(prompt, add_special_tokens=False)["input_ids"] == sent[turn["request_id"]]["input_ids"]
    assert (
        "note: specforge rows end at the one turn the model generated: train with data.train_only_last_turn: true"
        in (done.stderr)
    )


def test_the_render_check_counts_exact_and_drifting_rows_by_kind_with_the_first_example(ws, tmp_path, qwen3):
    log = tmp_path / "requests.jsonl"
    qwen3_run(ws, qwen3, log, "d", [chat("a", "Name a prime."), chat("b", "Name a colour.")])
    # The tokenizer the run recorded in settings.jsonl is found without --tokenizer: the check is on by default.
    report = ws.run("--dataset", "d", "--report", script=EXPORT)
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    [head] = [line for line in lines if line.startswith("  render check")]
    print(report.stdout)
    assert head.endswith("(the model's chat template)")


def test_fail_on_drift_writes_nothing_and_exits_1(ws, tmp_path, qwen3):
    log = tmp_path / "requests.jsonl"
    qwen3_run(ws, qwen3, log, "d", [chat("a", "Name a prime.")])
    (ws.root / "sf.jsonl").write_text("previous\n")
    done = ws.run("--dataset", "d", "--out", "sf.jsonl", "--fail-on-drift", script=EXPORT)
    print(done.stderr)
    assert done.returncode == 1
    assert (ws.root / "sf.jsonl").read_text() == "previous\n"


def test_exported_files_follow_the_umask_and_report_with_out_writes_the_file(ws, tmp_path, qwen3):
    log = tmp_path / "requests.jsonl"
    qwen3_run(ws, qwen3, log, "d", [chat("a", "Name a prime.")])
    done = ws.run("--dataset", "d", "--format", "tokens", "--out", "t.jsonl", "--report", script=EXPORT)
    assert done.returncode == 0, done.stderr
    assert "total: 1 of 1 rows" in done.stdout
    mode = stat.S_IMODE(os.stat(ws.root / "t.jsonl").st_mode)
    assert mode == 0o666 & ~_umask()
    assert len(paj.read_json(ws.root / "t.jsonl").to_pylist()) == 1


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_history_tool_call_arguments_keep_the_prompt_files_form(ws, tmp_path, qwen3):
    log = tmp_path / "requests.jsonl"
    row = agent("tool")
    row["messages"][2]["tool_calls"][0]["function"]["arguments"] = {"query": "Paris weather"}  # an object
    qwen3_run(ws, qwen3, log, "agents", [row], style="qwen_tool")
    done = ws.run("--dataset", "agents", "--format", "messages", "--out", "m.jsonl", script=EXPORT)
    assert done.returncode == 0, done.stderr
    [out] = [orjson.loads(line) for line in (ws.root / "m.jsonl").read_bytes().splitlines()]
    assert out["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"query": "Paris weather"}
    assert out["generated_turns"] == [6]
    done = ws.run("--dataset", "agents", "--out", "sf.jsonl", script=EXPORT)
    [sf] = paj.read_json(ws.root / "sf.jsonl").to_pylist()
    assert sf["conversations"][2]["tool_calls"][0]["function"]["arguments"] == json.dumps({"query": "Paris weather"})
    assert json.loads(sf["tools"]) == [LOOKUP_TOOL]
