"""The teacher side file: per dataset, ``<output-dir>/<dataset>/teacher/part-NNNNNN.parquet`` (one table to
``pyarrow.dataset``) and ``<output-dir>/<dataset>/teacher.json`` beside the folder.

One row per scored unit (a stored row, per sample, per generated turn where rows are per turn):

- ``id``: the row's id as the export names it (``<dataset>/<id>[@s<k>]``, ``#<turn>`` for one turn of several)
- ``input_ids`` (int32): the ids the teacher saw, prompt + output as stored
- ``start`` (int32): the position of the first scored token; row j of the lists below is position start + j
- ``topk_ids`` (list of K-lists of int32), ``topk_logprobs`` (list of K-lists of float32, temperature 1, as
  the server gave them, most likely first), ``token_logprob`` (float32: the logprob of the token there)
- ``digest``: sha1 of ``input_ids`` and ``start``; a stored row whose digest changed is scored again

Writes are atomic: a part is written to a dot-file, fsynced and renamed; a kill loses at most the part
being written (its rows were never reported scored). A stale row is removed by rewriting its part the same
way, before its new score is written, so the table never holds two rows of one id. One scorer per dataset
at a time (``teacher/.lock``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from synthgen.errors import RunLockedError

if TYPE_CHECKING:
    import pyarrow as pa

FOLDER = "teacher"
META = "teacher.json"
PART = re.compile(r"^part-(\d{6})\.parquet$")


def schema() -> pa.Schema:
    """The side file's columns (pyarrow is loaded by what reads or writes one, never at import)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("id", pa.string()),
            ("input_ids", pa.list_(pa.int32())),
            ("start", pa.int32()),
            ("topk_ids", pa.list_(pa.list_(pa.int32()))),
            ("topk_logprobs", pa.list_(pa.list_(pa.float32()))),
            ("token_logprob", pa.list_(pa.float32())),
            ("digest", pa.string()),
        ]
    )


def side_bytes(positions: int, input_tokens: int, top_k: int) -> int:
    """The side file's size before compression: K int32 ids + K float32 logprobs + a float32 token logprob a
    scored position, an int32 a token sent (``input_ids``)."""
    return positions * (top_k * 8 + 4) + input_tokens * 4


def digest(input_ids: list[int], start: int) -> str:
    h = hashlib.sha1(np.asarray(input_ids, dtype="<i4").tobytes())
    h.update(b"@%d" % start)
    return h.hexdigest()


@dataclass
class TeacherRow:
    id: str
    input_ids: list[int]
    start: int
    topk_ids: np.ndarray  # [n, K] int32, n = len(input_ids) - start
    topk_logprobs: np.ndarray  # [n, K] float32
    token_logprob: np.ndarray  # [n] float32

    @property
    def positions(self) -> int:
        return len(self.input_ids) - self.start


def folder(output_dir: Path, dataset: str) -> Path:
    return output_dir / dataset / FOLDER


def meta_path(output_dir: Path, dataset: str) -> Path:
    return output_dir / dataset / META


def parts(path: Path) -> list[Path]:
    if not path.is_dir():
        return []
    return sorted(p for p in path.iterdir() if PART.match(p.name))


def _nested(arr: np.ndarray) -> pa.Array:
    import pyarrow as pa

    n, k = arr.shape
    values = pa.array(arr.reshape(-1))
    return pa.ListArray.from_arrays(pa.array(np.arange(0, n * k + 1, k, dtype=np.int32)), values)


