"""The simulator's shared server state: the in-flight registry, fault decisions, statistics, runtime config."""

from __future__ import annotations

import hashlib
import json
import random
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING

from sim_config import MALFORMED_KINDS, THROUGHPUT_WINDOW, Faults, HttpError, Settings, prompt_sha1, value_error
from sim_requests import Sequence

if TYPE_CHECKING:  # a cycle at run time: only the annotations need it
    from sim_scheduler import Scheduler


@dataclass(eq=False)
class Job:
    """One /generate request while it generates; /abort_request reaches it through the registry."""

    sequences: list[Sequence]
    wake: threading.Event = field(default_factory=threading.Event)  # aborts, pause changes
    done: threading.Event = field(default_factory=threading.Event)  # scheduler mode: all finished
    unfinished: int = 0
    advanced: threading.Event = field(default_factory=threading.Event)  # scheduler mode: a step, a finish
    streamed: bool = False  # scheduler mode: wake the handler when a chunk is due, to send it
    due: int = 1  # ... that is, once this many tokens are out


@dataclass
class Plan:
    """The fault decisions for one request."""

    outcome: str  # "generate" | "drop" | "503" | "abort"
    slow: bool


class BusyClock:
    """Accumulates the time some condition (e.g. 'a request is running') holds."""

    def __init__(self) -> None:
        self.total = 0.0
        self.since: float | None = None

    def update(self, busy: bool, now: float) -> None:
        if busy and self.since is None:
            self.since = now
        elif not busy and self.since is not None:
            self.total += now - self.since
            self.since = None

    def read(self, now: float) -> float:
        return self.total + (now - self.since if self.since is not None else 0.0)

    def reset(self, now: float) -> None:
        self.total = 0.0
        if self.since is not None:
            self.since = now


