"""``--format tokens``: ``{"id", "input_ids", "loss_mask"}`` from the ids the server saw and returned.

No re-tokenization: input_ids = prompt ids + output ids (stop token included), loss_mask 1 on generated tokens.
A regenerate=all row with several generated turns is one sequence when each earlier turn's prompt + output ids
are a prefix of the last turn's prompt ids (every generated span masked 1); otherwise (e.g. the template drops
earlier reasoning from the history) one row per turn, with ids "<dataset>/<id>#<turn>". Rows without stored
ids are dropped and counted. The exact route.
"""

from __future__ import annotations

from typing import Any

from synthgen.data.records import ResultRecord
from synthgen.export.fields import Exported, export_id, turn_ids
from synthgen.export.formats.base import register


def token_rows(record: ResultRecord) -> list[dict[str, Any]]:
    """One sequence when the generated turns chain, else one row per turn (see the module docstring)."""
    spans = [ids for ids in (turn_ids(t) for t in record.finished_turns) if ids is not None]
    last_prompt, last_output = spans[-1]
    sequence = last_prompt + last_output
    chained = all(sequence[: len(p) + len(o)] == p + o and len(p) + len(o) <= len(last_prompt) for p, o in spans[:-1])
    if chained:
        mask = [0] * len(sequence)
        for prompt, output in spans:
            mask[len(prompt) : len(prompt) + len(output)] = [1] * len(output)
        return [{"id": export_id(record), "input_ids": sequence, "loss_mask": mask}]
    return [
        {"id": f"{export_id(record)}#{k}", "input_ids": p + o, "loss_mask": [0] * len(p) + [1] * len(o)}
        for k, (p, o) in enumerate(spans)
    ]


@register(
    "tokens",
    shape="{id, input_ids, loss_mask} from the stored ids",
    needs_ids=True,
    render_check=False,
    note="tokens rows are the stored ids and loss mask: exact by construction",
)
def tokens_rows(record: ResultRecord) -> list[Exported]:
    return [Exported(row) for row in token_rows(record)]
