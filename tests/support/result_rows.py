"""Result rows as the run writes them, for the export's tests: a realistic completed row and its variants
(old, tool-calling, cut, multi-turn), and a results file written from them."""

from __future__ import annotations

from pathlib import Path

import orjson

from synthgen.data.records import ResultRecord

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALC_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer", "default": 0}}},
    },
}
ARGS = '{"city": "Paris",  "unit":"C"}'  # odd spacing on purpose: it must survive byte for byte


def record(rid: str, dataset: str = "chat", **fields) -> ResultRecord:
    """A realistic completed row: reasoning closed, an answer, ids stored (prompt 4 ids, output 3 + stop)."""
    reasoning = fields.pop("reasoning_content", "Let me think.")
    content = fields.pop("content", f"Answer {rid}.")
    assistant = {"role": "assistant", "content": content, "reasoning_content": reasoning}
    if fields.get("tool_calls"):
        assistant["tool_calls"] = fields["tool_calls"]
    values = {
        "id": rid,
        "dataset": dataset,
        "partition": "short",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": f"Question {rid}?"},
            assistant,
        ],
        "reasoning_content": reasoning,
        "content": content,
        "finish_reason": "stop",
        "finish_detail": {"type": "stop", "matched": 2},
        "reasoning_complete": True,
        "prompt_tokens": 4,
        "completion_tokens": 4,
        "cached_tokens": None,
        "output_text": f"<think>{reasoning}</think>{content}",
        "model": "tiny",
        "sampling_params": {"temperature": 0.6, "max_new_tokens": 64},
        "chat_template_kwargs": None,
        "latency_s": 0.5,
        "server_latency_s": 0.4,
        "attempts": 1,
        "request_id": f"r-{rid}",
        "created_at": "2026-11-30T00:00:00Z",
        "source": f"short/{dataset}.jsonl",
        "input_ids": [1, 5, 6, 7],
        "output_ids": [10, 11, 12, 2],
        "regenerate": "last",
    }
    values.update(fields)
    return ResultRecord.from_dict(values)


def old_row(rid: str, dataset: str = "chat") -> dict:
    """A row written before tools, ids, turns and settings were stored."""
    row = record(rid, dataset).to_dict()
    for key in (
        "source",
        "prompt_hash",
        "tools",
        "tool_calls",
        "input_ids",
        "output_ids",
        "regenerate",
        "turns",
        "settings",
    ):
        del row[key]
    return row


def tool_row(rid: str = "t1", dataset: str = "chat") -> ResultRecord:
    calls = [{"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]
    return record(
        rid, dataset, content="", tool_calls=calls, tools=[WEATHER_TOOL], chat_template_kwargs={"thinking": True}
    )


def truncated_row(rid: str = "cut", dataset: str = "chat", content: str = "") -> ResultRecord:
    """A row cut at max tokens: with reasoning never closed and no answer, or (``content``) mid-answer."""
    return record(
        rid,
        dataset,
        content=content,
        reasoning_content="and so on and so",
        reasoning_complete=bool(content),
        finish_reason="length",
        finish_detail={"type": "length", "length": 4},
        output_text=f"<think>and so on and so{'</think>' + content if content else ''}",
        output_ids=[10, 11, 12, 13],
    )


def multi_turn_row(rid: str = "mt", chained: bool = True, dataset: str = "chat") -> ResultRecord:
    first = {
        "input_ids": [1, 5],
        "output_ids": [10, 2],
        "reasoning_content": "",
        "content": "A1",
        "tool_calls": None,
        "finish_reason": "stop",
        "reasoning_complete": True,
        "prompt_tokens": 2,
        "completion_tokens": 2,
        "output_text": "A1",
    }
    history = [1, 5, 10, 2] if chained else [1, 5, 99]
    second = dict(first, input_ids=[*history, 6], output_ids=[11, 12, 2], content="A2", output_text="A2 more")
    messages = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2"},
    ]
    return record(
        rid,
        dataset,
        messages=messages,
        turns=[first, second],
        regenerate="all",
        content="A2",
        reasoning_content="",
        input_ids=second["input_ids"],
        output_ids=second["output_ids"],
    )


def write_results(root: Path, dataset: str, rows: list, tail: bytes = b"") -> Path:
    path = root / "outputs" / dataset / "raw_responses.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = b"".join(r.to_json() if isinstance(r, ResultRecord) else orjson.dumps(r) + b"\n" for r in rows)
    path.write_bytes(data + tail)
    return path
