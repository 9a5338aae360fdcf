"""The run, top to bottom: open the datasets, ask the server, then keep requests in flight across
all datasets until every selected prompt is done, failed or skipped, or a signal, an outage or a
write error stops it.

    Runner.run()      plan (dataset_run.open_dataset per dataset) -> connect (server.discover,
                      model.load_model) -> provenance check -> Pool.execute -> summary -> exit code
    Pool.execute()    producer.Producer (prepare.Preparer, in a worker thread) -> queue -> dispatcher
                      (one task per prompt, as the in-flight limit admits: fixed, or moved by the
                      server's load) -> Pool.process -> DatasetRun.record_*
    request.Requests  one request with its retries: backoff, outages, aborts, partial outputs

Stopping (a signal, a fatal error, the launched server gone for good) is ``stopping.RunStop``'s:
the caller makes it and hands it to the runner and to the server's supervisor; the runner holds
the stop signals (``synthgen.signals``) while it runs.

This module owns scheduling only. What a dataset knows and writes is in ``dataset_run``, how a
prompt becomes a request in ``prepare``, what the server is and whether it is up in ``server``.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from synthgen import signals
from synthgen.config import RunConfig
from synthgen.data import provenance
from synthgen.data.prompts import DatasetSource
from synthgen.data.prompts import discover as discover_datasets
from synthgen.data.records import Turn
from synthgen.data.store import DatasetStore, ResumeState
from synthgen.errors import EXIT_FAILURES, EXIT_OK, StoreWriteError, SynthgenError, UsageError
from synthgen.report.figures import DatasetFigures
from synthgen.report.folder import LiveReport
from synthgen.report.timeline import sample_of
from synthgen.run.concurrency import FALLBACK_CONCURRENCY, AutoConcurrency, InFlightLimit, LoadMonitor
from synthgen.run.dataset_run import DatasetRun, claim_dataset, now_iso, open_dataset, recorded_settings
from synthgen.run.fleet import Fleet
from synthgen.run.job import Job
from synthgen.run.ledger import TokenLedger
from synthgen.run.mix import Mix, restart_note
from synthgen.run.model import flag_settings, load_model, run_settings
from synthgen.run.prepare import Preparer, Skip, first_request_report
from synthgen.run.procedure import Procedure
from synthgen.run.producer import Producer
from synthgen.run.progress import (
    SFT_EXPORT,
    Progress,
    end_of_run,
    export_command,
    startup_line,
    summary_table,
)
from synthgen.run.request import Requests
from synthgen.run.serverset import make_client
from synthgen.run.stopping import RunStop
from synthgen.run.writer import Writer
from synthgen.server.backend import Backend
from synthgen.server.discovery import ServerContext, ServerHealth, changed_terms, discover

# What a "rerun to retry" line prints when the caller does not say (the CLI passes the real command).
RERUN_COMMAND = "python run_inference.py (the same arguments)"


def run_tokens(runs: list[DatasetRun]) -> TokenLedger:
    """Where the output tokens of this run went, over all datasets."""
    total = TokenLedger()
    for run in runs:
        total = total.add(run.tokens)
    return total


def longest_first(runs: list[DatasetRun], planned: dict[str, float]) -> list[DatasetRun]:
    """Datasets whose answers are expected to be longest first: the order the producer mixes
    them in (``concurrency.interleave``), the longest's first prompt first. Expected: the budget
    file's average, else the mean of the rows already there; datasets with no estimate keep their
    place at the front."""

    def expected(run: DatasetRun) -> float:
        if run.name in planned:
            return planned[run.name]
        rows = len(run.resume.done)
        return run.resume.completion_tokens / rows if rows else float("inf")

    return sorted(runs, key=expected, reverse=True)  # stable: equal estimates keep discovery order


def plan_datasets(cfg: RunConfig, seeds: dict[str, DatasetFigures]) -> tuple[list[DatasetRun], str]:
    """Decide everything before anything is written: lock and read every dataset folder (each one's report
    figures seeded into ``seeds`` by the rows read), compare the settings the flags decide with what each
    folder recorded (before prompts are compared: a change of --regenerate is no change of prompts), scan and
    select. Files are written only once the run goes ahead (``DatasetRun.begin``), so a refusal here changes
    nothing. A run refuses settings that differ; a dry run, which writes nothing, plans on and returns why a
    run would be refused (else "")."""
    sources = discover_datasets(cfg.prompts_dir, cfg.partition, cfg.datasets)
    for source in sources:
        cfg.cap_for(source.name)  # a missing budget entry fails before any file is scanned
    claims: list[tuple[DatasetSource, DatasetStore, ResumeState]] = []
    refused = ""
    try:
        for source in sources:
            figures = seeds[source.name] = DatasetFigures(source.name)
            claims.append((source, *claim_dataset(source, cfg, figures.add)))
        if not cfg.allow_mixed_settings:
            recorded = {}
            for source, store, resume in claims:
                settings = recorded_settings(store, resume)
                if settings is not None:
                    recorded[source.name] = settings
            try:
                provenance.check_flags(recorded, flag_settings(cfg))
            except UsageError as exc:
                if not cfg.dry_run:
                    raise
                refused = f"WARNING: a run with these flags would be refused: {exc}"
        runs = [open_dataset(source, cfg, store, resume) for source, store, resume in claims]
    except BaseException:
        for _, store, _ in claims:
            store.close()  # the locks taken so far
        raise
    return runs, refused


def outage_hooks(
    progress: Progress, report: LiveReport | None, url: str, wait: float
) -> tuple[Callable[[str], None], Callable[[float], None]]:
    """What the server going down and coming back do: a line (progress) and an event on the run's
    timeline (the report, once the run writes one)."""

    def down(reason: str) -> None:
        progress.outage_began(url, reason, wait)
        if report is not None:
            report.event("outage", reason)

    def up(seconds: float) -> None:
        progress.outage_ended(seconds)
        if report is not None:
            report.event("recovered", f"after {seconds:.0f} s")

    return down, up


def no_restarts() -> int:
    return 0


class Runner:
    """One run. Its seams are its arguments: ``client`` (tests pass one over an httpx.MockTransport;
    None: built in run()), ``stop`` (shared with a server supervisor), ``before_connect`` (called once,
    right before the server is first needed: a launched server starts then, so a run with nothing to
    do never starts one), ``restarts`` (the launched server's restart count, for the report),
    ``rerun_command`` (what a "rerun to retry" line prints) and ``hold_end`` (the last lines, what to
    do next, are kept in ``end_text`` for the caller to print after what it does last, the CLI's
    stopping a launched server, instead of printed here)."""

    def __init__(
        self,
        config: RunConfig,
        progress: Progress,
        *,
        client: Backend | None = None,
        stop: RunStop | None = None,
        before_connect: Callable[[], Awaitable[None]] | None = None,
        restarts: Callable[[], int] = no_restarts,
        rerun_command: str = RERUN_COMMAND,
        hold_end: bool = False,
    ):
        self.config, self.progress, self.client = config, progress, client
        self.stop = stop or RunStop(progress, config.drain_timeout)
        self.before_connect, self.restarts = before_connect, restarts
        self.rerun_command, self.hold_end = rerun_command, hold_end
        self.end_text = ""
        self.refused = ""  # a dry run: why a run with these flags would be refused (check_flags)
        self.server_start: float | None = None  # how long the launched server's start took (None: none launched)
        self.runs: list[DatasetRun] = []
        self.server = ServerContext()
        self.preparer: Preparer | None = None
        self.pool: Pool | None = None
        # <output-dir>/report.html and timeline.jsonl once the run goes ahead.
        self.report: LiveReport | None = None
        # Each dataset's report figures, made by the resume scan from the rows it read: the first page
        # goes on from them instead of reading every row again.
        self.seeds: dict[str, DatasetFigures] = {}

    # ------------------------------------------------------------------ top level
    async def run(self) -> int:
        cfg = self.config
        client = self.client or make_client(cfg, self.progress.message)
        signals.hold(self.stop.on_signal)
        try:
            if cfg.dry_run:
                return await self._dry_run(client)
            self.plan()
            self.progress.print_block(
                f"{now_iso()} synthgen: {cfg.display_url}, partition {cfg.partition}\n" + self.plan_report()
            )
            if not any(run.selection.pending for run in self.runs):
                return self._nothing_to_do()
            return await self._go(client)
        finally:
            signals.release(self.stop.on_signal)
            self.stop.close()
            if self.client is None:
                await client.aclose()
            if self.preparer is not None:
                self.preparer.close()
            self._close_runs()
            self.progress.close()

    def _close_runs(self) -> None:
        """Every dataset's files closed (called on the way out). After a write the disk refused they are
        not tidied; a tidying that fails raises only when the run ends without an error of its own: the
        first write that failed is the one a user must hear of."""
        refused = isinstance(self.stop.fatal, StoreWriteError)
        failed: list[StoreWriteError] = []
        for run in self.runs:
            try:
                run.close(tidy=not refused)
            except StoreWriteError as exc:
                failed.append(exc)
        if failed and sys.exc_info()[1] is None:
            raise failed[0]

    def _nothing_to_do(self) -> int:
        """No prompt to send: none is, and no server is started; skips earlier runs settled are listed."""
        settled = any(run.counts.settled for run in self.runs)
        why = "done, or skipped for good by an earlier run (below)" if settled else "already done"
        self.progress.print_block(f"nothing to do: every selected prompt is {why}")
        self.open_report()
        text, left = self.end_of_run()
        self._end(text)
        return EXIT_FAILURES if left else EXIT_OK

    async def _dry_run(self, client: Backend) -> int:
        self.plan()
        if not any(run.selection.pending for run in self.runs):  # before any server is started
            text = "\n".join(part for part in ("dry run: nothing to do", self.plan_report(), self.refused) if part)
            print(text, file=self.progress.stream, flush=True)
            return EXIT_OK
        # With --tokenizer a dry run needs no server: none is launched for it (one that answers is asked).
        await self.connect(client, launch=self.config.tokenizer is None)
        return self.dry_run()

    async def _go(self, client: Backend) -> int:
        """Connect, check, send everything, sum up: a run with prompts to send."""
        cfg = self.config
        connecting = time.monotonic()
        await self.connect(client)
        startup = time.monotonic() - connecting
        self.check_settings()
        if self.stop.is_set():  # a signal during start-up: nothing was sent
            return self.exit_code()
        writer = Writer(self.runs, cfg, self.progress, self.server.model)
        for run in self.writing():
            writer.begin(run)  # every check passed: now the folders may change
        self.open_report()
        for note in self.server.notes:
            self.progress.message(f"note: {note}")
        self.progress.message(
            f"model {self.server.model}; tokenizer {self.server.tokenizer_path}; context "
            f"{self.server.context_len or 'unknown'}; max tokens {cfg.max_tokens}; "
            f"concurrency {cfg.concurrency or 'auto'}"
        )
        assert self.preparer is not None
        self.pool = Pool(
            cfg, client, self.preparer, writer, self.server, self.progress, self.stop, self.report, self.restarts
        )
        await self.pool.execute()
        # The last status line: a log under nohup ends on the final counts, however short the run.
        self.progress.tick(self.pool.status_text())
        self.progress.close_bar()  # its last line before the summary, not after it
        # The run's own figures: the server's start (a demo install, a model load) is shown apart.
        summary = summary_table([run.counts for run in self.runs], time.monotonic() - self.progress.started)
        summary += "\n" + "\n".join([self.pool.monitor.summary_line(), run_tokens(self.runs).line()])
        summary += "".join("\n" + line for line in self.pool.fleet.summary_lines())
        summary += "".join("\n" + line for line in client.summary_lines())
        if startup >= 1.0 or cfg.launch_server is not None:
            summary += "\n" + startup_line(startup, self.server_start if cfg.launch_server is not None else None)
        self.progress.print_block(summary)
        return self.exit_code()

    def open_report(self) -> None:
        seeds = [(self.seeds[run.name], run.resume.read) for run in self.runs if run.resume.read is not None]
        start = {  # what the run goes on from: its start's mark on the page's timeline
            "rows_before": sum(len(run.resume.entries) for run in self.runs),
            "continuing": sum(len(run.continuing) + len(run.partial) for run in self.runs),
            "continue_cut": self.config.continue_cut,
        }
        names = [run.name for run in self.runs]
        self.report = LiveReport.for_run(self.config, names, self.progress.message, seeds, start)

    def finish_report(self) -> str:
        """The last page of the output folder (after the timeline's last sample); the line naming it."""
        sample = sample_of(self.progress, self.pool.monitor, self.restarts()) if self.pool is not None else None
        signal = self.stop.signal
        stopped = f"stopped by {signal.name}" if signal is not None else "ended by an error" if self.stop.fatal else ""
        return self.report.finish(sample, stopped) if self.report is not None else ""

    def plan(self) -> None:
        """Decide everything before anything is written (``plan_datasets``); a dry run keeps why a run with
        these flags would be refused, to say it after its plan."""
        runs, self.refused = plan_datasets(self.config, self.seeds)
        self.runs = longest_first(runs, self.config.expected_tokens)

    def plan_report(self) -> str:
        return "\n".join(line for run in self.runs for line in run.plan_lines())

    async def connect(self, client: Backend, launch: bool = True) -> None:
        """Start a launched server if there is one, ask the server, load what renders and parses."""
        if self.before_connect is not None and launch:
            began = time.monotonic()
            await self.before_connect()
            self.server_start = time.monotonic() - began
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
            run.settle(settings.id)

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
        if self.refused:
            out.append(self.refused)
        print("\n".join(out), file=self.progress.stream, flush=True)
        return EXIT_OK

    def exit_code(self) -> int:
        stopped = self.stop.exit_code()  # raises the fatal error that stopped the run
        if stopped is not None:
            return stopped
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
        stats = [run.counts for run in self.runs]
        # A shard's rows are exported with every other shard's: from the folder holding the shards.
        shards_dir = cfg.output_dir.parent if cfg.shard is not None else cfg.output_dir
        where = (shards_dir, names, cfg.partition, not cfg.datasets, cfg.prompts_dir)
        export, sft = export_command(*where), export_command(*where, route=SFT_EXPORT)
        return end_of_run(stats, cfg.output_dir, self.rerun_command, export, sft)


class Pool:
    """The requests of one run in flight: prepared ahead by the producer, admitted one task per prompt
    by an in-flight limit (fixed, or moved by the server's load), retried, recorded."""

    def __init__(
        self,
        cfg: RunConfig,
        client: Backend,
        preparer: Preparer,
        writer: Writer,
        server: ServerContext,
        progress: Progress,
        stop: RunStop,
        report: LiveReport | None = None,
        restarts: Callable[[], int] = no_restarts,
    ):
        self.cfg, self.client, self.preparer, self.server = cfg, client, preparer, server
        self.progress, self.stop, self.report, self.restarts = progress, stop, report, restarts
        self.health = ServerHealth(
            client,
            cfg.server_wait,
            *outage_hooks(progress, report, client.shown_url, cfg.server_wait),
            on_gone=lambda gone: progress.gave_up(str(gone)),
            verify=lambda: changed_terms(client, server),
        )
        # auto: the server's load moves the limit; a fixed N only watches it, for the status line.
        fixed = cfg.concurrency
        self.limit = InFlightLimit(fixed or FALLBACK_CONCURRENCY)
        controller = AutoConcurrency(max_concurrency=cfg.max_concurrency, initial=fixed)
        self.monitor = LoadMonitor(client, self.limit, controller, on_message=progress.message, steer=fixed is None)
        self.fleet = Fleet(self.limit, controller, on_message=progress.message)
        self.tasks: set[asyncio.Task[None]] = set()  # one per prompt admitted
        self.writer = writer
        self.runs = runs = list(writer.runs.values())
        tokenizer = preparer.renderer.tokenizer
        self.requests = Requests(
            client,
            cfg,
            self.health,
            stop.event,
            preparer.parser,
            stop.fail,
            server,
            lambda ids: str(tokenizer.decode(ids, skip_special_tokens=False)),
            progress.message,
            self.fleet,
            writer.write,
        )
        if cfg.keep_partials and self.requests.blocker is not None:
            progress.message(
                f"note: requests ended early restart instead of continuing ({self.requests.blocker}); a stop "
                "waits --drain-timeout for them"
            )
        elif cfg.keep_partials and (restarting := Mix.from_config(cfg).restarting()):
            progress.message(restart_note(restarting))
        # Rendering and tokenizing: one worker for the producer, one for the next turns of conversations.
        self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tokenize")
        self.producer = Producer(cfg, runs, preparer, self._executor, stop, self.limit.target, writer.write)
        self.procedure = Procedure(self.requests, writer, self._next_turn, cfg, stop.fail)
        self._producing: asyncio.Task[None] | None = None
        stop.attach(self)

    async def execute(self) -> None:
        self.progress.start(self.producer.total)
        # The first target from the server's own load, before anything is sent; bounded, so a slow
        # load endpoint costs the start at most FIRST_POLL_TIMEOUT.
        await self.monitor.first_poll()
        if self.client.router_found:
            self.fleet.gateway_found(self.requests.sampling)
        self.producer.keep_ahead(self.limit.target)
        producer = self._producing = asyncio.create_task(self.producer.produce())
        dispatcher = asyncio.create_task(self.dispatch())
        background = [asyncio.create_task(self.ticker()), asyncio.create_task(self.monitor.run())]
        if self.report is not None:
            sample = lambda: sample_of(self.progress, self.monitor, self.restarts())  # noqa: E731
            background.append(asyncio.create_task(self.report.run(sample)))
        try:
            await asyncio.gather(producer, dispatcher)
        except SynthgenError as exc:  # an input error from the producer, or the skips check
            self.stop.fail(exc)
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
        if self._producing is not None:
            self._producing.cancel()

    def server_down(self) -> bool:
        return self.health.is_down

    def keeps_partials(self) -> bool:
        return self.requests.keeps_partials

    def in_flight_kept(self) -> tuple[int, int]:
        return self.requests.in_flight_kept()

    async def end_in_flight(self, kept_only: bool = False) -> int:
        return await self.requests.abort_all(kept_only)

    # ------------------------------------------------------------------ sending
    async def dispatch(self) -> None:
        while (item := await self.producer.take()) is not None:
            if self.stop.is_set():
                continue  # drain the queue so the producer is never left waiting
            previous, finished = self.writer.run_of(item).turn_order(item.key)
            if previous is not None and not previous.is_set():
                self._spawn(self._after(item, previous, finished))
                continue
            await self.limit.acquire()
            if self.stop.is_set():
                self.limit.release()
                finished.set()
                continue
            self.producer.keep_ahead(self.limit.target)
            self._spawn(self._one(item, finished))

    def _spawn(self, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(job)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _one(self, item: Job, finished: asyncio.Event) -> None:
        try:
            if await self.writer.admit(item):
                await self.procedure.run(item)
        except Exception as exc:  # a bug, not a prompt's failure: stop now rather than lose a worker
            self.stop.fail(exc)
        finally:
            self.limit.release()
            finished.set()

    async def _after(self, item: Job, previous: asyncio.Event, finished: asyncio.Event) -> None:
        """--regenerate each: a turn goes out once the turn before it is answered, so the server has
        their shared history in its prefix cache (turns sent together are prefilled together, and
        none reuses another's)."""
        try:
            await previous.wait()
            await self.limit.acquire()
        except BaseException:
            finished.set()
            raise
        if self.stop.is_set():
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
        kept = run_tokens(self.runs).status()
        parts = (self.monitor.status_text(), kept, self.fleet.status_text(), self.client.status_text())
        return "; ".join(part for part in parts if part)

    # ------------------------------------------------------------------ one prompt
    async def _next_turn(self, job: Job, turn: Turn) -> Job | Skip:
        """--regenerate all: the request of the turn after ``turn``, prepared in the worker thread."""
        run = self.writer.run_of(job)
        return await asyncio.get_running_loop().run_in_executor(
            self._executor, self.preparer.next_turn, run, job.prompt, [*job.turns, turn], job.request
        )
