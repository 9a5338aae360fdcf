"""The resume scan's row reading: what orjson reads, token ids passed over; lines as the file gives them."""

import io

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synthgen.data import rowscan
from synthgen.data.openfiles import Oversize, bounded_lines
from synthgen.data.rowscan import lines, resume_row

ROWS = [
    {"id": "p1", "completion_tokens": 3, "input_ids": [1, 2, 3], "output_ids": [4, 5, 6], "source": "a/b.jsonl"},
    {"id": 'quote " and _ids":[1,2] in a string', "input_ids": [], "output_ids": None},
    {"id": "p2", "turns": [{"input_ids": [7, 8], "completion_tokens": 9}], "messages": [{"content": 'x_ids":[1]'}]},
    {"id": "p3", "nested_ids": [[1], [2]], "tool_ids": [{"a": 1}], "more_ids": ["a", "b"]},
    {"id": "p4", "content": "\\", "input_ids": [10], "regenerate": "last"},
    # More brackets than the scan passes one by one before it searches for the key instead.
    {"id": "p5", "content": "[x] " * 100, "input_ids": [1, 2], "tools": [[]] * 40, "output_ids": [3], "x_ids": [[4]]},
    {"id": "p6", "a_ids": [1], "content": "[" * 33 + "_ids" + "[" * 5, "b_ids": [], "c_ids": [2, 3]},
]


def without_ids(value):
    """``value`` with every number array under a key ending in ``_ids`` emptied, at any depth."""
    if isinstance(value, list):
        return [without_ids(v) for v in value]
    if not isinstance(value, dict):
        return value
    return {
        k: [] if k.endswith("_ids") and isinstance(v, list) and all(isinstance(i, int) for i in v) else without_ids(v)
        for k, v in value.items()
    }


@pytest.mark.parametrize("row", ROWS)
def test_a_row_reads_as_orjson_reads_it_without_its_token_ids(row):
    line = orjson.dumps(row) + b"\n"
    assert resume_row(line) == without_ids(orjson.loads(line))


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": "p1", "input_ids": [1, 2',  # torn
        b'{"id": "p1", "input_ids": [1, 2]',  # torn after the ids
        b'{"id": "p1", "input_ids": [1, 2]} trailing',
        b'{"id": "p1", "input_ids": [1, "2]}',
        b"[1, 2]",
        b"",
        b'{"id": "p1", "input_ids": [1, 2}]}',
    ],
)
def test_a_line_orjson_rejects_is_no_row(line):
    assert resume_row(line) is None


def test_lines_are_the_file_lines_whatever_the_block_size():
    data = b"".join(orjson.dumps(r) + b"\n" for r in ROWS) + b"\n\n" + b'{"torn": tr'
    for block in (1, 3, 7, 64, 1 << 20):
        assert list(lines(io.BytesIO(data), block=block)) == list(io.BytesIO(data))
    assert list(lines(io.BytesIO(b""))) == []


def test_a_line_over_the_limit_is_its_size_only():
    data = b"short\n" + b"x" * 50 + b"\n" + b"y" * 9 + b"\nlast" + b"z" * 40
    expected = list(bounded_lines(io.BytesIO(data), 10, chunk=4))
    assert expected == [b"short\n", Oversize(51), b"y" * 9 + b"\n", Oversize(44)]
    for block in (1, 3, 7, 64):
        assert list(lines(io.BytesIO(data), 10, block=block)) == expected


@settings(max_examples=600, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\n\n", b"x" * 9]), max_size=30).map(b"".join),
    block=st.integers(1, 40),
    limit=st.none() | st.integers(1, 12),
    short_line=st.sampled_from([1, 1024, 10**9]),
)
def test_lines_match_the_files_own_lines_for_any_blocks_and_limit(data, block, limit, short_line):
    """A block of short lines is split in C, one of long lines cut line by line, and only a line spanning
    blocks is pieced together: whatever the block size and whichever way each block is read, the lines
    are the file's, and with a limit a longer line is only its size (as bounded_lines)."""
    expected = list(io.BytesIO(data)) if limit is None else list(bounded_lines(io.BytesIO(data), limit, chunk=3))
    before = rowscan.SHORT_LINE
    rowscan.SHORT_LINE = short_line  # 1: every block cut line by line; 10**9: every block with a newline split
    try:
        assert list(lines(io.BytesIO(data), limit, block=block)) == expected
    finally:
        rowscan.SHORT_LINE = before