class CountClock:
    """Accumulates a count integrated over time (running sequences x seconds)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0
        self.since = time.monotonic()

    def update(self, count: int, now: float) -> None:
        self.total += self.count * max(0.0, now - self.since)
        self.count, self.since = count, max(now, self.since)

    def read(self, now: float) -> float:
        return self.total + self.count * max(0.0, now - self.since)

    def reset(self, now: float) -> None:
        self.total, self.since = 0.0, now


class Throughput:
    """Output tokens per second over the last THROUGHPUT_WINDOW seconds (/v1/loads gen_throughput)."""

    def __init__(self) -> None:
        self.events: deque[tuple[float, int]] = deque()
        self.total = 0

    def add(self, now: float, tokens: int) -> None:
        self.events.append((now, tokens))
        self.total += tokens
        self._trim(now)

    def rate(self, now: float) -> float:
        self._trim(now)
        return self.total / THROUGHPUT_WINDOW

    def _trim(self, now: float) -> None:
        while self.events and self.events[0][0] < now - THROUGHPUT_WINDOW:
            self.total -= self.events.popleft()[1]


def validate_config_change(key: str, value) -> None:
    """Raise HttpError unless ``value`` suits the Faults field ``key``."""
    if key == "malformed":
        if value is not None and value not in MALFORMED_KINDS:
            raise HttpError(400, {"error": f"malformed must be null or one of {list(MALFORMED_KINDS)}"})
    elif key == "worker_ids":
        if not isinstance(value, str):
            raise HttpError(400, {"error": "worker_ids must be a string of comma-separated names"})
    elif key == "garbage_after" and value is None:
        pass
    elif key in ("no_workers", "reject_all"):
        if not isinstance(value, bool):
            raise HttpError(400, {"error": f"{key} must be true or false"})
    elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise HttpError(400, {"error": f"{key} must be a non-negative number"})
    elif key.startswith("rate_") and value > 1:
        raise HttpError(400, {"error": f"{key} must be a probability in [0, 1]"})


class PrefixCache:
    """``--prefix-cache``: the ids of finished requests (prompt and output), as SGLang's radix cache keeps them,
    in a trie. A request's ``cached_tokens`` is its longest prefix found there, all but its last id at most (the
    last is always computed)."""

    def __init__(self) -> None:
        self.root: dict[int, dict] = {}

    def match(self, ids: list[int]) -> int:
        node, found = self.root, 0
        for token in ids[:-1]:
            node = node.get(token)
            if node is None:
                break
            found += 1
        return found

    def insert(self, ids: list[int]) -> None:
        node = self.root
        for token in ids:
            node = node.setdefault(token, {})


class SimState:
    """Everything handler threads share, guarded by one lock (the scheduler has its own)."""

    def __init__(self, settings: Settings, faults: Faults):
        self.settings = settings
        self.initial_faults = faults
        self.lock = threading.Lock()
        # Live requests, which /sim/reset leaves alone: they still have to finish and unregister.
        self.inflight: dict[str, tuple[Job, Sequence]] = {}
        self.jobs_in_flight = 0
        self.http_in_flight = 0  # /generate requests received and not yet answered
        self.arrivals = 0  # /generate requests ever received, for --exit-after
        self.paused = False  # /pause_generation in the per-thread engine
        self.scheduler: Scheduler | None = None
        self.busy_clock = BusyClock()  # per-thread engine: time with a request generating
        self.throughput = Throughput()
        self.prefix = PrefixCache() if settings.prefix_cache else None
        self._reset_locked()

    def _reset_locked(self) -> None:
        self.faults = replace(self.initial_faults)
        self.fail_remaining = self.faults.fail_first_n
        self.shed_remaining = self.faults.shed_first_n
        self.sick_answers = 0
        self.generate_requests = 0
        self.by_outcome: dict[str, int] = {}
        self.prompt_counts: dict[str, int] = {}
        self.request_attempts: dict[str, int] = {}
        self.peak_in_flight = self.http_in_flight
        self.peak_sequences = len(self.inflight)
        self.first_request_at: float | None = None
        self.last_finish_at: float | None = None
        self.tokens_generated = 0
        self.busy_clock.reset(time.monotonic())

    def reset(self) -> None:
        with self.lock:
            self._reset_locked()
        if self.scheduler:
            self.scheduler.reset_stats()

    def configure(self, changes: dict) -> dict:
        names = {f.name for f in fields(Faults)}
        for key, value in changes.items():
            if key not in names:
                raise HttpError(400, {"error": f"unknown sim config key {key!r}; known: {sorted(names)}"})
            validate_config_change(key, value)
        with self.lock:
            self.faults = replace(self.faults, **changes)
            if "fail_first_n" in changes:
                self.fail_remaining = int(changes["fail_first_n"])
            if "shed_first_n" in changes:
                self.shed_remaining = int(changes["shed_first_n"])
            return asdict(self.faults)

    def current_faults(self) -> Faults:
        with self.lock:
            return replace(self.faults)

    def take_shed(self) -> bool:
        """Whether this /generate is one of the first ``shed_first_n``: shed by the admission limit."""
        with self.lock:
            if self.shed_remaining <= 0:
                return False
            self.shed_remaining -= 1
            return True

    def sick_answer(self) -> bool:
        """Count an answer of the sick worker; True once it is past ``garbage_after`` answers."""
        with self.lock:
            self.sick_answers += 1
            after = self.faults.garbage_after
            return after is not None and self.sick_answers > after

    def arrive(self) -> int:
        """Count a /generate request as received; returns its arrival number (1-based)."""
        with self.lock:
            self.arrivals += 1
            self.http_in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.http_in_flight)
            if self.first_request_at is None:
                self.first_request_at = time.time()
            return self.arrivals

    def plan(self, prompts: list[list[int]]) -> Plan:
        """Count the request's prompts and decide its faults."""
        keys = [prompt_sha1(p) for p in prompts]
        request_key = keys[0] if len(keys) == 1 else hashlib.sha1(" ".join(keys).encode()).hexdigest()
        with self.lock:
            for key in keys:
                self.prompt_counts[key] = self.prompt_counts.get(key, 0) + 1
            attempt = self.request_attempts.get(request_key, 0)
            self.request_attempts[request_key] = attempt + 1
            faults = self.faults
            if self.fail_remaining > 0:
                self.fail_remaining -= 1
                return Plan("503", slow=False)
        # Seeded by content and attempt rather than by arrival order, so concurrent clients see
        # the same decisions on every run; a retry of the same prompt rolls fresh dice.
        rng = random.Random(f"{self.settings.fault_seed}:{request_key}:{attempt}")
        roll, slow_roll = rng.random(), rng.random()
        outcome = "generate"
        for name, rate in (
            ("drop", faults.rate_drop),
            ("503", faults.rate_503),
            ("abort", faults.rate_abort),
        ):
            if roll < rate:
                outcome = name
                break
            roll -= rate
        return Plan(outcome, slow=slow_roll < faults.rate_slow)

    def register(self, job: Job) -> None:
        with self.lock:
            for seq in job.sequences:
                if seq.rid in self.inflight:
                    raise value_error(f"Duplicate request ID detected: {seq.rid}")
            for seq in job.sequences:
                self.inflight[seq.rid] = (job, seq)
                if self.prefix is not None:
                    seq.cached = self.prefix.match(seq.input_ids)
            self.jobs_in_flight += 1
            self.peak_sequences = max(self.peak_sequences, len(self.inflight))
            self.busy_clock.update(True, time.monotonic())

    def unregister(self, job: Job) -> None:
        with self.lock:
            for seq in job.sequences:
                self.inflight.pop(seq.rid, None)
                if self.prefix is not None:
                    self.prefix.insert([*seq.input_ids, *seq.planned])
            self.jobs_in_flight -= 1
            self.busy_clock.update(self.jobs_in_flight > 0, time.monotonic())

    def abort(self, rid: str, abort_all: bool) -> None:
        # The tokenizer manager passes an abort on only when its rid is in flight (one tokenizer
        # worker, the default); the scheduler then matches by prefix, so aborting "row#s1" also
        # aborts "row#s10", while "job" alone reaches no part of a batch "job" (job_0, job_1).
        with self.lock:
            if not abort_all and rid not in self.inflight:
                return
            for seq_rid, (job, seq) in self.inflight.items():
                if abort_all or (rid and seq_rid.startswith(rid)):
                    seq.aborted = True
                    job.wake.set()
        if self.scheduler:
            self.scheduler.notice_aborts()

    def set_paused(self, paused: bool) -> None:
        """Pause or resume the per-thread engine (the scheduler pauses itself)."""
        with self.lock:
            self.paused = paused
            for job, _ in self.inflight.values():
                job.wake.set()

    def is_paused(self) -> bool:
        with self.lock:
            return self.paused

    def record(self, outcome: str, prompts: list[list[int]], rid, answer: list[dict] | None) -> None:
        """Account for an answered (or dropped) /generate request; ``answer`` is what a 200 sent."""
        now = time.time()
        with self.lock:
            self.http_in_flight -= 1
            self.last_finish_at = now
            self.generate_requests += 1
            self.by_outcome[outcome] = self.by_outcome.get(outcome, 0) + 1
            tokens = sum(len(item["output_ids"]) for item in answer or [])
            self.tokens_generated += tokens
            if tokens and self.scheduler is None:
                self.throughput.add(time.monotonic(), tokens)
            if self.settings.request_log:
                line = {
                    "time": now,
                    "prompt_sha1": [prompt_sha1(p) for p in prompts],
                    "rid": rid,
                    "outcome": outcome,
                }
                if answer is not None:
                    line["answers"] = answer
                with self.settings.request_log.open("a") as fh:
                    fh.write(json.dumps(line) + "\n")

    def busy(self) -> bool:
        with self.lock:
            return self.jobs_in_flight > 0

    def running_sequences(self) -> list[Sequence]:
        with self.lock:
            return [seq for _, seq in self.inflight.values()]

    def stats(self) -> dict:
        now = time.monotonic()
        with self.lock:
            result = {
                "generate_requests": self.generate_requests,
                "completed": self.by_outcome.get("ok", 0),
                "in_flight": self.jobs_in_flight,
                "by_outcome": dict(self.by_outcome),
                "prompt_counts": dict(self.prompt_counts),
                "mode": "scheduler" if self.scheduler else "per_request",
                "http_in_flight": self.http_in_flight,
                "peak_in_flight": self.peak_in_flight,
                "first_request_at": self.first_request_at,
                "last_finish_at": self.last_finish_at,
                "tokens_generated": self.tokens_generated,
                "running": len(self.inflight),
                "waiting": 0,
                "peak_running": self.peak_sequences,
                "peak_waiting": 0,
                "busy_time": self.busy_clock.read(now),
                "running_time": 0.0,
                "queue_time_total": 0.0,
                "queue_time_max": 0.0,
                "retractions": 0,
                "decode_steps": 0,
                "token_usage": 0.0,
            }
        if self.scheduler:
            result |= self.scheduler.stats()
        return result
