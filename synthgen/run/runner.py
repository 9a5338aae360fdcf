"""The run, top to bottom: open the datasets, ask the server, then keep requests in flight across
all datasets until every selected prompt is done, failed or skipped, or a signal, an outage or a
write error stops it.

    Runner.run()      plan (dataset_run.open_dataset per dataset) -> connect (server.discover,
                      model.load_model) -> provenance check -> Pool.execute -> summary -> exit code;
                      signals and stopping
    Pool.execute()    producer (prepare.Preparer, in a worker thread) -> queue -> dispatcher (one
                      task per prompt, as the in-flight limit admits: fixed, or moved by the
                      server's load) -> Pool.process -> DatasetRun.record_*
    request.Requests  one request with its retries: backoff, outages, aborts, partial outputs

This module owns scheduling only. What a dataset knows and writes is in ``dataset_run``, how a
prompt becomes a request in ``prepare``, what the server is and whether it is up in ``server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

from synthgen.config import RunConfig
from synthgen.data import provenance
from synthgen.data.prompts import DatasetSource
from synthgen.data.prompts import discover as discover_datasets
from synthgen.data.store import DatasetStore, ResumeState
from synthgen.errors import (
    EXIT_FAILURES,
    EXIT_OK,
    EXIT_SIGHUP,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    SynthgenError,
    UsageError,
)
from synthgen.fmt import fmt_duration
from synthgen.report.folder import LiveReport
from synthgen.report.timeline import sample_of
from synthgen.run.concurrency import FALLBACK_CONCURRENCY, AutoConcurrency, InFlightLimit, LoadMonitor, interleave
from synthgen.run.dataset_run import DatasetRun, WorkItem, claim_dataset, now_iso, open_dataset, recorded_settings
from synthgen.run.ledger import TokenLedger
from synthgen.run.model import flag_settings, load_model, run_settings
from synthgen.run.prepare import Preparer, Skip, first_request_report
from synthgen.run.progress import Progress, end_of_run, export_command, summary_table
from synthgen.run.request import Requests
from synthgen.server.client import SGLangClient
from synthgen.server.discovery import ServerContext, ServerHealth, changed_identity, discover

# After a stop has aborted the requests in flight, their answers (one decode step away) are awaited this long.
ABORT_GRACE = 10.0
# When this many prompts (or every prompt, if fewer) fail the chat template the same way before any
# could be sent, the cause is the configuration (template, --chat-template-kwargs), not the data.
SKIPS_BEFORE_STOP = 20
# Prepared (rendered, tokenized) prompts waiting to be sent: about one in-flight target, at least this.
PREPARED_AHEAD_MIN = 16
# Prompts prepared per trip to the worker thread (Pool.produce).
PREPARE_BATCH = 32
# SIGHUP (a closed terminal without nohup) stops the run like SIGTERM: drain, then exit.
SIGNALS = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
SIGNAL_EXIT = {"SIGINT": EXIT_SIGINT, "SIGTERM": EXIT_SIGTERM, "SIGHUP": EXIT_SIGHUP}


def longest_first(runs: list[DatasetRun], planned: dict[str, float]) -> list[DatasetRun]:
    """Datasets whose answers are expected to be longest first: the order ``Pool.produce`` mixes
    them in (``concurrency.interleave``), the longest's first prompt first. Expected: the budget
    file's average, else the mean of the rows already there; datasets with no estimate keep their
    place at the front."""

    def expected(run: DatasetRun) -> float:
        if run.name in planned:
            return planned[run.name]
        rows = len(run.resume.done)
        return run.resume.completion_tokens / rows if rows else float("inf")

    return sorted(runs, key=expected, reverse=True)  # stable: equal estimates keep discovery order


class Runner:
    def __init__(
        self,
        config: RunConfig,
        progress_stream: TextIO | None = None,
        tty: bool | None = None,
        client: SGLangClient | None = None,
    ):
        self.config = config
        self.stream = progress_stream
        self.client = client  # None: built in run(); tests pass one over an httpx.MockTransport
        # Called once, right before the server is first needed (the supervisor starts a launched server
        # then, so a run with nothing to do never starts one).
        self.before_connect: Callable[[], Awaitable[None]] | None = None
        # The command a "rerun to retry" line prints; the CLI sets the real one.
        self.rerun_command = "python run_inference.py (the same arguments)"
        # With hold_end the last lines (what to do next) are kept in end_text for the caller to print
        # after what it does last (the CLI: stopping a launched server), instead of printed here.
        self.hold_end = False
        self.end_text = ""
        self.runs: list[DatasetRun] = []
        self.server = ServerContext()
        self.progress = Progress(0, progress_stream, config.status_interval, config.log_file, tty)
        self.preparer: Preparer | None = None
        self.pool: Pool | None = None
        self.stopping = asyncio.Event()
        self.signal_name: str | None = None
        self.fatal: BaseException | None = None
        self._aborting: asyncio.Task[Any] | None = None  # a stop's /abort_request calls
        self._stopping_now = False  # the drain ran out or a second signal came: in-flight requests are ended
        self._ignored: set[signal.Signals] = set()  # signals ignored when the run began (SIGHUP under nohup)
        # <output-dir>/report.html and timeline.jsonl once the run goes ahead; restarts: the launched server's.
        self.report: LiveReport | None = None
        self.restarts: Callable[[], int] = lambda: 0

    # ------------------------------------------------------------------ top level
    async def run(self) -> int:
        cfg = self.config
        client = self.client or SGLangClient(
            cfg.server_url,
            cfg.api_key,
            cfg.concurrency or cfg.max_concurrency,
            cfg.request_timeout,
            cfg.connect_timeout,
        )
        loop = asyncio.get_running_loop()
        # A signal ignored on purpose stays ignored: nohup ignores SIGHUP so the run outlives the terminal.
        self._ignored = {sig for sig in SIGNALS if signal.getsignal(sig) is signal.SIG_IGN}
        self._install_signals()
        try:
            self.plan()
            if cfg.dry_run:
                if not any(run.selection.pending for run in self.runs):  # before any server is started
                    print(f"dry run: nothing to do\n{self.plan_report()}", file=self.stream, flush=True)
                    return EXIT_OK
                # With --tokenizer a dry run needs no server: none is launched for it (one that answers is asked).
                await self.connect(client, launch=cfg.tokenizer is None)
                return self.dry_run()
            self.progress.print_block(
                f"{now_iso()} synthgen: {cfg.display_url}, partition {cfg.partition}\n" + self.plan_report()
            )
            if not any(run.selection.pending for run in self.runs):
                self.progress.print_block("nothing to do: every selected prompt is already done")
                self.open_report()
                self._end(self.end_of_run()[0])
                return EXIT_OK
            connecting = time.monotonic()
            await self.connect(client)
            startup = time.monotonic() - connecting
            self.check_settings()
            if self.stopping.is_set():  # a signal during start-up: nothing was sent
                return self.exit_code()
            for run in self.writing():
                run.begin(self.progress)  # every check passed: now the folders may change
            self.open_report()
            for note in self.server.notes:
                self.progress.message(f"note: {note}")
            self.progress.message(
                f"model {self.server.model}; tokenizer {self.server.tokenizer_path}; context "
                f"{self.server.context_len or 'unknown'}; max tokens {cfg.max_tokens}; "
                f"concurrency {cfg.concurrency or 'auto'}"
            )
            assert self.preparer is not None
            self.pool = Pool(self, client, self.preparer)
            await self.pool.execute()
            # The last status line: a log under nohup ends on the final counts, however short the run.
            self.progress.tick(self.pool.status_text())
            self.progress.close_bar()  # its last line before the summary, not after it
            # The run's own figures: the server's start (a demo install, a model load) is shown apart.
            summary = summary_table([run.counts for run in self.runs], time.monotonic() - self.progress.started)
            summary += "\n" + self.pool.monitor.summary_line() + "\n" + self.tokens().line()
            if startup >= 1.0 or cfg.launch_server is not None:
                summary += f"\nnot in these figures: {fmt_duration(startup)} before the first request (server start-up)"
            self.progress.print_block(summary)
            return self.exit_code()
        finally:
            if self._aborting is not None:
                self._aborting.cancel()
            for sig in SIGNALS.keys() - self._ignored:
                loop.remove_signal_handler(sig)
            if self.client is None:
                await client.aclose()
            if self.preparer is not None:
                self.preparer.close()
            for run in self.runs:
                run.close()
            self.progress.close()

    def tokens(self) -> TokenLedger:
        """Where the output tokens of this run went, over all datasets."""
        total = TokenLedger()
        for run in self.runs:
            total = total.add(run.tokens)
        return total

    def open_report(self) -> None:
        self.report = LiveReport.for_run(self.config, [run.name for run in self.runs], self.progress.message)
        self.progress.on_outage = self.report.event

    def finish_report(self) -> str:
        """The last page of the output folder (after the timeline's last sample); the line naming it."""
        sample = sample_of(self.progress, self.pool.monitor, self.restarts()) if self.pool is not None else None
        return self.report.finish(sample) if self.report is not None else ""

    def plan(self) -> None:
        """Decide everything before anything is written: lock and read every dataset folder, compare
        the settings the flags decide with what each folder recorded (before prompts are compared:
        a change of --regenerate is no change of prompts), scan and select. Files are written only
        once the run goes ahead (``DatasetRun.begin``), so a refusal here changes nothing."""
        cfg = self.config
        sources = discover_datasets(cfg.prompts_dir, cfg.partition, cfg.datasets)
        for source in sources:
            cfg.cap_for(source.name)  # a missing budget entry fails before any file is scanned
        claims: list[tuple[DatasetSource, DatasetStore, ResumeState]] = []
        try:
            for source in sources:
                claims.append((source, *claim_dataset(source, cfg)))
            if not cfg.allow_mixed_settings:
                recorded = {}
                for source, store, resume in claims:
                    settings = recorded_settings(store, resume)
                    if settings is not None:
                        recorded[source.name] = settings
                provenance.check_flags(recorded, flag_settings(cfg))
            runs = [open_dataset(source, cfg, self.progress, store, resume) for source, store, resume in claims]
        except BaseException:
            for _, store, _ in claims:
                store.close()  # the locks taken so far
            raise
        self.runs = longest_first(runs, cfg.expected_tokens)

    def plan_report(self) -> str:
        return "\n".join(line for run in self.runs for line in run.plan_lines())

    async def connect(self, client: SGLangClient, launch: bool = True) -> None:
        """Start a launched server if there is one, ask the server, load what renders and parses."""
        if self.before_connect is not None and launch:
            await self.before_connect()
            self._install_signals()  # a launching supervisor held the signals while the server started
        cfg = self.config
        self.server = await discover(client, cfg)
        self.preparer = Preparer(load_model(cfg, self.server), self.server, cfg.max_tokens)

    def check_settings(self) -> None:
        """Rows of one dataset folder share their settings unless --allow-mixed-settings (exit 2)."""
        assert self.preparer is not None
        settings = run_settings(self.config, self.server, self.preparer.model)
        writing = self.writing()
        provenance.check_folders(
            {run.name: run.store.dir for run in writing if run.store is not None},
            settings,
            self.config.allow_mixed_settings,
        )
        for run in writing:
            run.settings = settings.id

    def writing(self) -> list[DatasetRun]:
        """The datasets this run writes: not a dry run, and prompts to send."""
        return [run for run in self.runs if run.store is not None and run.selection.pending]

    def dry_run(self) -> int:
        cfg, ctx = self.config, self.server
        assert self.preparer is not None
        out = [f"dry run: nothing will be sent to {cfg.display_url}", self.plan_report()]
        out += [f"  note: {n}" for n in ctx.notes]
        out.append(
            f"  tokenizer: {ctx.tokenizer_path}; context length: {ctx.context_len or 'unknown'}; "
            f"max tokens: {cfg.max_tokens}; concurrency: {cfg.concurrency or 'auto'}"
        )
        out += first_request_report(self.preparer, self.runs, cfg)
        print("\n".join(out), file=self.stream, flush=True)
        return EXIT_OK

    def exit_code(self) -> int:
        if self.fatal is not None:
            raise self.fatal
        if self.signal_name is not None:
            self.progress.message(f"stopped by {self.signal_name}; rerun the same command to resume")
            return SIGNAL_EXIT[self.signal_name]
        text, left = self.end_of_run()
        self._end(text)
        return EXIT_FAILURES if left else EXIT_OK

    def _end(self, text: str) -> None:
        if self.hold_end:
            self.end_text = text
        else:
            self.progress.print_block(text)

    def end_of_run(self) -> tuple[str, bool]:
        """What to do next (progress.end_of_run), with this run's rerun and export commands."""
        cfg = self.config
        names = [run.name for run in self.runs]
        export = export_command(cfg.output_dir, names, cfg.partition, not cfg.datasets, cfg.prompts_dir)
        return end_of_run([run.counts for run in self.runs], cfg.output_dir, self.rerun_command, export)

    # ------------------------------------------------------------------ signals and stopping
    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig, name in SIGNALS.items():
            if sig not in self._ignored:
                loop.add_signal_handler(sig, self._on_signal, name)

    def _on_signal(self, name: str) -> None:
        if self.signal_name is not None:
            self._stop_now(f"second {name}")
            return
        self.signal_name = name
        self.stopping.set()
        if self.pool is not None:
            self.pool.stop_preparing()
        if self.pool is not None and self.pool.health.is_down:
            self._cancel_tasks(f"{name} during an outage: nothing in flight can finish")
            return
        asyncio.get_running_loop().call_later(self.config.drain_timeout, self._stop_now, "drain timeout")
        if self.pool is not None and self.pool.requests.keeps_partials:
            # Nothing is lost by ending them now: their output so far is kept and the next run continues it.
            self._aborting = asyncio.create_task(self.pool.requests.abort_all())
            self.progress.message(
                f"{name}: no new requests; ending the {self.progress.in_flight} in flight through /abort_request, "
                f"their output so far kept for the next run to continue (send {name} again to stop now)"
            )
            return
        self.progress.message(
            f"{name}: no new requests; waiting up to {fmt_duration(self.config.drain_timeout)} for "
            f"{self.progress.in_flight} in flight (send {name} again to stop now)"
        )

    def _stop_now(self, why: str) -> None:
        """The drain ran out, or a second signal: requests in flight are ended through /abort_request
        (the server stops generating for nobody; their output so far is kept where it can be
        continued), then cancelled if their answers do not come back within ABORT_GRACE."""
        if self.pool is None or self._stopping_now:
            self._cancel_tasks(why)
            return
        self._stopping_now = True
        pool = self.pool

        async def abort_then_cancel() -> None:
            alive = [t for t in pool.tasks if not t.done()]
            sent = self.progress.in_flight
            if alive:
                waiting = f" and {len(alive) - sent} waiting to be sent" if len(alive) > sent else ""
                self.progress.message(f"stopping now ({why}): ending {sent} requests in flight{waiting}")
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(pool.requests.abort_all(), ABORT_GRACE)
            if alive:
                await asyncio.wait(alive, timeout=ABORT_GRACE)
            self._cancel_tasks(why)

        self._aborting = asyncio.create_task(abort_then_cancel())

    def _cancel_tasks(self, why: str) -> None:
        alive = [t for t in self.pool.tasks if not t.done()] if self.pool is not None else []
        sent = self.progress.in_flight  # the same count as "waiting for N in flight"
        for task in alive:
            task.cancel()
        if alive:
            waiting = f" and {len(alive) - sent} waiting to be sent" if len(alive) > sent else ""
            self.progress.message(
                f"stopping now ({why}): cancelling {sent} requests in flight{waiting}; their prompts stay pending "
                "for the next run"
            )

    def fail_run(self, exc: BaseException) -> None:
        """Stop the run now with ``exc`` as its outcome (also used by the server supervisor)."""
        if self.fatal is None:
            self.fatal = exc
        self.stopping.set()
        for task in self.pool.tasks if self.pool is not None else ():
            if task is not asyncio.current_task():
                task.cancel()


class Pool:
    """The requests of one run in flight: prepared ahead by a producer, admitted one task per prompt
    by an in-flight limit (fixed, or moved by the server's load), retried, recorded."""

    def __init__(self, runner: Runner, client: SGLangClient, preparer: Preparer):
        self.runner, self.client, self.preparer = runner, client, preparer
        self.cfg, self.progress, self.stopping = runner.config, runner.progress, runner.stopping
        cfg, progress = self.cfg, self.progress
        self.health = ServerHealth(
            client,
            cfg.server_wait,
            on_down=lambda reason: progress.outage_began(client.shown_url, reason, cfg.server_wait),
            on_up=progress.outage_ended,
            on_gone=lambda gone: progress.gave_up(str(gone)),
            verify=lambda: changed_identity(client, runner.server),
        )
        # auto: the server's load moves the limit; a fixed N only watches it, for the status line.
        fixed = cfg.concurrency
        self.limit = InFlightLimit(fixed or FALLBACK_CONCURRENCY)
        controller = AutoConcurrency(max_concurrency=cfg.max_concurrency, initial=fixed)
        self.monitor = LoadMonitor(client, self.limit, controller, on_message=progress.message, steer=fixed is None)
        # Prompts are prepared about one in-flight target ahead of sending, never more.
        self.ahead = InFlightLimit(max(PREPARED_AHEAD_MIN, self.limit.target))
        self.queue: asyncio.Queue[WorkItem | None] = asyncio.Queue()
        self.tasks: set[asyncio.Task[None]] = set()  # one per prompt admitted
        self.requests = Requests(
            client, cfg, self.health, self.stopping, preparer.parser, runner.fail_run, runner.server
        )
        if cfg.keep_partials and self.requests.blocker is not None:
            progress.message(
                f"note: requests ended early restart instead of continuing ({self.requests.blocker}); a stop "
                "waits --drain-timeout for them"
            )
        self.total = sum(len(run.selection.pending) for run in runner.runs)
        # Rendering and tokenizing: one worker for the producer, one for the next turns of conversations.
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tokenize")
        self._producer: asyncio.Task[None] | None = None
        self._sendable = 0  # prompts prepared for sending so far
        self._skips: dict[str, int] = {}  # template error -> prompts skipped so, before the first sendable one

    async def execute(self) -> None:
        self.progress.start(self.total)
        # The first target from the server's own load, before anything is sent; bounded, so a slow
        # load endpoint costs the start at most FIRST_POLL_TIMEOUT.
        await self.monitor.first_poll()
        self.ahead.set_target(max(PREPARED_AHEAD_MIN, self.limit.target))
        producer = self._producer = asyncio.create_task(self.produce())
        dispatcher = asyncio.create_task(self.dispatch())
        background = [asyncio.create_task(self.ticker()), asyncio.create_task(self.monitor.run())]
        if self.runner.report is not None:
            sample = lambda: sample_of(self.progress, self.monitor, self.runner.restarts())  # noqa: E731
            background.append(asyncio.create_task(self.runner.report.run(sample)))
        try:
            await asyncio.gather(producer, dispatcher)
        except SynthgenError as exc:  # an input error from the producer, or the skips check
            self.runner.fail_run(exc)
        except asyncio.CancelledError:
            pass
        finally:
            producer.cancel()
            dispatcher.cancel()
            await asyncio.gather(producer, dispatcher, return_exceptions=True)
            await asyncio.gather(*self.tasks, return_exceptions=True)
            for task in background:
                task.cancel()
            self.health.close()
            # Not waited for: a render the run stopped waiting for ends on its own (its bounds), or
            # with the process (errors.exit_process); nothing it does is written anywhere.
            self._executor.shutdown(wait=False, cancel_futures=True)

    def stop_preparing(self) -> None:
        """A signal: the producer stops now, not after the render or tokenization under way."""
        if self._producer is not None:
            self._producer.cancel()

    # ------------------------------------------------------------------ feeding the pool
    async def produce(self) -> None:
        """Prepare the prompts of every dataset, mixed (``concurrency.interleave``: the datasets in
        ``longest_first`` order, each spread over the whole run), and queue them for sending.

        Prompts go to the worker thread in batches of up to PREPARE_BATCH (as many as the
        prepared-ahead bound has room for; the first alone, so the first request goes out at
        once): one hand-over per prompt made the producer, not the server, the bound at ~1,000 in
        flight, each costing a trip through the event loop and the GIL."""
        loop = asyncio.get_running_loop()
        prompts = self._send_order()
        size = 1
        try:
            while not self.stopping.is_set():
                await self.ahead.acquire()
                slots, batch = 1, []
                for run, prompt_id, last in prompts:
                    if run.closed:
                        if last:
                            self.preparer.done_with(run)  # no batch is being prepared now
                        continue
                    batch.append((run, prompt_id, last))
                    if len(batch) >= size or not self.ahead.try_acquire():
                        break
                    slots += 1
                for _ in range(slots - len(batch)):
                    self.ahead.release()
                if not batch:
                    break
                size = PREPARE_BATCH
                items, error = await loop.run_in_executor(self._executor, self._prepare, batch)
                for (run, _, _), item in zip(batch, items, strict=False):  # items stop at an error
                    if isinstance(item, Skip):
                        self.ahead.release()
                        run.record_error(item.prompt_id, "skipped", item.kind, item.reason, attempts=0)
                        self._check_skips(item)
                    else:
                        self._sendable += 1
                        self.queue.put_nowait(item)
                if error is not None:
                    raise error
        finally:
            self.queue.put_nowait(None)

    def _send_order(self) -> Iterator[tuple[DatasetRun, str, bool]]:
        """(dataset, prompt id, whether it is the dataset's last) in send order."""
        runs = self.runner.runs
        pending = [iter(run.selection.pending) for run in runs]
        left = [len(run.selection.pending) for run in runs]
        for index in interleave(list(left)):
            left[index] -= 1
            yield runs[index], next(pending[index]), left[index] == 0

    def _prepare(self, batch: list[tuple[DatasetRun, str, bool]]) -> tuple[list[WorkItem | Skip], Exception | None]:
        """In the worker thread: the batch's work items, up to the first error (returned with them,
        so the prompts prepared before it are still sent)."""
        items: list[WorkItem | Skip] = []
        try:
            for run, prompt_id, last in batch:
                items.append(self.preparer.prepare(run, prompt_id))
                if last:
                    self.preparer.done_with(run)
        except Exception as exc:
            return items, exc
        return items, None

    async def dispatch(self) -> None:
        while (item := await self.queue.get()) is not None:
            self.ahead.release()
            if self.stopping.is_set():
                continue  # drain the queue so the producer is never left waiting
            previous, finished = item.run.turn_order(item.prompt.id)
            if previous is not None and not previous.is_set():
                self._spawn(self._after(item, previous, finished))
                continue
            await self.limit.acquire()
            if self.stopping.is_set():
                self.limit.release()
                finished.set()
                continue
            self.ahead.set_target(max(PREPARED_AHEAD_MIN, self.limit.target))
            self._spawn(self._one(item, finished))

    def _spawn(self, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(job)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _one(self, item: WorkItem, finished: asyncio.Event) -> None:
        try:
            if await item.run.admit():
                await self.process(item)
        except Exception as exc:  # a bug, not a prompt's failure: stop now rather than lose a worker
            self.runner.fail_run(exc)
        finally:
            self.limit.release()
            finished.set()

    async def _after(self, item: WorkItem, previous: asyncio.Event, finished: asyncio.Event) -> None:
        """--regenerate each: a turn goes out once the turn before it is answered, so the server has
        their shared history in its prefix cache (turns sent together are prefilled together, and
        none reuses another's)."""
        try:
            await previous.wait()
            await self.limit.acquire()
        except BaseException:
            finished.set()
            raise
        if self.stopping.is_set():
            self.limit.release()
            finished.set()
            return
        await self._one(item, finished)

    async def ticker(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.status_interval)
            self.progress.tick(self.status_text())

    def status_text(self) -> str:
        """The load monitor's part of the status line, and how much of what was generated is kept."""
        kept = self.runner.tokens().status()
        return "; ".join(part for part in (self.monitor.status_text(), kept) if part)

    def _check_skips(self, skip: Skip) -> None:
        if self._sendable or skip.kind != "template_error":
            return
        self._skips[skip.reason] = count = self._skips.get(skip.reason, 0) + 1
        if count >= min(SKIPS_BEFORE_STOP, self.total):
            raise UsageError(
                f"the first {count} prompts all failed the chat template the same way ({skip.reason}); that is the "
                "run's configuration, not the data: check --chat-template, --chat-template-kwargs and --tokenizer "
                "(the skipped prompts are in errors.jsonl and are retried by the next run)"
            )

    # ------------------------------------------------------------------ one prompt
    async def process(self, item: WorkItem) -> None:
        """All requests of one prompt: one, or with --regenerate all one per turn, in order."""
        run = item.run
        run.request_started()
        try:
            while True:
                turn = await self.requests.request(item)
                if turn is None:
                    return
                conversation = item.prompt.conversation
                positions = 1 if conversation is None else len(conversation.all_positions())
                ended = item.conversation_done(turn, positions)
                if ended is not None:
                    run.record_result(item, turn, self.cfg, self.runner.server.model, ended)
                    return
                run.record_turn(item, turn)
                following = await asyncio.get_running_loop().run_in_executor(
                    self._executor, self.preparer.next_turn, run, item.prompt, [*item.turns, turn]
                )
                if isinstance(following, Skip):
                    run.record_error(following.prompt_id, "skipped", following.kind, following.reason, attempts=0)
                    return
                item = following
        except SynthgenError as exc:  # AuthError, StoreWriteError: the run cannot go on
            self.runner.fail_run(exc)
        finally:
            run.request_ended()
