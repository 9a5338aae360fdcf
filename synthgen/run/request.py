"""One turn's requests, with their retries: the ``send`` a prompt's procedure (run/procedure.py) calls.
Each attempt's payload is built from the job and its carry, and the reply names the sampling params
it sent (the row records exactly what was sent).

    Requests.send(job, carry, retry)   attempts until a parsed turn (a Reply), or the prompt's
                             failure (Failed), or a stop (Stopped); the retries are run/retry.py's
                             policy; what happens on the way (a partial output kept, a checkpoint,
                             tokens lost) goes to the writer as it happens, through ``emit``
    Requests.abort_all()     a stop: every request in flight is ended through /abort_request (the
                             first signal: those whose output is kept alone, ``in_flight_kept``); the
                             server answers each with HTTP 200, finish_reason abort and the output so
                             far, which is kept (data/partials.py) instead of being thrown away; where
                             the server refuses it (smg: 404), a streamed request's stream is closed
                             instead, after its next chunk, and the ids it delivered are kept

A request ended before it finished (by our stop, or by the server) is continued, not restarted: the
next attempt (or the next run) sends the prompt ids plus the partial output ids with what is left of
``max_new_tokens``, and the row's ``output_ids`` is the whole sequence, parsed on the whole, with
``segments`` saying how many tokens each attempt made. Where a continuation would not draw from the
same distribution (``partials.continuation_blocker``: the run's settings, or a recipe's), or with
``--keep-partials off``, requests restart instead and the stop drains them as before. The partial
outputs themselves (kept, continued, checkpointed, extended, ended by the loop guard) are
run/continuation.py's ``Continuation``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from synthgen.chat.parsers import OutputParser
from synthgen.config import RunConfig
from synthgen.data.failures import BAD_RESPONSE, GARBAGE, SERVER_DIED
from synthgen.data.records import Turn
from synthgen.errors import ServerError
from synthgen.run.continuation import Continuation, LoopFound, whole_text
from synthgen.run.fleet import Fleet
from synthgen.run.job import Carry, Job
from synthgen.run.outcomes import Failed, Lost, Outcome, Prefill, Stopped
from synthgen.run.retry import Failure, RetryPolicy, Step
from synthgen.run.serverset import ServerOut
from synthgen.server.backend import Backend
from synthgen.server.client import (
    DEFAULT_STREAM_INTERVAL,
    Closer,
    Generation,
    NoStreamIds,
    Rejected,
    RequestFailure,
    Transient,
    build_payload,
    new_rid,
)
from synthgen.server.discovery import ServerContext, ServerHealth
from synthgen.server.gateway import routing_key


@dataclass(frozen=True)
class Reply:
    """A turn parsed from an answer: what ``send`` gives back when it is not a failure or a stop."""

    turn: Turn
    sampling: dict[str, Any]  # the sampling params the request sent
    carry: Carry  # what the request continued
    retry: RetryPolicy  # the counters so far (one more request of the turn goes on from them)
    generated: int  # the answer's new tokens
    prefill: Prefill  # its prompt as the server counted it


class Requests:
    """The requests of one run: sent, retried, ended early and continued."""

    def __init__(
        self,
        client: Backend,
        cfg: RunConfig,
        health: ServerHealth,
        stopping: asyncio.Event,
        parser: OutputParser,
        fail_run: Callable[[BaseException], None],
        server: ServerContext | None = None,
        decode: Callable[[list[int]], str] | None = None,
        say: Callable[[str], None] | None = None,
        fleet: Fleet | None = None,
        emit: Callable[[Outcome], None] | None = None,
    ):
        self.client, self.cfg, self.health, self.stopping = client, cfg, health, stopping
        self.parser, self.fail_run = parser, fail_run
        # The text of partial output ids (the model's tokenizer, special tokens kept, as requests ask).
        self.decode = decode or (lambda ids: "")
        self.say = say or (lambda text: None)
        self.server = server or ServerContext()
        self.fleet = fleet  # the workers behind a gateway: sheds, garbage, answers by worker (run/fleet.py)
        self.emit = emit or (lambda outcome: None)  # the writer (run/writer.py)
        self.sampling = cfg.sampling_params()
        # Partial outputs: kept, continued, checkpointed, extended, ended by the loop guard (run/continuation.py).
        self.partials = Continuation(client, cfg, stopping, self.sampling, self.server, self.decode)
        self.live: dict[str, Job] = {}  # rid -> the request in flight
        self.streams: dict[str, Closer] = {}  # rid -> how to end it without /abort_request, if streamed
        self.said_closing = False  # the note that streams are closed instead of aborted was said
        # Streamed (coarse chunks) for checkpoints and the loop guard; off again if a gateway drops the interval.
        self.streaming = bool(cfg.loop_guard or (cfg.checkpoint_tokens and self.keeps_partials))
        self.interval = cfg.checkpoint_tokens or DEFAULT_STREAM_INTERVAL

    @property
    def keeps_partials(self) -> bool:
        return self.partials.keeps_partials

    @property
    def blocker(self) -> str | None:
        """Why partial outputs are not continued in this run (None: they are)."""
        return self.partials.blocker

    # ------------------------------------------------------------------ a stop
    def in_flight_kept(self) -> tuple[int, int]:
        """(the requests in flight whose output a stop keeps, the others: their recipe restarts them)."""
        kept = sum(1 for job in self.live.values() if self.partials.keeps_for(job))
        return kept, len(self.live) - kept

    async def abort_all(self, kept_only: bool = False) -> int:
        """End every request in flight (``kept_only``: those whose output is kept) through the server's
        /abort_request; how many it ends.
        Their pending answers come back (200, abort, output so far) and are kept by ``request``.
        Where the server refuses (smg 1.13 answers 404), a streamed request's stream is closed
        instead, after its next chunk (at once when called again: the drain ran out, or a second
        signal): the ids it delivered are kept the same way, and the server, seeing its client
        gone, ends the request (docs/sglang_api.md §10); an unstreamed one is left to the drain."""
        rids = [rid for rid, job in self.live.items() if not kept_only or self.partials.keeps_for(job)]
        accepted = await asyncio.gather(*(self.client.abort(rid) for rid in rids))
        refused = [rid for rid, ok in zip(rids, accepted, strict=True) if not ok]
        closing = [self.streams[rid] for rid in refused if rid in self.streams]
        for closer in closing:
            closer.close()
        if closing and not self.said_closing:
            self.said_closing = True
            self.say(
                "note: the server refused /abort_request (a gateway such as smg does not pass it on): streamed "
                "requests are ended by closing their streams after their next chunk, their output so far kept "
                "(at once at the drain timeout or a second signal)"
            )
        return sum(accepted) + len(closing)

    # ------------------------------------------------------------------ one turn
    def fresh_retry(self) -> RetryPolicy:
        return RetryPolicy.of(self.cfg, sheds=self.fleet is not None)

    async def send(self, job: Job, carry: Carry, retry: RetryPolicy | None = None) -> Reply | Failed | Stopped:
        """One request with its retries (run/retry.py decides them): the parsed turn, the prompt's
        failure, or a stop (a partial output is kept for the next run)."""
        health, partials = self.health, self.partials
        retry = retry or self.fresh_retry()
        while True:
            try:
                await health.wait_up()
            except ServerError as exc:  # gone for too long, or back with another model
                self.fail_run(exc)
                return Stopped(job)
            if self.stopping.is_set():
                return Stopped(job)
            payload = self._payload(job, carry)
            rid = payload["rid"]
            self.live[rid] = job
            started = time.monotonic()
            try:
                try:
                    generation, payload = await self._generate(job, carry, payload)
                except LoopFound as loop:
                    generation = await partials.looped(payload, loop)
                self._judge(job, carry, generation, retry.attempt)
                turn = self._turn(job, carry, generation, retry.attempt, time.monotonic() - started, payload["rid"])
                prefill = Prefill.of(generation, len(payload["input_ids"]))
                return Reply(turn, payload["sampling_params"], carry, retry, generation.completion_tokens, prefill)
            except Transient as exc:
                if exc.partial is not None:
                    carry, kept = partials.keep(job, carry, exc.partial)
                    for outcome in kept:
                        self.emit(outcome)
                if self.stopping.is_set() and exc.kind == "abort":
                    return Stopped(job)  # our own stop ended it: the prompt stays pending
                # ServerOut: one of several servers went out under it; it goes to another (run/serverset.py).
                # Otherwise the server was down when its health says so: that says nothing about the prompt.
                outage = exc.outage and (isinstance(exc, ServerOut) or await health.suspect(exc.message))
                step = retry.after(Failure.of(exc.shed, outage))
                retry = step.policy
                if step.action == "give_up":
                    return self._give_up(job, exc, step)
                if step.cause == "shed":
                    assert self.fleet is not None
                    self.fleet.shed(exc)  # the in-flight target comes down
                if step.action == "wait":
                    await self._hold_off(step.wait)
            except Rejected as exc:
                return self._failed(job, exc, retry.after(Failure("rejected")).policy.attempts)
            finally:
                self.live.pop(rid, None)
                self.streams.pop(rid, None)

    def _give_up(self, job: Job, exc: Transient, step: Step) -> Failed:
        if step.cause != "outage":
            return self._failed(job, exc, step.policy.attempts)
        outages = step.policy.outages
        message = f"the server went down {outages} times while this prompt was in flight (last: {exc.message})"
        return Failed(job, SERVER_DIED.name, message, step.policy.attempts, exc.status)

    def _judge(self, job: Job, carry: Carry, generation: Generation, attempt: int) -> None:
        """A garbage answer raises (retried, or the run stops on a burst: the prompt fails as ``garbage``,
        its row in errors.jsonl naming the worker); a good one is counted for its worker; smg's worker
        header makes the run say which sampling keys it drops."""
        if self.fleet is None:
            return
        try:
            if carry.output_ids is None:  # a continuation's answer is only the tail of one: not judged alone
                self.fleet.judge(generation)
        except Transient:
            self.emit(Lost(job.dataset, generation.completion_tokens, stopped=False))
            raise
        except ServerError as exc:  # a sick worker: the run stops; what it answered is lost
            self.emit(Lost(job.dataset, generation.completion_tokens, stopped=False))
            self.emit(Failed(job, GARBAGE.name, str(exc), attempt, None, generation.worker))
            raise
        self.fleet.answered(generation)
        if self.client.gateway_seen:
            self.fleet.gateway_found(self.sampling)

    def _failed(self, job: Job, exc: RequestFailure, attempts: int) -> Failed:
        if self.fleet is not None:
            self.fleet.failed(exc.worker, exc.kind)
        return Failed(job, exc.kind, exc.message, attempts, exc.status, exc.worker)

    def _routing_key(self, job: Job) -> str | None:
        """--regenerate each|all: one key per conversation, so a gateway keeps its turns on one worker."""
        mode = self.cfg.regenerate
        if mode == "last":
            return None
        conversation = job.prompt.id.rpartition("#")[0] if mode == "each" else job.prompt.id
        return routing_key(job.dataset, conversation or job.prompt.id)

    # ------------------------------------------------------------------ streaming: checkpoints, loops
    async def _generate(self, job: Job, carry: Carry, payload: dict[str, Any]) -> tuple[Generation, dict[str, Any]]:
        """One attempt: streamed at --checkpoint-tokens a chunk where that is on and cheap (the
        partial output is saved as it grows, and the loop guard watches it), else one answer. The
        answer, and the payload that got it (a plain resend has its own request id)."""
        if self.streaming and self.client.stream_interval_honoured is False:
            self.streaming = False
            self.say(
                "note: the server (or a gateway before it) ignores stream_interval, so streaming would send a "
                "chunk per token: requests are no longer streamed (no checkpoints, no loop guard)"
            )
        key = self._routing_key(job)
        if not self.streaming:
            return await self.client.generate(payload, routing_key=key), payload
        closer = self.streams[payload["rid"]] = Closer()  # dropped with the rid from ``live``
        try:
            watch = self.partials.watch(job, carry, self.emit)
            return await self.client.generate(payload, watch, self.interval, routing_key=key, closer=closer), payload
        except NoStreamIds:
            if self.streaming:
                self.streaming = False
                self.say(
                    "note: the server's stream chunks carry no output_ids (a router or proxy that drops them): "
                    "requests are no longer streamed (no checkpoints, no loop guard); rows keep null ids"
                )
            fresh = self._payload(job, carry)  # a fresh request id: the streamed one may still be ending
            self.live[fresh["rid"]] = job
            try:
                return await self.client.generate(fresh, routing_key=key), fresh
            finally:
                self.live.pop(fresh["rid"], None)

    def _payload(self, job: Job, carry: Carry) -> dict[str, Any]:
        """This attempt's payload: the prompt ids plus any partial output ids, with what is left of
        max_new_tokens."""
        sample = job.request  # a training mix: the sample's own params, seed and request id
        sampling, rid = (self.sampling, new_rid()) if sample is None else (sample.sampling(), sample.rid(new_rid()))
        return build_payload(carry.ids_after(job.input_ids), carry.left, sampling, rid)

    def _turn(self, job: Job, carry: Carry, generation: Generation, attempts: int, latency: float, rid: str) -> Turn:
        """The answer parsed into a turn, on the whole output when it continues a partial one;
        anything unexpected in it is a bad answer of this prompt (retried, then recorded), never the
        death of a worker."""
        new_tokens = generation.completion_tokens
        if carry.output_ids is not None:
            ids = [*carry.output_ids, *(generation.output_ids or [])]
            text = (
                whole_text(self.decode, ids, generation.finish_reason)
                if generation.output_ids is not None
                else self.decode(carry.output_ids) + generation.text
            )
            generation = dataclasses.replace(
                generation,
                text=text,
                output_ids=ids,
                prompt_tokens=len(job.input_ids),
                completion_tokens=carry.tokens + new_tokens,
            )
        try:
            turn = job.turn(generation, self.parser, attempts, latency, rid)
        except Exception as exc:
            self.emit(Lost(job.dataset, new_tokens, stopped=False))
            raise Transient(BAD_RESPONSE.name, f"could not read the answer ({type(exc).__name__}: {exc})") from exc
        if carry.output_ids is None:
            return dataclasses.replace(turn, extended_by=carry.extended_by)
        after = dataclasses.replace(
            carry, segments=[*carry.segments, new_tokens], seeds=[*carry.seeds, self.partials.seed_of(job)]
        )
        return dataclasses.replace(
            turn, segments=after.segments, segment_seeds=after.recorded_seeds(), extended_by=carry.extended_by
        )

    async def _hold_off(self, delay: float) -> None:
        """Wait ``delay`` s (less if the run stops)."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), timeout=delay)
