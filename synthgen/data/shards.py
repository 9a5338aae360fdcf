"""One dataset set over many hosts: ``--shard I/N``, each shard's folder, and the merge that proves it.

Which shard a sample belongs to is a keyed hash of (seed, dataset, prompt id, sample), so it never depends
on file order, on other prompts or on a cap: a shard run selects as an unsharded run would (the cap counts
over the whole dataset, in the stable --sample order) and then keeps the members of its slice. The union
over I of the shards' selections is the unsharded selection, and no two shards share a sample. The turns
of an ``each`` conversation (ids ``<conversation>#<k>``) hash by their conversation, so they stay together.

Layout: shard I of N writes ``<output-dir>/shard-I-of-N/`` as an ordinary output folder (its datasets'
folders, server.log, report.html, the lock table), with ``shard.json`` recording (I, N, seed, selection).
Every file has one writer host, so nothing is shared on a cluster filesystem but the parent folder, and
resume, the lock, partial outputs and the report hold per shard as they do for any run.

``merge`` reads a sharded output folder as one: it refuses a missing shard, a shard of another N, seed or
selection, a row in the wrong shard, and an (id, sample) in two shards, naming them.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from synthgen.data import rowread
from synthgen.data.samples import sample_key, split_key
from synthgen.data.selection import Selection, select
from synthgen.data.store import RESULTS
from synthgen.errors import UsageError

RECORD = "shard.json"
FOLDER = re.compile(r"shard-(\d+)-of-(\d+)")
MAX_SHARDS = 100_000
# What a scheduler's array task is told, and how to pass it on.
ENV_HINTS = (
    (("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"), "--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT"),
    (("JOB_COMPLETION_INDEX",), "--shard $JOB_COMPLETION_INDEX/<the job's completions>"),
)


@dataclass(frozen=True, slots=True)
class Shard:
    index: int  # 0-based, like Slurm array task ids and Kubernetes completion indexes
    count: int

    @property
    def folder(self) -> str:
        return f"shard-{self.index}-of-{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``I/N`` with 0 <= I < N; a one-line UsageError otherwise."""
    index, sep, count = text.strip().partition("/")
    if not sep or not index.strip().isdigit() or not count.strip().isdigit():
        raise UsageError(f"--shard {text}: expected I/N, e.g. --shard 0/4 (shards are numbered 0 to N-1)")
    shard = Shard(int(index), int(count))
    if not 1 <= shard.count <= MAX_SHARDS:
        raise UsageError(f"--shard {text}: N must be between 1 and {MAX_SHARDS:,}")
    if shard.index >= shard.count:
        raise UsageError(
            f"--shard {text}: I must be below N (shards are numbered 0 to {shard.count - 1}, like Slurm array ids)"
        )
    return shard


def env_hint(environ: Mapping[str, str]) -> str | None:
    """One line when a scheduler's array variables are set and --shard is not: what could be passed."""
    for names, how in ENV_HINTS:
        if all(environ.get(name) for name in names):
            found = ", ".join(f"{name}={environ[name]}" for name in names)
            return (
                f"note: {found} is set but --shard is not: this run takes every prompt; to run one shard per "
                f"array task pass {how}"
            )
    return None


def shard_key(dataset: str, key: str, grouped: bool) -> tuple[str, int]:
    """(the prompt or conversation, the sample) a resume key belongs to, for hashing."""
    prompt_id, sample = split_key(key)
    if grouped and "#" in prompt_id:
        prompt_id = prompt_id.rpartition("#")[0]
    return prompt_id, sample


def shard_of(seed: int, dataset: str, prompt_id: str, sample: int, count: int) -> int:
    """The shard (0..count-1) of one sample: a keyed hash, NUL-separated so no tuple spells another."""
    text = f"shard\0{seed}\0{dataset}\0{prompt_id}\0{sample}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big") % count


def in_shard(shard: Shard, seed: int, dataset: str, key: str, grouped: bool = False) -> bool:
    return shard_of(seed, dataset, *shard_key(dataset, key, grouped), shard.count) == shard.index


def keep(shard: Shard | None, seed: int, dataset: str, keys: Iterable[str], grouped: bool = False) -> list[str]:
    """The keys of ``keys`` in the shard, in their order (all of them without a shard)."""
    if shard is None:
        return list(keys)
    return [key for key in keys if in_shard(shard, seed, dataset, key, grouped)]


