"""Result files: torn-line repair, whole-line appends that never leave half a record, the lock."""

import os

import orjson
import pytest

from synthgen.data.records import ResultRecord
from synthgen.data.samples import sample_key
from synthgen.data.store import DatasetStore, PartialTurn, PartialTurns
from synthgen.errors import RunLockedError, StoreWriteError


def row(i, tokens=10):
    return orjson.dumps({"id": f"p{i}", "completion_tokens": tokens}) + b"\n"


def result(rid: str, content: str = "") -> ResultRecord:
    return ResultRecord.from_dict({"id": rid, "content": content})


def make(tmp_path, content: bytes) -> DatasetStore:
    store = DatasetStore(tmp_path, "ds")
    store.dir.mkdir(parents=True, exist_ok=True)
    store.results_path.write_bytes(content)
    return store


def test_a_torn_last_line_is_moved_aside_before_anything_is_appended(tmp_path):
    store = make(tmp_path, row(1) + row(2) + b'{"id": "p3", "content": "half')
    state = store.recover()
    assert state.done == {"p1", "p2"} and "torn" in state.repaired
    store.append_result(result("p3"))
    store.close()
    lines = store.results_path.read_bytes().splitlines()
    assert [orjson.loads(x)["id"] for x in lines] == ["p1", "p2", "p3"]
    assert (store.dir / "raw_responses.jsonl.torn").read_bytes() == b'{"id": "p3", "content": "half\n'


def test_a_complete_last_record_without_newline_is_kept(tmp_path):
    store = make(tmp_path, row(1) + row(2).rstrip(b"\n"))
    state = store.recover()
    assert state.done == {"p1", "p2"} and state.completion_tokens == 20
    store.append_result(result("p3"))
    store.close()
    assert len(store.results_path.read_bytes().splitlines()) == 3


def test_dry_run_recovery_changes_nothing(tmp_path):
    content = row(1) + b'{"id": "p2", "con'
    store = make(tmp_path, content)
    assert store.recover(repair=False).done == {"p1"}
    assert store.results_path.read_bytes() == content


def test_unreadable_middle_lines_are_reported_not_fatal(tmp_path):
    store = make(tmp_path, row(1) + b"garbage\n" + row(2))
    state = store.recover()
    assert state.done == {"p1", "p2"} and state.bad_lines == [2]


def test_a_failed_write_is_cut_back_and_reported(tmp_path, monkeypatch):
    store = make(tmp_path, row(1))
    store.recover()
    real_write = os.write

    def short_then_fail(fd, data):
        if len(data) > 5:
            return real_write(fd, bytes(data[:5]))  # a partial write, then the disk is full
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", short_then_fail)
    with pytest.raises(StoreWriteError, match="write failed \\(disk full\\); everything before this record is intact"):
        store.append_result(result("p2", "x" * 100))
    monkeypatch.undo()
    store.close()
    assert store.results_path.read_bytes() == row(1)


def test_error_rows_keep_the_latest_per_prompt_and_drop_completed_ones(tmp_path):
    store = make(tmp_path, row(1))
    store.errors_path.write_bytes(
        b'{"id": "p1", "error": "x"}\n{"id": "p9", "error": "old"}\n'
        b'{"id": "p8", "error": "z"}\n{"id": "p9", "error": "new"}\n'
    )
    store.compact_errors({"p1"})
    rows = [orjson.loads(x) for x in store.errors_path.read_bytes().splitlines()]
    assert rows == [{"id": "p8", "error": "z"}, {"id": "p9", "error": "new"}]


def test_the_lock_is_refused_within_one_process_too(tmp_path):
    first = DatasetStore(tmp_path, "ds")
    first.lock()
    with pytest.raises(RunLockedError):
        DatasetStore(tmp_path, "ds").lock()
    first.close()


@pytest.mark.parametrize(
    "tail, end_after_repair",
    [
        (b"", "size"),  # every line whole
        (row(4).rstrip(b"\n"), "size+1"),  # a complete last row, its newline missing: the repair adds it
        (b'{"id": "p4", "content": "half', "start"),  # a torn last line: the repair moves it out
    ],
)
def test_the_scan_hands_on_every_row_it_reads_and_where_the_rows_end_after_the_repair(tmp_path, tail, end_after_repair):
    """The run report's figures are made from the resume scan's reading (on_row), then read on from
    ``read``: after the repair, the file's identity and the offset where the counted rows end."""
    body = row(1) + b"not json\n" + row(2) + b"\n" + row(1)  # a bad line, a blank one, a duplicate
    store = make(tmp_path, body + tail)
    seen = []
    state = store.scan("will", seen.append)
    complete = end_after_repair == "size+1"
    assert [getattr(r, "key", None) for r in seen] == ["p1", None, "p2", "p1", *(["p4"] if complete else [])]
    store.lock()
    store.repair(state)
    store.close()
    st = os.stat(store.results_path)
    assert state.read == (st.st_dev, st.st_ino, st.st_size)  # every case: the rows end at the end of the file
    assert st.st_size == len(body) + (len(tail) + 1 if complete else 0)
    assert state.without({"p1"}).read is None  # moving rows out rewrites the file: read again from the start


def test_each_sample_of_a_conversation_continues_from_its_own_turns_checked_against_its_prompts_hash():
    first, second = sample_key("c", 0), sample_key("c", 1)
    rows = [PartialTurn(key, k, {"turn": k}, "h", "s") for key in (first, second) for k in range(2)]
    keep = PartialTurns.usable(rows, done=set(), hashes={"c": "h"}, settings="s")
    assert {key: [t.turn for t in turns] for key, turns in keep.items()} == {first: [0, 1], second: [0, 1]}
    assert PartialTurns.usable(rows, done={second}, hashes={"c": "h"}, settings="s").keys() == {first}
    assert not PartialTurns.usable(rows, done=set(), hashes={"c": "changed"}, settings="s")
