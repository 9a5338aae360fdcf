"""What the parquet and arrow readers share: pyarrow loaded on first use (a missing one is one line with
the install command), the columns a prompt is read from, and a batch of rows turned into records.

A column may hold structs (``messages`` as a list of ``{role, content}``) or a JSON string of the same
value (``synthgen.data.conversations`` reads both); a struct's null fields are left out, as a JSON
object would not have them, and a null cell is a missing field. Only the columns of ``FIELDS`` (after
--columns) are decoded: a dataset's other columns (metadata, long reference texts) are never read.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from synthgen.data.readers.base import SHAPES, Columns, no_shape_error, records
from synthgen.errors import UsageError

INSTALL = "pip install 'pyarrow>=15'"


def pyarrow(path: Path) -> Any:
    """The pyarrow module (with ``pyarrow.parquet``), or a one-line error naming the file and the install command."""
    try:
        module = importlib.import_module("pyarrow")
        importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise UsageError(f"{path}: reading parquet and arrow files needs pyarrow: {INSTALL}") from None
    return module


def _has_struct(pa: Any, kind: Any) -> bool:
    types = pa.types
    if types.is_struct(kind):
        return True
    if types.is_list(kind) or types.is_large_list(kind) or types.is_fixed_size_list(kind):
        return _has_struct(pa, kind.value_type)
    return False


class Layout:
    """The columns of one file's schema a prompt is read from: column -> field, and the fields holding structs."""

    def __init__(self, pa: Any, schema: Any, path: Path, columns: Columns):
        names = list(schema.names)
        self.wanted = columns.wanted(names)
        if not any(field in SHAPES for field in self.wanted.values()):
            raise no_shape_error(path, names, columns)
        self.read = list(self.wanted)  # the columns to decode
        self.same = all(column == field for column, field in self.wanted.items())  # no column renamed
        self.nested = {self.wanted[n] for n in self.read if _has_struct(pa, schema.field(n).type)}

    def records(self, batch: Any) -> list[dict[str, Any]]:
        """The records of a record batch (or a table slice) of this layout."""
        nested = {self.wanted[n] for n in self.read if self.wanted[n] in self.nested and _nulls(batch.column(n))}
        nulls = any(batch.column(name).null_count for name in self.read)
        if not nested and not nulls and self.same:  # the common case: pyarrow builds the records
            rows: list[dict[str, Any]] = batch.select(self.read).to_pylist()
            return rows
        values = {self.wanted[name]: batch.column(name).to_pylist() for name in self.read}
        return records(values, nested, batch.num_rows, nulls)


def _nulls(array: Any) -> bool:
    """Whether a struct anywhere in the array has a null field (the batch's structs need ``drop_nulls``):
    read from the arrays' null counts, so a batch of complete structs is not walked in Python."""
    chunks = getattr(array, "chunks", None)
    if chunks is not None:
        return any(_nulls(chunk) for chunk in chunks)
    kind = array.type
    if hasattr(array, "flatten") and hasattr(kind, "value_type"):  # a list: its values
        return _nulls(array.flatten())
    if kind.num_fields and hasattr(array, "field"):  # a struct: each field
        return any(array.field(i).null_count or _nulls(array.field(i)) for i in range(kind.num_fields))
    return False