def shard_selection(
    selection: Selection,
    ids: Sequence[str],
    cap: int | None,
    how: tuple[str, int, bool, int],
    shard: Shard,
    dataset: str,
) -> tuple[Selection, int]:
    """(the members of the shard among ``selection.pending``, the samples the shard owes when complete).
    ``how``: (--sample, --seed, grouped, samples per prompt). The selection was made over the whole dataset
    (the cap counts every shard's prompts), so the shards' parts add up to the unsharded run's exactly."""
    mode, seed, grouped, per_prompt = how
    pending = keep(shard, seed, dataset, selection.pending, grouped)
    chosen = select(ids, frozenset(), cap, mode, seed, grouped).pending
    keys = (sample_key(pid, k) for pid in chosen for k in range(per_prompt))
    target = sum(1 for key in keys if in_shard(shard, seed, dataset, key, grouped))
    return Selection(selection.available, selection.cap, selection.already_done, pending), target


def token_share(total: int | None, shard: Shard | None) -> int | None:
    """Shard I's part of a per-dataset token budget: the parts differ by at most one and sum to ``total``."""
    if total is None or shard is None:
        return total
    return total // shard.count + (1 if shard.index < total % shard.count else 0)


# --- the shard's folder -------------------------------------------------------------------------------


def shard_folders(output_dir: Path) -> dict[Shard, Path]:
    """The shard folders directly under ``output_dir``, by shard."""
    found: dict[Shard, Path] = {}
    try:
        entries = sorted(output_dir.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return found
    for path in entries:
        match = FOLDER.fullmatch(path.name)
        if match and path.is_dir():
            found[Shard(int(match[1]), int(match[2]))] = path
    return found


def read_record(folder: Path) -> dict[str, Any] | None:
    try:
        value = orjson.loads((folder / RECORD).read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, orjson.JSONDecodeError) as exc:
        raise UsageError(f"{folder / RECORD}: unreadable ({exc}); move the shard folder aside and rerun it") from None
    return value if isinstance(value, dict) else None


def _unsharded(output_dir: Path) -> list[str]:
    return sorted(p.parent.name for p in output_dir.glob(f"*/{RESULTS}") if not FOLDER.fullmatch(p.parent.name))


def prepare_folder(output_dir: Path, shard: Shard | None, record: dict[str, Any], write: bool) -> Path:
    """The output folder of this run: ``output_dir`` itself without a shard, else its shard folder, whose
    shard.json is written (when ``write``) once the checks pass. Refused in one line: a shard of another N or
    seed in the same folder, a sharded run over an unsharded folder's results, and the reverse."""
    others = shard_folders(output_dir)
    if shard is None:
        if others:
            counts = sorted({s.count for s in others})
            raise UsageError(
                f"{output_dir}: holds the shard folders of a sharded run ({', '.join(p.name for p in others.values())}"
                f"); pass --shard I/{counts[0]} to run one of them, or use another --output-dir"
            )
        return output_dir
    other_n = sorted({s.count for s in others} - {shard.count})
    if other_n:
        raise UsageError(
            f"{output_dir}: holds shards of a {other_n[0]}-way split, but this run is --shard {shard}: rerun with "
            f"--shard I/{other_n[0]} (the same N as before), or use another --output-dir"
        )
    plain = _unsharded(output_dir)
    if plain:
        raise UsageError(
            f"{output_dir}: holds results of an unsharded run ({', '.join(plain[:3])}); a sharded run would make "
            "them again: rerun without --shard, or use another --output-dir"
        )
    folder = output_dir / shard.folder
    seeds = {s: (read_record(p) or {}).get("seed") for s, p in others.items()}
    other_seed = next((str(seed) for seed in seeds.values() if seed is not None and seed != record["seed"]), None)
    if other_seed is not None:
        raise UsageError(
            f"{output_dir}: its shards were made with --seed {other_seed}, this run has --seed {record['seed']}: the "
            f"seed decides which shard holds a prompt; rerun with --seed {other_seed}, or use another --output-dir"
        )
    if write:
        folder.mkdir(parents=True, exist_ok=True)
        data = orjson.dumps({"shard": shard.index, "shards": shard.count, **record}, option=orjson.OPT_INDENT_2)
        tmp = folder / f".{RECORD}.{os.getpid()}"
        tmp.write_bytes(data + b"\n")
        os.replace(tmp, folder / RECORD)
    return folder


# --- the merge -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ShardedDataset:
    name: str
    paths: tuple[tuple[Shard, Path], ...]  # each shard's raw_responses.jsonl, in shard order
    rows: tuple[int, ...]  # the rows found in each


def _selection_of(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in ("shard", "shards")}


def check_shards(output_dir: Path) -> dict[Shard, dict[str, Any]] | None:
    """The records of a sharded output folder (None: not sharded), refused in one line when a shard is missing
    or the shards were run with another N, seed or selection."""
    found = shard_folders(output_dir)
    if not found:
        return None
    counts = sorted({s.count for s in found})
    if len(counts) > 1:
        by_n = {n: next(p.name for s, p in found.items() if s.count == n) for n in counts}
        raise UsageError(
            f"{output_dir}: holds shards of {len(counts)} different splits ({', '.join(by_n.values())}): "
            "move the shards of the split not wanted aside"
        )
    count = counts[0]
    missing = [Shard(i, count).folder for i in range(count) if Shard(i, count) not in found]
    if missing:
        raise UsageError(
            f"{output_dir}: shard {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''} missing "
            f"({len(found)} of {count} present): run it (--shard I/{count}) before exporting"
        )
    records: dict[Shard, dict[str, Any]] = {}
    for shard, folder in sorted(found.items(), key=lambda item: item[0].index):
        record = read_record(folder)
        if record is None or record.get("shard") != shard.index or record.get("shards") != shard.count:
            raise UsageError(f"{folder / RECORD}: missing or not this folder's shard; rerun --shard {shard}")
        records[shard] = record
    first_shard, first = next(iter(records.items()))
    for shard, record in records.items():
        if _selection_of(record) != _selection_of(first):
            keys = sorted(
                k for k in {*record, *first} if record.get(k) != first.get(k) and k not in ("shard", "shards")
            )
            what = ", ".join(f"{k} {first.get(k)!r} vs {record.get(k)!r}" for k in keys)
            raise UsageError(
                f"{output_dir}: {first_shard.folder} and {shard.folder} were run with another selection ({what}): "
                "rerun every shard with the same command"
            )
    return records


def _row_keys(path: Path) -> Iterable[str]:
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:  # through the one reader of a row: a malformed row with an id still holds its key
            outcome = rowread.read_row(line, lean=line.endswith(b"\n"))
            key = None if isinstance(outcome, rowread.Unreadable) else outcome.key
            if key is not None:
                yield key


def merge(output_dir: Path, names: Sequence[str], records: dict[Shard, dict[str, Any]]) -> list[ShardedDataset]:
    """Every shard of each dataset, read as one: refused when a row sits in a shard its hash does not name,
    or one (id, sample) is in two shards."""
    seed = int(next(iter(records.values())).get("seed", 0))
    grouped = next(iter(records.values())).get("regenerate") == "each"
    merged = []
    for name in names:
        owner: dict[str, Shard] = {}
        paths, rows = [], []
        for shard in records:
            path = output_dir / shard.folder / name / RESULTS
            count = 0
            for key in _row_keys(path):
                count += 1
                prompt_id, sample = split_key(key)
                if key in owner and owner[key] != shard:
                    raise UsageError(
                        f"{name}: id {prompt_id!r} sample {sample} is in two shards ({owner[key].folder} and "
                        f"{shard.folder}); remove the copy from the shard its hash does not name"
                    )
                owner[key] = shard
                if not in_shard(shard, seed, name, key, grouped):
                    right = shard_of(seed, name, *shard_key(name, key, grouped), shard.count)
                    raise UsageError(
                        f"{path}: id {prompt_id!r} sample {sample} belongs to shard-{right}-of-{shard.count}, "
                        "not this one: a row copied between shards or runs; move it out"
                    )
            paths.append((shard, path))
            rows.append(count)
        merged.append(ShardedDataset(name, tuple(paths), tuple(rows)))
    return merged


def dataset_names(output_dir: Path, records: dict[Shard, dict[str, Any]]) -> list[str]:
    """The datasets with results in any shard."""
    return sorted({p.parent.name for shard in records for p in (output_dir / shard.folder).glob(f"*/{RESULTS}")})
