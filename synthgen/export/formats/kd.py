"""``--format axolotl-kd`` and ``--format topk-sparse``: the stored ids with the teacher's top-k distribution
at every trained position, from the side file ``score_teacher.py`` writes (synthgen/data/teacherfile.py).

Both are parquet, one row per tokens row (``--format tokens``' rows: one sequence when the generated turns
chain, else one row per turn), and both put at position i the teacher's distribution of the token at i + 1
(the logits at position i), the way a causal student's logits at i are compared with it:

- axolotl-kd (axolotl's KD plugin, pre-tokenized): ``input_ids``, ``attention_mask``, ``labels`` (-100
  outside the generated spans), ``target_token_ids`` / ``target_logprobs`` / ``target_mask`` [L][K].
  axolotl's losses (``topk_logprob/forward_kl.loss``, the liger kernel) compare the student's logits at
  position i with target i, unshifted, so target i is the distribution of token i + 1 and target_mask i is 1
  where token i + 1 is trained; the logprobs are renormalized over the top K, as its ``transform_logprobs``
  does at kd_temperature = the logprob temperature (1); positions without a target hold ids 0..K-1 at -inf
  with mask 0, as ``transform_logprobs`` pads them.
- topk-sparse (DistillKit-style sparse targets): ``input_ids``, ``loss_mask`` (1 at position i when the
  token at i + 1 is trained: where a distribution is given), ``top_indices`` / ``top_values`` [L][K]
  (raw teacher logprobs at temperature 1; ids 0 and -inf where no distribution is given).

A row some trained position of which has no teacher row (not scored yet, or scored from other ids) is
left out and counted (``no_teacher``), never exported with a gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from synthgen.data import teacherfile
from synthgen.data.records import ResultRecord
from synthgen.errors import UsageError
from synthgen.export.fields import Exported
from synthgen.export.formats.base import register
from synthgen.export.formats.tokens import token_rows

if TYPE_CHECKING:
    import pyarrow as pa

    from synthgen.export.config import DatasetRef

NEG_INF = float("-inf")


@register(
    "axolotl-kd",
    shape="parquet {input_ids, attention_mask, labels, target_token_ids, target_logprobs, target_mask}",
    needs_ids=True,
    render_check=False,
    teacher=True,
    note="axolotl-kd: target i is the teacher's distribution of token i+1 (what axolotl's KD loss compares "
    "with the student's logits at i); load it as a pre-tokenized dataset",
)
def axolotl_rows(record: ResultRecord) -> list[Exported]:
    return [Exported(row) for row in token_rows(record)]


@register(
    "topk-sparse",
    shape="parquet {id, input_ids, loss_mask, top_indices, top_values}",
    needs_ids=True,
    render_check=False,
    teacher=True,
    note="topk-sparse: top_indices/top_values at position i are the teacher's top-k of token i+1 (logprobs, T=1)",
)
def sparse_rows(record: ResultRecord) -> list[Exported]:
    return [Exported(row) for row in token_rows(record)]


class TeacherIndex:
    """One dataset's side file in Arrow memory (about K x 8 bytes a position), rows found by id. A sharded
    run's dataset has one side file per shard (each scored where its shard ran): read as one, refused when
    their teachers differ (model, K) or one id is scored in two of them."""

    def __init__(self, folders: Sequence[Path]):
        import pyarrow as pa
        import pyarrow.dataset as pads

        self.table: pa.Table | None = None
        self.where: dict[str, int] = {}
        held = [f for f in folders if teacherfile.parts(f)]
        check_same_teacher(held)
        tables = [pads.dataset(teacherfile.parts(f), format="parquet").to_table() for f in held]
        seen: dict[str, Path] = {}
        for f, table in zip(held, tables, strict=True):
            for key in table.column("id").to_pylist():
                if key in seen:
                    raise UsageError(
                        f"{key} is scored in two side files ({seen[key]} and {f}): one shard's rows were "
                        "copied into another; remove the copy and score that shard again"
                    )
                seen[key] = f
        if tables:
            self.table = pa.concat_tables(tables)
            self.where = {key: i for i, key in enumerate(self.table.column("id").to_pylist())}

    def get(self, key: str) -> dict[str, Any] | None:
        i = self.where.get(key)
        if i is None or self.table is None:
            return None
        row: dict[str, Any] = self.table.slice(i, 1).to_pylist()[0]
        return row


def check_same_teacher(folders: Sequence[Path]) -> None:
    """The side files of one dataset's shards come from one teacher: same model and K (teacher.json)."""
    first: tuple[Path, dict[str, Any]] | None = None
    for f in folders:
        meta = teacherfile.read_meta(f.parent / teacherfile.META) or {}
        if first is None:
            first = (f, meta)
            continue
        for key in ("model", "top_k", "logprob_temperature"):
            a, b = first[1].get(key), meta.get(key)
            if a is not None and b is not None and a != b:
                raise UsageError(
                    f"{f.parent / teacherfile.META}: {key} {b!r}, but {first[0].parent / teacherfile.META} has "
                    f"{a!r}: one dataset's shards were scored by different teachers; score them all with one"
                )


