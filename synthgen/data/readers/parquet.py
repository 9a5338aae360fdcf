"""Parquet: a ``.parquet`` file, or a folder's ``*.parquet`` shards (a dataset hub's ``data/train-*.parquet``).

The scan reads one batch of rows at a time (``iter_batches``, only the columns a prompt is read from),
so a folder of any size is never held in memory. A row's position is its index in the concatenation of
the shards; ``read`` decodes the row group that holds it and keeps that one group, so rows read in file
order cost one decode a group (``--sample random`` decodes a group for most rows: the price of a
random pick over a format whose smallest readable unit is a row group).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from synthgen.data.openfiles import limit_error, open_input
from synthgen.data.readers.base import NOT_A_FILE, Reader, RowData, Shard, read_pool
from synthgen.data.readers.columnar import Layout, pyarrow
from synthgen.errors import InputFileError

BATCH = 1024  # rows decoded at a time by the scan


class _Open:
    """An open parquet file: the Python file under it (opened as every prompt file is) and pyarrow's reader."""

    def __init__(self, path: Path):
        pa = pyarrow(path)
        self.fh = open_input(path, NOT_A_FILE)
        try:
            self.file = pa.parquet.ParquetFile(self.fh)
        except (pa.ArrowException, OSError) as exc:
            self.fh.close()
            raise InputFileError(path, None, f"is not a readable parquet file ({exc}); replace or remove it") from None

    def close(self) -> None:
        self.fh.close()


class ParquetReader(Reader):
    format = "parquet"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._layouts: list[Layout] = []
        self._groups: list[list[int]] = []  # per shard: the first row of each row group
        self._cached: tuple[int, int, Any] | None = None  # (shard, group, the group's table)

    def scan(self) -> Iterator[tuple[int, int, RowData]]:
        self.shards, self._layouts, self._groups, self._cached = [], [], [], None
        row = 0
        for path in self.paths:
            self.shards.append(Shard(path, row, row + 1))
            pa = pyarrow(path)
            handle = self._open(path)
            try:
                layout = Layout(pa, handle.file.schema_arrow, path, self.columns)
                meta = handle.file.metadata
                starts, at = [], 0
                for g in range(meta.num_row_groups):
                    starts.append(at)
                    at += meta.row_group(g).num_rows
                self._layouts.append(layout)
                self._groups.append(starts)
                # Its own handle, not the pool's: a generator must not hold the pool's lock between rows.
                for batch in handle.file.iter_batches(batch_size=BATCH, columns=layout.read):
                    for record in layout.records(batch):
                        row += 1
                        yield row, row - 1, record
            except OSError as exc:
                raise limit_error(exc, path) or InputFileError(path, None, f"cannot read ({exc.strerror})") from exc
            except pa.ArrowException as exc:
                raise InputFileError(path, None, f"cannot read: {exc}; replace or remove the file") from None
            finally:
                handle.close()

    @staticmethod
    def _open(path: Path) -> _Open:
        try:
            return _Open(path)
        except OSError as exc:
            raise limit_error(exc, path) or InputFileError(path, None, f"cannot read ({exc.strerror})") from exc

    def _use(self, i: int) -> Any:
        return read_pool().use((self, i), lambda: self._open(self.paths[i]))

    def read(self, position: int) -> RowData:
        i, shard = self._shard_at(position)
        local = position - shard.start
        group = bisect_right(self._groups[i], local) - 1
        cached = self._cached  # one read: another thread may replace it meanwhile
        if cached is None or cached[:2] != (i, group):
            with self._use(i) as handle:
                try:
                    cached = (i, group, handle.file.read_row_group(group, columns=self._layouts[i].read))
                except OSError as exc:
                    raise InputFileError(shard.path, None, f"cannot read ({exc})") from exc
            self._cached = cached
        return self._layouts[i].records(cached[2].slice(local - self._groups[i][group], 1))[0]

    def close(self) -> None:
        self._cached = None
        super().close()
