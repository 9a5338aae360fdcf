"""The producer of a run: every selected prompt prepared (rendered, tokenized; ``prepare.Preparer``) in
a worker thread, in send order, a bounded number ahead of sending, onto the queue the pool sends from.

Prompts that will not be sent (``prepare.Skip``) go to the writer from here; when the first prompts all fail
the chat template the same way, the cause is the run's configuration, and the run stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from concurrent.futures import Executor

from synthgen.config import RunConfig
from synthgen.data.failures import TEMPLATE_ERROR
from synthgen.errors import UsageError
from synthgen.run.concurrency import InFlightLimit, interleave
from synthgen.run.dataset_run import DatasetRun
from synthgen.run.job import Job
from synthgen.run.outcomes import Outcome
from synthgen.run.prepare import Preparer, Skip
from synthgen.run.procedure import skipped
from synthgen.run.stopping import RunStop

# When this many prompts (or every prompt, if fewer) fail the chat template the same way before any
# could be sent, the cause is the configuration (template, --chat-template-kwargs), not the data.
SKIPS_BEFORE_STOP = 20
# Prepared (rendered, tokenized) prompts waiting to be sent: about one in-flight target, at least this.
PREPARED_AHEAD_MIN = 16
# Prompts prepared per trip to the worker thread.
PREPARE_BATCH = 32


class Producer:
    def __init__(
        self,
        cfg: RunConfig,
        runs: list[DatasetRun],
        preparer: Preparer,
        executor: Executor,
        stop: RunStop,
        ahead: int,
        write: Callable[[Outcome], None],
    ):
        self.cfg, self.runs, self.preparer, self.executor, self.stop = cfg, runs, preparer, executor, stop
        self.write = write  # the run's writer: skips go to errors.jsonl
        # Prompts are prepared about one in-flight target ahead of sending, never more.
        self.ahead = InFlightLimit(max(PREPARED_AHEAD_MIN, ahead))
        self.queue: asyncio.Queue[Job | None] = asyncio.Queue()  # None: no more prompts
        self.total = sum(len(run.selection.pending) for run in runs)
        self._sendable = 0  # prompts prepared for sending so far
        self._skips: dict[str, int] = {}  # template error -> prompts skipped so, before the first sendable one

    def keep_ahead(self, in_flight_target: int) -> None:
        self.ahead.set_target(max(PREPARED_AHEAD_MIN, in_flight_target))

    async def take(self) -> Job | None:
        """The next prepared prompt (its place ahead freed), or None when there are no more."""
        item = await self.queue.get()
        if item is not None:
            self.ahead.release()
        return item

    async def produce(self) -> None:
        """Prepare the prompts of every dataset, mixed (``concurrency.interleave``: the datasets in
        ``runner.longest_first`` order, each spread over the whole run), and queue them for sending.

        Prompts go to the worker thread in batches of up to PREPARE_BATCH (the first alone, so the
        first request goes out at once): one hand-over per prompt made the producer, not the
        server, the bound at ~1,000 in flight, each costing a trip through the event loop and the
        GIL. The queue is refilled once a third of it is gone (``_next_batch``), not each time the sender
        takes a prompt: else, at a steady pace, every place freed would be a trip of its own."""
        loop = asyncio.get_running_loop()
        prompts = self._send_order()
        size = 1
        try:
            while not self.stop.is_set():
                batch = await self._next_batch(prompts, size)
                if not batch:
                    break
                size = PREPARE_BATCH
                items, error = await loop.run_in_executor(self.executor, self._prepare, batch)
                for (run, _, _), item in zip(batch, items, strict=False):  # items stop at an error
                    if isinstance(item, Skip):
                        self.ahead.release()
                        self.write(skipped(run.name, item, self.cfg))
                        self._check_skips(item)
                    else:
                        self._sendable += 1
                        self.queue.put_nowait(item)
                if error is not None:
                    raise error
        finally:
            self.queue.put_nowait(None)

    async def _next_batch(
        self, prompts: Iterator[tuple[DatasetRun, str, bool]], size: int
    ) -> list[tuple[DatasetRun, str, bool]]:
        """Up to ``size`` prompts, one place ahead taken for each (at least one waited for). While
        more than two thirds of the prepared-ahead bound is still queued, places are waited for one
        by one as the sender frees them, so that a third of the bound is prepared in one trip,
        while the prompts left in the queue keep the sender going (short answers at a high rate
        empty a queue quickly: a deeper refill point would leave the sender waiting for a trip)."""
        await self.ahead.acquire()
        slots, batch = 1, []
        while slots < size and self.queue.qsize() > self.ahead.target * 2 // 3:
            await self.ahead.acquire()
            slots += 1
        for run, prompt_id, last in prompts:
            if run.closed:
                if last:
                    self.preparer.done_with(run)  # no batch is being prepared now
                continue
            batch.append((run, prompt_id, last))
            if len(batch) >= size:
                break
            if len(batch) >= slots:
                if not self.ahead.try_acquire():
                    break
                slots += 1
        for _ in range(slots - len(batch)):
            self.ahead.release()
        return batch

    def _send_order(self) -> Iterator[tuple[DatasetRun, str, bool]]:
        """(dataset, prompt id, whether it is the dataset's last) in send order."""
        runs = self.runs
        pending = [iter(run.selection.pending) for run in runs]
        left = [len(run.selection.pending) for run in runs]
        for index in interleave(list(left)):
            left[index] -= 1
            yield runs[index], next(pending[index]), left[index] == 0

    def _prepare(self, batch: list[tuple[DatasetRun, str, bool]]) -> tuple[list[Job | Skip], Exception | None]:
        """In the worker thread: the batch's work items, up to the first error (returned with them,
        so the prompts prepared before it are still sent)."""
        items: list[Job | Skip] = []
        try:
            for run, prompt_id, last in batch:
                items.append(self.preparer.prepare(run, prompt_id))
                if last:
                    self.preparer.done_with(run)
        except Exception as exc:
            return items, exc
        return items, None

    def _check_skips(self, skip: Skip) -> None:
        if self._sendable or skip.kind != TEMPLATE_ERROR.name:
            return
        self._skips[skip.reason] = count = self._skips.get(skip.reason, 0) + 1
        if count >= min(SKIPS_BEFORE_STOP, self.total):
            raise UsageError(
                f"the first {count} prompts all failed the chat template the same way ({skip.reason}); that is the "
                "run's configuration, not the data: check --chat-template, --chat-template-kwargs and --tokenizer "
                "(the skipped prompts are in errors.jsonl and are retried by the next run)"
            )
