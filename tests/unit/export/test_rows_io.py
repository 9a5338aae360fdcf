r"""Reading and writing rows that hold a lone surrogate (a tool call's arguments decoded from ``"\ud83d"``)."""

from __future__ import annotations

import json

import pyarrow.json as paj

from synthgen.data.rowread import Malformed, Unreadable, read_row
from synthgen.export.fields import arguments_text, tool_call
from synthgen.export.write import json_line

LONE = "\ud83d"


def test_a_line_with_a_lone_surrogate_escape_is_read_and_torn_or_foreign_lines_are_not():
    assert read_row(json.dumps({"a": f"x{LONE}"}).encode()) == Malformed(None, "no string id", {"a": f"x{LONE}"})
    assert read_row(b'{"id": "torn", "mess') == Unreadable()
    assert read_row(b"[1, 2]") == Unreadable()
    assert read_row(b"\xff\xfe") == Unreadable()


def test_a_row_orjson_refuses_is_written_with_ascii_escapes_on_one_line():
    line = json_line({"name": f"get_{LONE}", "n": 1})
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line) == {"name": f"get_{LONE}", "n": 1}
    assert json_line({"name": "é"}) == '{"name":"é"}\n'.encode()


def test_arguments_with_a_lone_surrogate_become_json_text_with_the_escape_and_load_in_arrow(tmp_path):
    text = json.dumps({"q": LONE}, ensure_ascii=False)  # what a parser that decodes and encodes again keeps
    assert arguments_text(text) == '{"q": "\\ud83d"}'
    assert json.loads(arguments_text(text)) == {"q": LONE}
    assert arguments_text({"q": LONE}) == '{"q": "\\ud83d"}'  # a history's object, as tojson writes it
    assert arguments_text('{"q": "ok"}') == '{"q": "ok"}'  # the model's own text, byte for byte
    call = tool_call({"function": {"name": "f", "arguments": text}}, as_string=False)
    path = tmp_path / "rows.jsonl"
    path.write_bytes(json_line({"id": "a", "call": call}))
    assert paj.read_json(path).to_pylist()[0]["call"]["function"]["arguments"] == '{"q": "\\ud83d"}'
