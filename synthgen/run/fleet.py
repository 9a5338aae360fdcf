"""The run's view of the replicas behind a gateway: who answered what, sheds, sick workers.

    Fleet.answered(gen)        a good answer: counted for its worker; after a calm stretch the target grows back
    Fleet.judge(gen)           garbage (sickworker.garbage_reason; stricter for a worker seen answering it)
                               -> a Transient to retry; a burst -> ServerError
    Fleet.shed(exc)            a gateway's 429/503 with Retry-After: the in-flight target comes down, the wait
    Fleet.failed(exc, kind)    a prompt's recorded failure, by worker
    Fleet.gateway_found(keys)  once, behind a gateway: the sampling keys it drops
    Fleet.status_text()        the fleet's part of the status line ("gateway shedding", sick workers)
    Fleet.summary_lines()      finish reasons and errors by worker, when more than one worker answered

Sheds are backpressure: they never use up ``--max-attempts``; each one cuts the in-flight
target by a quarter (multiplicative decrease) and every ``target`` answers without a shed give one back,
up to where it was (additive increase), so a gateway's admission limit is found and kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from synthgen.data.failures import GARBAGE
from synthgen.errors import ServerError
from synthgen.run.concurrency import AutoConcurrency, InFlightLimit, LoadMonitor
from synthgen.run.sickworker import WorkerHealth, garbage_reason
from synthgen.server.client import Generation, Transient
from synthgen.server.gateway import dropped_keys

SHED_CUT = 0.75


class Fleet:
    def __init__(
        self,
        limit: InFlightLimit,
        controller: AutoConcurrency,
        on_message: Callable[[str], None] = lambda text: None,
        health: WorkerHealth | None = None,
    ):
        self.limit, self.controller, self.on_message = limit, controller, on_message
        self.health = health or WorkerHealth()
        self.finish: Counter[tuple[str, str]] = Counter()  # (worker, finish reason) -> answers
        self.errors: Counter[tuple[str, str]] = Counter()  # (worker, error kind) -> failed prompts
        self.sheds = 0
        self.shedding = False  # the last answer from the gateway was a shed
        self.ceiling: int | None = None  # the target before the first shed
        self._calm = 0
        self._told: set[str] = set()
        self.told_keys = False

    def gateway_found(self, sampling_keys: Iterable[str]) -> None:
        """Behind a gateway (its /readiness, or smg's worker header on an answer): say once which of the
        sampling keys the run sends it drops (smg 1.13 forwards a fixed set, gateways/smg.py)."""
        if self.told_keys:
            return
        self.told_keys = True
        for gateway, dropped in dropped_keys(sampling_keys):
            self.on_message(
                f"warning: a gateway is in front and {gateway.name} does not pass {', '.join(dropped)} on to its "
                "workers: "
                "those settings have no effect (settings.jsonl records them as sent); talk to a worker directly "
                "to use them"
            )

    # ------------------------------------------------------------------ answers
    def judge(self, gen: Generation) -> None:
        """Raise when ``gen`` is garbage: a Transient (retried, not written), or a ServerError once its
        worker's garbage comes in a burst (the run stops, naming it)."""
        worker = gen.worker or "?"
        reason = garbage_reason(gen.output_ids, gen.text, suspect=self.health.garbage[worker] > 0)
        sick = self.health.record(worker, reason)
        if reason is None:
            return
        if sick:
            raise ServerError(
                f"{self.health.describe(worker)}: it is sick, the run stops rather than write garbage; take it out "
                "of the gateway or the --server-url list (or restart it) and rerun to resume"
            )
        if worker not in self._told:
            self._told.add(worker)
            self.on_message(f"worker {worker} answered garbage ({reason}); such answers are retried, not written")
        raise Transient(GARBAGE.name, f"worker {worker} answered garbage: {reason}", worker=worker)

    def answered(self, gen: Generation) -> None:
        self.finish[gen.worker or "?", gen.finish_type] += 1
        self.shedding = False
        if self.ceiling is not None and self.limit.target < self.ceiling:
            self._calm += 1
            if self._calm >= self.limit.target:
                self._calm = 0
                self._set_target(self.limit.target + 1)

    def failed(self, worker: str | None, kind: str) -> None:
        self.errors[worker or "?", kind] += 1

    # ------------------------------------------------------------------ sheds
    def shed(self, exc: Transient) -> float:
        """A shed: lower the in-flight target, say so once; returns the seconds to hold off."""
        self.sheds += 1
        self.shedding = True
        self._calm = 0
        if self.ceiling is None:
            self.ceiling = self.limit.target
            self.on_message(
                f"the gateway is shedding load ({exc.message}); waiting as it asks and sending less at once "
                "(sheds do not count as attempts)"
            )
        self._set_target(int(min(self.limit.target, self.limit.in_use) * SHED_CUT))
        return exc.shed or 0.0

    def _set_target(self, target: int) -> None:
        target = max(1, target)
        self.controller.hold(target)  # the load monitor sets the limit from the controller's target
        self.limit.set_target(target)

    # ------------------------------------------------------------------ what is said
    def status_text(self) -> str:
        parts = []
        if self.shedding:
            parts.append(f"gateway shedding ({self.sheds:,} sheds, target {self.limit.target})")
        for worker, n in sorted(self.health.garbage.items()):
            parts.append(f"worker {worker}: {n} garbage answers")
        return "; ".join(parts)

    def workers(self) -> list[str]:
        return sorted({w for w, _ in self.finish} | {w for w, _ in self.errors})

    def summary_lines(self) -> list[str]:
        lines = []
        if self.sheds:
            lines.append(f"the gateway shed {self.sheds:,} requests (waited out, not counted as attempts)")
        workers = self.workers()
        if len(workers) > 1:
            lines.append("by worker:")
            for worker in workers:
                finish = ", ".join(f"{n:,} {k}" for (w, k), n in sorted(self.finish.items()) if w == worker)
                errors = ", ".join(f"{n:,} {k}" for (w, k), n in sorted(self.errors.items()) if w == worker)
                garbage = self.health.garbage.get(worker, 0)
                lines.append(
                    f"  {worker}: answers {finish or 'none'}"
                    + (f"; failed {errors}" if errors else "")
                    + (f"; {garbage} garbage answers retried" if garbage else "")
                )
        return lines


def status_text(monitor: LoadMonitor, fleet: Fleet) -> str:
    """The server part of the status line: the load, then the fleet's news, if any."""
    return "; ".join(part for part in (monitor.status_text(), fleet.status_text()) if part)
