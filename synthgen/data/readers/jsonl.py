"""JSONL: one JSON object per line; a dataset is one file or a folder's ``*.jsonl`` shards.

A row's position is its byte offset in the concatenation of the shards (the first shard's lines,
then the next's), so the index of a scan keeps one integer a prompt and a read is one seek. Lines
are read with a bound (``MAX_LINE``): a longer one is given as its ``Oversize``, never held whole.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO, cast

from synthgen.data.openfiles import limit_error, open_input
from synthgen.data.readers.base import NOT_A_FILE, Reader, RowData, Shard, read_pool
from synthgen.data.rowscan import lines
from synthgen.errors import InputFileError

# The longest line a prompt file may have (more tokens than any context): a longer one is a bad
# line, passed over in chunks, never read into memory whole (a file without newlines, /dev/zero).
MAX_LINE = 64 << 20


class JsonlReader(Reader):
    format = "jsonl"
    unit = "line"

    def scan(self) -> Iterator[tuple[int, int, RowData]]:
        self.shards = []
        row = offset = 0
        for path in self.paths:
            self.shards.append(Shard(path, offset, row + 1))
            try:
                with open_input(path, NOT_A_FILE) as fh:
                    for line in lines(fh, MAX_LINE):
                        row += 1
                        yield row, offset, line
                        offset += line.size if not isinstance(line, bytes) else len(line)
            except OSError as exc:
                raise limit_error(exc, path) or InputFileError(path, None, f"cannot read ({exc.strerror})") from exc

    def read(self, position: int) -> RowData:
        i, shard = self._shard_at(position)
        path = shard.path
        try:
            with read_pool().use((self, i), lambda: open_input(path, NOT_A_FILE)) as fh:
                handle = cast(BinaryIO, fh)
                handle.seek(position - shard.start)
                # Longer: the file changed since the scan (the caller's parse says so).
                return handle.readline(MAX_LINE + 1)
        except OSError as exc:
            raise limit_error(exc, path) or InputFileError(path, None, f"cannot read ({exc.strerror})") from exc
