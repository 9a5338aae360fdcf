"""Partial outputs of one run's requests: kept when a request is ended early, continued by the next
attempt (or the next run), checkpointed as a stream grows, extended once where --continue-cut allows,
and cut short by the loop guard. Each step takes the turn's ``job.Carry`` and gives the next one (and
the outcomes to write, run/outcomes.py); nothing here writes or counts.

    Continuation.resume(job, partial)    an earlier run's partial output of the job (or of its extension), carried
    Continuation.keep(job, carry, ids)   an ended attempt's output so far: carried and kept, or lost
    Continuation.extend(job, carry, turn)  --continue-cut: a cut answer carried into one more request
    Continuation.watch(job, carry, emit)   the progress hook of a streamed attempt: loop guard, checkpoints
    Continuation.looped(payload, loop)   the loop guard's end of a request, as its answer
    whole_text(decode, ids, finish)      a continued output's text, as one uninterrupted request gives it

Where a continuation would not draw from the same distribution (``partials.continuation_blocker``: the
run's settings, or a recipe's), or with ``--keep-partials off``, nothing is continued and ended attempts
are counted as lost. A seeded sample is continued under its own seed (SGLang draws each token from the seed
and the token's position), and each segment's seed goes with its ids, to the row that ends it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from synthgen.config import RunConfig
from synthgen.data import rowread
from synthgen.data.partials import Extension, Partial, continuation_blocker
from synthgen.data.records import Turn
from synthgen.run.job import Carry, Job
from synthgen.run.loopguard import LoopGuard, Repetition
from synthgen.run.outcomes import Checkpoint, Discarded, KeptPartial, Lost, Outcome
from synthgen.server.backend import Backend
from synthgen.server.client import Generation
from synthgen.server.discovery import ServerContext, fit_max_new_tokens
from synthgen.server.streaming import StreamEnded


def whole_text(decode: Callable[[list[int]], str], output_ids: list[int], finish_reason: dict[str, Any]) -> str:
    """The text of a continued output (earlier segments' ids + this request's) as one uninterrupted
    request gives it: all its ids decoded at once. Joining the head's text to the server's text of
    the rest is not that: where a token boundary splits a UTF-8 character (CJK, emoji), the head
    decoded alone ends in U+FFFD and the server's text of the rest starts after the character. The
    matched stop is left out as SGLang's detokenizer leaves it out (``trim_matched_stop``): a stop id
    is the last id and not in the text; a stop string ends the text where it first occurs."""
    matched = finish_reason.get("matched") if finish_reason.get("type") == "stop" else None
    ids = output_ids[:-1] if type(matched) is int and output_ids and output_ids[-1] == matched else output_ids
    text = decode(ids)
    if isinstance(matched, str) and matched and matched in text:
        text = text[: text.index(matched)]
    return text


class LoopFound(StreamEnded):
    """Raised from a stream's progress hook: the answer's tail is a repetition loop."""

    def __init__(self, found: Repetition, ids: list[int]):
        super().__init__(f"repetition of {found.pattern_size} ids x{found.count}")
        self.found, self.ids = found, ids


class Continuation:
    """The partial outputs of one run's requests: whether they are continued, and how."""

    def __init__(
        self,
        client: Backend,
        cfg: RunConfig,
        stopping: asyncio.Event,
        sampling: dict[str, Any],
        server: ServerContext,
        decode: Callable[[list[int]], str],
    ):
        self.client, self.cfg, self.stopping, self.server, self.decode = client, cfg, stopping, server, decode
        self.sampling = sampling
        # Why a continuation would not be the same distribution as one whole request (None: it is).
        self.unlike = continuation_blocker(sampling)
        # Why partial outputs are not continued in this run (None: they are).
        self.blocker = "--keep-partials off" if not cfg.keep_partials else self.unlike

    @property
    def keeps_partials(self) -> bool:
        return self.blocker is None

    def unlike_for(self, job: Job) -> str | None:
        """Why a continuation of this job would not be the same distribution (None: it would): the
        run's sampling params, or its sample's (a recipe's penalties)."""
        if self.unlike is not None or job.request is None:
            return self.unlike
        return continuation_blocker(job.request.sampling())

    def seed_of(self, job: Job) -> int | None:
        """The sampling_seed this job's requests send (its sample's, or one --sampling-params gives)."""
        seed = (self.sampling if job.request is None else job.request.sampling()).get("sampling_seed")
        return seed if isinstance(seed, int) and not isinstance(seed, bool) else None

    def keeps_for(self, job: Job) -> bool:
        """This job's ended attempts are kept and continued."""
        return self.blocker is None and self.unlike_for(job) is None

    def watch(self, job: Job, carry: Carry, emit: Callable[[Outcome], None]) -> Callable[[list[int]], None]:
        """The hook a streamed attempt calls with its output ids so far: the loop guard, then a
        checkpoint (the ids since the last one) every --checkpoint-tokens ids."""
        base, segments, seeds = carry.output_ids or [], carry.segments, [*carry.seeds, self.seed_of(job)]
        recorded = seeds if any(seed is not None for seed in seeds) else None
        guard = LoopGuard(job.max_new_tokens, self.decode) if self.cfg.loop_guard else None
        every = self.cfg.checkpoint_tokens if self.keeps_for(job) else 0
        saved = 0  # ids of this attempt on disk

        def progress(ids: list[int]) -> None:
            nonlocal saved
            whole = [*base, *ids]
            found = guard.check(whole) if guard is not None else None
            if found is not None:
                raise LoopFound(found, list(ids))
            if every and len(ids) - saved >= every:
                at = len(base) + saved
                emit(Checkpoint(job, whole, [*segments, len(ids)], at, seeds=recorded, extension=carry.extension()))
                saved = len(ids)

        return progress

    async def looped(self, payload: dict[str, Any], loop: LoopFound) -> Generation:
        """The loop guard found a loop: the request is ended (the stream is closed, and /abort_request
        for a gateway that would not pass that on) and kept as it is, finish_reason "repetition"."""
        await self.client.abort(payload["rid"])
        return Generation(
            text=self.decode(loop.ids),
            output_ids=loop.ids,
            finish_reason={"type": "repetition", **loop.found.as_dict()},
            prompt_tokens=len(payload["input_ids"]),
            completion_tokens=len(loop.ids),
            cached_tokens=None,
            server_latency=None,
            request_id=payload["rid"],
            worker=loop.worker,  # the one that streamed it, as an answer's names its worker
        )

    def resume(self, job: Job, partial: Partial | None) -> tuple[Carry, Discarded | None]:
        """The turn's start: a partial output an earlier run kept for this prompt (and turn), carried. A
        cut answer's --continue-cut extension goes on to the end it was given, the context allowing.
        Ids at or past the turn's max_new_tokens (the context shrank since, or a checkpoint caught the
        last id) are dropped, the last kept one sampled again: still the same generation."""
        if partial is None:
            return Carry.fresh(job), None
        budget, extended_by = self._budget(job, partial.extension)
        kept = partial.head(budget - 1)
        dropped = Discarded(job.dataset, partial.tokens - kept.tokens) if kept.tokens < partial.tokens else None
        if not kept.tokens:
            return Carry.fresh(job), dropped
        seeds = kept.seeds or [None] * len(kept.segments)
        return Carry(budget, kept.output_ids, kept.segments, kept.tokens, extended_by, seeds), dropped

    def _budget(self, job: Job, extension: Extension | None) -> tuple[int, int | None]:
        """(max_new_tokens, extended_by) of the turn a partial output is part of: the job's, or a
        --continue-cut extension's end (its cut answer's length plus what it was given), the context
        allowing (else the cut answer alone, cut again and extended as this run's flags say)."""
        if extension is None:
            return job.max_new_tokens, None
        ctx = self.server
        fitted, _ = fit_max_new_tokens(len(job.input_ids), extension.max_new_tokens, ctx.context_len, ctx.max_input_len)
        if fitted is None or fitted <= extension.cut_at:
            return job.max_new_tokens, None
        return fitted, fitted - extension.cut_at

    def keep(self, job: Job, carry: Carry, partial: list[int]) -> tuple[Carry, list[Outcome]]:
        """An ended attempt's output so far (an abort's answer, or what a stream delivered): carried
        into the next attempt (and kept on disk for the next run), or lost where partial outputs
        are not continued. The carry after it, and the outcomes to write."""
        # The last id is sampled again: an abort can race the answer's own end, and a stop token must
        # not be continued past (one token a partial; drawn from the same distribution again).
        lost, partial = partial[-1:], partial[:-1]
        if not self.keeps_for(job) or not partial:
            lost, partial = lost + partial, []
        outcomes: list[Outcome] = [Lost(job.dataset, len(lost), stopped=self.stopping.is_set())]
        if not partial:
            return carry, outcomes
        ids, segments = [*(carry.output_ids or []), *partial], [*carry.segments, len(partial)]
        after = replace(carry, output_ids=ids, segments=segments, seeds=[*carry.seeds, self.seed_of(job)])
        outcomes.append(KeptPartial(job, ids, segments, len(partial), after.recorded_seeds(), after.extension()))
        return after, outcomes

    def extend(self, job: Job, carry: Carry, turn: Turn) -> Carry | None:
        """--continue-cut N: an answer cut at max tokens with its reasoning open (or no answer yet) is
        continued once with up to N more tokens, as the same generation (the context allowing): the
        carry of that one more request, or None."""
        extra = self.cfg.continue_cut
        if not extra or carry.extended_by or self.unlike_for(job) is not None or turn.output_ids is None:
            return None
        if not rowread.cut_unanswered(turn):
            return None
        ctx = self.server
        room, _ = fit_max_new_tokens(
            len(job.input_ids) + len(turn.output_ids), extra, ctx.context_len, ctx.max_input_len
        )
        if room is None:
            return None
        ids, segments = turn.output_ids, turn.segments or [len(turn.output_ids)]
        seeds = turn.segment_seeds or [self.seed_of(job)] * len(segments)
        return Carry(len(ids) + room, ids, segments, carry.before, extended_by=room, seeds=seeds)
