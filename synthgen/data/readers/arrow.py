"""Arrow: a folder ``datasets.save_to_disk`` wrote (``data-00000-of-00002.arrow`` ..., in the order its
``state.json`` lists them), or ``*.arrow`` shards of either Arrow IPC format (the stream format
``datasets`` writes, or the file format).

A file is memory-mapped, as ``datasets`` does: its batches are views of the file's pages, which the
operating system reads in and drops as it likes, so a folder of any size is never copied into the
process's memory. The scan decodes ``BATCH`` rows at a time; ``read`` slices one row of the mapped table.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from synthgen.data.openfiles import limit_error, open_input
from synthgen.data.readers.base import NOT_A_FILE, Reader, RowData, Shard, read_pool
from synthgen.data.readers.columnar import Layout, pyarrow
from synthgen.errors import InputFileError

BATCH = 1024  # rows decoded at a time by the scan
FILE_MAGIC = b"ARROW1"  # the start of the IPC file format; the stream format has none


class _Mapped:
    """A memory-mapped arrow file as one table (zero-copy), with the layout of its columns."""

    def __init__(self, path: Path, columns: Any):
        pa = pyarrow(path)
        try:
            open_input(path, NOT_A_FILE).close()  # a FIFO or a device is refused before it is mapped
            self.map = pa.memory_map(str(path))
        except OSError as exc:
            raise limit_error(exc, path) or InputFileError(path, None, f"cannot read ({exc.strerror})") from exc
        try:
            if self.map.read(len(FILE_MAGIC)) == FILE_MAGIC:
                self.map.seek(0)
                self.table = pa.ipc.open_file(self.map).read_all()
            else:
                self.map.seek(0)
                self.table = pa.ipc.open_stream(self.map).read_all()
            self.layout = Layout(pa, self.table.schema, path, columns)
        except pa.ArrowException as exc:
            self.close()
            raise InputFileError(path, None, f"is not a readable arrow file ({exc}); replace or remove it") from None
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self.table = None
        self.map.close()


class ArrowReader(Reader):
    format = "arrow"

    def scan(self) -> Iterator[tuple[int, int, RowData]]:
        self.shards = []
        row = 0
        for path in self.paths:
            self.shards.append(Shard(path, row, row + 1))
            mapped = _Mapped(path, self.columns)
            try:
                for batch in mapped.table.to_batches(max_chunksize=BATCH):
                    for record in mapped.layout.records(batch):
                        row += 1
                        yield row, row - 1, record
            finally:
                mapped.close()

    def read(self, position: int) -> RowData:
        i, shard = self._shard_at(position)
        with read_pool().use((self, i), lambda: _Mapped(shard.path, self.columns)) as handle:
            mapped: _Mapped = handle  # type: ignore[assignment]
            return mapped.layout.records(mapped.table.slice(position - shard.start, 1))[0]
