"""What every prompt reader shares: a dataset's files in a stable order, one numbering of its rows,
where a row is for an error message, the column mapping, and the pool of open files.

A dataset is one file or the shards of one folder, read as their concatenation. A reader gives each
row two numbers: ``row``, counted from 1 over the whole dataset (the plan's count and the key of error
messages), and ``position``, which the reader alone interprets to read that row again (a byte offset
for JSONL, a row index for parquet and arrow). ``Reader.place(row)`` turns the row back into the file
and that file's own numbering: ``prompts/short/x.jsonl:12`` (lines from 1), ``prompts/short/x/
train-00001.parquet: row 11 (from 0)`` (rows from 0, as ``datasets`` and pandas count).

A reader yields each row as JSONL bytes (parsed by ``synthgen.data.prompts``, so the fast path of a
plain line stays one ``orjson.loads``), as the ``Oversize`` of a line too long to read, or as a dict
a columnar reader built already (null cells left out, the column mapping applied).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from synthgen.data.openfiles import FilePool, Oversize, pool_size
from synthgen.errors import InputFileError, UsageError

NOT_A_FILE = "a prompt file must be a regular file (or a link to one): replace it or move it out of the partition"

# What a reader yields for one row: a JSONL line, a line too long to read, or a columnar row as a dict.
RowData = bytes | Oversize | dict[str, Any]

# The record fields a prompt is read from (``synthgen.data.conversations``): the targets of --columns,
# and the only columns a columnar reader decodes.
FIELDS = (
    "id",
    "messages",
    "conversations",
    "prompt",
    "system",
    "tools",
    "input_ids",
    "instruction",
    "input",
    "output",
)
# A record has a prompt if it has one of these.
SHAPES = ("messages", "conversations", "prompt", "instruction", "input_ids")


class Closable(Protocol):
    def close(self) -> None: ...


# Open prompt files across all readers; a small share of the descriptor limit.
READ_POOL: FilePool[Closable] = FilePool(pool_size(32), lambda fh: fh.close())


def read_pool() -> FilePool[Closable]:
    """The pool, looked up when used (a test may give the readers a pool of its own)."""
    return READ_POOL


@dataclass(frozen=True, slots=True)
class Columns:
    """--columns: the dataset's column for each record field, e.g. ``prompt=question,id=uid``."""

    pairs: tuple[tuple[str, str], ...] = ()  # (field, column)

    def __bool__(self) -> bool:
        return bool(self.pairs)

    @classmethod
    def parse(cls, text: str) -> Columns:
        """The mapping of ``FIELD=COLUMN[,FIELD=COLUMN...]``; a mistake is a one-line UsageError."""
        pairs: list[tuple[str, str]] = []
        example = "e.g. --columns prompt=question,id=uid"
        for item in text.split(","):
            target, sep, column = (part.strip() for part in item.partition("="))
            if not sep or not target or not column:
                raise UsageError(f"--columns: {item.strip()!r} is not FIELD=COLUMN; {example}")
            if target not in FIELDS:
                fields = ", ".join(FIELDS)
                raise UsageError(f"--columns: unknown field {target!r} in {item.strip()!r} (fields: {fields})")
            if any(target == t for t, _ in pairs):
                raise UsageError(f"--columns: field {target!r} is mapped twice; give each field one column")
            if any(column == c for _, c in pairs):
                raise UsageError(f"--columns: column {column!r} is mapped to two fields; give each its own column")
            pairs.append((target, column))
        return cls(tuple(pairs))

    def text(self) -> str:
        return ",".join(f"{t}={c}" for t, c in self.pairs)

    def apply(self, record: dict[str, Any]) -> dict[str, Any]:
        """The record with each mapped column under its field's name (a column the record lacks is left out;
        the field's own column, if any, is replaced)."""
        out = dict(record)
        for target, _ in self.pairs:
            out.pop(target, None)
        for target, column in self.pairs:
            if column in record:
                out[target] = record[column]
        return out

    def wanted(self, names: list[str]) -> dict[str, str]:
        """column -> field, for the columns of ``names`` a prompt is read from (after the mapping)."""
        mapped = {column: target for target, column in self.pairs}
        targets = set(mapped.values())
        wanted = {name: mapped[name] for name in names if name in mapped}
        wanted.update({name: name for name in names if name in FIELDS and name not in targets and name not in mapped})
        return wanted


