"""Partial outputs of one run's requests: kept when a request is ended early, continued by the next
attempt (or the next run), checkpointed as a stream grows, extended once where --continue-cut allows,
and cut short by the loop guard. ``request.Requests`` holds one and calls it around each attempt.

    Continuation.resume(item)      an earlier run's partial output of the item, carried if it fits
    Continuation.keep(item, ids)   an ended attempt's output so far: carried and kept on disk, or lost
    Continuation.extend(...)       --continue-cut: a cut answer carried into one more request
    Continuation.watch(item)       the progress hook of a streamed attempt: loop guard, checkpoints
    Continuation.looped(...)       the loop guard's end of a request, as its answer

Where a continuation would not draw from the same distribution (``partials.continuation_blocker``), or
with ``--keep-partials off``, nothing is continued and ended attempts are counted as lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from synthgen.config import RunConfig
from synthgen.data.partials import Partial, continuation_blocker
from synthgen.data.records import Turn
from synthgen.run.dataset_run import WorkItem
from synthgen.run.loopguard import LoopGuard, Repetition
from synthgen.server.client import Generation, SGLangClient
from synthgen.server.discovery import ServerContext, fit_max_new_tokens


class LoopFound(Exception):
    """Raised from a stream's progress hook: the answer's tail is a repetition loop."""

    def __init__(self, found: Repetition, ids: list[int]):
        super().__init__(f"repetition of {found.pattern_size} ids x{found.count}")
        self.found, self.ids = found, ids


class Continuation:
    """The partial outputs of one run's requests: whether they are continued, and how."""

    def __init__(
        self,
        client: SGLangClient,
        cfg: RunConfig,
        stopping: asyncio.Event,
        sampling: dict[str, Any],
        server: ServerContext,
        decode: Callable[[list[int]], str],
    ):
        self.client, self.cfg, self.stopping, self.server, self.decode = client, cfg, stopping, server, decode
        # Why a continuation would not be the same distribution as one whole request (None: it is).
        self.unlike = continuation_blocker(sampling)
        # Why partial outputs are not continued in this run (None: they are).
        self.blocker = "--keep-partials off" if not cfg.keep_partials else self.unlike

    @property
    def keeps_partials(self) -> bool:
        return self.blocker is None

    def unlike_for(self, item: WorkItem) -> str | None:
        """Why a continuation of this item would not be the same distribution (None: it would): the
        run's sampling params, or its sample's (a training mix's per-sample seed is a fixed seed)."""
        if self.unlike is not None or item.request is None:
            return self.unlike
        return continuation_blocker(item.request.sampling())

    def keeps_for(self, item: WorkItem) -> bool:
        """This item's ended attempts are kept and continued."""
        return self.blocker is None and self.unlike_for(item) is None

    def watch(self, item: WorkItem) -> Callable[[list[int]], None]:
        """The hook a streamed attempt calls with its output ids so far: the loop guard, then a
        checkpoint line (the ids since the last one) every --checkpoint-tokens ids."""
        run, carried = item.run, item.carried
        base = carried.output_ids if carried is not None else []
        segments = carried.segments if carried is not None else []
        guard = LoopGuard(item.max_new_tokens, self.decode) if self.cfg.loop_guard else None
        every = self.cfg.checkpoint_tokens if self.keeps_for(item) else 0
        saved = 0  # ids of this attempt on disk

        def progress(ids: list[int]) -> None:
            nonlocal saved
            whole = [*base, *ids]
            found = guard.check(whole) if guard is not None else None
            if found is not None:
                raise LoopFound(found, list(ids))
            if every and len(ids) - saved >= every:
                partial = Partial(
                    item.key, len(item.turns), whole, [*segments, len(ids)], item.prompt.prompt_hash, run.settings
                )
                run.checkpoint(partial, len(base) + saved)
                saved = len(ids)

        return progress

    async def looped(self, item: WorkItem, payload: dict[str, Any], loop: LoopFound) -> Generation:
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
        )

    def resume(self, item: WorkItem) -> None:
        """A partial output an earlier run kept for this prompt (and turn), if it can be continued."""
        partial = item.run.take_partial(item.key, len(item.turns))
        if partial is None:
            return
        if partial.tokens >= item.max_new_tokens:  # nothing left to continue (the context shrank, a cut extended)
            item.run.tokens.discarded += partial.tokens
            return
        item.carried, item.carried_before = partial, partial.tokens

    def keep(self, item: WorkItem, partial: list[int]) -> None:
        """An ended attempt's output so far (an abort's answer, or what a stream delivered): carried
        into the next attempt (and kept on disk for the next run), or counted as lost where partial
        outputs are not continued."""
        run = item.run
        run.tokens.generated += len(partial)
        # The last id is sampled again: an abort can race the answer's own end, and a stop token must
        # not be continued past (one token a partial; drawn from the same distribution again).
        lost, partial = partial[-1:], partial[:-1]
        if not self.keeps_for(item) or not partial:
            lost, partial = lost + partial, []
        if self.stopping.is_set():
            run.tokens.stopped += len(lost)
        else:
            run.tokens.failed += len(lost)
        if not partial:
            return
        tokens = len(partial)
        before = item.carried
        item.carried = Partial(
            item.key,
            len(item.turns),
            [*(before.output_ids if before else []), *partial],
            [*(before.segments if before else []), tokens],
            item.prompt.prompt_hash,
            run.settings,
        )
        run.keep_partial(item.carried, tokens)

    def extend(self, item: WorkItem, turn: Turn, new_tokens: int) -> bool:
        """--continue-cut N: an answer cut at max tokens with its reasoning open (or no answer yet) is
        continued once with up to N more tokens, as the same generation (the context allowing); True
        when the item now carries it for one more request."""
        extra = self.cfg.continue_cut
        if not extra or item.extended_by or self.unlike_for(item) is not None or turn.output_ids is None:
            return False
        if turn.finish_reason != "length" or (turn.reasoning_complete and turn.content.strip()):
            return False
        ctx = self.server
        room, _ = fit_max_new_tokens(
            len(item.input_ids) + len(turn.output_ids), extra, ctx.context_len, ctx.max_input_len
        )
        if room is None:
            return False
        run = item.run
        item.carried = Partial(
            item.key,
            len(item.turns),
            turn.output_ids,
            turn.segments or [len(turn.output_ids)],
            item.prompt.prompt_hash,
            run.settings,
        )
        item.max_new_tokens, item.extended_by = len(turn.output_ids) + room, room
        run.keep_partial(item.carried, new_tokens)
        return True
