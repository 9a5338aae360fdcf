"""Skips an earlier run settled: prompts whose latest row in errors.jsonl is a skip that only the prompt
and a few settings decide (``failures.settled_key``: cannot_regenerate, prompt_too_long, ...). While the
prompt and those settings are the same, a rerun does not take them again: with nothing else left it has
nothing to do, and starts no server to skip them once more. They stay in errors.jsonl, and the end of the
run lists them with their fix.
"""

from __future__ import annotations

from dataclasses import replace

from synthgen.config import RunConfig
from synthgen.data.failures import settled_key
from synthgen.data.prompts import DatasetIndex
from synthgen.data.records import ErrorRecord
from synthgen.data.samples import split_key
from synthgen.data.selection import Selection
from synthgen.data.store import DatasetStore, iter_rows


def unread_prompt(size: int) -> str:
    """What identifies a prompt skipped by its size alone: any line of that size is too long."""
    return f"{size} bytes"


def settled_skips(store: DatasetStore) -> dict[str, ErrorRecord]:
    """The prompts whose latest row in errors.jsonl is a settled skip (keyed), by id."""
    latest: dict[str, ErrorRecord] = {}
    try:
        for row in iter_rows(store.errors_path):
            record = ErrorRecord.from_dict(row)
            if record is not None:
                latest[record.id] = record
    except OSError:
        return {}  # unreadable: the run's own checks name it; nothing is set aside
    return {pid: record for pid, record in latest.items() if record.settled is not None}


def set_aside(
    selection: Selection, settled: dict[str, ErrorRecord], index: DatasetIndex, cfg: RunConfig
) -> tuple[Selection, dict[str, ErrorRecord]]:
    """The selection without the prompts whose settled skip still holds (the same prompt, the same
    deciding settings), and those skips."""
    held: dict[str, ErrorRecord] = {}
    for pid in selection.pending:
        record = settled.get(pid)
        if record is None:
            continue
        base = split_key(pid)[0]  # a sample's skip is decided by its prompt
        prompts = [index.hashes.get(base), unread_prompt(index.long_lines[base]) if base in index.long_lines else None]
        if any(p and settled_key(record.error_type, p, cfg) == record.settled for p in prompts):
            held[pid] = record
    if not held:
        return selection, held
    return replace(selection, pending=[pid for pid in selection.pending if pid not in held]), held
