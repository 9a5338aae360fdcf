"""The scoring pass's loop: send each unit's scoring request, write what comes back to the side file.

Exactly once across kills: a unit is scored when its row is in a part on disk (teacherfile's atomic
parts); on a rerun the side file's (id, digest) index says what is done, a unit whose stored ids changed
(another digest) has its old row removed before it is scored again, and everything else is sent once.
A stop signal (SIGINT/SIGTERM/SIGHUP) stops sending, cancels the requests in flight (sent again by the
rerun), writes the rows already answered and exits 128 + the signal; SIGKILL loses at most the part
being collected (scored again on the rerun).

The HTTP side is the run's: ``SGLangClient`` (one per ``--server-url``, requests spread round-robin),
``check_status``'s split of answers into Transient (retried; an outage waits for ``healthy()``) and
Rejected (counted as failed, never retried).
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
import orjson

from synthgen import signals
from synthgen.data import teacherfile
from synthgen.data.failures import BAD_RESPONSE
from synthgen.data.teacherfile import TeacherRow, TeacherWriter
from synthgen.errors import ServerError, UsageError
from synthgen.run.concurrency import FALLBACK_CONCURRENCY, AutoConcurrency, InFlightLimit, LoadMonitor
from synthgen.server.answers import Rejected, RequestFailure, Transient, check_status
from synthgen.server.client import SGLangClient, transport_failure
from synthgen.server.gateway import request_headers
from synthgen.teacher.answer import MissingLogprobs, payload, read_scores
from synthgen.teacher.units import Unit, UnitCounts

DROPPED = (
    "the answers carry no top-k logprobs: the server, or a gateway in front of it (smg), drops the "
    "logprob fields; score against the SGLang server itself (--server-url http://host:port)"
)


@dataclass
class ScoreConfig:
    output_dir: Path
    urls: list[str]
    api_key: str | None = None
    top_k: int = 20
    concurrency: int | None = None  # None: auto, from the server's load (the run's controller)
    max_concurrency: int = 256
    transport: str = "auto"  # auto: base64 flat where the server has it, else nested
    part_rows: int = 512
    part_positions: int = 1 << 18
    request_timeout: float = 600.0
    retries: int = 6
    progress_every: float = 10.0  # seconds between progress lines (--status-interval)


@dataclass
class DatasetOutcome:
    name: str
    units: int = 0
    already: int = 0  # scored by an earlier pass, ids unchanged
    rescored: int = 0  # scored before with other ids: the old row removed, scored again
    scored: int = 0
    positions: int = 0
    failed: int = 0
    failures: list[str] = field(default_factory=list)
    stopped: bool = False
    left_out: dict[str, int] = field(default_factory=dict)  # stored rows/turns not made units, by reason


class Stop(Exception):
    """A stop signal arrived."""


class Scorer:
    def __init__(self, config: ScoreConfig, err: TextIO = sys.stderr):
        self.config = config
        self.err = err
        pool = config.concurrency or config.max_concurrency
        self.clients = [SGLangClient(url, config.api_key, pool, config.request_timeout) for url in config.urls]
        fixed = config.concurrency
        self.limit = InFlightLimit(fixed or FALLBACK_CONCURRENCY)
        controller = AutoConcurrency(max_concurrency=config.max_concurrency, initial=fixed)
        self.monitor = LoadMonitor(self.clients[0], self.limit, controller, on_message=self._say, steer=fixed is None)
        self._next = itertools.cycle(self.clients)
        self.transport = "b64" if config.transport == "auto" else config.transport
        self._transport_settled = config.transport != "auto"
        self.signal: signal.Signals | None = None
        self.fatal: BaseException | None = None  # the launched server could not be brought back
        self.in_flight: set[asyncio.Task[None]] = set()
        self.server: dict[str, Any] = {}
        self.waiting = 0  # requests waiting for a server that is down to be healthy again

    def _say(self, text: str) -> None:
        print(f"teacher: {text}", file=self.err, flush=True)

    def on_signal(self, sig: signal.Signals) -> None:
        """Stop sending; the requests in flight are cancelled (a scoring request is cheap to send again, and a
        server that hangs must not hold the stop), the rows already answered are written."""
        self.signal = sig
        for task in self.in_flight:
            task.cancel()

    def fail(self, exc: BaseException) -> None:
        """The launched server is gone for good (--launch-server, restarts used up): stop as on a signal,
        then end the pass with ``exc``."""
        self.fatal = exc
        for task in self.in_flight:
            task.cancel()

    @property
    def stopping(self) -> bool:
        return self.signal is not None or self.fatal is not None

    async def aclose(self) -> None:
        for client in self.clients:
            await client.aclose()

    async def describe_server(self) -> dict[str, Any]:
        client = self.clients[0]
        info = await client.model_info()
        server = await client.server_info()
        self.server = {
            "model": info.get("model_path"),
            "weight_version": info.get("weight_version") or server.get("weight_version"),
            "sglang_version": server.get("version"),
        }
        return self.server

    async def _post(self, client: SGLangClient, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = await client.http.post("/generate", content=orjson.dumps(body), headers=request_headers())
        except httpx.HTTPError as exc:
            raise transport_failure(exc, None) from exc
        check_status(response.status_code, response.content, response.headers)
        data = orjson.loads(response.content)
        data = data[0] if isinstance(data, list) and data else data
        meta = data.get("meta_info") if isinstance(data, dict) else None
        if not isinstance(meta, dict):
            raise Transient(BAD_RESPONSE.name, "the answer has no meta_info", response.status_code)
        return meta

    async def score_unit(self, unit: Unit) -> TeacherRow:
        """One unit's row; RequestFailure after the retries, ServerError when the fields are dropped."""
        attempt = 0
        while True:
            client = next(self._next)
            body = payload(unit.input_ids, unit.start, self.config.top_k, self.transport)
            try:
                meta = await self._post(client, body)
                ids, values, token = read_scores(meta, unit.input_ids, unit.start)
                self._transport_settled = True
                return TeacherRow(unit.id, unit.input_ids, unit.start, ids, values, token)
            except MissingLogprobs as exc:
                raise ServerError(f"{client.shown_url}: {DROPPED}") from exc
            except Rejected:
                if not self._transport_settled and self.transport != "nested":
                    self.transport = "nested"  # an older server refusing the flat keys
                    continue
                raise
            except ValueError as exc:
                raise Rejected(BAD_RESPONSE.name, f"{client.shown_url}: {exc}") from exc
            except Transient as exc:
                attempt += 1
                if attempt > self.config.retries or self.stopping:
                    raise
                if exc.outage:
                    self.waiting += 1
                    try:
                        while not await client.healthy() and not self.stopping:
                            await asyncio.sleep(2.0)
                    finally:
                        self.waiting -= 1
                else:
                    await asyncio.sleep(exc.shed or min(0.5 * 2**attempt, 30.0))

    async def score(self, name: str, writer: TeacherWriter, todo: Iterable[Unit], outcome: DatasetOutcome) -> None:
        """Score ``todo`` (units not in the side file) into ``writer``; parts as they fill."""
        limit = self.limit
        tasks = self.in_flight
        await self.monitor.first_poll()
        watching = asyncio.create_task(self.monitor.run())
        ticking = asyncio.create_task(self._tick(name, outcome))
        failure: list[BaseException] = []

        async def one(unit: Unit) -> None:
            try:
                row = await self.score_unit(unit)
            except RequestFailure as exc:
                outcome.failed += 1
                if len(outcome.failures) < 5:
                    outcome.failures.append(f"{unit.id}: {exc}")
                return
            except ServerError as exc:
                failure.append(exc)
                return
            finally:
                limit.release()
            writer.add(row)
            if len(writer.pending) >= self.config.part_rows or writer.pending_positions >= self.config.part_positions:
                self._flush(writer, outcome)

        for unit in todo:
            await limit.acquire()
            if failure or self.stopping:
                limit.release()
                break
            task = asyncio.create_task(one(unit))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        for side in (watching, ticking):
            side.cancel()
        await asyncio.gather(watching, ticking, return_exceptions=True)
        self._flush(writer, outcome)
        if failure:
            raise failure[0]
        if self.fatal is not None:
            raise self.fatal
        outcome.stopped = self.signal is not None
        self._progress(name, outcome)

    def _flush(self, writer: TeacherWriter, outcome: DatasetOutcome) -> None:
        for row in writer.flush():
            outcome.scored += 1
            outcome.positions += row.positions

    async def _tick(self, name: str, outcome: DatasetOutcome) -> None:
        """A progress line every ``progress_every`` seconds while the dataset is scored, whether rows are
        being sent or every request waits on the server."""
        began = time.monotonic()
        while True:
            await asyncio.sleep(self.config.progress_every)
            self._progress(name, outcome, time.monotonic() - began)

    def _progress(self, name: str, outcome: DatasetOutcome, seconds: float | None = None) -> None:
        done = outcome.already + outcome.scored
        rate = f", {outcome.positions / seconds:,.0f} positions/s" if seconds else ""
        down = f"; server down: {self.waiting} waiting for it to be healthy" if self.waiting else ""
        print(
            f"teacher: {name}: {done:,}/{outcome.units:,} rows scored ({outcome.scored:,} now, "
            f"{outcome.positions:,} positions{rate}), {outcome.failed} failed; {self.limit.in_use} in flight "
            f"(target {self.limit.target}){down}",
            file=self.err,
            flush=True,
        )


