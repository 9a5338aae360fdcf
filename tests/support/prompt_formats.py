"""The same prompt records written in every input layout the runner reads: a JSONL file, a parquet
file, a folder of parquet shards, a folder ``datasets.save_to_disk`` would write (arrow IPC stream
files, ``state.json``, ``dataset_info.json``; made with pyarrow, without ``datasets``), a folder of
JSONL shards."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq


def table(rows: list[dict]) -> pa.Table:
    """The rows as one table: the columns are the union of the rows' keys (a missing key a null cell), and a
    nested value is a struct of the union of its objects' keys, as a dataset hub's parquet holds them."""
    return pa.Table.from_struct_array(pa.array(rows))


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def write_parquet(path: Path, rows: list[dict], row_group_size: int = 2) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table(rows), path, row_group_size=row_group_size)
    return path


def _chunks(rows: list[dict], shards: int) -> list[list[dict]]:
    size = -(-len(rows) // shards)
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def write_parquet_shards(folder: Path, rows: list[dict], shards: int = 3, split: str = "train") -> Path:
    """A hub download: data/<split>-0000k-of-0000n.parquet, with a README beside it."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "README.md").write_text("---\nlicense: mit\n---\n")
    schema = table(rows).schema  # every shard the same schema, as a hub's conversion writes them
    parts = _chunks(rows, shards)
    for k, part in enumerate(parts):
        name = f"{split}-{k:05d}-of-{len(parts):05d}.parquet"
        pq.write_table(pa.Table.from_pylist(part, schema=schema), folder / "data" / name, row_group_size=2)
    return folder


def write_saved(folder: Path, rows: list[dict], shards: int = 2) -> Path:
    """What ``Dataset.save_to_disk`` writes: arrow IPC *stream* files in the order state.json lists. The
    files are named so that their sorted order is not that order, to show which one the reader follows."""
    folder.mkdir(parents=True, exist_ok=True)
    schema = table(rows).schema
    parts = _chunks(rows, shards)
    names = [f"data-{len(parts) - 1 - k:05d}-of-{len(parts):05d}.arrow" for k in range(len(parts))]
    for name, part in zip(names, parts, strict=True):
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            writer.write_table(pa.Table.from_pylist(part, schema=schema), max_chunksize=2)
    state = {"_data_files": [{"filename": n} for n in names], "_fingerprint": "0", "_split": None}
    (folder / "state.json").write_text(json.dumps(state))
    (folder / "dataset_info.json").write_text(json.dumps({"features": {}}))
    return folder


def write_jsonl_shards(folder: Path, rows: list[dict], shards: int = 2) -> Path:
    for k, part in enumerate(_chunks(rows, shards)):
        write_jsonl(folder / f"part-{k:03d}.jsonl", part)
    return folder


def write_all(partition: Path, rows: list[dict]) -> dict[str, Path]:
    """The rows as one dataset in each layout, named by layout, under ``partition``."""
    return {
        "jsonl": write_jsonl(partition / "as_jsonl.jsonl", rows),
        "parquet": write_parquet(partition / "as_parquet.parquet", rows),
        "parquet_shards": write_parquet_shards(partition / "as_parquet_shards", rows),
        "saved": write_saved(partition / "as_saved", rows),
        "jsonl_shards": write_jsonl_shards(partition / "as_jsonl_shards", rows),
    }
