"""How a run stops before its prompts are all done: a signal (drain, then stop) or a fatal error.

``RunStop`` is made before the runner and the launched server's supervisor, and handed to both: the
supervisor ends the run through ``fail`` when its server cannot be brought back; the runner holds
the stop signals (``synthgen.signals``) with ``on_signal`` while it runs. What is in flight is
whatever the pool attaches (``attach``): its tasks are cancelled on a fatal error, a second
signal, the drain timeout, or at once when the server is down (nothing in flight can finish).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Any, Protocol

from synthgen import signals
from synthgen.fmt import fmt_duration
from synthgen.run.progress import Progress

# After a stop has aborted the requests in flight, their answers (one decode step away) are awaited this long.
ABORT_GRACE = 10.0


class InFlight(Protocol):
    """What a stop needs of the requests in flight (``runner.Pool`` fits)."""

    tasks: set[asyncio.Task[None]]

    def stop_preparing(self) -> None: ...

    def server_down(self) -> bool: ...

    def keeps_partials(self) -> bool: ...

    def in_flight_kept(self) -> tuple[int, int]: ...

    async def end_in_flight(self, kept_only: bool = False) -> int: ...


class RunStop:
    def __init__(self, progress: Progress, drain_timeout: float):
        self.progress, self.drain_timeout = progress, drain_timeout
        self.event = asyncio.Event()  # set: no new requests
        self.signal: signal.Signals | None = None
        self.fatal: BaseException | None = None
        self._in_flight: InFlight | None = None
        self._ending: asyncio.Task[Any] | None = None  # /abort_request calls of a stop
        self._ended = False  # the drain ran out or a second signal came: what is in flight was ended

    def is_set(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()

    def attach(self, in_flight: InFlight) -> None:
        self._in_flight = in_flight

    def fail(self, exc: BaseException) -> None:
        """Stop the run now with ``exc`` as its outcome (the pool's fatal errors, the server supervisor's)."""
        if self.fatal is None:
            self.fatal = exc
        self.event.set()
        for task in self._in_flight.tasks if self._in_flight is not None else ():
            if task is not asyncio.current_task():
                task.cancel()

    def exit_code(self) -> int | None:
        """The exit code of a run a signal stopped (a fatal error is raised); None when neither happened."""
        if self.fatal is not None:
            raise self.fatal
        if self.signal is None:
            return None
        self.progress.message(f"stopped by {self.signal.name}; rerun the same command to resume")
        return signals.exit_code(self.signal)

    def on_signal(self, sig: signal.Signals) -> None:
        """The first signal stops sending, ends what is in flight whose output is kept and drains the
        rest (a recipe's samples that restart, or everything where partial outputs are not kept); a
        second (or the drain timeout) ends what is left."""
        name = sig.name
        if self.signal is not None:
            self._end_now(f"second {name}")
            return
        self.signal = sig
        self.event.set()
        pool = self._in_flight
        if pool is not None:
            pool.stop_preparing()
            if pool.server_down():
                self._cancel(f"{name} during an outage: nothing in flight can finish")
                return
        asyncio.get_running_loop().call_later(self.drain_timeout, self._end_now, "drain timeout")
        wait, again = fmt_duration(self.drain_timeout), f"(send {name} again to stop now)"
        kept, others = pool.in_flight_kept() if pool is not None else (0, 0)
        if pool is not None and pool.keeps_partials() and (kept or not others):
            # Nothing is lost by ending them now: their output so far is kept and the next run continues it.
            self._ending = asyncio.create_task(pool.end_in_flight(kept_only=bool(others)))
            if not others:
                self.progress.message(
                    f"{name}: no new requests; ending the {self.progress.tally.in_flight} in flight through "
                    f"/abort_request, their output so far kept for the next run to continue {again}"
                )
                return
            self.progress.message(
                f"{name}: no new requests; ending the {kept} in flight whose output is kept through /abort_request "
                f"(kept for the next run to continue); waiting up to {wait} for the other {others}, whose output "
                f"would not be kept (their recipe restarts a request ended early) {again}"
            )
            return
        keeps = pool is not None and pool.keeps_partials()
        why = ", whose output would not be kept (their recipe restarts a request ended early)" if keeps else ""
        self.progress.message(
            f"{name}: no new requests; waiting up to {wait} for {self.progress.tally.in_flight} in flight{why} {again}"
        )

    def _end_now(self, why: str) -> None:
        """The drain ran out, or a second signal: requests in flight are ended through /abort_request
        (the server stops generating for nobody; their output so far is kept where it can be
        continued), then cancelled if their answers do not come back within ABORT_GRACE. Once more:
        cancelled at once."""
        pool = self._in_flight
        if pool is None or self._ended:
            self._cancel(why)
            return
        self._ended = True

        async def end_then_cancel() -> None:
            alive = [t for t in pool.tasks if not t.done()]
            sent = self.progress.tally.in_flight
            if alive:
                waiting = f" and {len(alive) - sent} waiting to be sent" if len(alive) > sent else ""
                self.progress.message(f"stopping now ({why}): ending {sent} requests in flight{waiting}")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(pool.end_in_flight(), ABORT_GRACE)
            if alive:
                await asyncio.wait(alive, timeout=ABORT_GRACE)
            self._cancel(why)

        self._ending = asyncio.create_task(end_then_cancel())

    def close(self) -> None:
        """The run is over: a stop's /abort_request calls still under way are not waited for."""
        if self._ending is not None:
            self._ending.cancel()

    def _cancel(self, why: str) -> None:
        tasks = self._in_flight.tasks if self._in_flight is not None else set()
        alive = [t for t in tasks if not t.done()]
        sent = self.progress.tally.in_flight  # the same count as "waiting for N in flight"
        for task in alive:
            task.cancel()
        if alive:
            waiting = f" and {len(alive) - sent} waiting to be sent" if len(alive) > sent else ""
            self.progress.message(
                f"stopping now ({why}): cancelling {sent} requests in flight{waiting}; their prompts stay pending "
                "for the next run"
            )