def to_table(rows: list[TeacherRow]) -> pa.Table:
    """Rows as one table of ``schema()``, built from the arrays (no per-position Python objects)."""
    import pyarrow as pa

    inner_ids = [_nested(np.asarray(r.topk_ids, dtype=np.int32)) for r in rows]
    inner_lps = [_nested(np.asarray(r.topk_logprobs, dtype=np.float32)) for r in rows]

    def outer(inner: list[pa.Array], kind: pa.DataType) -> pa.Array:
        offsets = np.zeros(len(inner) + 1, dtype=np.int32)
        np.cumsum([len(a) for a in inner], out=offsets[1:])
        flat = pa.concat_arrays(inner) if inner else pa.array([], type=kind)
        return pa.ListArray.from_arrays(pa.array(offsets), flat.cast(kind))

    columns = [
        pa.array([r.id for r in rows], pa.string()),
        pa.array([np.asarray(r.input_ids, dtype=np.int32) for r in rows], pa.list_(pa.int32())),
        pa.array([r.start for r in rows], pa.int32()),
        outer(inner_ids, pa.list_(pa.int32())),
        outer(inner_lps, pa.list_(pa.float32())),
        pa.array([np.asarray(r.token_logprob, dtype=np.float32) for r in rows], pa.list_(pa.float32())),
        pa.array([digest(r.input_ids, r.start) for r in rows], pa.string()),
    ]
    return pa.Table.from_arrays(columns, schema=schema())


def _write_atomic(table: pa.Table, target: Path) -> None:
    import pyarrow.parquet as pq

    tmp = target.with_name(f".{target.name}.tmp")
    pq.write_table(table, tmp, compression="zstd")
    fd = os.open(tmp, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def read_index(path: Path) -> dict[str, str]:
    """id -> digest of every row in the side file (two columns read, not the distributions)."""
    import pyarrow.parquet as pq

    index: dict[str, str] = {}
    for part in parts(path):
        table = pq.read_table(part, columns=["id", "digest"])
        index.update(zip(table.column("id").to_pylist(), table.column("digest").to_pylist(), strict=True))
    return index


def iter_rows(path: Path, columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Every row as a dict, part by part (one part in memory at a time)."""
    import pyarrow.parquet as pq

    for part in parts(path):
        yield from pq.read_table(part, columns=columns).to_pylist()


class TeacherWriter:
    """Appends scored rows to a dataset's side file, a part at a time; holds the dataset's lock."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise RunLockedError(
                f"{path}: another score_teacher.py is scoring this dataset; wait for it or stop it"
            ) from None
        for stale in path.glob(".part-*.tmp"):  # a part a kill left half-written: its rows were never reported
            stale.unlink()
        existing = [int(m.group(1)) for p in parts(path) if (m := PART.match(p.name))]
        self.next_part = max(existing, default=-1) + 1
        self.pending: list[TeacherRow] = []

    def drop(self, ids: set[str]) -> int:
        """Remove rows of these ids (stale scores), rewriting each part that holds one; returns how many."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        removed = 0
        for part in parts(self.path):
            table = pq.read_table(part)
            keep = np.array([i not in ids for i in table.column("id").to_pylist()], dtype=bool)
            if keep.all():
                continue
            removed += int((~keep).sum())
            if keep.any():
                _write_atomic(table.filter(pa.array(keep)), part)
            else:
                part.unlink()
        return removed

    def add(self, row: TeacherRow) -> None:
        self.pending.append(row)

    @property
    def pending_positions(self) -> int:
        return sum(r.positions for r in self.pending)

    def flush(self) -> list[TeacherRow]:
        """Write the pending rows as one part; returns them (now safe to report as scored)."""
        if not self.pending:
            return []
        rows, self.pending = self.pending, []
        _write_atomic(to_table(rows), self.path / f"part-{self.next_part:06d}.parquet")
        self.next_part += 1
        return rows

    def close(self) -> None:
        os.close(self._lock_fd)


def write_meta(path: Path, meta: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_meta(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# teacher.json's last_pass.left_out: the stored rows and turns a pass did not score, by reason
LEFT_OUT = {  # reason -> (one, several, why or what to do)
    "no_ids": (
        "row stored without token ids",
        "rows stored without token ids",
        "written before ids were stored: run them again to score them",
    ),
    "empty": ("turn with no generated token", "turns with no generated token", "nothing to score"),
    "duplicate": ("repeated id", "repeated ids", "the first row of an id is scored"),
}


def left_out_text(left_out: dict[str, int]) -> str:
    """``1 row stored without token ids (written before ...), 2 turns with no generated token (...)``."""
    parts = []
    for reason, (one, several, why) in LEFT_OUT.items():  # in this order, whatever the record's
        n = left_out.get(reason)
        if n:
            parts.append(f"{n:,} {one if n == 1 else several} ({why})")
    return ", ".join(parts)
