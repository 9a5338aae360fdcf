"""The scan's fast path for plain chat lines and its compact index: the same prompts, ids, offsets and
duplicates as the full reading of every record."""

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from synthgen.data.conversations import Conversation, parse_record
from synthgen.data.idtable import PromptOffsets
from synthgen.data.prompts import DatasetSource, PromptReader, _plain, scan_dataset

roles = st.sampled_from(["system", "user", "assistant", "tool", "human", "User", 3, None])
contents = st.one_of(st.text(max_size=5), st.none(), st.just([{"type": "text", "text": "x"}]))
messages = st.lists(st.fixed_dictionaries({"role": roles, "content": contents}), max_size=4)


@given(messages, st.sampled_from([None, [], [{"type": "function"}]]))
def test_a_plain_record_reads_as_parse_record_reads_it(msgs, tools):
    record = {"id": "x", "messages": msgs, "tools": tools}
    fast = _plain(record)
    if fast is None:
        return
    assert Conversation(fast) == parse_record(record)


def test_records_other_than_plain_chats_take_the_full_reading():
    assert _plain({"messages": [{"content": "hi", "role": "user"}]}) is None  # key order kept as parse_record writes it
    assert _plain({"messages": [{"role": "system", "content": " "}, {"role": "user", "content": "hi"}]}) is None
    assert _plain({"messages": [{"role": "assistant", "content": "hi"}]}) is None  # no user turn: an error
    assert _plain({"messages": [{"role": "user", "content": "hi", "name": "a"}]}) is None
    assert _plain({"prompt": "hi"}) is None
    assert _plain({"messages": [{"role": "user", "content": "hi"}]}) is not None


def write(path, rows):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" if isinstance(r, dict) else r for r in rows))
    return DatasetSource(path.stem, "p", path)


@pytest.mark.parametrize("mode", ["last", "all", "each"])
def test_the_first_line_of_a_repeated_id_wins_and_the_offsets_find_every_prompt(tmp_path, mode):
    def chat(rid, text):
        return {"id": rid, "messages": [{"role": "user", "content": text}, {"role": "assistant", "content": "a"}]}

    rows = [chat("a", "one"), b"\n", chat("b", "two"), chat("a", "again"), {"prompt": "p", "id": "c"}, chat(7, "x")]
    source = write(tmp_path / "d.jsonl", rows)
    index = scan_dataset(source, mode=mode)
    expected = ["a#0", "b#0", "c#0", "7#0"] if mode == "each" else ["a", "b", "c", "7"]
    assert index.ids == expected and index.duplicates == 1
    assert [index.offsets[i][1] for i in expected] == [1, 3, 5, 6]
    reader = PromptReader(index)
    assert [reader.read(i).messages[0]["content"] for i in expected[:2]] == ["one", "two"]
    assert "a" in index.offsets if mode != "each" else "a#0" in index.offsets
    assert "zz" not in index.offsets and len(index.offsets) == len(expected)


def test_offsets_tell_colliding_hashes_apart(monkeypatch):
    ids = ["a", "b", "c", "b"]
    table = PromptOffsets(ids)
    table.starts.extend([0, 10, 20, 30])
    table.lines.extend([1, 2, 3, 4])
    monkeypatch.setattr("builtins.hash", lambda value: 5)  # every id collides
    assert [table[i] for i in ("a", "b", "c")] == [(0, 1), (10, 2), (20, 3)]
    assert table.has_duplicates()
    del ids[3]
    assert not table.has_duplicates()
