"""Datasets that are already tokens: files of finished rows, ``{"input_ids": [...], "loss_mask": [...]}``.

That is the row ``export_training.py --format tokens`` writes (SpecForge's and speculators' pre-tokenized
route), so data tokenized elsewhere, or an earlier export, joins a training mix as it is. ``--existing
NAME=PATH`` declares one such file to ``compute_budget.py`` (its rows and tokens count in the plan, no
inference is planned for it) and to ``export_training.py`` (its rows are merged into the training files).

``scan_token_rows`` reads a file once, checking every line, and counts its rows, its trained tokens (the
ones ``loss_mask`` marks: what the model wrote) and all its tokens. ``parse_existing`` reads the flag.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from synthgen.data.openfiles import Oversize, bounded_lines, open_input
from synthgen.errors import InputFileError, UsageError

FLAG = "--existing"
MAX_LINE_BYTES = 1 << 30  # a 256K-token row is a few MB; a line over this is not a row
FIX = 'each line is {"input_ids": [ids], "loss_mask": [0 or 1 per id]}, as export_training.py --format tokens writes'


@dataclass(frozen=True, slots=True)
class ExistingSource:
    name: str
    path: Path


@dataclass(frozen=True, slots=True)
class TokenRowsScan:
    rows: int
    trained_tokens: int  # loss_mask 1: the model's own tokens, comparable to a plan's output tokens
    total_tokens: int  # every input id


def parse_existing(texts: Sequence[str], flag: str = FLAG) -> tuple[ExistingSource, ...]:
    """``NAME=PATH`` per flag given; each name once."""
    out: dict[str, ExistingSource] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise UsageError(f"{flag}: '{text}' is not NAME=PATH; write it like {flag} A1_deepswekimi=tokens.jsonl")
        if name in out:
            raise UsageError(f"{flag}: '{name}' is given twice; keep one")
        out[name] = ExistingSource(name, Path(value))
    return tuple(out.values())


def check_row(row: Any) -> str | None:
    """What is wrong with one token row, or None."""
    if not isinstance(row, dict):
        return f"not a JSON object; {FIX}"
    ids, mask = row.get("input_ids"), row.get("loss_mask")
    if not isinstance(ids, list) or not ids:
        return f"no input_ids list; {FIX}"
    if not isinstance(mask, list) or len(mask) != len(ids):
        got = "none" if not isinstance(mask, list) else f"{len(mask)} entries for {len(ids)} ids"
        return f"loss_mask must have one 0 or 1 per input id (got {got}); {FIX}"
    if not all(type(i) is int and i >= 0 for i in ids):
        return f"input_ids must be token ids (whole numbers, 0 or more); {FIX}"
    if not all(m == 0 or m == 1 for m in mask) or any(type(m) is not int for m in mask):
        return f"loss_mask must hold only 0 and 1; {FIX}"
    return None


def iter_token_rows(path: Path) -> Iterator[tuple[int, bytes, dict[str, Any]]]:
    """(line number, the line as it is, the row) of every non-blank line, each checked; a bad one stops
    the read with ``file:line: what is wrong`` and the fix."""
    what = f"pass a file of token rows ({FIX})"
    try:
        fh = open_input(path, what)
    except FileNotFoundError:
        raise UsageError(f"{FLAG}: {path}: no such file; check the path (NAME=PATH)") from None
    except OSError as exc:
        raise UsageError(f"{FLAG}: {path}: cannot read ({exc.strerror or exc})") from None
    with fh:
        for number, line in enumerate(bounded_lines(fh, MAX_LINE_BYTES), 1):
            if isinstance(line, Oversize):
                raise InputFileError(path, number, f"a line of {line.size:,} bytes; {FIX}")
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise InputFileError(path, number, f"not valid JSON ({exc}); {FIX}") from None
            problem = check_row(row)
            if problem:
                raise InputFileError(path, number, problem)
            yield number, line, row


def scan_token_rows(path: Path) -> TokenRowsScan:
    rows = trained = total = 0
    for _, _, row in iter_token_rows(path):
        rows += 1
        trained += sum(row["loss_mask"])
        total += len(row["input_ids"])
    if rows == 0:
        raise UsageError(f"{FLAG}: {path}: holds no rows; {FIX}")
    return TokenRowsScan(rows, trained, total)
