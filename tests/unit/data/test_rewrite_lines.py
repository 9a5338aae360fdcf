"""A file replaced whole (partial outputs, compacted at a run's start and end): a failed rewrite, as on a full
disk, leaves the old file as it was and no temp file beside it, and says which file and why."""

import errno
import os

import pytest

from synthgen.data import store
from synthgen.errors import StoreWriteError


def test_a_rewrite_that_hits_a_full_disk_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "partial_outputs.jsonl"
    path.write_bytes(b'{"id": "a"}\n')

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store.os, "fsync", full)
    with pytest.raises(StoreWriteError) as info:
        store.rewrite_lines(path, [b'{"id": "b"}\n'])
    assert str(info.value) == f"{path}: cannot rewrite (disk full)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["partial_outputs.jsonl"]
    assert path.read_bytes() == b'{"id": "a"}\n'


def test_a_rewrite_replaces_the_file_whole_and_no_lines_remove_it(tmp_path):
    path = tmp_path / "partial_outputs.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b"}\n')
    store.rewrite_lines(path, [b'{"id": "b"}\n'])
    assert path.read_bytes() == b'{"id": "b"}\n'
    store.rewrite_lines(path, [])
    assert list(tmp_path.iterdir()) == []
