"""Which result rows become training rows (pure): malformed rows, then the drop reasons in order.

A row counts under the first reason that applies; REASONS is that order and the report's. The format decides
two of them through its table entry (formats/base.py): ``needs_ids`` (no_ids) and its own ``refuse`` (a
Refusal: specforge's cut_empty).
"""

from __future__ import annotations

import re
from typing import Any

from synthgen.data.records import ResultRecord, typed_list
from synthgen.export.fields import as_text, turn_ids
from synthgen.export.formats import FORMATS, Format

# Left in a reasoning or answer field, these mean the split into reasoning and answer went wrong.
STRAY_MARKERS = (
    "<think>",
    "</think>",
    "<|channel|>",
    "<|message|>",
    "<|start|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|constrain|>",
)
ROLES = frozenset({"system", "user", "assistant", "tool"})

DUPLICATE = "duplicate"
MALFORMED = "malformed"
OTHER_SETTINGS = "other_settings"
NO_IDS = "no_ids"
LOOPED = "repetition"
TRUNCATED = "truncated"
UNCLOSED = "unclosed"
EMPTY = "empty"
STRAY = "stray"
REASONS = {
    DUPLICATE: "duplicate id (first kept)",
    MALFORMED: "malformed",
    OTHER_SETTINGS: "other settings set",
    NO_IDS: "no stored token ids",
    LOOPED: "ended by the loop guard",
    TRUNCATED: "cut at max tokens",
    UNCLOSED: "reasoning never closed",
    EMPTY: "empty answer",
    STRAY: "stray think/channel markers",
    # then each format's own (formats/*.py: Refusal)
    **{f.refuse.reason: f.refuse.text for f in FORMATS.values() if f.refuse is not None},
}
HINTS = {
    OTHER_SETTINGS: "not the set --settings picks",
    NO_IDS: "rows written before ids were stored; use --format specforge or messages",
    LOOPED: "finish_reason repetition: the answer fell into a loop (--loop-guard)",
    TRUNCATED: "finish_reason length; --keep-truncated keeps them",
    STRAY: "a tag left in reasoning_content or content",
    **{f.refuse.reason: f.refuse.hint for f in FORMATS.values() if f.refuse is not None},
}


def _bad_ids(value: Any, vocab: int | None) -> str | None:
    """Why a stored id list cannot be trained on, or None (None itself is "not stored", a later filter)."""
    if value is None:
        return None
    if typed_list(value, int) is None:
        return "token ids are not a list of integers"
    if any(v < 0 for v in value):
        return "a negative token id"
    if vocab is not None and any(v >= vocab for v in value):
        return f"a token id outside the vocabulary ({vocab:,} ids)"
    return None


def _bad_messages(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return "messages is not a list of objects"
    for m in messages:
        role = m.get("role")
        if role not in ROLES:
            return f"unknown role {str(role)[:20]!r}"
        content = m.get("content")
        if not isinstance(content, str) and not (content is None and role == "assistant" and m.get("tool_calls")):
            return f"{role} content is not a string"
        if m.get("reasoning_content") is not None and not isinstance(m.get("reasoning_content"), str):
            return "reasoning_content is not a string"
    if messages[-1].get("role") != "assistant":
        return "the last turn is not the assistant's"
    return None


def malformed(record: ResultRecord, vocab: int | None = None) -> str | None:
    """Why a row cannot become a training row (the fields every format needs, with their types), or None.

    ``vocab``: the tokenizer's size when one is known; ids at or above it are malformed."""
    if not isinstance(record.id, str):
        return "no string id"
    why = _bad_messages(record.messages)
    if why is not None:
        return why
    if record.tools is not None and not isinstance(record.tools, list):
        return "tools is not a list"
    if record.turns is not None and not isinstance(record.turns, list):
        return "turns is not a list"
    for turn in record.finished_turns:
        if not isinstance(turn, dict):
            return "a turn is not an object"
        if not isinstance(turn.get("content"), str):
            return "the generated content is not a string"
        for key in ("input_ids", "output_ids"):
            reason = _bad_ids(turn.get(key), vocab)
            if reason is not None:
                return f"{key}: {reason}"
    return None


def conversation_key(record: ResultRecord) -> str:
    """The source conversation of a row: ``<id>`` for the ``<id>#<k>`` rows of mode each, else ""."""
    each = record.regenerate == "each" or (record.regenerate is None and re.fullmatch(r".+#\d+", record.id))
    return record.id.rpartition("#")[0] if each and "#" in record.id else ""


def tool_calls(turn: dict[str, Any]) -> int:
    calls = turn.get("tool_calls")
    return len(calls) if isinstance(calls, list) else 0


def is_empty_answer(turn: dict[str, Any]) -> bool:
    """Reasoning closed (or none), yet no answer and no tool call."""
    answered = as_text(turn.get("content")).strip() or tool_calls(turn)
    return turn.get("reasoning_complete") is not False and not answered


def has_stray_marker(turn: dict[str, Any]) -> bool:
    fields = (as_text(turn.get("reasoning_content")), as_text(turn.get("content")))
    return any(marker in text for text in fields for marker in STRAY_MARKERS)


def _shared_reason(turns: list[dict[str, Any]], keep_truncated: bool) -> str | None:
    if any(t.get("finish_reason") == LOOPED for t in turns):
        return LOOPED  # never training data, whatever else is kept
    cut = any(t.get("finish_reason") == "length" for t in turns)
    if cut and keep_truncated:
        return STRAY if any(has_stray_marker(t) for t in turns) else None
    if cut:
        return TRUNCATED
    if any(t.get("reasoning_complete") is False for t in turns):
        return UNCLOSED
    if any(is_empty_answer(t) for t in turns):
        return EMPTY
    if any(has_stray_marker(t) for t in turns):
        return STRAY
    return None


def drop_reason(record: ResultRecord, fmt: Format, keep_truncated: bool) -> str | None:
    """Why a (unique, well-formed) row is not exported in ``fmt``, or None to export it."""
    turns = record.finished_turns
    if fmt.needs_ids and any(turn_ids(t) is None for t in turns):
        return NO_IDS
    reason = _shared_reason(turns, keep_truncated)
    if reason is None and fmt.refuse is not None and fmt.refuse.applies(record, keep_truncated):
        return fmt.refuse.reason
    return reason
