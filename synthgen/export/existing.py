"""``--existing NAME=PATH``: files of token rows made elsewhere, merged into a ``--format tokens`` export.

Each line of such a file (``{"input_ids", "loss_mask"}``, ``data.tokenrows``) becomes a training row
``{"id": "<NAME>/<line>", "input_ids", "loss_mask"}``: the same shape as the generated rows, its source named
by the id's prefix as a generated row's dataset is. Rows go to the validation file by a hash of (--seed, NAME,
line), as generated rows do by their conversation. Every file is checked whole before anything is written.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

from synthgen.data.tokenrows import ExistingSource, TokenRowsScan, iter_token_rows, scan_token_rows
from synthgen.errors import UsageError

FORMAT = "tokens"
TOKEN_FORMATS = (FORMAT, "axolotl-kd", "topk-sparse")  # formats made of token rows, which --existing joins


def check_existing(existing: Sequence[ExistingSource], fmt: str) -> None:
    if existing and fmt not in TOKEN_FORMATS:
        raise UsageError(
            f"--existing: files of token rows join a --format {FORMAT} export only (this one is --format {fmt}); "
            f"add --format {FORMAT}"
        )


def scan_existing(existing: Sequence[ExistingSource]) -> dict[str, TokenRowsScan]:
    """Every file read and checked once, before the export writes anything."""
    return {source.name: scan_token_rows(source.path) for source in existing}


def in_validation(seed: int, name: str, line: int, fraction: float) -> bool:
    digest = hashlib.sha256(f"{seed}\0existing\0{name}\0{line}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def existing_rows(
    existing: Sequence[ExistingSource], seed: int, fraction: float, validation: bool
) -> Iterator[dict[str, Any]]:
    """The rows of one side (train or validation) of every file, in file order."""
    for source in existing:
        for line, _, row in iter_token_rows(source.path):
            if in_validation(seed, source.name, line, fraction) == validation:
                yield {"id": f"{source.name}/{line}", "input_ids": row["input_ids"], "loss_mask": row["loss_mask"]}
