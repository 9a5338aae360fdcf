"""The KD export's join over a sharded run's side files (one per shard, read as one) and the check that a
store needs scoring (the launched server is started only then)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from synthgen.data import teacherfile
from synthgen.data.teacherfile import TeacherRow, TeacherWriter
from synthgen.errors import UsageError
from synthgen.export.config import DatasetRef
from synthgen.export.formats.kd import TeacherJoin
from synthgen.teacher.scorer import has_work
from synthgen.teacher.units import Unit


def scored(folder: Path, key: str, ids: list[int], start: int, top_k: int = 2, model: str = "m") -> None:
    writer = TeacherWriter(folder / "ds" / teacherfile.FOLDER)
    n = len(ids) - start
    lps = np.tile(np.array([-0.5, -1.5][:top_k], dtype=np.float32), (n, 1))
    writer.add(TeacherRow(key, ids, start, np.tile(np.arange(top_k, dtype=np.int32), (n, 1)), lps, lps[:, 0]))
    writer.flush()
    writer.close()
    teacherfile.write_meta(folder / "ds" / teacherfile.META, {"model": model, "top_k": top_k})


def refs(root: Path, *shards: str) -> list[DatasetRef]:
    return [DatasetRef("ds", root / s / "ds" / "raw_responses.jsonl") for s in shards]


def row(key: str, ids: list[int], start: int) -> dict:
    return {"id": key, "input_ids": ids, "loss_mask": [0] * start + [1] * (len(ids) - start)}


def test_each_shards_rows_find_their_side_file_and_a_row_without_one_is_counted(tmp_path):
    scored(tmp_path / "shard-0-of-2", "ds/a", [1, 2, 3], 1)
    scored(tmp_path / "shard-1-of-2", "ds/b", [4, 5, 6, 7], 2)
    join = TeacherJoin.of(tmp_path, refs(tmp_path, "shard-0-of-2", "shard-1-of-2"))
    assert join.targets(row("ds/a", [1, 2, 3], 1)) is not None
    assert join.targets(row("ds/b", [4, 5, 6, 7], 2)) is not None
    assert join.targets(row("ds/c", [4, 5, 6], 1)) is None
    assert (join.kept, join.no_teacher) == (2, 1)


def test_an_id_in_two_shards_side_files_or_two_teachers_are_refused(tmp_path):
    scored(tmp_path / "shard-0-of-2", "ds/a", [1, 2, 3], 1)
    scored(tmp_path / "shard-1-of-2", "ds/a", [1, 2, 3], 1)
    join = TeacherJoin.of(tmp_path, refs(tmp_path, "shard-0-of-2", "shard-1-of-2"))
    with pytest.raises(UsageError, match="scored in two side files"):
        join.targets(row("ds/a", [1, 2, 3], 1))
    meta = tmp_path / "shard-1-of-2" / "ds" / teacherfile.META
    meta.write_text(json.dumps({"model": "other", "top_k": 2}))
    join = TeacherJoin.of(tmp_path, refs(tmp_path, "shard-0-of-2", "shard-1-of-2"))
    with pytest.raises(UsageError, match="different teachers"):
        join.targets(row("ds/a", [1, 2, 3], 1))


def test_a_store_needs_scoring_when_a_unit_is_unscored_or_its_ids_changed(tmp_path):
    scored(tmp_path, "ds/a", [1, 2, 3], 1)
    folder = tmp_path / "ds" / teacherfile.FOLDER
    assert not has_work(iter([Unit("ds/a", [1, 2, 3], 1)]), folder)
    assert has_work(iter([Unit("ds/a", [1, 2, 9], 1)]), folder)
    assert has_work(iter([Unit("ds/a", [1, 2, 3], 1), Unit("ds/b", [1, 2], 1)]), folder)
    assert not has_work(iter([]), folder)
