"""One prompt's requests: each attempt's payload (kept on the work item, so the row records exactly
what was sent), the retries, and partial outputs.

    Requests.request(item)   attempts until a parsed turn, a recorded failure, or a stop
    Requests.abort_all()     a stop: every request in flight is ended through /abort_request; the
                             server answers each with HTTP 200, finish_reason abort and the output so
                             far, which is kept (data/partials.py) instead of being thrown away; where
                             the server refuses it (smg: 404), a streamed request's stream is closed
                             instead, after its next chunk, and the ids it delivered are kept

A request ended before it finished (by our stop, or by the server) is continued, not restarted: the
next attempt (or the next run) sends the prompt ids plus the partial output ids with what is left of
``max_new_tokens``, and the row's ``output_ids`` is the whole sequence, parsed on the whole, with
``segments`` saying how many tokens each attempt made. Where a continuation would not draw from the
same distribution (``partials.continuation_blocker``), or with ``--keep-partials off``, requests
restart instead and the stop drains as before. The partial outputs themselves (kept, continued,
checkpointed, extended, ended by the loop guard) are run/continuation.py's ``Continuation``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
import time
from collections.abc import Callable
from typing import Any

from synthgen.chat.parsers import OutputParser
from synthgen.config import RunConfig
from synthgen.data.failures import BAD_RESPONSE, FAILED, SERVER_DIED
from synthgen.data.records import Turn
from synthgen.errors import ServerError
from synthgen.run.continuation import Continuation, LoopFound
from synthgen.run.dataset_run import WorkItem
from synthgen.run.fleet import Fleet
from synthgen.run.serverset import ServerOut
from synthgen.server.client import (
    DEFAULT_STREAM_INTERVAL,
    Closer,
    Generation,
    NoStreamIds,
    Rejected,
    RequestFailure,
    SGLangClient,
    Transient,
    build_payload,
    new_rid,
)
from synthgen.server.discovery import ServerContext, ServerHealth
from synthgen.server.gateway import routing_key

# A prompt in flight at this many server deaths is recorded as failed rather than retried forever.
OUTAGES_PER_PROMPT = 3


class Requests:
    """The requests of one run: sent, retried, ended early and continued."""

    def __init__(
        self,
        client: SGLangClient,
        cfg: RunConfig,
        health: ServerHealth,
        stopping: asyncio.Event,
        parser: OutputParser,
        fail_run: Callable[[BaseException], None],
        server: ServerContext | None = None,
        decode: Callable[[list[int]], str] | None = None,
        say: Callable[[str], None] | None = None,
        fleet: Fleet | None = None,
    ):
        self.client, self.cfg, self.health, self.stopping = client, cfg, health, stopping
        self.parser, self.fail_run = parser, fail_run
        # The text of partial output ids (the model's tokenizer, special tokens kept, as requests ask).
        self.decode = decode or (lambda ids: "")
        self.say = say or (lambda text: None)
        self.server = server or ServerContext()
        self.fleet = fleet  # the workers behind a gateway: sheds, garbage, answers by worker (run/fleet.py)
        self.sampling = cfg.sampling_params()
        # Partial outputs: kept, continued, checkpointed, extended, ended by the loop guard (run/continuation.py).
        self.partials = Continuation(client, cfg, stopping, self.sampling, self.server, self.decode)
        self.live: dict[str, WorkItem] = {}  # rid -> the request in flight
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
    async def abort_all(self) -> int:
        """End every request in flight through the server's /abort_request; how many it ends.
        Their pending answers come back (200, abort, output so far) and are kept by ``request``.
        Where the server refuses (smg 1.13 answers 404), a streamed request's stream is closed
        instead, after its next chunk (at once when called again: the drain ran out, or a second
        signal): the ids it delivered are kept the same way, and the server, seeing its client
        gone, ends the request (docs/sglang_api.md §10); an unstreamed one is left to the drain."""
        rids = list(self.live)
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

    # ------------------------------------------------------------------ one prompt
    async def request(self, item: WorkItem) -> Turn | None:
        """One request with its retries: the parsed turn, or None once the prompt's failure is
        recorded (or the run is stopping; a partial output is kept for the next run)."""
        run, health = item.run, self.health
        partials = self.partials
        if partials.keeps_for(item):
            partials.resume(item)
        attempts = outages = 0
        shed_waited = 0.0
        while True:
            try:
                await health.wait_up()
            except ServerError as exc:  # gone for too long, or back with another model
                self.fail_run(exc)
                return None
            if self.stopping.is_set():
                return None
            attempts += 1
            payload = self._payload(item)
            rid = payload["rid"]
            self.live[rid] = item
            started = time.monotonic()
            try:
                try:
                    generation = await self._generate(item, payload)
                except LoopFound as loop:
                    generation = await partials.looped(item, payload, loop)
                run.tokens.generated += generation.completion_tokens
                self._judge(item, generation)
                sent = item.payload["rid"] if item.payload is not None else rid  # a plain resend has its own
                turn = self._turn(item, generation, attempts, time.monotonic() - started, sent)
                if not partials.extend(item, turn, generation.completion_tokens):
                    return turn
            except Transient as exc:
                # The gateway's backpressure is not an attempt, up to --server-wait of holding off for one
                # prompt: a gateway that sheds it for longer is treated as failing it.
                if exc.shed is not None and self.fleet is not None and shed_waited < self.cfg.server_wait:
                    shed_waited += await self._hold_off(self.fleet.shed(exc))
                    attempts -= 1
                    continue
                if exc.partial is not None:
                    partials.keep(item, exc.partial)
                if self.stopping.is_set() and exc.kind == "abort":
                    return None  # our own stop ended it: the prompt stays pending
                # ServerOut: one of several servers went out under it; it goes to another (run/serverset.py).
                if exc.outage and (isinstance(exc, ServerOut) or await health.suspect(exc.message)):
                    # The server was down: usually this says nothing about the prompt, but a
                    # prompt that keeps being in flight when the server dies may be killing it.
                    outages += 1
                    if outages >= OUTAGES_PER_PROMPT:
                        self._server_died(item, outages, exc, attempts)
                        return None
                    attempts -= 1
                    continue
                if attempts >= self.cfg.max_attempts:
                    self._failed(item, exc, attempts)
                    return None
                await self._backoff(attempts)
            except Rejected as exc:
                self._failed(item, exc, attempts)
                return None
            finally:
                self.live.pop(rid, None)
                self.streams.pop(rid, None)

    def _server_died(self, item: WorkItem, outages: int, exc: Transient, attempts: int) -> None:
        message = f"the server went down {outages} times while this prompt was in flight (last: {exc.message})"
        item.run.record_error(item.key, FAILED, SERVER_DIED.name, message, attempts, exc.status)

    def _judge(self, item: WorkItem, generation: Generation) -> None:
        """A garbage answer raises (retried, or the run stops on a burst); a good one is counted
        for its worker; smg's worker header makes the run say which sampling keys it drops."""
        if self.fleet is None:
            return
        try:
            if item.carried is None:  # a continuation's answer is only the tail of one: not judged alone
                self.fleet.judge(generation)
        except Transient:
            item.run.tokens.failed += generation.completion_tokens
            raise
        self.fleet.answered(generation)
        if self.client.gateway_seen:
            self.fleet.gateway_found(self.sampling)

    def _failed(self, item: WorkItem, exc: RequestFailure, attempts: int) -> None:
        if self.fleet is not None:
            self.fleet.failed(exc.worker, exc.kind)
        item.run.record_error(item.key, FAILED, exc.kind, exc.message, attempts, exc.status, worker=exc.worker)

    def _routing_key(self, item: WorkItem) -> str | None:
        """--regenerate each|all: one key per conversation, so a gateway keeps its turns on one worker."""
        mode = self.cfg.regenerate
        if mode == "last":
            return None
        conversation = item.prompt.id.rpartition("#")[0] if mode == "each" else item.prompt.id
        return routing_key(item.run.name, conversation or item.prompt.id)

    # ------------------------------------------------------------------ streaming: checkpoints, loops
    async def _generate(self, item: WorkItem, payload: dict[str, Any]) -> Generation:
        """One attempt: streamed at --checkpoint-tokens a chunk where that is on and cheap (the
        partial output is saved as it grows, and the loop guard watches it), else one answer."""
        if self.streaming and self.client.stream_interval_honoured is False:
            self.streaming = False
            self.say(
                "note: the server (or a gateway before it) ignores stream_interval, so streaming would send a "
                "chunk per token: requests are no longer streamed (no checkpoints, no loop guard)"
            )
        key = self._routing_key(item)
        if not self.streaming:
            return await self.client.generate(payload, routing_key=key)
        closer = self.streams[payload["rid"]] = Closer()  # dropped with the rid from ``live``
        try:
            watch = self.partials.watch(item)
            return await self.client.generate(payload, watch, self.interval, routing_key=key, closer=closer)
        except NoStreamIds:
            if self.streaming:
                self.streaming = False
                self.say(
                    "note: the server's stream chunks carry no output_ids (a router or proxy that drops them): "
                    "requests are no longer streamed (no checkpoints, no loop guard); rows keep null ids"
                )
            fresh = self._payload(item)  # a fresh request id: the streamed one may still be ending
            self.live[fresh["rid"]] = item
            try:
                return await self.client.generate(fresh, routing_key=key)
            finally:
                self.live.pop(fresh["rid"], None)

    def _payload(self, item: WorkItem) -> dict[str, Any]:
        """This attempt's payload, kept on the item: the prompt ids plus any partial output ids, with
        what is left of max_new_tokens."""
        carried = item.carried
        ids = item.input_ids if carried is None else [*item.input_ids, *carried.output_ids]
        left = item.max_new_tokens - (0 if carried is None else carried.tokens)
        sample = item.request  # a training mix: the sample's own params, seed and request id
        sampling, rid = (self.sampling, new_rid()) if sample is None else (sample.sampling(), sample.rid(new_rid()))
        item.payload = build_payload(ids, left, sampling, rid)
        return item.payload

    def _turn(self, item: WorkItem, generation: Generation, attempts: int, latency: float, rid: str) -> Turn:
        """The answer parsed into a turn, on the whole output when it continues a partial one;
        anything unexpected in it is a bad answer of this prompt (retried, then recorded), never the
        death of a worker."""
        carried = item.carried
        if carried is not None:
            new_ids = generation.output_ids or []
            generation = dataclasses.replace(
                generation,
                text=self.decode(carried.output_ids) + generation.text,
                output_ids=[*carried.output_ids, *new_ids],
                prompt_tokens=len(item.input_ids),
                completion_tokens=carried.tokens + generation.completion_tokens,
            )
        try:
            turn = item.turn(generation, self.parser, attempts, latency, rid)
        except Exception as exc:
            item.run.tokens.failed += generation.completion_tokens - (carried.tokens if carried else 0)
            raise Transient(BAD_RESPONSE.name, f"could not read the answer ({type(exc).__name__}: {exc})") from exc
        if carried is not None:
            turn.segments = [*carried.segments, generation.completion_tokens - carried.tokens]
        turn.extended_by = item.extended_by
        return turn

    async def _backoff(self, attempt: int) -> None:
        cfg = self.cfg
        delay = min(cfg.backoff_max, cfg.backoff_base * 2 ** (attempt - 1))
        delay *= random.uniform(0.5, 1.0)  # jitter: retries from many workers do not arrive together
        await self._hold_off(delay)

    async def _hold_off(self, delay: float) -> float:
        """Wait ``delay`` s (less if the run stops); returns the delay."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), timeout=delay)
        return delay
