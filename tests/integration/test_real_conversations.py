"""--regenerate all and the tokens export against the real SGLang 0.5.23 server on CPU.

A shared server started with ``--reasoning-parser qwen3 --tool-call-parser qwen25`` (``real_parser_server``),
so the test also shows what /server_info reports for them. The tiny model's greedy answer to any prompt is the
same 29 tokens (<think>...</think>, an answer, its EOS; synthgen/demo/model.py): with --max-tokens 64 every
turn ends with its EOS, with 12 every answer is cut.
"""

from __future__ import annotations

import os
import signal

import orjson
import pytest
from simharness import wait_until
from workspace import Workspace

from tests.integration import realserver

pytestmark = pytest.mark.real_sglang

EXPORT = realserver.REPO / "export_training.py"


def conversations(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        rows.append(
            {
                "id": f"conv-{i}",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": f"Question {i}, part one."},
                    {"role": "assistant", "content": "An answer from another model."},
                    {"role": "user", "content": f"Question {i}, part two."},
                ],
            }
        )
    return rows


def test_the_server_reports_the_parsers_it_was_started_with_deprecated_names_replaced(real_parser_server):
    # 0.5.23 accepts qwen25 but rewrites it to qwen (sglang/srt/arg_groups/serving_hook.py,
    # deprecated_tool_call_parsers = {"qwen25": "qwen", "glm45": "glm"}); reasoning names are kept.
    info = real_parser_server.get("/server_info").json()
    assert info["reasoning_parser"] == "qwen3" and info["tool_call_parser"] == "qwen"


def test_an_all_run_completes_and_a_killed_run_resumes_with_each_conversation_once(ws: Workspace, real_parser_server):
    ids = ws.dataset("short", "mt", conversations(8))
    args = (
        "--server-url",
        real_parser_server.url,
        "--regenerate",
        "all",
        "--temperature",
        "0",
        "--max-tokens",
        "64",
        "--concurrency",
        "2",
        "--status-interval",
        "0.5",
    )
    proc = ws.start(*args)
    results = ws.outputs / "mt" / "raw_responses.jsonl"
    wait_until(
        lambda: (results.exists() and results.stat().st_size > 0) or proc.poll() is not None,
        timeout=300,
        interval=0.05,
        what="a first row",
    )
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    result = ws.run(*args, timeout=600)
    assert result.returncode == 0, result.stderr
    rows = ws.assert_exactly_once("mt", ids)
    for row in rows:
        turns = row["turns"]
        assert row["regenerate"] == "all" and row["stopped_early"] is None
        assert [turn["finish_reason"] for turn in turns] == ["stop", "stop"]
        for turn in turns:
            assert turn["reasoning_content"] and turn["content"] and turn["reasoning_complete"]
            assert turn["prompt_tokens"] == len(turn["input_ids"])
            assert turn["completion_tokens"] == len(turn["output_ids"])
        assert row["completion_tokens"] == sum(t["completion_tokens"] for t in turns)
    again = ws.run(*args)
    assert again.returncode == 0 and "nothing to do" in again.stderr
    # The parsers default to the server's, and the provenance records them.
    [settings] = ws.rows("mt", "settings.jsonl")
    assert settings["settings"]["reasoning_parser"] == "qwen3" and settings["settings"]["tool_call_parser"] == "qwen"


def test_the_tokens_export_holds_the_ids_the_server_received_and_returned(ws: Workspace, real_parser_server):
    ws.dataset("short", "d", 4)
    run = ws.run(
        "--server-url", real_parser_server.url, "--temperature", "0", "--max-tokens", "12", "--concurrency", "2"
    )
    assert run.returncode == 0, run.stderr
    rows = {f"d/{r['id']}": r for r in ws.results("d")}
    done = ws.run("--dataset", "d", "--format", "tokens", "--keep-truncated", "--out", "tokens.jsonl", script=EXPORT)
    assert done.returncode == 0, done.stderr
    exported = [orjson.loads(line) for line in (ws.root / "tokens.jsonl").read_bytes().splitlines()]
    assert sorted(r["id"] for r in exported) == sorted(rows)
    for out in exported:
        row = rows[out["id"]]
        prompt = row["input_ids"]
        # Asked again greedily, the server says how many prompt tokens it received and what it returns.
        answer = real_parser_server.post("/generate", {"input_ids": prompt, "sampling_params": row["sampling_params"]})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["meta_info"]["prompt_tokens"] == len(prompt) == row["prompt_tokens"]
        assert out["input_ids"] == prompt + body["output_ids"]
        assert out["loss_mask"] == [0] * len(prompt) + [1] * len(body["output_ids"])
        if body["meta_info"]["finish_reason"]["type"] == "stop":  # the stop token is kept
            assert body["output_ids"][-1] == body["meta_info"]["finish_reason"]["matched"]
