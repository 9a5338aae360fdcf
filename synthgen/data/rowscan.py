"""The resume scan's reading of result rows: every row parsed, its token ids passed over.

Resume needs a few scalars of each row (id, token count, source, hash, mode), and most of the cost of
parsing a row with token ids is building their int objects (3,000-10,000 a row). ``resume_row``
parses the row without them: every array under a key ending in ``_ids`` (``input_ids``,
``output_ids``) is read as ``[]``, the rest of the line as orjson reads it. ``_ids":[`` can only be
the end of a key (inside a JSON string the quote would be escaped), and an array is cut only when
it holds no quote, brace or bracket, so the line's structure is checked in full; only the number
tokens inside those arrays go unchecked (rows are written whole by this tool, and the export parses
every row it reads in full).

``lines`` reads a file in large blocks and gives its lines as iterating the file would, without
a per-line read call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, BinaryIO, overload

import orjson

from synthgen.data.openfiles import Oversize
from synthgen.data.records import parse_line

_IDS_KEY = b'_ids":['
_IDS_HEAD = _IDS_KEY[:-1]  # what precedes the "[" of an ids array
# "[" that open no ids array (text full of brackets) passed one by one before the key itself is searched for.
_OTHER_BRACKETS = 32
# A block whose lines average under this many bytes is split in C (lines: the cost is per line, not per byte).
SHORT_LINE = 1024
SAMPLE = 1 << 16


def without_ids(line: bytes) -> bytes:
    """``line`` with the contents of its ``..._ids`` number arrays cut out.

    The arrays are found through their "[" (a byte search, several times faster than searching for the
    key in text); after ``_OTHER_BRACKETS`` brackets of anything else, through the key, so a text full
    of brackets costs no more than the key's search."""
    find, startswith = line.find, line.startswith
    view = memoryview(line)
    pieces: list[memoryview] = []
    at = others = 0
    bracket = find(b"[")
    while bracket >= 0:
        if bracket >= len(_IDS_HEAD) and startswith(_IDS_HEAD, bracket - len(_IDS_HEAD)):
            start = bracket + 1
            end = find(b"]", start)
            if end < 0:
                break
            structure = find(b'"', start, end) >= 0 or find(b"{", start, end) >= 0 or find(b"}", start, end) >= 0
            if not structure and find(b"[", start, end) < 0:
                pieces.append(view[at:start])
                at = end
            bracket = find(b"[", end)
        elif others < _OTHER_BRACKETS:
            others += 1
            bracket = find(b"[", bracket + 1)
        else:
            key = find(_IDS_KEY, bracket)
            bracket = key + len(_IDS_HEAD) if key >= 0 else -1
    if not pieces:
        return line
    pieces.append(view[at:])
    return b"".join(pieces)


def resume_row(line: bytes) -> dict[str, Any] | None:
    """One result-file line as a dict without its token ids, or None for anything else (torn, not
    JSON, not an object)."""
    try:
        row = orjson.loads(without_ids(line))
    except orjson.JSONDecodeError:
        # A row written with ASCII escapes because it holds a lone surrogate (records.json_line) is
        # one orjson refuses to read: the standard library's reader takes it (records.parse_line).
        return parse_line(without_ids(line))
    return row if isinstance(row, dict) else None


@overload
def lines(fh: BinaryIO, limit: None = None, block: int = ...) -> Iterator[bytes]: ...


@overload
def lines(fh: BinaryIO, limit: int, block: int = ...) -> Iterator[bytes | Oversize]: ...


def lines(fh: BinaryIO, limit: int | None = None, block: int = 1 << 23) -> Iterator[bytes | Oversize]:
    """The lines of ``fh``, each with its newline (the last may have none), read ``block`` bytes at a time.
    With ``limit``, a longer line is given as its ``Oversize`` and never held whole (as ``bounded_lines``).

    A block of short lines (a prompt file's) is split in C and each line given with its newline
    appended; a block of long ones (result rows of ~40 KB) is cut line by line, so each row's bytes are
    copied once. Only a line that spans two blocks is pieced together."""
    pieces: list[bytes] = []  # the start of a line that spans blocks
    held = 0  # its bytes so far
    newline = b"\n"
    while True:
        data = fh.read(block)
        if not data:
            if held:
                yield Oversize(held) if limit is not None and held > limit else b"".join(pieces)
            return
        start = 0
        sample = min(len(data), SAMPLE)
        if data.count(newline, 0, sample) * SHORT_LINE > sample:  # judged by the block's first 64 KB
            parts = data.split(newline)
            rest = parts.pop()  # after the block's last newline (b"" when it ends with one)
            whole = iter(parts)
            if held and parts:  # the line that spans blocks ends with this block's first part
                first = next(whole)
                size = held + len(first) + 1
                if limit is not None and size > limit:
                    yield Oversize(size)
                else:
                    pieces += (first, newline)
                    yield b"".join(pieces)
                pieces, held = [], 0
            if limit is None:
                for part in whole:
                    yield part + newline
            else:
                for part in whole:
                    yield part + newline if len(part) < limit else Oversize(len(part) + 1)
            start = len(data) - len(rest)
        else:
            find = data.find
            while (end := find(newline, start)) >= 0:
                if limit is not None and held + end + 1 - start > limit:
                    yield Oversize(held + end + 1 - start)
                elif held:
                    pieces.append(data[start : end + 1])
                    yield b"".join(pieces)
                else:
                    yield data[start : end + 1]
                pieces, held = [], 0
                start = end + 1
        if start < len(data):
            held += len(data) - start
            if limit is None or held <= limit:
                pieces.append(data[start:])
            else:
                pieces = []  # over the limit: only its size is kept
