"""The one writer of a run: every outcome of a request (run/outcomes.py) is filed here and counted
here. Nothing else appends to a dataset's rows, errors or partial outputs, or changes the run's one
tally (``progress.Tally``: each dataset's ``DatasetStats`` with its token ledger), which progress (the
status line, the bar, the ETA, the timeline), the summary, the ledger line and the report read; progress
hears of each change here (its events move the bar and the rates), as the token budget's gate does.

    Writer.write(outcome)   file and count one outcome (vLLM's run_batch: every request one output
                            value, one writer)
    Writer.begin(run)       a dataset's files made ready (DatasetRun.begin), its starting figures counted
    Writer.started / ended  a prompt in flight, for the counts and the gate
    Writer.admit(job)       the --max-tokens-per-dataset gate: one more request of the dataset may go
"""

from __future__ import annotations

import asyncio
import time

from synthgen.config import RunConfig
from synthgen.data import rowread
from synthgen.data.failures import FAILED, SKIPPED
from synthgen.data.partials import Partial
from synthgen.data.records import ErrorRecord, RowContext, Turn, build_result
from synthgen.data.store import PartialTurn
from synthgen.run.dataset_run import DatasetRun, now_iso
from synthgen.run.job import Carry, Job
from synthgen.run.outcomes import (
    Answered,
    Checkpoint,
    Discarded,
    Failed,
    KeptPartial,
    Lost,
    Outcome,
    Prefill,
    Skipped,
    Stopped,
)
from synthgen.run.progress import Progress, Tally


