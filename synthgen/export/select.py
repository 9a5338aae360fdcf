"""Which datasets an export reads, which files it may write, and which kept rows go where (train or
validation, in what order).

A dataset with no results file is a note, not an error, as long as another one has rows: a run prints
``--partition short`` as its export command, and a dataset of that partition whose every prompt was skipped
(e.g. ``--regenerate all`` on tool conversations) has no results file.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from pathlib import Path

from synthgen.data.prompts import discover
from synthgen.data.store import RESULTS
from synthgen.errors import UsageError
from synthgen.export.config import DatasetRef, ExportConfig, ExportRequest
from synthgen.export.scan import RowRef
from synthgen.export.sharded import sharded_refs


def choose_datasets(
    request: ExportRequest, note: Callable[[str], None]
) -> tuple[tuple[DatasetRef, ...], tuple[DatasetRef, ...]]:
    """(the datasets to read, the chosen ones without results): those of --partition, --dataset and --budget,
    else every one with results. One without a results file is left out with a note (an error when none is
    left); its folder is still no place for the export (refuse_input_destination)."""
    names = list(request.datasets) + list(request.plan.names if request.plan else ())
    names = list(dict.fromkeys(names))
    output_dir = Path(request.output_dir)
    if request.partition is not None:
        names = [source.name for source in discover(request.prompts_dir, request.partition, names)]
    sharded = sharded_refs(output_dir, names, note)  # a --shard run's folder: its shards read as one
    if sharded is not None:
        return sharded
    if not names:
        found = sorted(p.parent.name for p in output_dir.glob(f"*/{RESULTS}"))
        if not found:
            raise UsageError(
                f"no results under {output_dir}/*/{RESULTS}; run run_inference.py first, or pass --output-dir DIR"
            )
        names = found
    refs = [DatasetRef(name, output_dir / name / RESULTS) for name in names]
    missing = [ref for ref in refs if not ref.path.is_file()]
    if len(missing) == len(refs):
        ref = missing[0]
        more = f" (nor the {len(missing) - 1} other datasets chosen)" if len(missing) > 1 else ""
        raise UsageError(
            f"{ref.path}: no results for dataset '{ref.name}'{more}; run it first "
            f"(python run_inference.py --dataset {ref.name}) or check --output-dir"
        )
    for ref in missing:
        note(
            f"{ref.name}: no results ({ref.path}), left out: not run yet, or every prompt was skipped "
            f"(see {ref.path.parent / 'errors.jsonl'})"
        )
    return tuple(ref for ref in refs if ref not in missing), tuple(missing)


def refuse_input_destination(target: Path, datasets: Sequence[DatasetRef], inputs: Sequence[Path]) -> None:
    """An export written over an input file, or into a dataset folder being read, would replace what it reads
    (the results, the run's lock or settings): refused before anything is read or written."""
    where = target.resolve()
    for path in inputs:
        if where == path.resolve():
            raise UsageError(f"--out {target}: is the input file {path}; write the export to another file")
    for ref in datasets:
        folder = ref.path.parent.resolve()
        if where == folder or folder in where.parents:
            raise UsageError(
                f"--out {target}: is inside the dataset folder {ref.path.parent} being read; "
                "write the export outside the output folders (e.g. --out train.jsonl)"
            )


def in_validation(ref: RowRef, seed: int, fraction: float) -> bool:
    """A hash of (seed, dataset, conversation): a row stays on its side when the export is redone with more
    rows, and the rows of one `each` conversation (ids ``<id>#<k>``) all go to the same side."""
    digest = hashlib.sha256(f"{seed}\0{ref.dataset}\0{ref.group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def split_rows(rows: Sequence[RowRef], config: ExportConfig) -> tuple[list[RowRef], list[RowRef]]:
    """(train, validation), each in input order or shuffled by the seed."""
    train = [r for r in rows if not in_validation(r, config.seed, config.val_fraction)]
    val = [r for r in rows if in_validation(r, config.seed, config.val_fraction)]
    if config.shuffle:
        rng = random.Random(config.seed)
        rng.shuffle(train)
        rng.shuffle(val)
    return train, val
