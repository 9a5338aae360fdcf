"""The datasets of a sharded output folder (``run_inference.py --shard I/N``), read as one: every shard of a
dataset is one DatasetRef of that dataset's name, after ``synthgen.data.shards`` has proved the shards whole
(none missing, one N, seed and selection, each (id, sample) in the one shard its hash names)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from synthgen.data.shards import FOLDER, check_shards, dataset_names, merge, read_record
from synthgen.data.store import RESULTS
from synthgen.errors import UsageError
from synthgen.export.config import DatasetRef


def sharded_refs(
    output_dir: Path, names: Sequence[str], note: Callable[[str], None]
) -> tuple[tuple[DatasetRef, ...], tuple[DatasetRef, ...]] | None:
    """(one ref per shard of each dataset with rows, the datasets no shard has rows of), or None when
    ``output_dir`` holds no shards. ``names``: the datasets asked for (none: every one with rows)."""
    records = check_shards(output_dir)
    if records is None:
        record = read_record(output_dir) if FOLDER.fullmatch(output_dir.name) else None
        if record is not None:
            note(
                f"{output_dir} is shard {record.get('shard')} of {record.get('shards')} alone: its rows only; "
                f"pass --output-dir {output_dir.parent} to read every shard as one"
            )
        return None
    names = list(names) or dataset_names(output_dir, records)
    if not names:
        raise UsageError(f"no results in the shards under {output_dir}; run run_inference.py --shard I/N first")
    refs: list[DatasetRef] = []
    missing: list[DatasetRef] = []
    for dataset in merge(output_dir, names, records):
        held = [
            (shard, path, rows)
            for (shard, path), rows in zip(dataset.paths, dataset.rows, strict=True)
            if path.is_file()
        ]
        if not held:
            missing.append(DatasetRef(dataset.name, output_dir / dataset.paths[0][0].folder / dataset.name / RESULTS))
            continue
        parts = ", ".join(f"{shard.folder} {rows:,}" for shard, _, rows in held)
        note(
            f"{dataset.name}: {len(held)} of {len(dataset.paths)} shards hold rows ({parts}): "
            f"{sum(dataset.rows):,} rows, each (id, sample) in one shard"
        )
        refs.extend(DatasetRef(dataset.name, path) for _, path, _ in held)
    if not refs:
        raise UsageError(f"no results for {', '.join(names)} in the shards under {output_dir}; run them first")
    for ref in missing:
        note(f"{ref.name}: no rows in any shard under {output_dir}, left out")
    return tuple(refs), tuple(missing)
