"""A prompt's procedure, apart from the runner's machinery (datatrove's ``inference/types.py`` shape: the
rollout given a generate callback): one turn, each turn of a conversation, and a cut answer continued,
over a ``send`` that does the attempts (run/request.py). Everything that comes of it goes to the one
writer (run/writer.py) as values (run/outcomes.py).

    Procedure.run(job)    every request of one prompt: one turn, or with --regenerate all one per turn
                          in order (the next turn prepared on the model's own replies); a turn that
                          fails or is skipped ends it
    Procedure.turn(job)   one turn: an earlier run's partial output resumed, the requests sent, and a
                          cut answer continued once (--continue-cut): the Answered outcome, or None

--regenerate each (one prompt per turn, each after the one before it) is the dispatcher's order
(run/runner.py, ``DatasetRun.turn_order``); each of its prompts is one turn here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from synthgen.config import RunConfig
from synthgen.data.failures import settled_key
from synthgen.data.records import Turn
from synthgen.errors import SynthgenError
from synthgen.run.job import Carry, Job
from synthgen.run.outcomes import Answered, KeptPartial, Skipped
from synthgen.run.prepare import Skip
from synthgen.run.request import Reply, Requests
from synthgen.run.writer import Writer

NextTurn = Callable[[Job, Turn], Awaitable["Job | Skip"]]


def skipped(dataset: str, skip: Skip, cfg: RunConfig) -> Skipped:
    """A prompt not sent, for errors.jsonl; keyed when the prompt and a few settings alone decide it."""
    return Skipped(dataset, skip.prompt_id, skip.kind, skip.reason, settled_key(skip.kind, skip.prompt, cfg))


class Procedure:
    def __init__(
        self,
        requests: Requests,
        writer: Writer,
        next_turn: NextTurn,
        cfg: RunConfig,
        fail_run: Callable[[BaseException], None],
    ):
        self.requests, self.writer, self.next_turn = requests, writer, next_turn
        self.cfg, self.fail_run = cfg, fail_run

    async def run(self, job: Job) -> None:
        first = job
        self.writer.started(first)
        try:
            while True:
                answer = await self.turn(job)
                if answer is None:
                    return
                self.writer.write(answer)
                if answer.ended is not None:
                    return
                following = await self.next_turn(job, answer.turn)
                if isinstance(following, Skip):
                    self.writer.write(skipped(job.dataset, following, self.cfg))
                    return
                job = following
        except SynthgenError as exc:  # AuthError, StoreWriteError: the run cannot go on
            self.fail_run(exc)
        finally:
            self.writer.ended(first)

    async def turn(self, job: Job) -> Answered | None:
        partials, writer = self.requests.partials, self.writer
        carry = Carry.fresh(job)
        if partials.keeps_for(job):
            carry, discarded = partials.resume(job, writer.take_partial(job))
            if discarded is not None:
                writer.write(discarded)
        retry = self.requests.fresh_retry()
        while True:
            sent = await self.requests.send(job, carry, retry)
            if not isinstance(sent, Reply):
                writer.write(sent)  # failed, or stopped (the prompt stays pending)
                return None
            extended = partials.extend(job, sent.carry, sent.turn)
            if extended is None:
                ended = job.conversation_done(sent.turn)
                return Answered(job, sent.turn, sent.sampling, sent.carry, sent.generated, ended, sent.prefill)
            assert extended.output_ids is not None
            kept = KeptPartial(
                job,
                extended.output_ids,
                extended.segments,
                sent.generated,
                extended.recorded_seeds(),
                extended.extension(),
                sent.prefill,
            )
            writer.write(kept)
            carry, retry = extended, sent.retry.answered()
