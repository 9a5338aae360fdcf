"""The pieces of an output row, from one result row (pure): ids, messages, tool calls, template kwargs, meta.

Every format builds its rows from these; the text of a message is never changed, so a row renders back to
what the model saw and wrote (the render check's premise).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

from synthgen.data import samples
from synthgen.data.records import ResultRecord, typed_list

META_KEY = "synthgen_meta"
# Keys SpecForge itself reads, or that apply_chat_template takes as arguments: never template variables.
RESERVED_KEYS = frozenset(
    {
        "id",
        "conversations",
        "tools",
        "status",
        "text",
        META_KEY,
        "messages",
        "conversation",
        "tokenize",
        "add_generation_prompt",
        "add_special_tokens",
        "chat_template",
        "documents",
        "continue_final_message",
        "return_dict",
        "tokenizer_kwargs",
    }
)
SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Expected:
    """What one exported row must render to: ``ids`` (prompt ids + output ids as stored) with the generated
    span ``[start, len(ids))`` trained and nothing else."""

    ids: list[int]
    start: int
    reasoning: str = ""  # the generated turn's reasoning, to name a drift that drops it


@dataclass(frozen=True, slots=True)
class Exported:
    row: dict[str, Any]
    expected: Expected | None = None  # None: exact by construction (tokens) or no stored ids to compare


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def as_text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def export_id(record: ResultRecord) -> str:
    """``<dataset>/<id>``: the same prompt id in two datasets stays two rows; a sample of a run with
    several samples or a mix adds ``@s<k>`` (``samples.export_id``), so each sample is a row of its own."""
    sample = record.sample if isinstance(record.sample, int) and not isinstance(record.sample, bool) else None
    return samples.export_id(f"{record.dataset}/{record.id}", sample)


def turn_ids(turn: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    prompt, output = typed_list(turn.get("input_ids"), int), typed_list(turn.get("output_ids"), int)
    return (prompt, output) if prompt is not None and output is not None else None


def expected(turn: dict[str, Any]) -> Expected | None:
    """What a row ending at this generated turn must render to, or None without stored ids."""
    ids = turn_ids(turn)
    if ids is None:
        return None
    prompt, output = ids
    return Expected(prompt + output, len(prompt), as_text(turn.get("reasoning_content")))


def escape_surrogates(text: str) -> str:
    r"""JSON text with each lone surrogate written as the ``\uXXXX`` escape the model wrote for it.

    A parser that decodes arguments such as ``{"q": "\ud83d"}`` and encodes them again holds a lone surrogate,
    which no UTF-8 file can carry (Arrow refuses the whole file when it is escaped in the line); as an escape
    inside the JSON text it decodes back to the same value."""
    return SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def arguments_text(value: Any) -> str:
    """A tool call's arguments as a JSON string. The model's own text is kept byte for byte; an object (only
    a prompt's history carries one) becomes the text a template's ``tojson`` writes for it, so a trainer that
    parses it back (SpecForge does) or prints it as it is renders what the model saw."""
    text = value if isinstance(value, str) else json.dumps(value if value is not None else {}, ensure_ascii=False)
    return escape_surrogates(text) if SURROGATE.search(text) else text


def tool_call(call: dict[str, Any], as_string: bool = True) -> dict[str, Any]:
    """One call in the OpenAI shape. ``as_string`` (specforge, for Arrow's one type per column): arguments as
    a JSON string; else (messages) arguments in the form the prompt file gave them, object or string."""
    function = call.get("function")
    if not isinstance(function, dict):
        function = {}
    out: dict[str, Any] = {}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    out["type"] = call.get("type") if isinstance(call.get("type"), str) else "function"
    arguments = function.get("arguments")
    if as_string or not isinstance(arguments, (dict, str)):
        arguments = arguments_text(arguments)
    elif isinstance(arguments, str) and SURROGATE.search(arguments):
        arguments = escape_surrogates(arguments)
    out["function"] = {"name": as_text(function.get("name")), "arguments": arguments}
    return out


def message(raw: dict[str, Any], as_string: bool = True) -> dict[str, Any]:
    """One message with the keys a chat template reads (the ones that made the prompt's ids, RENDERED_KEYS),
    in stable types; a tool-calling turn's null content stays null, as the template saw it."""
    content = raw.get("content")
    out: dict[str, Any] = {"role": raw["role"], "content": content if content is None else as_text(content)}
    if isinstance(raw.get("reasoning_content"), str):
        out["reasoning_content"] = raw["reasoning_content"]
    calls = raw.get("tool_calls")
    if isinstance(calls, list) and calls:
        out["tool_calls"] = [tool_call(c, as_string) for c in calls if isinstance(c, dict)]
    for key in ("tool_call_id", "name"):
        if isinstance(raw.get(key), str):
            out[key] = raw[key]
    return out


def template_kwargs(record: ResultRecord) -> dict[str, Any]:
    kwargs = record.chat_template_kwargs
    return {k: v for k, v in kwargs.items() if k not in RESERVED_KEYS} if isinstance(kwargs, dict) else {}


def generated_positions(record: ResultRecord) -> list[int]:
    """Message indices of the assistant turns the model wrote: the last one for last/each rows, the last
    ``len(turns)`` assistant turns for all rows (a greeting before the first user turn is the source's)."""
    assistant = [i for i, m in enumerate(record.messages) if m.get("role") == "assistant"]
    return assistant[-len(record.finished_turns) :]


def json_text(value: Any, sort: bool = True) -> str | None:
    """A nested value as one compact JSON string, None for None; ASCII escapes for what orjson refuses (a lone
    surrogate). ``sort=False`` keeps the key order (tool schemas render in the order given)."""
    if value is None:
        return None
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS if sort else 0).decode()
    except TypeError:
        return json.dumps(value, sort_keys=sort, separators=(",", ":"))


def meta(record: ResultRecord, generated: list[int]) -> dict[str, Any]:
    """Everything a trainer does not read, as scalars of one type each (JSON text for the nested ones)."""
    return {
        "dataset": record.dataset,
        "id": record.id,
        "partition": as_text(record.partition) or None,
        "source": record.source,
        "finish_reason": record.finish_reason,
        "reasoning_complete": record.reasoning_complete,
        "prompt_tokens": as_int(record.prompt_tokens),
        "completion_tokens": as_int(record.completion_tokens),
        "generated_turns": generated,
        "model": record.model,
        "regenerate": record.regenerate,
        "settings": record.settings,
        "chat_template_kwargs": json_text(record.chat_template_kwargs),
        "sampling_params": json_text(record.sampling_params),
        "created_at": record.created_at,
    }
