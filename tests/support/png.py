"""A tiny PNG reader for tests (zlib only): enough to tell a rendered screenshot from a blank one.

``pixels(data)`` decodes an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium's ``--screenshot``
writes) into (width, height, rows of (r, g, b) tuples); ``colours(data)`` counts the distinct colours.
"""

from __future__ import annotations

import struct
import zlib
from collections import Counter

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _chunks(data: bytes):
    assert data[:8] == SIGNATURE, "not a PNG"
    pos = 8
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        yield kind, data[pos + 8 : pos + 8 + length]
        pos += 12 + length


def _paeth(a: int, b: int, c: int) -> int:
    p = a + b - c
    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
    return a if pa <= pb and pa <= pc else b if pb <= pc else c


def _unfilter(raw: bytes, width: int, height: int, bpp: int) -> list[bytearray]:
    stride = width * bpp
    rows: list[bytearray] = []
    prior = bytearray(stride)
    pos = 0
    for _ in range(height):
        kind, line = raw[pos], bytearray(raw[pos + 1 : pos + 1 + stride])
        pos += 1 + stride
        if kind == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif kind == 2:
            line = bytearray((x + y) & 255 for x, y in zip(line, prior, strict=True))
        elif kind == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prior[i]) >> 1)) & 255
        elif kind == 4:
            for i in range(stride):
                left, corner = (line[i - bpp], prior[i - bpp]) if i >= bpp else (0, 0)
                line[i] = (line[i] + _paeth(left, prior[i], corner)) & 255
        rows.append(line)
        prior = line
    return rows


def pixels(data: bytes) -> tuple[int, int, list[list[tuple[int, int, int]]]]:
    header = b""
    idat = []
    for kind, body in _chunks(data):
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat.append(body)
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, "only 8-bit RGB(A), not interlaced"
    bpp = 3 if colour == 2 else 4
    rows = _unfilter(zlib.decompress(b"".join(idat)), width, height, bpp)
    return width, height, [[tuple(row[i : i + 3]) for i in range(0, len(row), bpp)] for row in rows]


def colours(data: bytes) -> Counter[tuple[int, int, int]]:
    """Pixels per distinct (r, g, b) colour."""
    _, _, rows = pixels(data)
    return Counter(p for row in rows for p in row)
