"""The budget file, in one place: what compute_budget.py writes and run_inference.py --budget reads.

    {"tokens_per_dataset": 10000000,
     "datasets": {"glaive": {"max_samples": 2636, "available": 14714, "avg_completion_tokens": 3793,
                             "avg_source": "measured", "expected_tokens": 9998348}, ...},
     "no_estimate": ["sweagent"], "samples_per_prompt": 4}

``max_samples`` counts prompts (as ``--max-samples``); with ``samples_per_prompt`` N a run makes N rows
of each (the key is left out for 1). An ``--existing`` dataset (a file of token rows) has ``max_samples``
0, ``avg_source`` "existing", its ``rows`` and its ``path`` (as given to compute_budget.py): a run generates
nothing for it, and ``export_training.py --budget`` merges that file into a ``--format tokens`` export.

``plan_json`` builds it from a ``budget.Plan``, ``write_budget`` writes it atomically (mode 0644,
like any other file the user reads), ``read_budget`` reads and validates it back into the
per-dataset caps the runner uses.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import orjson

from synthgen.budget.plan import EXISTING, FIXED, Plan
from synthgen.data.openfiles import read_input
from synthgen.errors import StoreWriteError, UsageError


def _json_number(value: Fraction) -> int | float:
    return int(value) if value.denominator == 1 else round(float(value), 2)


def plan_json(plan: Plan) -> dict[str, Any]:
    """The budget file run_inference.py --budget reads.

    A fixed dataset has max_samples 0, available null, avg_completion_tokens null and
    avg_source "fixed", so a run given the budget generates nothing for it. A dataset with
    no estimate is left out of "datasets" and named under "no_estimate": the runner
    refuses to run it with this budget rather than guess.
    """
    datasets = {}
    for d in plan.datasets:
        if not d.has_estimate:
            continue
        estimate = None if d.fixed and not d.existing else d.estimate
        datasets[d.name] = {
            "max_samples": d.max_samples,
            "available": d.available,
            "avg_completion_tokens": None if estimate is None else _json_number(estimate.avg),
            "avg_source": FIXED if estimate is None else estimate.source,
            "expected_tokens": d.expected_tokens,
        }
        if d.existing:
            datasets[d.name]["rows"] = d.rows
            datasets[d.name]["path"] = d.path
    out = {
        "tokens_per_dataset": plan.tokens_per_dataset,
        "datasets": datasets,
        "no_estimate": [d.name for d in plan.no_estimate],
    }
    if plan.samples_per_prompt > 1:  # a plan of one sample per prompt reads as before samples existed
        out["samples_per_prompt"] = plan.samples_per_prompt
    return out


def write_budget(path: Path, plan: Plan, extra: dict[str, Any] | None = None) -> None:
    """Temp file in the same folder, fsync, os.replace: a reader sees the old file or the new one. ``extra``:
    more top-level keys (``teacher``: compute_budget.py --teacher-topk)."""
    path = Path(path)
    payload = orjson.dumps({**plan_json(plan), **(extra or {})}, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.fchmod(fd, _file_mode(path))  # mkstemp makes 0600; the plan is a file like any other
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        raise StoreWriteError(
            f"{path}: cannot write the budget file ({exc.strerror}); check that its folder exists and is writable"
        ) from exc


def _file_mode(path: Path) -> int:
    """The mode ``open(path, "w")`` would leave: the existing file's, else 0666 minus the umask."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@dataclass(frozen=True)
class Budget:
    """What run_inference.py takes from a budget file."""

    caps: dict[str, int]  # dataset -> max_samples
    averages: dict[str, float]  # dataset -> expected completion tokens, where the plan had one
    fixed: frozenset[str] = frozenset()  # --fixed and --existing datasets: never run here
    samples_per_prompt: int = 1  # what the plan counted each prompt as
    # --existing datasets: name -> their token file as the plan recorded it (None: a plan file older than that)
    existing: dict[str, str | None] = field(default_factory=dict)

    @property
    def generated(self) -> list[str]:
        """The datasets the plan generates, in the file's order (what a run or an export of the plan reads)."""
        return [name for name in self.caps if name not in self.fixed]


MAX_BUDGET_BYTES = 256 << 20  # a plan of a million datasets is far smaller


def read_budget(path: Path) -> Budget:
    """The per-dataset caps (and expected completion lengths) of a compute_budget.py plan file."""
    try:
        data = orjson.loads(read_input(path, "pass the budget file compute_budget.py --out wrote", MAX_BUDGET_BYTES))
    except FileNotFoundError:
        raise UsageError(f"{path}: budget file not found; create it with compute_budget.py --out {path}") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the budget file ({exc.strerror})") from None
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc}); recreate it with compute_budget.py --out {path}") from None
    datasets = data.get("datasets") if isinstance(data, dict) else None
    if not isinstance(datasets, dict):
        raise UsageError(f"{path}: no 'datasets' object; recreate it with compute_budget.py --out {path}")
    caps, averages, fixed = {}, {}, set()
    existing: dict[str, str | None] = {}
    for name, entry in datasets.items():
        value = entry.get("max_samples") if isinstance(entry, dict) else None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise UsageError(f"{path}: dataset '{name}' has no valid max_samples (a whole number, 0 or more)")
        caps[name] = value
        avg = entry.get("avg_completion_tokens")
        if isinstance(avg, (int, float)) and not isinstance(avg, bool) and avg > 0:
            averages[name] = float(avg)
        if entry.get("avg_source") in (FIXED, EXISTING):
            fixed.add(name)
        if entry.get("avg_source") == EXISTING:
            where = entry.get("path")
            existing[name] = where if isinstance(where, str) and where else None
    per_prompt = data.get("samples_per_prompt", 1)
    if isinstance(per_prompt, bool) or not isinstance(per_prompt, int) or per_prompt < 1:
        raise UsageError(f"{path}: samples_per_prompt must be a whole number of at least 1; recreate the file")
    return Budget(caps, averages, frozenset(fixed), per_prompt, existing)
