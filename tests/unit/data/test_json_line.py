"""Rows are written whole whatever strings they hold: ``json_line`` falls back to ASCII-escaped JSON for a
lone surrogate (a model's ``\\ud83d`` escape in a tool call's arguments), and ``parse_line`` reads it back."""

from __future__ import annotations

import orjson
import pytest

from synthgen.data.records import json_line, parse_line


def test_a_plain_row_is_orjsons_line():
    row = {"id": "a", "content": "héllo ✓", "n": 3}
    assert json_line(row) == orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)


@pytest.mark.parametrize("text", ["\ud83d", "a\udc00b", "😀 and \ud83d"])
def test_a_lone_surrogate_is_written_as_an_escape_and_read_back(text):
    row = {"id": "s", "tool_calls": [{"function": {"arguments": '{"q": "' + text + '"}'}}], "note": "é"}
    line = json_line(row)
    assert line.endswith(b"\n") and line.count(b"\n") == 1 and line.isascii()
    assert parse_line(line) == row


@pytest.mark.parametrize("line", [b'{"id": "a", "x": ', b"not json", b"[1, 2]", b'{"x": "\\ud83d"'])
def test_a_torn_or_foreign_line_is_none(line):
    assert parse_line(line) is None