@dataclass
class TeacherJoin:
    """The side files of the export's datasets and what the join left out."""

    output_dir: Path
    folders: dict[str, list[Path]] = field(default_factory=dict)  # dataset -> its side files (one per shard)
    top_k: int | None = None
    kept: int = 0
    no_teacher: int = 0
    examples: list[str] = field(default_factory=list)
    indexes: dict[str, TeacherIndex] = field(default_factory=dict)

    @classmethod
    def of(cls, output_dir: Path, refs: Sequence[DatasetRef]) -> TeacherJoin:
        """The join of the datasets read: each one's side file beside its results (every shard's, for the
        shards of a sharded run); an --existing source's under ``output_dir``."""
        folders: dict[str, list[Path]] = {}
        for ref in refs:
            folders.setdefault(ref.name, []).append(ref.path.parent / teacherfile.FOLDER)
        return cls(output_dir, folders)

    def index(self, dataset: str) -> TeacherIndex:
        if dataset not in self.indexes:
            folders = self.folders.get(dataset) or [teacherfile.folder(self.output_dir, dataset)]
            self.indexes = {dataset: TeacherIndex(folders)}  # one at a time
        return self.indexes[dataset]

    def targets(self, row: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(ids [L, K], logprobs [L, K], given [L]) with position i holding the distribution of token i+1."""
        key, ids, mask = str(row["id"]), row["input_ids"], row["loss_mask"]
        index = self.index(key.split("/", 1)[0])
        spans = sum(1 for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1]))
        length = len(ids)
        out_ids: np.ndarray | None = None
        out_lps = None
        given = np.zeros(length, dtype=bool)
        for candidate in [key, *(f"{key}#{k}" for k in range(spans))]:
            scored = index.get(candidate)
            if scored is None or ids[: len(scored["input_ids"])] != scored["input_ids"]:
                continue
            top_ids = np.asarray(scored["topk_ids"], dtype=np.int32)
            top_lps = np.asarray(scored["topk_logprobs"], dtype=np.float32)
            if out_ids is None:
                k = top_ids.shape[1]
                out_ids = np.tile(np.arange(k, dtype=np.int32), (length, 1))
                out_lps = np.full((length, k), NEG_INF, dtype=np.float32)
            first = scored["start"] - 1
            out_ids[first : first + len(top_ids)] = top_ids
            out_lps[first : first + len(top_ids)] = top_lps  # type: ignore[index]
            given[first : first + len(top_ids)] = True
        wanted = np.zeros(length, dtype=bool)
        wanted[:-1] = np.asarray(mask[1:], dtype=bool)
        if out_ids is None or out_lps is None or not given[wanted].all():
            self.no_teacher += 1
            if len(self.examples) < 3:
                self.examples.append(key)
            return None
        self.kept += 1
        return out_ids, out_lps, wanted

    def summary(self) -> str:
        line = f"teacher: {self.kept:,} rows with a teacher distribution at every trained position"
        if self.no_teacher:
            line += (
                f"; {self.no_teacher:,} left out without one (e.g. {', '.join(self.examples)}): "
                "run score_teacher.py on them, then export again"
            )
        return line


def axolotl_columns(row: dict[str, Any], ids: np.ndarray, lps: np.ndarray, wanted: np.ndarray) -> dict[str, Any]:
    norm = lps - np.logaddexp.reduce(np.where(np.isfinite(lps), lps, NEG_INF), axis=1, keepdims=True)
    norm = np.where(wanted[:, None], norm, NEG_INF).astype(np.float32)
    mask = row["loss_mask"]
    return {
        "id": row["id"],
        "input_ids": row["input_ids"],
        "attention_mask": [1] * len(mask),
        "labels": [t if m else -100 for t, m in zip(row["input_ids"], mask, strict=True)],
        "target_token_ids": np.where(wanted[:, None], ids, np.arange(ids.shape[1])).tolist(),
        "target_logprobs": norm.tolist(),
        "target_mask": np.repeat(wanted[:, None], ids.shape[1], axis=1).astype(np.int8).tolist(),
    }


def sparse_columns(row: dict[str, Any], ids: np.ndarray, lps: np.ndarray, wanted: np.ndarray) -> dict[str, Any]:
    return {
        "id": row["id"],
        "input_ids": row["input_ids"],
        "loss_mask": wanted.astype(np.int8).tolist(),
        "top_indices": np.where(wanted[:, None], ids, 0).tolist(),
        "top_values": np.where(wanted[:, None], lps, NEG_INF).tolist(),
    }


def schema(fmt: str) -> pa.Schema:
    """The parquet schema of a KD format (pyarrow is loaded here, by an export that writes one)."""
    import pyarrow as pa

    return {
        "axolotl-kd": pa.schema(
            [
                ("id", pa.string()),
                ("input_ids", pa.list_(pa.int32())),
                ("attention_mask", pa.list_(pa.int8())),
                ("labels", pa.list_(pa.int32())),
                ("target_token_ids", pa.list_(pa.list_(pa.int32()))),
                ("target_logprobs", pa.list_(pa.list_(pa.float32()))),
                ("target_mask", pa.list_(pa.list_(pa.int8()))),
            ]
        ),
        "topk-sparse": pa.schema(
            [
                ("id", pa.string()),
                ("input_ids", pa.list_(pa.int32())),
                ("loss_mask", pa.list_(pa.int8())),
                ("top_indices", pa.list_(pa.list_(pa.int32()))),
                ("top_values", pa.list_(pa.list_(pa.float32()))),
            ]
        ),
    }[fmt]


COLUMNS = {"axolotl-kd": axolotl_columns, "topk-sparse": sparse_columns}
BATCH = 256


def write_parquet(out: Any, rows: Any, fmt: str, join: TeacherJoin) -> int:
    """The rows with their teacher targets to the open file ``out``, a row group per BATCH; returns rows written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    layout, make = schema(fmt), COLUMNS[fmt]
    written = 0
    batch: list[dict[str, Any]] = []
    with pq.ParquetWriter(out, layout, compression="zstd") as writer:
        for row in rows:
            found = join.targets(row)
            if found is None:
                continue
            batch.append(make(row, *found))
            if len(batch) >= BATCH:
                writer.write_table(pa.Table.from_pylist(batch, schema=layout))
                written, batch = written + len(batch), []
        if batch:
            writer.write_table(pa.Table.from_pylist(batch, schema=layout))
            written += len(batch)
    return written
