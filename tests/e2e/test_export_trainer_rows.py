"""export_training.py on the rows of real runs against the simulator, checked the way trainers use them.

``tokens`` rows are compared with what the simulator logged it received and sent; ``specforge`` rows are
loaded with pyarrow's JSON reader (what ``datasets.load_dataset("json")`` uses) and rendered with the
model's real chat template, which must give back the text the model saw and wrote.
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pyarrow.json as paj
import pytest
from specforge_validator import validate_row
from workspace import chat

EXPORT = Path(__file__).resolve().parents[2] / "export_training.py"
COMMON = ("--max-tokens", "256", "--concurrency", "4", "--status-interval", "0.2")
LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a query up",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}


def agent(rid: str) -> dict:
    return {
        "id": rid,
        "tools": [LOOKUP_TOOL],
        "messages": [
            {"role": "system", "content": "Use the tools."},
            {"role": "user", "content": "What is the weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"query": "Paris weather"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "name": "lookup", "content": "sunny, 21 C"},
            {"role": "assistant", "content": "It is sunny and 21 C."},
            {"role": "user", "content": "And in Rome?"},
        ],
    }


def answers(path: Path) -> dict[str, dict]:
    """rid -> what the simulator received and sent for it."""
    out = {}
    for line in path.read_bytes().splitlines():
        for answer in orjson.loads(line).get("answers") or []:
            out[answer["rid"]] = answer
    return out


def export(ws, *args: str) -> list[dict]:
    done = ws.run(*args, "--out", "out.jsonl", script=EXPORT)
    assert done.returncode == 0, done.stderr
    return paj.read_json(ws.root / "out.jsonl").to_pylist()


def spans(mask: list[int]) -> list[tuple[int, int]]:
    """[start, end) of every run of 1s."""
    out, start = [], None
    for i, bit in enumerate([*mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            out.append((start, i))
            start = None
    return out


def test_tokens_rows_are_the_ids_the_server_received_then_sent_with_the_mask_on_what_it_sent(ws, make_sim, tmp_path):
    log = tmp_path / "requests.jsonl"
    sim = make_sim("chatml", "--request-log", str(log))
    ws.dataset("short", "d", [chat("a", "first q", "old", "second q"), {"id": "b", "prompt": "plain prompt"}])
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    rows = {r["id"]: r for r in ws.results("d")}
    sent = answers(log)
    exported = export(ws, "--dataset", "d", "--format", "tokens")
    assert sorted(r["id"] for r in exported) == ["d/a", "d/b"]
    for out in exported:
        answer = sent[rows[out["id"].removeprefix("d/")]["request_id"]]
        assert out["input_ids"] == answer["input_ids"] + answer["output_ids"]
        assert out["loss_mask"] == [0] * len(answer["input_ids"]) + [1] * len(answer["output_ids"])
        assert out["input_ids"][-1] == 2  # <|im_end|>, the stop token, is trained on


def test_an_all_row_whose_turns_chain_is_one_sequence_with_each_generated_span_masked(ws, make_sim, tmp_path):
    # Without reasoning the template renders the model's reply exactly as it wrote it, so each turn's
    # prompt + answer is the start of the next turn's prompt.
    log = tmp_path / "requests.jsonl"
    sim = make_sim("chatml", "--request-log", str(log), "--no-reasoning")
    ws.dataset("short", "d", [chat("c", "first q", "old 1", "second q", "old 2", "third q")])
    assert ws.run("--server-url", sim.url, "--regenerate", "all", *COMMON).returncode == 0
    [row] = ws.results("d")
    turns = [answers(log)[t["request_id"]] for t in row["turns"]]
    [out] = export(ws, "--dataset", "d", "--format", "tokens")
    last = turns[-1]
    assert out["id"] == "d/c" and out["input_ids"] == last["input_ids"] + last["output_ids"]
    expected = []
    for turn in turns:
        start = len(turn["input_ids"])
        assert out["input_ids"][start : start + len(turn["output_ids"])] == turn["output_ids"]
        expected.append((start, start + len(turn["output_ids"])))
    assert spans(out["loss_mask"]) == expected


def test_an_all_row_whose_history_drops_the_reasoning_is_one_tokens_row_per_turn(ws, make_sim, tmp_path):
    log = tmp_path / "requests.jsonl"
    sim = make_sim("chatml", "--request-log", str(log))
    ws.dataset("short", "d", [chat("c", "first q", "old 1", "second q")])
    assert ws.run("--server-url", sim.url, "--regenerate", "all", *COMMON).returncode == 0
    [row] = ws.results("d")
    sent = answers(log)
    exported = export(ws, "--dataset", "d", "--format", "tokens")
    assert [r["id"] for r in exported] == ["d/c#0", "d/c#1"]
    for out, turn in zip(exported, row["turns"], strict=True):
        answer = sent[turn["request_id"]]
        assert out["input_ids"] == answer["input_ids"] + answer["output_ids"]
        assert out["loss_mask"] == [0] * len(answer["input_ids"]) + [1] * len(answer["output_ids"])


SPECFORGE_MESSAGE_KEYS = {"role", "content", "tool_calls", "reasoning_content", "name", "tool_call_id"}


def specforge_render(tokenizer, row: dict) -> str:
    """What SpecForge renders for a row as Arrow loaded it: id, conversations and tools popped, every other
    column a template variable; its ThinkingParser keeps these message keys."""
    messages = []
    for raw in row["conversations"]:
        message = {k: v for k, v in raw.items() if k in SPECFORGE_MESSAGE_KEYS and v is not None}
        messages.append(message)
    extra = {k: v for k, v in row.items() if k not in ("id", "conversations", "tools")}
    tools = json.loads(row["tools"]) if row.get("tools") else None
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=False, **extra)


def test_specforge_rows_rendered_with_qwen3s_template_give_back_what_the_model_saw_and_wrote(
    ws, make_sim, tmp_path, qwen3
):
    # Thinking off: the template pre-fills the empty think block, and the simulator's answer (no newlines
    # around reasoning, unlike the real Qwen3) does not have to match the template's reasoning layout.
    from simharness import start_sim
    from transformers import AutoTokenizer

    log = tmp_path / "requests.jsonl"
    kwargs = ("--chat-template-kwargs", '{"enable_thinking": false}', *COMMON)
    ws.dataset("short", "agents", [agent("tool")])
    ws.dataset("short", "chats", [chat("chat", "Name a prime.", "Seven.", "And another?")])
    for style, dataset in (("qwen_tool", "agents"), ("think", "chats")):
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
            result = ws.run("--server-url", sim.url, "--dataset", dataset, *kwargs)
            assert result.returncode == 0, result.stderr
    rows = {r["id"]: r for r in ws.results("agents") + ws.results("chats")}
    assert rows["tool"]["tool_calls"] and rows["chat"]["tool_calls"] is None
    tokenizer = AutoTokenizer.from_pretrained(str(qwen3))
    sent = answers(log)
    exported = export(ws, "--dataset", "agents", "--dataset", "chats", "--format", "specforge")
    assert sorted(r["id"] for r in exported) == ["agents/tool", "chats/chat"]
    for out in exported:
        row = rows[out["id"].partition("/")[2]]
        answer = sent[row["request_id"]]
        assert out["enable_thinking"] is False
        seen = tokenizer.decode(answer["input_ids"])
        assert specforge_render(tokenizer, out) == seen + answer["text"] + "<|im_end|>\n"
        if row["tool_calls"]:
            [call] = out["conversations"][-1]["tool_calls"]
            assert call["function"]["arguments"] == json.dumps({"query": "And in Rome?"})
            assert json.loads(out["tools"]) == [LOOKUP_TOOL]
    # SpecForge's validator (docs/export.md): the chat passes, thinking off; the tool-calling turn has no text.
    by_id = {r["id"]: r for r in exported}
    assert validate_row(by_id["chats/chat"], expect_non_reasoning=True, strict_think_markers=True) == 2
    with pytest.raises(ValueError, match="content must be a non-empty string"):
        validate_row(by_id["agents/tool"])
