"""The run, top to bottom: open the datasets, ask the server, then keep a bounded pool of
requests in flight across all datasets until every selected prompt is done, failed or
skipped, or a signal, an outage or a write error stops it.

    plan()       open every dataset (dataset_run.open_dataset): scan, lock, resume, select
    connect()    ask the server (server.discover) and load the tokenizer
    execute()    producer (prepare.Preparer in a worker thread) -> queue -> ``concurrency``
                 workers -> DatasetRun.record_*, with a status ticker
    _process()   one prompt's attempts: retries with backoff, outages, aborts

This module owns scheduling only: the pool, retries, outages, signals and the exit code.
What a dataset knows and writes is in ``dataset_run``, what the server is in ``server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

import orjson

from . import provenance, templating
from .client import Generation, Rejected, SGLangClient, Transient, build_payload, new_rid
from .concurrency import FALLBACK_CONCURRENCY, AutoConcurrency, InFlightLimit, LoadMonitor
from .config import RunConfig
from .dataset_run import DatasetRun, WorkItem, now_iso, open_dataset
from .errors import (
    EXIT_FAILURES,
    EXIT_OK,
    EXIT_SIGHUP,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    ServerError,
    SynthgenError,
    UsageError,
)
from .parsers import KNOWN_REASONING, KNOWN_TOOL_CALL, OutputParser
from .prepare import Preparer, Skip, all_positions
from .progress import Progress, fmt_duration, summary_table
from .prompts import discover as discover_datasets
from .records import Turn
from .server import ServerContext, ServerHealth, changed_identity, discover

# A prompt in flight at this many server deaths is recorded as failed rather than retried forever.
OUTAGES_PER_PROMPT = 3
# When this many prompts (or every prompt, if fewer) fail the chat template the same way before any
# could be sent, the cause is the configuration (template, --chat-template-kwargs), not the data.
SKIPS_BEFORE_STOP = 20
# SIGHUP (a closed terminal without nohup) stops the run like SIGTERM: drain, then exit.
# Prepared (rendered, tokenized) prompts waiting to be sent: about one in-flight target, at least this.
PREPARED_AHEAD_MIN = 16
SIGNALS = {signal.SIGINT: "SIGINT", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
SIGNAL_EXIT = {"SIGINT": EXIT_SIGINT, "SIGTERM": EXIT_SIGTERM, "SIGHUP": EXIT_SIGHUP}


def longest_first(runs: list[DatasetRun], planned: dict[str, float]) -> list[DatasetRun]:
    """Datasets whose answers are expected to be longest start first, so the end of a run is not
    a few long generations on an idle server. Expected: the budget file's average, else the mean
    of the rows already there; datasets with no estimate keep their place at the front."""
    def expected(run: DatasetRun) -> float:
        if run.name in planned:
            return planned[run.name]
        rows = len(run.resume.done)
        return run.resume.completion_tokens / rows if rows else float("inf")

    return sorted(runs, key=expected, reverse=True)  # stable: equal estimates keep discovery order


class Runner:
    def __init__(self, config: RunConfig, progress_stream: TextIO | None = None, tty: bool | None = None,
                 client: SGLangClient | None = None):
        self.config = config
        self.stream = progress_stream
        self.tty = tty
        self.client = client  # None: built in run(); tests pass one over an httpx.MockTransport
        # Called once, right before the server is first needed (the supervisor starts a launched server
        # then, so a run with nothing to do never starts one).
        self.before_connect: Callable[[], Awaitable[None]] | None = None
        self.runs: list[DatasetRun] = []
        self.server = ServerContext()
        self.progress = Progress(0, progress_stream, config.status_interval, config.log_file, tty)
        self.preparer: Preparer | None = None
        self.stopping = asyncio.Event()
        self.signal_name: str | None = None
        self.fatal: BaseException | None = None
        self._workers: set[asyncio.Task] = set()  # one task per prompt in flight
        self._monitor: LoadMonitor | None = None
        self._health: ServerHealth | None = None  # while execute() runs
        self._ignored: set[signal.Signals] = set()  # signals ignored when the run began (SIGHUP under nohup)
        self._sendable = 0  # prompts prepared for sending so far
        self._skips: dict[str, int] = {}  # template error -> prompts skipped so, before the first sendable one

    # ------------------------------------------------------------------ plan
    def plan(self) -> None:
        cfg = self.config
        sources = discover_datasets(cfg.prompts_dir, cfg.partition, cfg.datasets)
        for source in sources:
            cfg.cap_for(source.name)  # a missing budget entry fails before any file is scanned
        runs = [open_dataset(source, cfg, self.progress) for source in sources]
        self.runs = longest_first(runs, cfg.expected_tokens)

    def plan_report(self) -> str:
        return "\n".join(line for run in self.runs for line in run.plan_lines())

    # ------------------------------------------------------------------ server
    async def connect(self, client: SGLangClient) -> None:
        cfg = self.config
        self.server = ctx = await discover(client, cfg)
        assert ctx.tokenizer_path is not None
        template = templating.read_chat_template(cfg.chat_template) if cfg.chat_template else None
        tokenizer = templating.load_tokenizer(ctx.tokenizer_path, cfg.trust_remote_code, template)
        renderer = templating.ChatRenderer(tokenizer, cfg.chat_template_kwargs, cfg.think_start, template)
        parser = OutputParser(self._parser_name("reasoning", cfg.reasoning_parser, ctx.reasoning_parser),
                              self._parser_name("tool-call", cfg.tool_call_parser, ctx.tool_call_parser),
                              cfg.think_start, cfg.think_end)
        self.preparer = Preparer(renderer, parser, ctx, cfg.max_tokens, templating.max_token_bytes(tokenizer))

    def _parser_name(self, kind: str, chosen: str | None, served: str | None) -> str | None:
        """The user's parser, else the one the server was started with (the model's), if we know it."""
        if chosen is not None or served is None:
            return chosen
        known = KNOWN_REASONING if kind == "reasoning" else KNOWN_TOOL_CALL
        if served in known:
            return served
        fallback = "the --think-start/--think-end rule" if kind == "reasoning" else "no tool-call parsing"
        self.server.notes.append(f"the server's {kind} parser '{served}' is not one this tool implements; using "
                                 f"{fallback} (pass --{kind}-parser NAME to choose one)")
        return None

    def settings(self) -> provenance.Settings:
        cfg, ctx = self.config, self.server
        assert self.preparer is not None
        parser = self.preparer.parser
        return provenance.Settings(
            model=ctx.model, weight_version=ctx.weight_version, tokenizer=ctx.tokenizer_path,
            chat_template_sha256=self.preparer.renderer.template_hash, chat_template_kwargs=cfg.chat_template_kwargs,
            reasoning_parser=parser.reasoning, tool_call_parser=parser.tool_call,
            sampling_params=cfg.sampling_params(), max_tokens=cfg.max_tokens, regenerate=cfg.regenerate,
        )

    def check_settings(self) -> None:
        """Rows of one dataset folder share their settings unless --allow-mixed-settings (exit 2)."""
        settings = self.settings()
        mismatches = {}
        for run in self.runs:
            if run.store is None or not run.selection.pending:
                continue
            diff = provenance.check(run.store.dir, settings, self.config.allow_mixed_settings)
            if diff is not None:
                mismatches[run.name] = diff
            run.settings = settings.id
        if mismatches:
            raise provenance.refuse(mismatches)

    # ------------------------------------------------------------------ dry run
    async def dry_run(self) -> int:
        cfg, ctx = self.config, self.server
        assert self.preparer is not None
        out = [f"dry run: nothing will be sent to {cfg.display_url}", self.plan_report()]
        out += [f"  note: {n}" for n in ctx.notes]
        out.append(f"  tokenizer: {ctx.tokenizer_path}; context length: {ctx.context_len or 'unknown'}; "
                   f"max tokens: {cfg.max_tokens}; concurrency: {cfg.concurrency or 'auto'}")
        sample = next(((run, run.selection.pending[0]) for run in self.runs if run.selection.pending), None)
        if sample is None:
            out.append("nothing to do: every selected prompt is already done")
        else:
            item = self.preparer.prepare(*sample)
            if isinstance(item, WorkItem):
                payload = build_payload(item.input_ids, item.max_new_tokens, cfg.sampling_params(), "synthgen-<uuid>")
                shown = dict(payload, input_ids=f"[{len(item.input_ids)} token ids: {item.input_ids[:12]} ...]")
                rendered = self.preparer.renderer.tokenizer.decode(item.input_ids)
                out.append(f"first request ({item.run.name} / {item.prompt.id}): POST {cfg.display_url}/generate")
                out.append("  " + orjson.dumps(shown).decode())
                out.append("  rendered prompt:\n    " + rendered.replace("\n", "\n    "))
                out.append(f"  prompt opens reasoning: {item.opens_reasoning}")
            else:
                out.append(f"first prompt {sample[1]} would be skipped: {item.kind}: {item.reason}")
        print("\n".join(out), file=self.stream, flush=True)
        return EXIT_OK

    # ------------------------------------------------------------------ signals and stopping
    def _on_signal(self, name: str) -> None:
        if self.signal_name is None:
            self.signal_name = name
            self.stopping.set()
            if self._health is not None and self._health.is_down:
                self._cancel_workers(f"{name} during an outage: nothing in flight can finish")
                return
            asyncio.get_running_loop().call_later(self.config.drain_timeout, self._cancel_workers, "drain timeout")
            self.progress.message(
                f"{name}: no new requests; waiting up to {fmt_duration(self.config.drain_timeout)} for "
                f"{self.progress.in_flight} in flight (send {name} again to stop now)"
            )
        else:
            self._cancel_workers(f"second {name}")

    def _cancel_workers(self, why: str) -> None:
        alive = [t for t in self._workers if not t.done()]
        for task in alive:
            task.cancel()
        if alive:
            self.progress.message(f"stopping now ({why}): cancelling {len(alive)} workers; "
                                  "their prompts stay pending for the next run")

    def fail_run(self, exc: BaseException) -> None:
        """Stop the run now with ``exc`` as its outcome (also used by the server supervisor)."""
        if self.fatal is None:
            self.fatal = exc
        self.stopping.set()
        for task in self._workers:
            if task is not asyncio.current_task():
                task.cancel()

    # ------------------------------------------------------------------ the pool
    async def execute(self, client: SGLangClient) -> None:
        """producer (prepare, in a worker thread) -> queue -> dispatcher (one task per prompt, as the
        in-flight limit admits) -> DatasetRun.record_*. The limit is fixed (--concurrency N) or moved
        by the server's load (auto, concurrency.LoadMonitor)."""
        cfg, progress, preparer = self.config, self.progress, self.preparer
        assert preparer is not None
        total = sum(len(run.selection.pending) for run in self.runs)
        progress.start(total)
        self._health = health = ServerHealth(
            client, cfg.server_wait,
            on_down=lambda reason: progress.outage_began(client.shown_url, reason, cfg.server_wait),
            on_up=progress.outage_ended,
            on_gone=lambda gone: progress.gave_up(str(gone)),
            verify=lambda: changed_identity(client, self.server),
        )
        limit, monitor = self._in_flight_limit(client)
        # Prompts are prepared about one in-flight target ahead of sending, never more.
        ahead = InFlightLimit(max(PREPARED_AHEAD_MIN, limit.target))
        queue: asyncio.Queue[WorkItem | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")
        sampling = cfg.sampling_params()

        async def produce() -> None:
            try:
                for run in self.runs:
                    for prompt_id in run.selection.pending:
                        if self.stopping.is_set() or run.closed:
                            break
                        await ahead.acquire()
                        item = await loop.run_in_executor(executor, preparer.prepare, run, prompt_id)
                        if isinstance(item, Skip):
                            ahead.release()
                            run.record_error(item.prompt_id, "skipped", item.kind, item.reason, attempts=0)
                            self._check_skips(item, total)
                        else:
                            self._sendable += 1
                            queue.put_nowait(item)
                    preparer.done_with(run)
            finally:
                queue.put_nowait(None)

        async def one(item: WorkItem, finished: asyncio.Event) -> None:
            try:
                if await item.run.admit():
                    await self._process(item, client, health, sampling)
            except Exception as exc:  # a bug, not a prompt's failure: stop now rather than lose a worker
                self.fail_run(exc)
            finally:
                limit.release()
                finished.set()

        async def after(item: WorkItem, previous: asyncio.Event, finished: asyncio.Event) -> None:
            """--regenerate each: a turn goes out once the turn before it is answered, so the server has
            its shared history in the prefix cache (turns sent together are prefilled together, and
            none reuses another's)."""
            try:
                await previous.wait()
                await limit.acquire()
            except BaseException:
                finished.set()
                raise
            if self.stopping.is_set():
                limit.release()
                finished.set()
                return
            await one(item, finished)

        def spawn(job: Coroutine[Any, Any, None]) -> None:
            task = asyncio.create_task(job)
            self._workers.add(task)
            task.add_done_callback(self._workers.discard)

        async def dispatch() -> None:
            while (item := await queue.get()) is not None:
                ahead.release()
                if self.stopping.is_set():
                    continue  # drain the queue so the producer is never left waiting
                previous, finished = item.run.turn_order(item.prompt.id)
                if previous is not None and not previous.is_set():
                    spawn(after(item, previous, finished))
                    continue
                await limit.acquire()
                if self.stopping.is_set():
                    limit.release()
                    finished.set()
                    continue
                ahead.set_target(max(PREPARED_AHEAD_MIN, limit.target))
                spawn(one(item, finished))

        async def ticker() -> None:
            while True:
                await asyncio.sleep(cfg.status_interval)
                progress.tick(monitor.status_text() if monitor is not None else None)

        producer = asyncio.create_task(produce())
        dispatcher = asyncio.create_task(dispatch())
        background = [asyncio.create_task(ticker())]
        if monitor is not None:
            background.append(asyncio.create_task(monitor.run()))
        self._monitor = monitor
        try:
            await asyncio.gather(producer, dispatcher)
        except SynthgenError as exc:  # an input error from the producer, or the skips check
            self.fail_run(exc)
        except asyncio.CancelledError:
            pass
        finally:
            producer.cancel()
            dispatcher.cancel()
            await asyncio.gather(producer, dispatcher, return_exceptions=True)
            await asyncio.gather(*self._workers, return_exceptions=True)
            for task in background:
                task.cancel()
            health.close()
            self._health = None
            executor.shutdown(wait=True, cancel_futures=True)

    def _in_flight_limit(self, client: SGLangClient) -> tuple[InFlightLimit, LoadMonitor | None]:
        cfg = self.config
        if cfg.concurrency is not None:
            return InFlightLimit(cfg.concurrency), None
        limit = InFlightLimit(FALLBACK_CONCURRENCY)
        controller = AutoConcurrency(max_concurrency=cfg.max_concurrency)
        return limit, LoadMonitor(client, limit, controller, on_message=self.progress.message)

    # ------------------------------------------------------------------ one prompt
    async def _process(self, item: WorkItem, client: SGLangClient, health: ServerHealth, sampling: dict) -> None:
        """All requests of one prompt: one, or with --regenerate all one per turn, in order."""
        cfg, run, preparer = self.config, item.run, self.preparer
        assert preparer is not None
        run.request_started()
        try:
            while True:
                turn = await self._request(item, client, health, sampling)
                if turn is None:
                    return
                conversation = item.prompt.conversation
                positions = 1 if conversation is None else len(
                    all_positions(conversation.messages, conversation.all_positions()))
                ended = item.conversation_done(turn, positions)
                if ended is not None:
                    run.record_result(item, turn, cfg, self.server.model, ended)
                    return
                run.record_turn(item, turn)
                loop = asyncio.get_running_loop()
                following = await loop.run_in_executor(None, preparer.next_turn, run, item.prompt,
                                                       [*item.turns, turn])
                if isinstance(following, Skip):
                    run.record_error(following.prompt_id, "skipped", following.kind, following.reason, attempts=0)
                    return
                item = following
        except SynthgenError as exc:  # AuthError, StoreWriteError: the run cannot go on
            self.fail_run(exc)
        finally:
            run.request_ended()

    async def _request(self, item: WorkItem, client: SGLangClient, health: ServerHealth,
                       sampling: dict) -> Turn | None:
        """One request with its retries: the parsed turn, or None once the prompt's failure is
        recorded (or the run is stopping)."""
        cfg, run, preparer = self.config, item.run, self.preparer
        assert preparer is not None
        attempts = outages = 0
        while True:
            try:
                await health.wait_up()
            except ServerError as exc:  # gone for too long, or back with another model
                self.fail_run(exc)
                return None
            if self.stopping.is_set():
                return None
            attempts += 1
            payload = build_payload(item.input_ids, item.max_new_tokens, sampling, new_rid())
            started = time.monotonic()
            try:
                generation = await client.generate(payload)
                return self._turn(item, generation, attempts, time.monotonic() - started, payload["rid"])
            except Transient as exc:
                if exc.outage and await health.suspect(exc.message):
                    # The server was down: usually this says nothing about the prompt, but a
                    # prompt that keeps being in flight when the server dies may be killing it.
                    outages += 1
                    if outages >= OUTAGES_PER_PROMPT:
                        run.record_error(item.prompt.id, "failed", "server_died", (
                            f"the server went down {outages} times while this prompt was in flight "
                            f"(last: {exc.message})"), attempts, exc.status)
                        return None
                    attempts -= 1
                    continue
                if attempts >= cfg.max_attempts:
                    run.record_error(item.prompt.id, "failed", exc.kind, exc.message, attempts, exc.status)
                    return None
                await self._backoff(attempts)
                continue
            except Rejected as exc:
                run.record_error(item.prompt.id, "failed", exc.kind, exc.message, attempts, exc.status)
                return None

    def _turn(self, item: WorkItem, generation: Generation, attempts: int, latency: float, rid: str) -> Turn:
        """The answer parsed into a turn; anything unexpected in it is a bad answer of this prompt
        (retried, then recorded), never the death of a worker."""
        assert self.preparer is not None
        try:
            return item.turn(generation, self.preparer.parser, attempts, latency, rid)
        except Exception as exc:
            raise Transient("bad_response", f"could not read the answer ({type(exc).__name__}: {exc})") from exc

    def _check_skips(self, skip: Skip, total: int) -> None:
        if self._sendable or skip.kind != "template_error":
            return
        self._skips[skip.reason] = count = self._skips.get(skip.reason, 0) + 1
        if count >= min(SKIPS_BEFORE_STOP, total):
            raise UsageError(
                f"the first {count} prompts all failed the chat template the same way ({skip.reason}); that is the "
                "run's configuration, not the data: check --chat-template, --chat-template-kwargs and --tokenizer "
                "(the skipped prompts are in errors.jsonl and are retried by the next run)"
            )

    async def _backoff(self, attempt: int) -> None:
        cfg = self.config
        delay = min(cfg.backoff_max, cfg.backoff_base * 2 ** (attempt - 1))
        delay *= random.uniform(0.5, 1.0)  # jitter: retries from many workers do not arrive together
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), timeout=delay)

    # ------------------------------------------------------------------ top level
    async def run(self) -> int:
        cfg = self.config
        started = time.monotonic()
        client = self.client or SGLangClient(cfg.server_url, cfg.api_key, cfg.concurrency or cfg.max_concurrency,
                                             cfg.request_timeout, cfg.connect_timeout)
        loop = asyncio.get_running_loop()
        # A signal ignored on purpose stays ignored: nohup ignores SIGHUP so the run outlives the terminal.
        self._ignored = {sig for sig in SIGNALS if signal.getsignal(sig) is signal.SIG_IGN}
        self._install_signals()
        try:
            self.plan()
            if cfg.dry_run:
                await self._server_needed()
                await self.connect(client)
                return await self.dry_run()
            self.progress.print_block(f"{now_iso()} synthgen: {cfg.display_url}, partition {cfg.partition}\n"
                                      + self.plan_report())
            if not any(run.selection.pending for run in self.runs):
                self.progress.print_block("nothing to do: every selected prompt is already done")
                return EXIT_OK
            await self._server_needed()
            await self.connect(client)
            self.check_settings()
            if self.stopping.is_set():  # a signal during start-up: nothing was sent
                return self.exit_code()
            for note in self.server.notes:
                self.progress.message(f"note: {note}")
            self.progress.message(
                f"model {self.server.model}; tokenizer {self.server.tokenizer_path}; context "
                f"{self.server.context_len or 'unknown'}; max tokens {cfg.max_tokens}; "
                f"concurrency {cfg.concurrency or 'auto'}")
            await self.execute(client)
            summary = summary_table([run.counts for run in self.runs], time.monotonic() - started)
            if self._monitor is not None:
                summary += "\n" + self._monitor.summary_line()
            self.progress.print_block(summary)
            return self.exit_code()
        finally:
            for sig in SIGNALS.keys() - self._ignored:
                loop.remove_signal_handler(sig)
            if self.client is None:
                await client.aclose()
            if self.preparer is not None:
                self.preparer.close()
            for run in self.runs:
                run.close()
            self.progress.close()

    async def _server_needed(self) -> None:
        if self.before_connect is not None:
            await self.before_connect()
            self._install_signals()  # a launching supervisor held the signals while the server started

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig, name in SIGNALS.items():
            if sig not in self._ignored:
                loop.add_signal_handler(sig, self._on_signal, name)

    def exit_code(self) -> int:
        if self.fatal is not None:
            raise self.fatal
        if self.signal_name is not None:
            self.progress.message(f"stopped by {self.signal_name}; rerun the same command to resume")
            return SIGNAL_EXIT[self.signal_name]
        failed = sum(run.counts.failed for run in self.runs)
        skipped = sum(run.counts.skipped for run in self.runs)
        if failed or skipped:
            where = self.config.output_dir / "<dataset>" / "errors.jsonl"
            what = " and ".join(f"{n} prompts {verb}" for n, verb in ((failed, "failed"), (skipped, "were skipped"))
                                if n)
            self.progress.message(f"WARNING: {what} (see {where}); rerun the same command to retry them")
            return EXIT_FAILURES
        return EXIT_OK