class Writer:
    """The datasets of one run, written and counted. ``model`` is what rows record as the model."""

    def __init__(self, runs: list[DatasetRun], cfg: RunConfig, progress: Progress, model: str | None = None):
        self.runs = {run.name: run for run in runs}
        # The one tally: each dataset's counts, changed here alone; progress (the status line, the timeline) reads it.
        self.tally = Tally([run.counts for run in runs])
        progress.watch(self.tally)
        self.cfg, self.progress, self.model = cfg, progress, model
        self._ended = {run.name: asyncio.Event() for run in runs}  # a request of the dataset ended

    def run_of(self, job: Job) -> DatasetRun:
        return self.runs[job.dataset]

    # ------------------------------------------------------------------ outcomes
    def write(self, outcome: Outcome) -> None:
        run = self.runs[outcome.dataset]
        tokens = run.counts.tokens
        tokens.generated += outcome.generated
        if isinstance(outcome, Answered):
            self._answered(run, outcome)
        elif isinstance(outcome, Failed):
            job = outcome.job
            self._error(run, job.key, FAILED, outcome.kind, outcome.message, outcome.attempts, outcome.http_status,
                        worker=outcome.worker)  # fmt: skip
        elif isinstance(outcome, Skipped):
            self._error(run, outcome.key, SKIPPED, outcome.kind, outcome.reason, 0, settled=outcome.settled)
        elif isinstance(outcome, KeptPartial):
            # On disk before anything else happens to it (with --keep-partials off, in memory only).
            if run.partial_outputs is not None:
                run.partial_outputs.append(self._partial(run, outcome))
            tokens.partials += outcome.generated
            if outcome.prefill is not None:  # an answer, cut, to extend: its request counts as every answer's
                self._count_prefill(run, outcome.prefill)
        elif isinstance(outcome, Checkpoint):
            if run.partial_outputs is not None:
                run.partial_outputs.append(self._partial(run, outcome), outcome.start)
        elif isinstance(outcome, Lost):
            if outcome.stopped:
                tokens.stopped += outcome.generated
            else:
                tokens.failed += outcome.generated
        elif isinstance(outcome, Discarded):
            tokens.discarded += outcome.tokens
        else:
            assert isinstance(outcome, Stopped)  # the prompt stays pending: nothing to write

    @staticmethod
    def _partial(run: DatasetRun, kept: KeptPartial | Checkpoint) -> Partial:
        job, hashed = kept.job, kept.job.prompt.prompt_hash
        extension = kept.extension
        return Partial(
            job.key, job.turn_index, kept.output_ids, kept.segments, hashed, run.settings, 0, kept.seeds, extension
        )

    def _answered(self, run: DatasetRun, answer: Answered) -> None:
        job, turn = answer.job, answer.turn
        if answer.ended is None:
            # regenerate=all: a finished turn of an unfinished conversation, kept for the next run too,
            # with what it was made for (the prompt's hash, the settings).
            assert run.partial_store is not None
            run.partial_store.append(
                PartialTurn(job.key, job.turn_index, turn.to_dict(), job.prompt.prompt_hash, run.settings)
            )
            self._count_turn(run, turn, answer.carry)  # the token budget counts every turn
            self._count_prefill(run, answer.prefill)
            self.progress.turn_finished(turn.completion_tokens)
            return
        prompt, sample = job.prompt, job.request
        turns = [*job.turns, turn]
        kwargs = self.cfg.chat_template_kwargs if sample is None else sample.kwargs
        context = RowContext(
            id=prompt.id,
            dataset=run.name,
            partition=run.source.partition,
            source=run.label,
            prompt_hash=prompt.prompt_hash,
            tools=prompt.tools,
            model=self.model,
            sampling_params=answer.sampling,
            chat_template_kwargs=kwargs or None,
            regenerate=self.cfg.regenerate,
            settings=run.settings,
            mix=None if sample is None else sample.row_fields() or None,
        )
        record = build_result(context, [*job.messages, turn.message()], turns, now_iso(), answer.ended or None)
        assert run.store is not None
        run.store.append_result(record)
        run.resume.done.add(job.key)
        c = run.counts
        self._count_turn(run, turn, answer.carry)  # earlier turns were counted as they finished
        self._count_prefill(run, answer.prefill)
        c.done += 1
        c.last_finish = time.monotonic()
        if any(rowread.cut(t) for t in turns):
            c.cut += 1
        c.finishes[turn.finish_reason] = c.finishes.get(turn.finish_reason, 0) + 1
        self.progress.finished(turn.completion_tokens)

    @staticmethod
    def _count_turn(run: DatasetRun, turn: Turn, carry: Carry) -> None:
        """A finished turn in the dataset's counts and its token ledger; its carried output is spent."""
        c = run.counts
        c.completion_tokens += turn.completion_tokens
        t, before = c.tokens, carry.before
        if rowread.looped(turn):
            t.loops += turn.completion_tokens - before  # kept as a row, left out of exports
        else:
            t.rows += turn.completion_tokens - before
        t.earlier += before
        if carry.output_ids is not None:
            t.partials -= carry.tokens - before  # counted as kept when this run kept them
        if rowread.cut_unanswered(turn):
            t.cut += turn.completion_tokens - before
        if turn.extended_by:
            t.extended += 1

    @staticmethod
    def _count_prefill(run: DatasetRun, prefill: Prefill) -> None:
        """An answered request's prompt tokens and those of them its prefix cache served, as the server counted
        them: once per request, so a continuation's carried ids count where they were sent again."""
        run.counts.prompt_tokens += prefill.tokens
        run.counts.cached_tokens += prefill.cached

    def _error(
        self,
        run: DatasetRun,
        prompt_id: str,
        status: str,
        kind: str,
        message: str,
        attempts: int,
        http_status: int | None = None,
        settled: str | None = None,
        worker: str | None = None,
    ) -> None:
        record = ErrorRecord(
            prompt_id, run.name, status, kind, message, attempts, http_status, now_iso(), settled, worker
        )
        assert run.store is not None
        run.store.append_error(record)
        c = run.counts
        c.last_finish = time.monotonic()
        if status == SKIPPED:
            c.skipped += 1
            c.skip_kinds[kind] = c.skip_kinds.get(kind, 0) + 1
            c.skip_example.setdefault(kind, f"{prompt_id}: {message}")
            self.progress.skipped_one()
        else:
            c.failed += 1
            self.progress.failed_one()

    # ------------------------------------------------------------------ a dataset's start
    def begin(self, run: DatasetRun) -> None:
        """The run goes ahead for this dataset: its files made ready (DatasetRun.begin), and the figures
        that makes counted (the output tokens of the turns kept, the partial outputs discarded)."""
        begun = run.begin(self.progress)
        if begun.tokens_before is not None:
            run.counts.tokens_before = begun.tokens_before
        run.counts.tokens.discarded += begun.discarded

    # ------------------------------------------------------------------ in flight, and the budget's gate
    def started(self, job: Job) -> None:
        c = self.runs[job.dataset].counts
        c.in_flight += 1
        if c.first_start is None:
            c.first_start = time.monotonic()

    def ended(self, job: Job) -> None:
        self.runs[job.dataset].counts.in_flight -= 1
        self._ended[job.dataset].set()

    async def admit(self, job: Job) -> bool:
        """Whether one more request of this dataset may go out, waiting while the token budget's
        estimate of what is in flight leaves no room: an estimate never closes a dataset, only
        output tokens that are done reaching the cap do."""
        run = self.runs[job.dataset]
        budget, c = run.budget, run.counts
        while not c.budget_stopped:
            done_tokens = run.budget_spent
            if budget is None:
                return True
            if budget.reached(done_tokens):
                c.budget_stopped = True
                withdrawn = c.pending - c.done - c.failed - c.skipped - c.in_flight
                self.progress.budget_closed(run.name, budget.cap, done_tokens, c.in_flight, withdrawn)
                return False
            if c.in_flight == 0 or budget.allows(done_tokens, len(run.resume.done), c.in_flight):
                return True
            ended = self._ended[run.name]
            ended.clear()
            await ended.wait()
        return False

    def take_partial(self, job: Job) -> Partial | None:
        """An earlier run's partial output of this job's turn, to continue (once)."""
        return self.runs[job.dataset].take_partial(job.key, job.turn_index)
