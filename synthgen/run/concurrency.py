"""Load-driven concurrency: how many requests to keep in flight, decided from the server's own load.

This module owns ``--concurrency auto``: reading the server's load report (``parse_loads``), the
bound on requests in flight whose target moves (``InFlightLimit``), the pure decision of that
target (``AutoConcurrency``) and the polling loop that joins them (``LoadMonitor``), which also
keeps the server state for the status line, warns about a starved or retracting server and sums
the run up.

What it reads
-------------
SGLang 0.5.2x answers ``GET /v1/loads`` with one entry per data-parallel rank: ``num_running_reqs``,
``num_waiting_reqs``, ``token_usage`` (KV pool share held), ``max_total_num_tokens``,
``max_running_requests``, ``gen_throughput`` (output tokens/s) and, in its ``queues`` section,
``retracted`` (requests the scheduler retracted in its last report interval). Ranks are summed.
sglang-router 0.3.2 has no ``/v1/loads`` (404) and its ``/get_loads`` answers ``load: -1`` per
worker against 0.5.23 (it asks the workers for the removed ``/get_load``); it does list its workers
with their URLs at ``GET /workers``, so behind a router the monitor polls each worker's
``/v1/loads`` directly and sums them.

How it decides (``AutoConcurrency.update``, once per poll)
---------------------------------------------------------
The goal is a short queue on the server: every request the server could admit is already there,
and hardly more. With ``running`` the highest running count of the last five polls, ``margin =
max(8, running / 5)`` and ``desired = running + margin``:

- **starved** (fewer than ``margin / 2`` waiting, KV below 90 % full, running below the
  server's limit, no retractions), the limit is what holds the client back and the server holds what the client
  has in flight (none in transit): grow multiplicatively, ``target = max(desired, target * 1.25
  + 8)``. Geometric growth fills a server that fits 8x more in about ten polls; the mild factor
  keeps one poll's overshoot within 1.25x of what the server ran.
- **queued** (more than ``1.5 * margin`` waiting, or the server retracting): shrink a quarter of
  the way towards ``desired`` (with ``margin = 8`` while retracting), never below it.
- **thin queue** (fewer than ``margin / 2`` waiting while the client is held back and the
  server has no room: at its running limit or its KV full): raise the target to ``desired``.
- otherwise hold.

Why it is stable: the server, not the client, decides how many requests run; as long as some
wait, ``running`` does not depend on the target, so the loop is a direct map from target to
queue length with no feedback through ``running``. Growth overshoots the band at most once:
shrinking then stops at ``desired``, i.e. ``margin`` waiting, inside the band. The dead band between ``margin / 2`` and
``1.5 * margin`` waiting absorbs the queue's noise; sizing the margin from the highest recent
running count keeps a momentary dip (a burst of completions) from shrinking the target; a shrink
moves a quarter of the excess (a first-order filter: it never undershoots ``desired``); growth
needs evidence that the server had room and nothing to admit. Lowering the target cancels
nothing: the in-flight count falls as requests finish.

Start: ``initial`` if given; else, on the first report, ``max_total_num_tokens /
tokens_per_request`` when the caller knows its prompt plus expected completion length, else 16
(low, because a server that fits few requests must not see a pile first); never above the
server's ``max_running_requests`` plus a margin; always within ``[1, max_concurrency]``. While
the target grows (a poll raised it) the monitor polls four times as often, so a low start costs about
a second: 16 -> 28 -> 43 -> 62 -> 86 -> 116 at one step per quarter second; otherwise once a second.

Fallback: with no load report (an older server, a router whose workers are unreachable, a failed
poll) the target stays where it is: 64 (today's fixed default) or ``initial`` if the server never
reported, and ``LoadMonitor`` says so once through its message callback. The first poll
(``LoadMonitor.first_poll``; under a fixed ``--concurrency N``, none) waits at most
``FIRST_POLL_TIMEOUT`` (2 s): a load endpoint that answers slowly starts the run at the fallback,
and the target moves once a report comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from synthgen.server.gateway import worker_listings

DEFAULT_MAX_CONCURRENCY = 1024
FALLBACK_CONCURRENCY = 64
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_WARN_AFTER = 60.0
# The first load poll sizes the start, but a load endpoint that answers slowly (or a router's
# workers that do) must not hold back the first request: after this long the run starts at the
# fallback target and the polls go on beside the requests.
FIRST_POLL_TIMEOUT = 2.0
LOADS_PATH = "/v1/loads"


# ------------------------------------------------------------------------------ load reports
@dataclass(frozen=True, slots=True)
class ServerLoad:
    """A load report summed over the server's data-parallel ranks (or a router's workers)."""

    running: int
    waiting: int
    token_usage: float  # KV pool share held, weighted by pool size over ranks: 0..1
    max_total_tokens: int | None  # KV pool tokens, summed
    max_running: int | None  # the most requests the server runs at once, summed
    gen_throughput: float  # output tokens per second, summed
    retracted: int  # requests retracted in the server's last report interval, summed
    ranks: int


def _number(entry: dict[str, Any], key: str) -> float | None:
    value = entry.get(key)
    # bool is an int subclass; a JSON true is never a count.
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        return float(value)
    return None


def parse_loads(body: object) -> ServerLoad | None:
    """Sum ``/v1/loads`` (SGLang 0.5.2x) over its ranks; None when ``body`` is not such a report.

    A list of bodies (one per router worker) is summed the same way. A rank without both
    ``num_running_reqs`` and ``num_waiting_reqs`` makes the report unusable: a partial sum would
    read as a starved server.
    """
    bodies = body if isinstance(body, list) else [body]
    entries: list[dict[str, Any]] = []
    for one in bodies:
        loads = one.get("loads") if isinstance(one, dict) else None
        if not isinstance(loads, list) or not loads or not all(isinstance(entry, dict) for entry in loads):
            return None
        entries.extend(loads)
    running = waiting = retracted = 0
    throughput = used = pool = 0.0
    max_running = 0
    pools_known = max_running_known = True
    for entry in entries:
        run, wait = _number(entry, "num_running_reqs"), _number(entry, "num_waiting_reqs")
        if run is None or wait is None:
            return None
        running += int(run)
        waiting += int(wait)
        throughput += _number(entry, "gen_throughput") or 0.0
        queues = entry.get("queues")
        retracted += int(_number(queues, "retracted") or 0) if isinstance(queues, dict) else 0
        size, usage = _number(entry, "max_total_num_tokens"), _number(entry, "token_usage") or 0.0
        if size:
            pool += size
            used += usage * size
        else:
            pools_known = False
            used += usage
        limit = _number(entry, "max_running_requests")
        if limit:
            max_running += int(limit)
        else:
            max_running_known = False
    usage_share = used / pool if pools_known and pool else used / len(entries)
    return ServerLoad(
        running=running,
        waiting=waiting,
        token_usage=min(1.0, usage_share),
        max_total_tokens=int(pool) if pools_known and pool else None,
        max_running=max_running if max_running_known else None,
        gen_throughput=throughput,
        retracted=retracted,
        ranks=len(entries),
    )


# ------------------------------------------------------------------------------ the send order
def interleave(counts: list[int]) -> Iterator[int]:
    """The dataset index of each prompt in send order, for datasets of ``counts`` prompts, given
    longest expected answers first: every dataset is spread evenly over the whole run (its k-th
    of n prompts at k / n of the way), ties going to the earlier dataset, so the run opens with
    the longest dataset's first prompt and the others mixed in.

    Why: a KV-bound server running long answers has room for short ones beside them. Sent one
    dataset after the other, the client first holds a few long requests, then must grow its
    target several-fold when the short dataset starts (and a run can end on long answers); a
    steady mix keeps the server's running set, and so the target, the same from start to end.
    """
    heap = [(0.0, index, 0) for index, count in enumerate(counts) if count > 0]
    heapq.heapify(heap)
    while heap:
        _, index, k = heapq.heappop(heap)
        yield index
        if k + 1 < counts[index]:
            heapq.heappush(heap, ((k + 1) / counts[index], index, k + 1))


# ------------------------------------------------------------------------------ the limit
class InFlightLimit:
    """An asyncio bound on requests in flight whose target can change at any time.

    ``acquire`` waits while ``in_use >= target`` (first come, first served); ``release`` frees
    a slot. Lowering the target cancels nothing: it only admits no more until ``in_use`` drops
    below it. Usable as ``async with limit:``.
    """

    def __init__(self, target: int):
        self._target = max(1, int(target))
        self.in_use = 0
        self.peak_in_use = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._held_back = False

    @property
    def target(self) -> int:
        return self._target

    def set_target(self, target: int) -> None:
        self._target = max(1, int(target))
        self._wake()

    @property
    def waiting(self) -> int:
        """Acquirers waiting for a slot now."""
        return sum(1 for waiter in self._waiters if not waiter.done())

    def held_back(self) -> bool:
        """Whether the limit made an acquirer wait, or was full, since the last call; resets it.

        This tells the controller that more in flight was wanted: growth is pointless when the
        client itself is not sending (the last prompts, a slow producer)."""
        held = self._held_back or self.waiting > 0 or self.in_use >= self._target
        self._held_back = False
        return held

    def try_acquire(self) -> bool:
        """Take a slot if one is free now, without waiting."""
        if self.in_use < self._target and not self._waiters:
            self._take()
            return True
        return False

    async def acquire(self) -> None:
        if self.try_acquire():
            return
        self._held_back = True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the slot was handed over just as we were cancelled
            raise
        finally:
            if not waiter.done() or waiter.cancelled():  # a waiter given its slot is out of the deque already
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)

    def release(self) -> None:
        if self.in_use <= 0:
            raise RuntimeError("InFlightLimit.release() without a matching acquire()")
        self.in_use -= 1
        self._wake()

    def _take(self) -> None:
        self.in_use += 1
        self.peak_in_use = max(self.peak_in_use, self.in_use)

    def _wake(self) -> None:
        while self._waiters and self.in_use < self._target:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self._take()
                waiter.set_result(None)

    async def __aenter__(self) -> InFlightLimit:
        await self.acquire()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


# ------------------------------------------------------------------------------ the controller
@dataclass
class AutoConcurrency:
    """The in-flight target from one load report to the next; pure (no I/O, no clock).

    See the module docstring for the rule and why it is stable. ``update`` returns the new
    target; ``state`` names the last decision (starved, queued, retracting, thin, steady,
    no-load) for the status line and the warnings.
    """

    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    initial: int | None = None  # the start target; None: sized from the first load report
    tokens_per_request: float | None = None  # prompt + expected completion, when known
    fallback: int = FALLBACK_CONCURRENCY
    start_unknown: int = 16  # the start when the server reports but the request length is unknown
    growth: float = 1.25
    min_margin: int = 8
    margin_fraction: float = 0.2
    queue_high: float = 1.5  # shrink above this many margins waiting
    running_window: int = 5  # polls whose highest running count sizes the margin
    shrink_fraction: float = 0.25
    kv_full: float = 0.9
    target: int = field(init=False)
    state: str = field(init=False, default="no-load")
    started: bool = field(init=False, default=False)
    _recent_running: deque[int] = field(init=False)

    def __post_init__(self) -> None:
        self._recent_running = deque(maxlen=self.running_window)
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, got {self.max_concurrency}")
        self.target = self._clamp(self.initial if self.initial is not None else self.fallback)

    def _clamp(self, value: float) -> int:
        return max(1, min(self.max_concurrency, math.ceil(value)))

    def hold(self, target: int) -> None:
        """A target set from outside the load (a gateway's sheds, run/fleet.py); the next update goes on from it."""
        self.target = target

    def start_target(self, load: ServerLoad) -> int:
        """The target to begin with, given the first load report (``initial`` wins when set)."""
        if self.initial is not None:
            return self._clamp(self.initial)
        guess = float(self.start_unknown)
        if self.tokens_per_request and load.max_total_tokens:
            guess = load.max_total_tokens / self.tokens_per_request
        if load.max_running:
            guess = min(guess, load.max_running + self.margin(load.max_running))
        return self._clamp(guess)

    def margin(self, running: float) -> int:
        """How many requests to keep waiting on the server beyond those it runs."""
        return max(self.min_margin, math.ceil(running * self.margin_fraction))

    def update(self, load: ServerLoad | None, held_back: bool, in_flight: int | None = None) -> int:
        """The new target after a poll. ``held_back``: the limit kept the client from sending
        more since the last poll (``InFlightLimit.held_back()``); ``in_flight``: the client's
        requests in flight when the report was read (``InFlightLimit.in_use``), if known."""
        if load is None:
            self.state = "no-load"
            return self.target
        if not self.started:
            self.started = True
            self.target = self.start_target(load)
        self._recent_running.append(load.running)
        running = max(self._recent_running)
        retracting = load.retracted > 0
        margin = self.min_margin if retracting else self.margin(running)
        desired = self._clamp(running + margin)
        room = load.token_usage < self.kv_full and (load.max_running is None or load.running < load.max_running)
        # Requests the client counts in flight but the server does not hold yet are in transit:
        # an empty queue then says nothing about the server's room.
        in_transit = in_flight is not None and load.running + load.waiting < in_flight - margin
        if load.waiting < margin / 2 and room and not retracting:
            self.state = "starved"
            if held_back and not in_transit:
                self.target = self._clamp(max(desired, self.target * self.growth + self.min_margin))
        elif retracting or load.waiting > self.queue_high * margin:
            self.state = "retracting" if retracting else "queued"
            if self.target > desired:
                self.target = max(desired, self.target - math.ceil((self.target - desired) * self.shrink_fraction))
        elif load.waiting < margin / 2 and held_back and self.target < desired:
            self.state = "thin"
            self.target = desired
        else:
            self.state = "steady"
        return self.target


# ------------------------------------------------------------------------------ the monitor
class LoadSource(Protocol):
    """What the monitor needs of the HTTP client (``SGLangClient`` fits)."""

    async def loads(self, path: str = LOADS_PATH) -> dict[str, Any] | None: ...


@dataclass
class _Episode:
    """A condition seen on consecutive polls, for sustained-condition warnings."""

    since: float | None = None
    warned: bool = False
    total: float = 0.0
    last: float | None = None

    def observe(self, active: bool, now: float) -> float:
        """Record one poll; returns for how long the condition has held (0 when it does not)."""
        if active and self.last is not None and self.since is not None:
            self.total += now - self.last
        if not active:
            self.since, self.warned, self.last = None, False, None
            return 0.0
        if self.since is None:
            self.since = now
        self.last = now
        return now - self.since


class LoadMonitor:
    """Polls the server's load, feeds the controller and moves the limit's target.

    ``await poll_once()`` is one poll (tests drive it directly); ``run()`` polls every
    ``interval`` seconds until cancelled. With ``steer=False`` (a fixed ``--concurrency N``) it
    only watches: the limit's target is left alone, the status line and warnings still work.
    ``status_text()`` is the server part of the status
    line, ``summary()`` / ``summary_line()`` the end-of-run figures. Messages (no load report;
    a server starved or retracting for ``warn_after`` seconds, with what to change) go to
    ``on_message`` once per episode.
    """

    def __init__(
        self,
        client: LoadSource,
        limit: InFlightLimit,
        controller: AutoConcurrency,
        on_message: Callable[[str], None] = lambda text: None,
        interval: float = DEFAULT_POLL_INTERVAL,
        warn_after: float = DEFAULT_WARN_AFTER,
        clock: Callable[[], float] = time.monotonic,
        steer: bool = True,
    ):
        self.client, self.limit, self.controller, self.steer = client, limit, controller, steer
        self.on_message, self.interval, self.warn_after, self.clock = on_message, interval, warn_after, clock
        self.latest: ServerLoad | None = None
        self.source: str | None = None  # "server", "router workers" or None before a report
        self._worker_urls: list[str] = []
        self._told_no_load = False
        self._starved = _Episode()
        self._retracting = _Episode()
        self.polls = self.reports = 0
        self.peak_running = self.peak_waiting = 0
        self.min_target = self.max_target = limit.target
        self._running_sum = 0
        self._in_flight_at_read = 0
        self.grew = False  # the last poll raised the target: the next comes sooner

    async def run(self) -> None:
        """Poll until cancelled; four times as often while the target grows (the last poll raised it), so that
        the client finds a server's capacity quickly (each step still waits for the server's answer). A server
        merely starved while the client has nothing more to send (a CPU server that runs all it gets) is polled
        once an interval: the target would not move."""
        while True:
            await self.poll_once()
            await asyncio.sleep(self.interval / 4 if self.grew else self.interval)

    async def first_poll(self, timeout: float = FIRST_POLL_TIMEOUT) -> ServerLoad | None:
        """``poll_once`` bounded by ``timeout``: None (the target unchanged) when no answer came in time.
        A fixed target (``steer=False``) does not wait for it: nothing the poll says moves it, so the
        first requests go out at once and ``run`` makes the first poll beside them."""
        if not self.steer:
            return None
        try:
            return await asyncio.wait_for(self.poll_once(), timeout)
        except asyncio.TimeoutError:
            return None

    async def poll_once(self) -> ServerLoad | None:
        """Read the load once, update the target and the warnings; returns the load (or None)."""
        load = await self._read()
        now = self.clock()
        self.polls += 1
        held_back = self.limit.held_back()
        before = self.controller.target
        target = self.controller.update(load, held_back, self._in_flight_at_read)
        self.grew = self.steer and target > before
        if self.steer:
            self.limit.set_target(target)
        self.min_target = min(self.min_target, self.limit.target)
        self.max_target = max(self.max_target, self.limit.target)
        self.latest = load
        if load is None:
            self._no_load()
            return None
        self.reports += 1
        self._running_sum += load.running
        self.peak_running = max(self.peak_running, load.running)
        self.peak_waiting = max(self.peak_waiting, load.waiting)
        self._warn(self.controller.state, held_back, now)
        return load

    async def _read(self) -> ServerLoad | None:
        self._in_flight_at_read = self.limit.in_use
        if self.source != "router workers":
            load = parse_loads(await self.client.loads(LOADS_PATH))
            if load is not None:
                self.source = "server"
                return load
            if self.source == "server":
                return None  # a failed poll of a server that has reported: not a router
        if not self._worker_urls:
            self._worker_urls = await self._list_workers()
            if not self._worker_urls:
                return None
        # The worker URLs are absolute, so the client's base URL (the router's) is not applied.
        bodies = await asyncio.gather(*(self.client.loads(url + LOADS_PATH) for url in self._worker_urls))
        load = parse_loads(list(bodies)) if all(body is not None for body in bodies) else None
        if load is None:
            self._worker_urls = []  # the router's worker set may have changed: ask again next time
        else:
            self.source = "router workers"
        return load

    async def _list_workers(self) -> list[str]:
        """The worker URLs a gateway in front lists (sglang-router's /workers), if one does."""
        for gateway in worker_listings():
            assert gateway.workers_path is not None
            urls = gateway.worker_urls(await self.client.loads(gateway.workers_path))
            if urls:
                return urls
        return []

    def _no_load(self) -> None:
        if self._told_no_load or self.source is not None or not self.steer:
            return
        self._told_no_load = True
        self.on_message(
            f"the server reports no load (no {LOADS_PATH}, nor a router's /workers with reachable workers): "
            f"keeping {self.limit.target} requests in flight; pass --concurrency N to choose another number"
        )

    def _warn(self, state: str, held_back: bool, now: float) -> None:
        # Starvation the client can fix only counts while the client was held back by the limit.
        starved_for = self._starved.observe(state == "starved" and held_back, now)
        if starved_for >= self.warn_after and not self._starved.warned:
            self._starved.warned = True
            if not self.steer:
                fix = f"raise --concurrency (now {self.limit.target}) or use --concurrency auto"
            elif self.limit.target >= self.controller.max_concurrency:
                fix = f"raise --max-concurrency (now {self.controller.max_concurrency})"
            else:
                fix = "the in-flight target is still growing; if this persists, raise --concurrency"
            self.on_message(f"the server has had room and almost nothing waiting for {starved_for:.0f} s: {fix}")
        retracting_for = self._retracting.observe(state == "retracting", now)
        if retracting_for >= self.warn_after and not self._retracting.warned:
            self._retracting.warned = True
            self.on_message(
                f"the server has been retracting requests for {retracting_for:.0f} s (its KV cache is too small "
                "for what it admits): lower the server's --max-running-requests, or --max-tokens"
            )

    def status_text(self) -> str:
        """E.g. ``server 120 run / 8 wait, KV 83%, 4,210 tok/s, target 136``."""
        load = self.latest
        if load is None:
            return f"server load unknown, target {self.limit.target}"
        return (
            f"server {load.running} run / {load.waiting} wait, KV {load.token_usage:.0%}, "
            f"{load.gen_throughput:,.0f} tok/s, target {self.limit.target}"
        )

    def summary(self) -> dict[str, Any]:
        """End-of-run figures: where the load came from, the target's range, the server's peaks,
        and for how many seconds it was starved or retracting."""
        return {
            "load_source": self.source,
            "polls": self.polls,
            "reports": self.reports,
            "target_final": self.limit.target,
            "target_min": self.min_target,
            "target_max": self.max_target,
            "peak_in_flight": self.limit.peak_in_use,
            "server_peak_running": self.peak_running,
            "server_peak_waiting": self.peak_waiting,
            "server_mean_running": round(self._running_sum / self.reports, 1) if self.reports else None,
            "starved_seconds": round(self._starved.total, 1),
            "retracting_seconds": round(self._retracting.total, 1),
        }

    def summary_line(self) -> str:
        s = self.summary()
        if s["reports"] == 0:
            return f"concurrency: no server load report; {s['target_final']} in flight (fixed)"
        mode = "auto" if self.steer else "fixed"
        return (
            f"concurrency: {mode}, {s['load_source']} load, target {s['target_min']}-{s['target_max']} "
            f"(final {s['target_final']}), peak in flight {s['peak_in_flight']}; server peak "
            f"{s['server_peak_running']} running / {s['server_peak_waiting']} waiting, "
            f"starved {s['starved_seconds']:.0f} s, retracting {s['retracting_seconds']:.0f} s"
        )