def plan(units: Iterator[Unit], index: dict[str, str]) -> tuple[int, set[str]]:
    """(units in the store, ids whose stored row changed since it was scored)."""
    total, stale = 0, set()
    for unit in units:
        total += 1
        known = index.get(unit.id)
        if known is not None and known != teacherfile.digest(unit.input_ids, unit.start):
            stale.add(unit.id)
    return total, stale


def has_work(units: Iterator[Unit], folder: Path) -> bool:
    """Whether a unit has no row in the side file at ``folder``, or one of other ids (reads ids, not scores)."""
    index = teacherfile.read_index(folder)
    return any(index.get(u.id) != teacherfile.digest(u.input_ids, u.start) for u in units)


def todo(units: Iterator[Unit], index: dict[str, str], outcome: DatasetOutcome) -> Iterator[Unit]:
    for unit in units:
        if index.get(unit.id) == teacherfile.digest(unit.input_ids, unit.start):
            outcome.already += 1
            continue
        yield unit


def check_meta(path: Path, meta: dict[str, Any]) -> None:
    """A side file is one teacher at one K: refuse to add rows of another."""
    old = teacherfile.read_meta(path)
    if old is None:
        return
    for key, flag in (("top_k", "--top-k"), ("model", "--server-url")):
        if old.get(key) is not None and meta.get(key) is not None and old[key] != meta[key]:
            raise UsageError(
                f"{path}: the side file was scored with {key} {old[key]!r}, this pass has {meta[key]!r}; "
                f"use the same {flag}, or move {path.parent / teacherfile.FOLDER} and {path.name} away to start over"
            )


