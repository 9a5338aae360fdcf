"""Provenance: the settings that shape a dataset's rows, recorded beside them and checked on rerun.

    outputs/<dataset>/settings.jsonl   one line per settings set: {"id", "recorded_at", "settings"}

Every result row carries the ``settings`` id of the set it was made with. A rerun whose settings
differ from the latest set refuses (exit 2) with one line naming each difference by its flag and
the fix, unless ``--allow-mixed-settings``, which records the new set for the rows it writes. The
settings the flags decide alone (``FLAG_SETTINGS``: --regenerate, --max-tokens, sampling,
--chat-template-kwargs) are checked first (``check_flags``), before the server is asked and before
any prompt is compared, for every dataset folder, whether or not anything is pending; the rest
once the server has answered (``check_folders``), which records a new set only when every folder
passed. A folder written before this existed has rows without ``settings``; they stay readable,
and the first run records its settings for the rows that follow.

The training mix (``--samples-per-prompt``, ``--seed`` of the samples, ``--sampling-mix``) is recorded
too. Its defaults (one sample, no mix) leave the settings id what it was before the mix existed
(``MIX_DEFAULTS``), another seed or mix is refused like any other change, and another sample count is
recorded and allowed: raising it adds the missing samples, lowering it sends nothing.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from synthgen.data.openfiles import open_output, open_output_file
from synthgen.data.records import parse_line
from synthgen.data.sampling_keys import FLAGGED
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
    samples_per_prompt: int = 1
    sample_seed: int | None = None  # --seed, when requests carry seeds (several samples or a mix)
    sampling_mix: list[dict[str, Any]] | None = None

    @property
    def id(self) -> str:
        return settings_id(asdict(self))

    def differences(self, recorded: dict[str, Any]) -> list[str]:
        """``flag old -> new`` for every setting that is not what ``recorded`` says. settings.jsonl
        holds the settings with credentials hidden (see ``record``), so they are compared hidden too."""
        return differences(recorded, asdict(self)) or ["a hidden credential value"]


# Settings of the training mix, and their values in a run without one: left out of the id at these
# values, so the folders of such runs keep the id they had before the mix existed.
MIX_DEFAULTS: dict[str, Any] = {"samples_per_prompt": 1, "sample_seed": None, "sampling_mix": None}
# Recorded, but a change is no reason to refuse: N samples of a prompt are the first N of any larger N.
ALLOWED_CHANGES = ("samples_per_prompt",)


def settings_id(values: dict[str, Any]) -> str:
    kept = {k: v for k, v in values.items() if k not in MIX_DEFAULTS or v != MIX_DEFAULTS[k]}
    return hashlib.sha256(orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)).hexdigest()[:12]


def only_allowed_changes(recorded: dict[str, Any], current: dict[str, Any]) -> bool:
    """Whether ``current`` differs from ``recorded`` only in what may change (ALLOWED_CHANGES)."""
    current = redact_value(current)
    same = {k: recorded.get(k, MIX_DEFAULTS.get(k)) == v for k, v in current.items() if k not in ALLOWED_CHANGES}
    return all(same.values())


# Where each setting comes from, as a refusal names it: the flag to change, or the server.
SOURCES = {
    "model": "the server's model",
    "weight_version": "the server's weight version",
    "tokenizer": "the tokenizer (--tokenizer)",
    "chat_template_sha256": "the chat template's sha256 (--chat-template)",
    "chat_template_kwargs": "--chat-template-kwargs",
    "reasoning_parser": "--reasoning-parser",
    "tool_call_parser": "--tool-call-parser",
    "max_tokens": "--max-tokens",
    "regenerate": "--regenerate",
    "samples_per_prompt": "--samples-per-prompt",
    "sample_seed": "--seed (the samples' seeds and recipe draws)",
    "sampling_mix": "--sampling-mix",
}
SAMPLING_FLAGS = {row.key: row.flag for row in FLAGGED}
# The settings a run's own flags decide: known before the server is asked, so checked first.
FLAG_SETTINGS = ("regenerate", "max_tokens", "sampling_params", "chat_template_kwargs", "sample_seed", "sampling_mix")


def differences(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``flag old -> new`` for every setting of ``current`` that ``recorded`` holds otherwise; the
    sampling parameters one by one, by their flags."""
    out = []
    for name, new in current.items():
        # settings.jsonl holds the settings with credentials hidden (see ``record``): compare them so
        new = redact_value({name: new})[name]
        old = recorded.get(name, MIX_DEFAULTS.get(name))
        if old == new or name in ALLOWED_CHANGES:
            continue
        if name == "sampling_params" and isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(old.keys() | new.keys()):
                if old.get(key) != new.get(key):
                    flag = SAMPLING_FLAGS.get(key, f"sampling parameter {key}")
                    out.append(f"{flag} {_shown(old.get(key))} -> {_shown(new.get(key))}")
            continue
        out.append(f"{SOURCES.get(name, name)} {_shown(old)} -> {_shown(new)}")
    return out


def _shown(value: Any) -> str:
    if value is None:
        return "(unset)"
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


def latest(folder: Path) -> dict[str, Any] | None:
    """The settings of the latest set recorded in a dataset folder, None when none is."""
    sets = recorded_sets(folder)
    return sets[-1]["settings"] if sets else None


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


def check_flags(recorded: dict[str, dict[str, Any]], flags: dict[str, Any]) -> None:
    """The first check of a rerun, before the server is asked and before any prompt is compared:
    the settings the run's flags decide (``FLAG_SETTINGS``) against what each dataset recorded
    (name -> recorded settings; only the keys a record holds are compared). One error names them all."""
    mismatches = {}
    for name, settings in recorded.items():
        diff = differences(settings, redact_value({k: v for k, v in flags.items() if k in settings}))
        if diff:
            mismatches[name] = "; ".join(diff)
    if mismatches:
        raise refuse(mismatches)


def check_folders(folders: dict[str, Path], settings: Settings, allow_mixed: bool) -> None:
    """Every dataset folder (name -> folder) a run writes either holds ``settings`` as its latest
    set, or has none (or ``allow_mixed``): then ``settings`` is recorded, once all are checked,
    so a refusal records nothing. One error names every folder that differs."""
    mismatches = {}
    new = []
    for name, folder in folders.items():
        sets = recorded_sets(folder)
        if sets and sets[-1]["id"] == settings.id:
            continue
        if sets and not allow_mixed and not only_allowed_changes(sets[-1]["settings"], asdict(settings)):
            old = sets[-1]
            mismatches[name] = "; ".join(settings.differences(old["settings"])) or (
                f"settings set {old['id']} -> {settings.id}"
            )
            continue
        new.append(folder)
    if mismatches:
        raise refuse(mismatches)
    for folder in new:
        record(folder, settings)
