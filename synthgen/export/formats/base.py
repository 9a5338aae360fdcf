"""The formats table: one entry per export format, registered by ``@register`` beside the code that makes its
rows (formats/specforge.py, tokens.py, messages.py). --help's choices, the docs' table and every decision that
differs by format (stored ids needed, render check, a format's own drop reason, its closing note) read it here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from synthgen.data.records import ResultRecord
from synthgen.export.fields import Exported

RowMaker = Callable[[ResultRecord], list[Exported]]


@dataclass(frozen=True, slots=True)
class Refusal:
    """A format's own reason to leave out a row the shared filters keep, counted and reported as ``reason``."""

    reason: str  # its name in the counts, e.g. cut_empty
    text: str  # the report's line for it
    hint: str  # why, and what keeps such rows
    applies: Callable[[ResultRecord, bool], bool]  # (row, --keep-truncated) -> leave it out


@dataclass(frozen=True, slots=True)
class Format:
    name: str
    rows: RowMaker  # the output rows of one result row, each with what it must render to
    shape: str  # one line for --help: the keys of a row
    needs_ids: bool  # rows without stored token ids cannot be made (dropped as no_ids)
    render_check: bool  # a trainer renders the row again, so the render check applies
    refuse: Refusal | None = None
    note: str = ""  # printed after an export of this format: what the trainer needs to know
    teacher: bool = False  # parquet rows joined with the teacher side file (formats/kd.py)


FORMATS: dict[str, Format] = {}


def register(
    name: str,
    *,
    shape: str,
    needs_ids: bool,
    render_check: bool,
    refuse: Refusal | None = None,
    note: str = "",
    teacher: bool = False,
) -> Callable[[RowMaker], RowMaker]:
    """Enter the decorated row maker in the table under ``name`` (once: a second entry is a programming error)."""

    def enter(rows: RowMaker) -> RowMaker:
        if name in FORMATS:
            raise ValueError(f"export format {name!r} registered twice")
        FORMATS[name] = Format(name, rows, shape, needs_ids, render_check, refuse, note, teacher)
        return rows

    return enter


def get(name: str) -> Format:
    """The table's entry for ``name`` (the CLI offers only these names)."""
    return FORMATS[name]


def names() -> tuple[str, ...]:
    return tuple(sorted(FORMATS))
