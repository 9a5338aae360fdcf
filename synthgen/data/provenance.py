"""Provenance: the settings that shape a dataset's rows, recorded beside them and checked on rerun.

    outputs/<dataset>/settings.jsonl   one line per settings set: {"id", "recorded_at", "settings"}

Every result row carries the ``settings`` id of the set it was made with. A rerun whose settings
differ from the latest set refuses (exit 2) with one line naming each difference and the fix,
unless ``--allow-mixed-settings``, which records the new set for the rows it writes. A folder
written before this existed has rows without ``settings``; they stay readable, and the first
run records its settings for the rows that follow.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from synthgen.data.openfiles import open_output, open_output_file
from synthgen.data.records import parse_line
from synthgen.errors import StoreWriteError, UsageError
from synthgen.redact import redact_value

SETTINGS_FILE = "settings.jsonl"


@dataclass(frozen=True)
class Settings:
    """What decides the data: the same prompts under the same settings give rows of one kind."""

    model: str | None
    weight_version: str | None
    tokenizer: str | None
    chat_template_sha256: str | None
    chat_template_kwargs: dict[str, Any]
    reasoning_parser: str | None
    tool_call_parser: str | None
    sampling_params: dict[str, Any]
    max_tokens: int
    regenerate: str

    @property
    def id(self) -> str:
        return hashlib.sha256(orjson.dumps(asdict(self), option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]

    def differences(self, recorded: dict[str, Any]) -> list[str]:
        """``name: old -> new`` for every setting that is not what ``recorded`` says."""
        out = []
        for f in fields(self):
            # settings.jsonl holds the settings with credentials hidden (see ``record``): compare them so
            old, new = recorded.get(f.name), redact_value(getattr(self, f.name))
            if old != new:
                out.append(f"{f.name} {_shown(old)} -> {_shown(new)}")
        return out or ["a hidden credential value"]


def _shown(value: Any) -> str:
    text = orjson.dumps(value).decode() if not isinstance(value, str) else value
    return text if len(text) <= 60 else text[:57] + "..."


def recorded_sets(folder: Path) -> list[dict[str, Any]]:
    """Every settings set recorded in a dataset folder, oldest first."""
    path = Path(folder) / SETTINGS_FILE
    try:
        with open_output_file(path, os.O_RDONLY, "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreWriteError(f"{path}: cannot read ({exc.strerror})") from exc
    sets = []
    for line in data.splitlines():
        row = parse_line(line)
        if row is not None and isinstance(row.get("settings"), dict) and isinstance(row.get("id"), str):
            sets.append(row)
    return sets


def check(folder: Path, settings: Settings, allow_mixed: bool) -> str | None:
    """None when ``settings`` may write here (recording it first if it is new), else the reason it may not."""
    sets = recorded_sets(folder)
    if sets and sets[-1]["id"] == settings.id:
        return None
    if sets and not allow_mixed:
        return "; ".join(settings.differences(sets[-1]["settings"]))
    record(folder, settings)
    return None


def record(folder: Path, settings: Settings) -> None:
    path = Path(folder) / SETTINGS_FILE
    line = orjson.dumps(
        {
            "id": settings.id,
            "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "settings": redact_value(asdict(settings)),  # a tokenizer URL or template kwarg may hold a key
        },
        option=orjson.OPT_APPEND_NEWLINE,
    )
    try:
        fd = open_output(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StoreWriteError(f"{path}: cannot record the run's settings ({exc.strerror})") from exc


def refuse(mismatches: dict[str, str]) -> UsageError:
    """One line for every dataset whose settings differ, and the fixes."""
    parts = "; ".join(f"{name}: {diff}" for name, diff in mismatches.items())
    return UsageError(
        f"settings differ from the rows already written ({parts}); rerun with the same flags, use another "
        "--output-dir, or pass --allow-mixed-settings to record the new settings for the rows this run writes"
    )


def check_folders(folders: dict[str, Path], settings: Settings, allow_mixed: bool) -> None:
    """``check`` for every dataset folder (name -> folder) a run writes; one error naming them all."""
    mismatches = {}
    for name, folder in folders.items():
        diff = check(folder, settings, allow_mixed)
        if diff is not None:
            mismatches[name] = diff
    if mismatches:
        raise refuse(mismatches)
