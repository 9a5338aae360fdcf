"""``--format specforge``: the rows SpecForge's loader reads (its ``data.train_data_path``).

    {"id", "conversations": [...], "tools"?: "<JSON string>", <chat_template_kwargs>..., "status": "success",
     "synthgen_meta": {...}}

One row per generated turn, ending at it (ids ``#<turn>`` when there are several), for SpecForge's
``data.train_only_last_turn: true``. SpecForge's online loader (build_eagle3_dataset) pops "conversations", "id"
and "tools" and passes every other column to the chat template as a variable, so the row's chat_template_kwargs
are top-level keys and everything else sits under "synthgen_meta" (its offline prepare_hidden_states.py keeps
only conversations and tools). Types are the same in every row so Arrow loads the file: content and
reasoning_content strings, function.arguments a JSON string, tools a JSON string.
"""

from __future__ import annotations

from typing import Any

from synthgen.data.records import ResultRecord
from synthgen.data.rowread import cut_unanswered, record_turns
from synthgen.export.fields import (
    META_KEY,
    Exported,
    expected,
    export_id,
    generated_positions,
    json_text,
    message,
    meta,
    template_kwargs,
)
from synthgen.export.formats.base import Refusal, register

SPECFORGE_SETTING = "data.train_only_last_turn: true"


def cut_before_an_answer(record: ResultRecord, keep_truncated: bool) -> bool:
    """A turn cut at --max-tokens with no answer and no call, kept by --keep-truncated: SpecForge's data validator
    (scripts/validate_regenerated_data.py) refuses a file with an empty assistant content, and a drafter learns
    nothing from a turn that ends without an answer; --format tokens keeps these rows."""
    if not keep_truncated:
        return False  # the shared filters drop every cut row already
    return any(cut_unanswered(turn) for turn in record_turns(record))


CUT_EMPTY = Refusal(
    "cut_empty",
    "cut, with an empty answer",
    "kept by --keep-truncated but SpecForge's validator refuses an empty answer; --format tokens keeps them",
    cut_before_an_answer,
)


@register(
    "specforge",
    shape="{id, conversations, tools?, status, synthgen_meta}",
    needs_ids=False,
    render_check=True,
    refuse=CUT_EMPTY,
    note=f"specforge rows end at the one turn the model generated: train with {SPECFORGE_SETTING} "
    "(SpecForge's config), or earlier assistant turns are trained too",
)
def specforge_rows(record: ResultRecord) -> list[Exported]:
    """One row per generated turn, ending at that turn, with the history as the model saw it: trained with
    SpecForge's ``data.train_only_last_turn: true``, each row trains exactly the turn the model wrote."""
    positions = generated_positions(record)
    out = []
    for k, (position, turn) in enumerate(zip(positions, record.finished_turns, strict=False)):
        rid = export_id(record) if len(positions) == 1 else f"{export_id(record)}#{k}"
        row: dict[str, Any] = {"id": rid, "conversations": [message(m) for m in record.messages[: position + 1]]}
        if record.tools:
            row["tools"] = json_text(record.tools, sort=False)
        row.update(template_kwargs(record))
        row["status"] = "success"  # what SpecForge's data validator looks for
        row[META_KEY] = meta(record, [p for p in positions if p <= position])
        out.append(Exported(row, expected(turn)))
    return out
