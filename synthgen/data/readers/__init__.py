"""Prompt readers, one per format, behind one seam (``base.Reader``), and what makes a dataset of a
partition's entries.

A dataset is ``<partition>/<name>.jsonl``, ``<partition>/<name>.parquet``, ``<partition>/<name>.arrow``,
or a folder ``<partition>/<name>/`` holding the shards of one format: ``*.parquet`` (a dataset hub's
``data/train-00000-of-00004.parquet``), ``*.arrow`` (a ``datasets.save_to_disk`` folder, in the order its
``state.json`` lists them) or ``*.jsonl``. A folder's shards are found in its subfolders too (hidden
ones aside) and read in the order of their paths. A folder whose shards are named for two splits
(``train-*`` and ``test-*``), or that holds two formats, is refused with the fix: which rows a run
reads is never a guess. A new format is one module with a ``Reader`` and a line in ``FORMATS``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from synthgen.data.readers.arrow import ArrowReader
from synthgen.data.readers.base import NO_COLUMNS, Columns, Reader
from synthgen.data.readers.jsonl import JsonlReader
from synthgen.data.readers.parquet import ParquetReader
from synthgen.errors import UsageError

FORMATS: dict[str, type[Reader]] = {"jsonl": JsonlReader, "parquet": ParquetReader, "arrow": ArrowReader}
SUFFIXES = {f".{name}": name for name in FORMATS}
# A hub shard's name: <split>-00000-of-00004.parquet (also datasets' own data-00000-of-00001.arrow).
_SHARD_NAME = re.compile(r"^(?P<split>.+?)-\d+-of-\d+(-[0-9a-f]+)?\.[a-z]+$")
# A folder named for a split, as the hub's parquet conversion lays them out: default/train/0000.parquet.
_SPLIT_FOLDERS = frozenset(("train", "test", "validation", "valid", "dev", "eval", "evaluation"))
_DEPTH = 4  # how deep a folder's shards are looked for


def open_reader(fmt: str, paths: tuple[Path, ...], columns: Columns = NO_COLUMNS) -> Reader:
    return FORMATS[fmt](paths, columns)


def format_of(name: str) -> str | None:
    """The format a file name's suffix says, or None."""
    return next((fmt for suffix, fmt in SUFFIXES.items() if name.endswith(suffix)), None)


def label_stem(label: str) -> str:
    """A source label (``short/name.jsonl``, ``short/name.parquet``, ``short/name/``) without its format:
    the same dataset in another format is the same dataset."""
    label = label.rstrip("/")
    fmt = format_of(label)
    return label[: -len(fmt) - 1] if fmt else label


def _hidden(path: Path) -> bool:
    return path.name.startswith(".")


def _walk(folder: Path, depth: int = 0) -> list[Path]:
    try:
        entries = sorted(folder.iterdir())
    except OSError as exc:
        raise UsageError(f"{folder}: cannot list the folder ({exc.strerror}); make it readable") from exc
    found = []
    for entry in entries:
        if _hidden(entry):
            continue
        if entry.is_dir():
            if depth < _DEPTH:
                found += _walk(entry, depth + 1)
        elif format_of(entry.name):
            found.append(entry)
    return found


def _saved(folder: Path) -> tuple[Path, ...] | None:
    """The arrow files of a ``save_to_disk`` folder in its ``state.json`` order; None if it is not one."""
    if (folder / "dataset_dict.json").is_file():
        try:
            splits = json.loads((folder / "dataset_dict.json").read_text())["splits"]
        except (OSError, ValueError, KeyError, TypeError):
            splits = []
        raise UsageError(
            f"{folder}: is a saved DatasetDict (splits: {', '.join(map(str, splits)) or '?'}); a dataset is one "
            f"split: move the split you want to run (e.g. {folder}/train) into the partition under its own name"
        )
    state = folder / "state.json"
    if not state.is_file():
        return None
    try:
        files = [entry["filename"] for entry in json.loads(state.read_text())["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"{state}: not a datasets state.json with _data_files ({exc}); fix or remove it") from None
    paths = tuple(folder / str(name) for name in files)
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"{missing[0]}: listed in {state} but missing; save the dataset again")
    return paths


def _split(relative: Path) -> str | None:
    """The split a shard's name or folder says it belongs to, or None."""
    match = _SHARD_NAME.match(relative.name)
    if match:
        return match["split"]
    return next((part for part in relative.parts[:-1] if part.lower() in _SPLIT_FOLDERS), None)


def folder_dataset(folder: Path) -> tuple[str, tuple[Path, ...]] | None:
    """(format, shards in order) of a dataset folder; None for a folder without data files."""
    saved = _saved(folder)
    if saved is not None:
        return "arrow", saved
    files = _walk(folder)
    if not files:
        return None
    formats = sorted({format_of(p.name) or "" for p in files})
    if len(formats) > 1:
        raise UsageError(
            f"{folder}: holds shards of {' and '.join(formats)}; a dataset is shards of one format: "
            "move the others out of the folder"
        )
    splits = sorted({split for p in files if (split := _split(p.relative_to(folder)))})
    if len(splits) > 1:
        keep = "train" if "train" in splits else splits[0]
        raise UsageError(
            f"{folder}: holds the splits {', '.join(splits)}; a dataset is one split: move the other splits' "
            f"files out of the folder (e.g. keep {keep}-*)"
        )
    files.sort(key=lambda p: p.relative_to(folder).parts)
    return formats[0], tuple(files)