UnitsOf = Callable[[UnitCounts], Iterator[Unit]]  # a dataset's units, counting what is left out


async def run_dataset(scorer: Scorer, name: str, units_of: UnitsOf, folder: Path, meta_path: Path) -> DatasetOutcome:
    """Score one dataset: ``units_of`` iterates its units (called twice: plan, then score)."""
    outcome = DatasetOutcome(name)
    writer = TeacherWriter(folder)
    try:
        index = teacherfile.read_index(folder)
        counts = UnitCounts()
        outcome.units, stale = plan(units_of(counts), index)
        outcome.left_out = counts.left_out()
        if stale:
            writer.drop(stale)
            outcome.rescored = len(stale)
            for key in stale:
                index.pop(key, None)
        meta = {**scorer.server, **teacher_meta(scorer.config)}
        check_meta(meta_path, meta)
        if scorer.server:  # else nothing to score: no server asked, the file's record stays as it is
            teacherfile.write_meta(meta_path, {**(teacherfile.read_meta(meta_path) or {}), **meta})
        began, first = time.time(), None
        try:
            pending = todo(units_of(UnitCounts()), index, outcome)
            first = next(pending, None)
            if first is not None:  # else every row is scored: nothing is sent
                signals.hold(scorer.on_signal)
                try:
                    await scorer.score(name, writer, itertools.chain([first], pending), outcome)
                finally:
                    signals.release(scorer.on_signal)
        finally:
            record_pass(meta_path, outcome, scorer, began, sent=first is not None)
    finally:
        writer.close()
    return outcome


def record_pass(meta_path: Path, outcome: DatasetOutcome, scorer: Scorer, began: float, sent: bool) -> None:
    """teacher.json's ``last_pass``: when this pass ended, what it scored and left out, the server it asked
    (none when nothing was sent) and the signal that stopped it. Only beside a side file's record."""
    meta = teacherfile.read_meta(meta_path)
    if meta is None:
        return
    meta["last_pass"] = {
        "ended": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.time() - began, 3),
        "server": [c.shown_url for c in scorer.clients] if sent else None,
        "units": outcome.units,
        "scored_before": outcome.already,
        "scored": outcome.scored,
        "rescored": outcome.rescored,
        "positions": outcome.positions,
        "failed": outcome.failed,
        "left_out": outcome.left_out,
        "stopped_by": scorer.signal.name if scorer.signal is not None else None,
    }
    teacherfile.write_meta(meta_path, meta)


def teacher_meta(config: ScoreConfig) -> dict[str, Any]:
    return {
        "top_k": config.top_k,
        "logprob_temperature": 1.0,
        "made_by": (
            "score_teacher.py: one SGLang /generate per stored row (per sample, per generated turn) with "
            "input_ids = the row's stored prompt ids + output ids (never re-rendered), max_new_tokens 0, "
            "return_logprob, logprob_start_len = start - 1, top_logprobs_num = K; the prompt-side "
            "(input_top_logprobs) rows, which are at temperature 1 whatever the row was sampled at"
        ),
        "columns": "id, input_ids, start, topk_ids [n][K], topk_logprobs [n][K], token_logprob [n], digest; "
        "row j is the distribution of the token at position start + j",
    }