NO_COLUMNS = Columns()
# Column names that usually hold the prompt: the one a refusal suggests, when a file has one.
_PROMPT_NAMES = frozenset(("question", "query", "problem", "text", "content", "request", "task", "user", "human"))


def no_shape_error(path: Path, names: list[str], columns: Columns) -> UsageError:
    """A columnar file none of whose columns holds a prompt: one line with its columns and the fix."""
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    mapped = f" (with --columns {columns.text()})" if columns else ""
    others = [n for n in names if n not in FIELDS]
    likely = [n for n in others if n.lower() in _PROMPT_NAMES] or [n for n in others if not n.lower().endswith("id")]
    guess = (likely or others or ["COLUMN"])[0]
    return UsageError(
        f"{path}: no column holds a prompt{mapped}: expected one of {', '.join(SHAPES)} (columns: {shown}); "
        f"name the prompt's column with --columns, e.g. --columns prompt={guess}"
    )


@dataclass(frozen=True, slots=True)
class Shard:
    path: Path
    start: int  # the position of its first row in the dataset
    first_row: int  # the dataset's row number (from 1) of its first row


class Reader(ABC):
    """One dataset's rows, in a stable order: ``scan`` yields (row, position, data) for every row,
    ``read(position)`` one row again, in any order, through the shared pool of open files."""

    format = ""
    # How a row of this format is named in a message: "line" (JSONL, from 1) or "row" (from 0).
    unit = "row"

    def __init__(self, paths: tuple[Path, ...], columns: Columns = NO_COLUMNS):
        self.paths = paths
        self.columns = columns
        self.shards: list[Shard] = []  # filled as the scan reaches each file

    @abstractmethod
    def scan(self) -> Iterator[tuple[int, int, RowData]]:
        """Every row of every file, in order: (row number from 1, position, data)."""

    @abstractmethod
    def read(self, position: int) -> RowData:
        """The row at ``position`` (a position ``scan`` gave)."""

    def close(self) -> None:
        """Close this reader's open files, if any; a later read opens them again."""
        for key in self._pool_keys():
            READ_POOL.release(key)

    def _pool_keys(self) -> list[object]:
        return [(self, i) for i in range(len(self.paths))]

    def _shard_at(self, position: int) -> tuple[int, Shard]:
        i = bisect_right([s.start for s in self.shards], position) - 1
        return i, self.shards[max(i, 0)]

    def place(self, row: int) -> tuple[Path, int | None, str]:
        """(file, line for ``InputFileError``, prefix of the problem) of a row number of the scan."""
        i = bisect_right([s.first_row for s in self.shards], row) - 1
        shard = self.shards[max(i, 0)] if self.shards else Shard(self.paths[0], 0, 1)
        local = row - shard.first_row
        if self.unit == "line":
            return shard.path, local + 1, ""
        return shard.path, None, f"row {local:,} (from 0): "

    def error(self, row: int, problem: str) -> InputFileError:
        path, line, prefix = self.place(row)
        return InputFileError(path, line, prefix + problem)

    def where(self, row: int) -> str:
        path, line, prefix = self.place(row)
        return f"{path}:{line}" if line is not None else f"{path}: {prefix.rstrip(': ')}"


def drop_nulls(value: Any) -> Any:
    """A struct value as a JSON object would have been: a parquet struct has every field of its type in
    every row, null where the row had none, so null fields are left out (lists are walked)."""
    if type(value) is dict:
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if type(value) is list:
        return [drop_nulls(v) for v in value]
    return value


def records(columns: Mapping[str, list[Any]], nested: set[str], count: int, nulls: bool = True) -> list[dict[str, Any]]:
    """The rows of a batch as records: ``columns`` field -> values (``nested``: fields whose values hold
    structs, cleaned by ``drop_nulls``); a null cell is a missing field, as in a JSON line without it.
    ``nulls`` False: no cell is null (the caller knows from the arrays), so none is looked for."""
    for name in nested:
        columns = {**columns, name: [drop_nulls(v) for v in columns[name]]}
    names = list(columns)
    rows = zip(*(columns[n] for n in names), strict=True) if names else iter([()] * count)
    if not nulls:
        return [dict(zip(names, row, strict=True)) for row in rows]
    return [{n: v for n, v in zip(names, row, strict=True) if v is not None} for row in rows]
