"""The run's time series: ``<output-dir>/timeline.jsonl``, a line every status interval while a run goes.

    {"t": 1764650000.0, "run": "20261202T031500-4242", "tok_s": 812.0, "in_flight": 64, "running": 60,
     "waiting": 4, "target": 72, "done": 1200, "failed": 0, "skipped": 0, "tokens": 980000, "restarts": 0,
     "down": false}
    {"t": 1764650007.2, "run": "20261202T031500-4242", "event": "outage", "detail": "connection refused"}
    {"t": 1764651000.0, "run": "20261202T041000-4300", "event": "start", "detail": "resumes 1,200 rows",
     "rows_before": 1200, "continuing": 12, "continue_cut": 0}

``t`` is Unix time in seconds; ``tok_s`` the output tokens per second of the last minute (the status line's
``1m`` figure); ``running``/``waiting`` the server's own counts from its load report (null when it gives
none); ``restarts`` the launched server's restarts so far. Events: ``start`` (with the rows already written,
the partial outputs it continues and ``--continue-cut``), ``end`` (its detail says a stop: ``stopped by
SIGTERM``), ``outage``, ``recovered``, ``restart``. Reruns append to the same file, each under its own
``run`` id. A line costs about 200 bytes: a day at the default 10 s is under 2 MB.

    TimelineWriter   appends lines (never through a link); a failure stops it and is said once
    read_timeline    the lines back, a torn or foreign line skipped
    sample_of        the sample of a run's progress and load monitor (duck-typed: this layer is below ``run``)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

import orjson

from synthgen.data.openfiles import open_output
from synthgen.errors import UsageError

TIMELINE = "timeline.jsonl"
EVENTS = ("start", "end", "outage", "recovered", "restart")


def run_id(pid: int | None = None, now: float | None = None) -> str:
    stamp = datetime.fromtimestamp(time.time() if now is None else now, timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{os.getpid() if pid is None else pid}"


class TimelineWriter:
    """Appends samples and events to ``path``; the first failure (a full disk, a link in its place) turns it
    off and is passed to ``on_problem`` once: the timeline is a convenience, never the end of a run."""

    def __init__(self, path: Path, run: str, on_problem: Callable[[str], None] = lambda text: None):
        self.path, self.run, self.on_problem = path, run, on_problem
        self._fd: int | None = None
        self._broken = False

    def sample(self, fields: dict[str, Any], now: float | None = None) -> None:
        self._append({"t": round(time.time() if now is None else now, 1), "run": self.run, **fields})

    def event(self, kind: str, detail: str = "", now: float | None = None, **counts: int) -> None:
        stamp = round(time.time() if now is None else now, 1)
        self._append({"t": stamp, "run": self.run, "event": kind, "detail": detail, **counts})

    def _append(self, line: dict[str, Any]) -> None:
        if self._broken:
            return
        try:
            if self._fd is None:
                self._fd = open_output(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
            os.write(self._fd, orjson.dumps(line, option=orjson.OPT_APPEND_NEWLINE))
        except (OSError, UsageError) as exc:
            self._broken = True
            self.on_problem(f"the run's timeline is not recorded from here on ({self.path}: {exc})")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass
class Timeline:
    samples: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def runs(self) -> list[str]:
        return list(dict.fromkeys(str(s.get("run", "")) for s in [*self.samples, *self.events]))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse_timeline(data: bytes) -> Timeline:
    """Every whole line that is a sample or an event; anything else (a torn last line) is skipped."""
    timeline = Timeline()
    for line in data.splitlines():
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(row, dict) or not _number(row.get("t")):
            continue
        if "event" in row:
            if row["event"] in EVENTS:
                timeline.events.append(row)
        else:
            timeline.samples.append(row)
    timeline.samples.sort(key=lambda s: s["t"])
    timeline.events.sort(key=lambda e: e["t"])
    return timeline


def read_timeline(path: Path) -> Timeline:
    try:
        fd = open_output(path, os.O_RDONLY)
    except FileNotFoundError:
        return Timeline()
    with os.fdopen(fd, "rb") as fh:
        return parse_timeline(fh.read())


# --- what a sample holds ---------------------------------------------------------------------------
class _Tally(Protocol):
    @property
    def done(self) -> int: ...

    @property
    def failed(self) -> int: ...

    @property
    def skipped(self) -> int: ...

    @property
    def tokens(self) -> int: ...

    @property
    def in_flight(self) -> int: ...


class _Progress(Protocol):
    @property
    def tally(self) -> _Tally: ...

    outage_since: float | None

    def rates(self) -> tuple[float, float]: ...


class _Load(Protocol):
    @property
    def running(self) -> int: ...

    @property
    def waiting(self) -> int: ...


class _Limit(Protocol):
    @property
    def target(self) -> int: ...


class _Monitor(Protocol):
    @property
    def latest(self) -> _Load | None: ...

    @property
    def limit(self) -> _Limit: ...


def sample_of(progress: _Progress, monitor: _Monitor | None, restarts: int) -> dict[str, Any]:
    """A timeline sample from the run's own counters: the figures of its status line."""
    load = monitor.latest if monitor is not None else None
    return {
        "tok_s": round(progress.rates()[0], 1),
        "in_flight": progress.tally.in_flight,
        "running": load.running if load is not None else None,
        "waiting": load.waiting if load is not None else None,
        "target": monitor.limit.target if monitor is not None else None,
        "done": progress.tally.done,
        "failed": progress.tally.failed,
        "skipped": progress.tally.skipped,
        "tokens": progress.tally.tokens,
        "restarts": restarts,
        "down": progress.outage_since is not None,
    }
