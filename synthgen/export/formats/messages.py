"""``--format messages``: OpenAI-style ``{"id", "messages", "generated_turns", "tools"?, "chat_template_kwargs"?}``
for SFT trainers, the history in the prompt file's form (tool-call arguments object or string)."""

from __future__ import annotations

from typing import Any

from synthgen.data.records import ResultRecord
from synthgen.export.fields import Exported, expected, export_id, generated_positions, message, template_kwargs
from synthgen.export.formats.base import register


@register("messages", shape="{id, messages, generated_turns, tools?}", needs_ids=False, render_check=True)
def messages_rows(record: ResultRecord) -> list[Exported]:
    row: dict[str, Any] = {
        "id": export_id(record),
        "messages": [message(m, as_string=False) for m in record.messages],
        "generated_turns": generated_positions(record),
    }
    if record.tools:
        row["tools"] = record.tools
    if template_kwargs(record):
        row["chat_template_kwargs"] = template_kwargs(record)
    return [Exported(row, expected(record.finished_turns[-1]))]
