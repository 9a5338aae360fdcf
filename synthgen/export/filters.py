"""Which result rows become training rows (pure): malformed rows, then the drop reasons in order.

What a row is (its turns, cut, looped, an empty answer) is the row reader's (``synthgen.data.rowread``): a row
it finds malformed is dropped as such; ``vocab_problem`` adds the ids the export's tokenizer cannot hold.

A row counts under the first reason that applies; REASONS is that order and the report's. The format decides
two of them through its table entry (formats/base.py): ``needs_ids`` (no_ids) and its own ``refuse`` (a
Refusal: specforge's cut_empty).
"""

from __future__ import annotations

import re

from synthgen.data.records import ResultRecord, Turn
from synthgen.data.rowread import LOOPED, Row, cut, empty_answer, looped
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

DUPLICATE = "duplicate"
MALFORMED = "malformed"
OTHER_SETTINGS = "other_settings"
NO_IDS = "no_ids"
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


def vocab_problem(row: Row, vocab: int | None) -> str | None:
    """Why a row's stored token ids (lists of integers: the reader checked that) cannot be trained on, or None:
    a negative id, or, with ``vocab`` (the tokenizer's size when one is known), one at or above it."""
    for turn in row.turns:
        for key, ids in (("input_ids", turn.input_ids), ("output_ids", turn.output_ids)):
            if not ids:
                continue
            if min(ids) < 0:
                return f"{key}: a negative token id"
            if vocab is not None and max(ids) >= vocab:
                return f"{key}: a token id outside the vocabulary ({vocab:,} ids)"
    return None


def conversation_key(record: ResultRecord) -> str:
    """The source conversation of a row: ``<id>`` for the ``<id>#<k>`` rows of mode each, else ""."""
    each = record.regenerate == "each" or (record.regenerate is None and re.fullmatch(r".+#\d+", record.id))
    return record.id.rpartition("#")[0] if each and "#" in record.id else ""


def has_stray_marker(turn: Turn) -> bool:
    return any(marker in text for text in (turn.reasoning_content, turn.content) for marker in STRAY_MARKERS)


def _shared_reason(turns: list[Turn], keep_truncated: bool) -> str | None:
    if any(looped(t) for t in turns):
        return LOOPED  # never training data, whatever else is kept
    if any(cut(t) for t in turns):
        if not keep_truncated:
            return TRUNCATED
        return STRAY if any(has_stray_marker(t) for t in turns) else None
    if any(not t.reasoning_complete for t in turns):
        return UNCLOSED
    if any(empty_answer(t) for t in turns):
        return EMPTY
    if any(has_stray_marker(t) for t in turns):
        return STRAY
    return None


def drop_reason(row: Row, fmt: Format, keep_truncated: bool) -> str | None:
    """Why a (unique, well-formed) row is not exported in ``fmt``, or None to export it."""
    if fmt.needs_ids and any(t.input_ids is None or t.output_ids is None for t in row.turns):
        return NO_IDS
    reason = _shared_reason(row.turns, keep_truncated)
    if reason is None and fmt.refuse is not None and fmt.refuse.applies(row.record, keep_truncated):
        return fmt.refuse.reason
    return reason
