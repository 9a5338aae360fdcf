"""The run, top to bottom: plan the datasets, ask the server, then keep a bounded pool of
requests in flight across all datasets until every selected prompt is done, failed or
skipped, or a signal, an outage or a write error stops it.

    plan()          scan + validate input, lock outputs, resume state, selection
    connect()       /model_info, /v1/models, /server_info; load the tokenizer
    execute()       producer (read + render + tokenize in a worker thread) -> queue ->
                    ``concurrency`` workers -> result store, with a status ticker
    ServerHealth    one shared view of whether the server is up; waits out outages

Everything a worker learns is recorded as data (a result row, an error row); only errors
that make the whole run pointless (bad API key, disk full, server gone) stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

import orjson

from . import templating
from .client import Rejected, SGLangClient, Transient, build_payload, new_rid
from .config import RunConfig
from .errors import (
    EXIT_FAILURES,
    EXIT_OK,
    EXIT_SIGINT,
    EXIT_SIGTERM,
    ServerError,
    SynthgenError,
)
from .progress import DatasetStats, Progress, fmt_duration, summary_table
from .prompts import DatasetIndex, Prompt, PromptReader, discover, scan_dataset
from .reasoning import split_reasoning
from .selection import Selection, select
from .store import DatasetStore, ResumeState

# SGLang's scheduler refuses inputs of max_req_input_len = context_len - 1 - 5 tokens or more,
# even when the tokenizer-side check passed (sglang_api.md §1.3).
SCHEDULER_RESERVED = 6
# A prompt in flight at this many server deaths is recorded as failed rather than retried forever.
OUTAGES_PER_PROMPT = 3


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def fit_max_new_tokens(prompt_len: int, max_tokens: int, context_len: int | None,
                       max_input_len: int | None) -> tuple[int | None, str | None]:
    """(max_new_tokens, None) for a prompt that fits, or (None, reason) for one to skip."""
    if max_input_len is None and context_len is not None:
        max_input_len = context_len - SCHEDULER_RESERVED
    if max_input_len is not None and prompt_len >= max_input_len:
        return None, f"prompt has {prompt_len} tokens; the server accepts fewer than {max_input_len}"
    if context_len is None:
        return max_tokens, None
    # SGLang 0.5.5 rejects input + max_new >= context, 0.5.23 only >: leave one token.
    room = context_len - prompt_len - 1
    if room < 1:
        return None, f"prompt has {prompt_len} tokens, leaving no room to generate under {context_len}"
    return min(max_tokens, room), None


@dataclass
class DatasetPlan:
    index: DatasetIndex
    selection: Selection
    state: ResumeState
    store: DatasetStore | None
    stats: DatasetStats
    in_flight: int = 0
    budget_closed: bool = False

    @property
    def name(self) -> str:
        return self.index.source.name


@dataclass
class WorkItem:
    plan: DatasetPlan
    prompt: Prompt
    input_ids: list[int]
    opens_reasoning: bool
    max_new_tokens: int


@dataclass
class ServerContext:
    model: str | None = None
    tokenizer_path: str | None = None
    context_len: int | None = None
    max_input_len: int | None = None
    vocab_size: int | None = None
    notes: list[str] = field(default_factory=list)


class ServerGone(ServerError):
    pass


class ServerHealth:
    """Whether the server is up, shared by all workers.

    A worker whose request failed in a way that smells of an outage calls ``suspect()``;
    the first such call checks /health and, if the server is down, every worker waits in
    ``wait_up()`` while one poller checks /health with backoff. After ``server_wait``
    seconds of continuous outage the run gives up (it is resumable).
    """

    def __init__(self, client: SGLangClient, server_wait: float, progress: Progress):
        self.client, self.server_wait, self.progress = client, server_wait, progress
        self.up = asyncio.Event()
        self.up.set()
        self.gone: ServerGone | None = None
        self._lock = asyncio.Lock()
        self._poller: asyncio.Task | None = None

    async def suspect(self, reason: str) -> bool:
        """True if the server is down (the failed attempt should not count against the prompt)."""
        async with self._lock:
            if not self.up.is_set():
                return True
            if await self.client.healthy():
                return False
            self.up.clear()
            self.progress.outage_since = time.monotonic()
            self.progress.message(f"OUTAGE: server {self.client.base_url} is not healthy ({reason}); "
                                  f"waiting up to {fmt_duration(self.server_wait)} for it to come back")
            self._poller = asyncio.create_task(self._poll())
            return True

    async def _poll(self) -> None:
        started = time.monotonic()
        delay = 1.0
        while True:
            await asyncio.sleep(delay)
            if await self.client.healthy():
                self.progress.message(f"RECOVERED: server is healthy again after "
                                      f"{fmt_duration(time.monotonic() - started)} of outage; resuming")
                self.progress.outage_since = None
                self.up.set()
                return
            if time.monotonic() - started >= self.server_wait:
                self.gone = ServerGone(
                    f"gave up: server {self.client.base_url} was unreachable for "
                    f"{fmt_duration(time.monotonic() - started)} (--server-wait); nothing was lost: "
                    "rerun the same command to resume"
                )
                self.progress.message(f"GIVE UP: {self.gone}")
                self.up.set()  # release the waiters so they see ``gone``
                return
            delay = min(delay * 2, 5.0)

    async def wait_up(self) -> None:
        await self.up.wait()
        if self.gone is not None:
            raise self.gone

    def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()


class Runner:
    def __init__(self, config: RunConfig, progress_stream=None, tty: bool | None = None):
        self.config = config
        self.stream = progress_stream
        self.tty = tty
        self.plans: list[DatasetPlan] = []
        self.server = ServerContext()
        self.progress: Progress | None = None
        self.stopping = asyncio.Event()
        self.signal_name: str | None = None
        self.fatal: BaseException | None = None
        self._workers: list[asyncio.Task] = []
        self._renderer: templating.ChatRenderer | None = None
        self._readers: dict[str, PromptReader] = {}

    # ------------------------------------------------------------------ plan
    def plan(self) -> None:
        cfg = self.config
        sources = discover(cfg.prompts_dir, cfg.partition, cfg.datasets)
        caps = {s.name: cfg.cap_for(s.name) for s in sources}  # a missing budget entry fails here
        for source in sources:
            index = scan_dataset(source, cfg.skip_bad_lines)
            store = None if cfg.dry_run else DatasetStore(cfg.output_dir, source.name)
            if store is not None:
                store.lock()
                state = store.recover(repair=True)
            else:
                state = DatasetStore(cfg.output_dir, source.name).recover(repair=False)
            selection = select(index.ids, state.done, caps[source.name], cfg.sample, cfg.seed)
            if store is not None:
                store.compact_errors(state.done | set(selection.pending))
            stats = DatasetStats(source.name, target=selection.target, already_done=selection.already_done,
                                 pending=len(selection.pending), token_budget=cfg.max_tokens_per_dataset)
            stats.budget_tokens_done = state.completion_tokens
            plan = DatasetPlan(index, selection, state, store, stats)
            self.plans.append(plan)

    def plan_report(self) -> str:
        lines = []
        for p in self.plans:
            ix, sel = p.index, p.selection
            cap = "no cap" if sel.cap is None else f"cap {sel.cap:,}"
            extra = []
            if ix.duplicates:
                extra.append(f"{ix.duplicates} duplicate ids ignored (first wins)")
            if ix.bad_lines:
                extra.append(f"{ix.bad_lines} bad lines skipped")
            if p.state.repaired:
                extra.append(p.state.repaired)
            if p.state.bad_lines:
                extra.append(f"unreadable result lines {p.state.bad_lines[:5]}")
            if p.state.duplicate_rows:
                extra.append(f"{p.state.duplicate_rows} duplicate result rows")
            lines.append(
                f"  {p.name} ({ix.source.partition}): {sel.available:,} prompts, {cap}, "
                f"{sel.already_done:,} already done, {len(sel.pending):,} to run"
                + (f" [{'; '.join(extra)}]" if extra else "")
            )
            for bad in ix.first_bad:
                lines.append(f"    skipped {bad}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ server
    async def connect(self, client: SGLangClient) -> None:
        cfg, ctx = self.config, self.server
        try:
            info = await client.model_info()
        except ServerError:
            if not (cfg.dry_run and cfg.tokenizer):
                raise
            info = {}
            ctx.notes.append(f"server {cfg.server_url} not reachable; dry run continues without it")
        ctx.model = info.get("served_model_name") or info.get("model_path")
        ctx.tokenizer_path = cfg.tokenizer or info.get("tokenizer_path") or info.get("model_path")
        if not ctx.tokenizer_path:
            raise SynthgenError(f"{cfg.server_url}/model_info reports no tokenizer_path; pass --tokenizer PATH")
        # The served model's own config.json is the truth; a --tokenizer folder's is the fallback.
        model_config = templating.model_config(info.get("model_path"), ctx.tokenizer_path)
        if cfg.max_seq_len is not None:
            ctx.context_len = cfg.max_seq_len
        elif info:
            ctx.context_len = await client.context_length()
            if ctx.context_len is None:
                ctx.context_len = templating.model_context_length(model_config)
                found = (f"using max_position_embeddings {ctx.context_len} from the model's config.json"
                         if ctx.context_len else "prompt lengths are not checked before sending")
                ctx.notes.append(f"the server reports no max_model_len at /v1/models; {found}; "
                                 "pass --max-seq-len to set it")
        if info and cfg.max_seq_len is None:  # an explicit --max-seq-len is the user's word on lengths
            server_info = await client.server_info()
            value = server_info.get("max_req_input_len")
            if isinstance(value, int) and value > 0:
                limit = value if ctx.context_len is None else min(value, ctx.context_len - SCHEDULER_RESERVED)
                ctx.max_input_len = limit
        tokenizer = templating.load_tokenizer(ctx.tokenizer_path, cfg.trust_remote_code)
        ctx.vocab_size = templating.model_vocab_size(model_config)
        self._renderer = templating.ChatRenderer(tokenizer, cfg.chat_template_kwargs, cfg.think_start)

    # ------------------------------------------------------------------ preparing one prompt
    def prepare(self, plan: DatasetPlan, prompt_id: str) -> WorkItem | tuple[Prompt | None, str, str]:
        """Read, render and tokenize one prompt (runs in a worker thread).

        Returns a WorkItem, or (prompt, kind, reason) for a prompt that will not be sent.
        """
        reader = self._readers.get(plan.name)
        if reader is None:
            reader = self._readers[plan.name] = PromptReader(plan.index)
        prompt = reader.read(prompt_id)
        try:
            rendered = self._renderer.render(prompt.messages)
        except ValueError as exc:
            return prompt, "template_error", str(exc)
        ids = rendered.input_ids
        ctx = self.server
        if ctx.vocab_size is not None and ids and max(ids) >= ctx.vocab_size:
            return prompt, "token_out_of_vocab", (
                f"token id {max(ids)} is outside the model's vocabulary ({ctx.vocab_size}); "
                "the tokenizer does not match the served model"
            )
        if not ids:
            return prompt, "empty_prompt", "the chat template rendered an empty prompt"
        max_new, reason = fit_max_new_tokens(len(ids), self.config.max_tokens, ctx.context_len, ctx.max_input_len)
        if max_new is None:
            return prompt, "prompt_too_long", reason
        return WorkItem(plan, prompt, ids, rendered.opens_reasoning, max_new)

    # ------------------------------------------------------------------ dry run
    async def dry_run(self) -> int:
        cfg = self.config
        out = [f"dry run: nothing will be sent to {cfg.server_url}", self.plan_report()]
        out += [f"  note: {n}" for n in self.server.notes]
        ctx = self.server
        out.append(f"  tokenizer: {ctx.tokenizer_path}; context length: {ctx.context_len or 'unknown'}; "
                   f"max tokens: {cfg.max_tokens}; concurrency: {cfg.concurrency}")
        sample = next(((p, p.selection.pending[0]) for p in self.plans if p.selection.pending), None)
        if sample is None:
            out.append("nothing to do: every selected prompt is already done")
        else:
            item = self.prepare(*sample)
            if isinstance(item, WorkItem):
                payload = build_payload(item.input_ids, item.max_new_tokens, cfg.sampling_params(), "synthgen-<uuid>")
                shown = dict(payload, input_ids=f"[{len(item.input_ids)} token ids: {item.input_ids[:12]} ...]")
                rendered = self._renderer.tokenizer.decode(item.input_ids)
                out.append(f"first request ({item.plan.name} / {item.prompt.id}): POST {cfg.server_url}/generate")
                out.append("  " + orjson.dumps(shown).decode())
                out.append("  rendered prompt:\n    " + rendered.replace("\n", "\n    "))
                out.append(f"  prompt opens reasoning: {item.opens_reasoning}")
            else:
                prompt, kind, reason = item
                out.append(f"first prompt {sample[1]} would be skipped: {kind}: {reason}")
        print("\n".join(out), file=self.stream, flush=True)
        return EXIT_OK

    # ------------------------------------------------------------------ execution
    def _on_signal(self, name: str) -> None:
        if self.signal_name is None:
            self.signal_name = name
            self.stopping.set()
            n = self.progress.in_flight if self.progress else 0
            self.progress.message(
                f"{name}: no new requests; waiting up to {fmt_duration(self.config.drain_timeout)} for {n} in flight "
                f"(send {name} again to stop now)"
            )
            asyncio.get_running_loop().call_later(self.config.drain_timeout, self._cancel_workers, "drain timeout")
        else:
            self._cancel_workers(f"second {name}")

    def _cancel_workers(self, why: str) -> None:
        alive = [t for t in self._workers if not t.done()]
        if alive:
            self.progress.message(f"stopping now ({why}): cancelling {len(alive)} workers; "
                                  "their prompts stay pending for the next run")
        for task in alive:
            task.cancel()

    def _fail_run(self, exc: BaseException) -> None:
        if self.fatal is None:
            self.fatal = exc
        self.stopping.set()
        for task in self._workers:
            if task is not asyncio.current_task():
                task.cancel()

    async def execute(self, client: SGLangClient) -> None:
        cfg = self.config
        self.progress.start(sum(len(p.selection.pending) for p in self.plans))
        health = ServerHealth(client, cfg.server_wait, self.progress)
        # Prepared prompts wait in an unbounded queue, but the producer holds a slot for each,
        # so at most 2 x concurrency are tokenized ahead; the end-of-work sentinels never block.
        queue: asyncio.Queue = asyncio.Queue()
        slots = asyncio.Semaphore(cfg.concurrency * 2)
        loop = asyncio.get_running_loop()
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")
        sampling = cfg.sampling_params()

        async def produce() -> None:
            for plan in self.plans:
                for prompt_id in plan.selection.pending:
                    if self.stopping.is_set():
                        return
                    if plan.budget_closed:
                        break
                    await slots.acquire()
                    item = await loop.run_in_executor(executor, self.prepare, plan, prompt_id)
                    if isinstance(item, WorkItem):
                        queue.put_nowait(item)
                    else:
                        slots.release()
                        prompt, kind, reason = item
                        self._record_error(plan, prompt.id, "skipped", kind, reason, attempts=0)

        def budget_allows(plan: DatasetPlan) -> bool:
            cap = cfg.max_tokens_per_dataset
            if cap is None:
                return True
            # Until the dataset has results, assume the worst: each request uses max_tokens.
            state = plan.state
            expected = state.mean_completion_tokens or cfg.max_tokens
            if state.completion_tokens + plan.in_flight * expected >= cap:
                if not plan.budget_closed:
                    plan.budget_closed = plan.stats.budget_stopped = True
                    s = plan.stats
                    self.progress.total -= s.pending - s.done - s.failed - s.skipped - plan.in_flight
                    self.progress.message(
                        f"{plan.name}: token budget {cap:,} reached ({state.completion_tokens:,} done + "
                        f"{plan.in_flight} in flight); no new requests for this dataset")
                return False
            return True

        async def work() -> None:
            while True:
                item = await queue.get()
                if item is None or self.stopping.is_set():
                    return
                slots.release()
                plan = item.plan
                if plan.budget_closed or not budget_allows(plan):
                    continue
                await self._process(item, client, health, sampling)

        async def ticker() -> None:
            while True:
                await asyncio.sleep(cfg.status_interval)
                self.progress.tick()

        for sig, name in ((signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")):
            loop.add_signal_handler(sig, self._on_signal, name)
        producer = asyncio.create_task(produce())
        self._workers = [asyncio.create_task(work()) for _ in range(cfg.concurrency)]
        tick_task = asyncio.create_task(ticker())
        stop_waiter = asyncio.create_task(self.stopping.wait())
        try:
            # Feed until the producer is done, then tell every worker to finish.
            await asyncio.wait({producer, stop_waiter}, return_when=asyncio.FIRST_COMPLETED)
            if self.stopping.is_set():
                producer.cancel()
                with contextlib.suppress(asyncio.CancelledError, SynthgenError):
                    await producer
            else:
                producer.result()  # re-raise an input error from the producer
            for _ in self._workers:
                queue.put_nowait(None)
            results = await asyncio.gather(*self._workers, return_exceptions=True)
            for result in results:
                if isinstance(result, BaseException) and not isinstance(result, asyncio.CancelledError):
                    self._fail_run(result)
        except SynthgenError as exc:
            self._fail_run(exc)
            await asyncio.gather(*self._workers, return_exceptions=True)
        finally:
            stop_waiter.cancel()
            tick_task.cancel()
            health.close()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            executor.shutdown(wait=True, cancel_futures=True)

    async def _process(self, item: WorkItem, client: SGLangClient, health: ServerHealth, sampling: dict) -> None:
        cfg, plan = self.config, item.plan
        attempts = outages = 0
        plan.in_flight += 1
        self.progress.in_flight += 1
        if plan.stats.first_start is None:
            plan.stats.first_start = time.monotonic()
        try:
            while True:
                try:
                    await health.wait_up()
                except ServerGone as exc:
                    self._fail_run(exc)
                    return
                if self.stopping.is_set():
                    return
                attempts += 1
                payload = build_payload(item.input_ids, item.max_new_tokens, sampling, new_rid())
                started = time.monotonic()
                try:
                    generation = await client.generate(payload)
                except Transient as exc:
                    if exc.outage and await health.suspect(exc.message):
                        # The server was down: usually this says nothing about the prompt, but a
                        # prompt that keeps being in flight when the server dies may be killing it.
                        outages += 1
                        if outages >= OUTAGES_PER_PROMPT:
                            self._record_error(plan, item.prompt.id, "failed", "server_died", (
                                f"the server went down {outages} times while this prompt was in flight "
                                f"(last: {exc.message})"), attempts, exc.status)
                            return
                        attempts -= 1
                        continue
                    if attempts >= cfg.max_attempts:
                        self._record_error(plan, item.prompt.id, "failed", exc.kind, exc.message, attempts, exc.status)
                        return
                    await self._backoff(attempts)
                    continue
                except Rejected as exc:
                    self._record_error(plan, item.prompt.id, "failed", exc.kind, exc.message, attempts, exc.status)
                    return
                self._record_result(item, generation, payload, attempts, time.monotonic() - started)
                return
        except SynthgenError as exc:  # AuthError, StoreWriteError: the run cannot go on
            self._fail_run(exc)
        finally:
            plan.in_flight -= 1
            self.progress.in_flight -= 1

    async def _backoff(self, attempt: int) -> None:
        cfg = self.config
        delay = min(cfg.backoff_max, cfg.backoff_base * 2 ** (attempt - 1))
        delay *= random.uniform(0.5, 1.0)  # jitter: retries from many workers do not arrive together
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), timeout=delay)

    # ------------------------------------------------------------------ records
    def _record_result(self, item: WorkItem, gen, payload: dict, attempts: int, latency: float) -> None:
        cfg, plan = self.config, item.plan
        split = split_reasoning(gen.text, item.opens_reasoning, cfg.think_start, cfg.think_end)
        assistant = {"role": "assistant", "content": split.content}
        if split.had_reasoning:
            assistant["reasoning_content"] = split.reasoning
        row = {
            "id": item.prompt.id,
            "dataset": plan.name,
            "partition": plan.index.source.partition,
            "messages": [*item.prompt.messages, assistant],
            "reasoning_content": split.reasoning,
            "content": split.content,
            "finish_reason": gen.finish_type,
            "finish_detail": gen.finish_reason,
            "reasoning_complete": split.reasoning_closed,
            "prompt_tokens": gen.prompt_tokens or len(item.input_ids),
            "completion_tokens": gen.completion_tokens,
            "cached_tokens": gen.cached_tokens,
            "output_text": gen.text,
            "model": self.server.model,
            "sampling_params": payload["sampling_params"],
            "chat_template_kwargs": cfg.chat_template_kwargs or None,
            "latency_s": round(latency, 3),
            "server_latency_s": gen.server_latency,
            "attempts": attempts,
            "request_id": gen.request_id or payload.get("rid"),
            "created_at": now_iso(),
        }
        plan.store.append_result(row)
        plan.state.done.add(item.prompt.id)
        plan.state.completion_tokens += gen.completion_tokens
        stats = plan.stats
        stats.done += 1
        stats.completion_tokens += gen.completion_tokens
        stats.budget_tokens_done = plan.state.completion_tokens
        stats.last_finish = time.monotonic()
        self.progress.finished(gen.completion_tokens)

    def _record_error(self, plan: DatasetPlan, prompt_id: str, status: str, kind: str, message: str,
                      attempts: int, http_status: int | None = None) -> None:
        row = {"id": prompt_id, "dataset": plan.name, "status": status, "error_type": kind, "error": message,
               "attempts": attempts, "http_status": http_status, "at": now_iso()}
        plan.store.append_error(row)
        plan.stats.last_finish = time.monotonic()
        if status == "skipped":
            plan.stats.skipped += 1
            self.progress.skipped_one()
        else:
            plan.stats.failed += 1
            self.progress.failed_one()

    # ------------------------------------------------------------------ top level
    async def run(self) -> int:
        cfg = self.config
        started = time.monotonic()
        self.progress = Progress(0, self.stream, cfg.status_interval, cfg.log_file, self.tty)
        client = SGLangClient(cfg.server_url, cfg.api_key, cfg.concurrency, cfg.request_timeout, cfg.connect_timeout)
        try:
            self.plan()
            if cfg.dry_run:
                await self.connect(client)
                return await self.dry_run()
            self.progress.print_block(f"{now_iso()} synthgen: {cfg.server_url}, partition {cfg.partition}\n"
                                      + self.plan_report())
            if not any(p.selection.pending for p in self.plans):
                self.progress.print_block("nothing to do: every selected prompt is already done")
                return EXIT_OK
            await self.connect(client)
            for note in self.server.notes:
                self.progress.message(f"note: {note}")
            self.progress.message(
                f"model {self.server.model}; tokenizer {self.server.tokenizer_path}; context "
                f"{self.server.context_len or 'unknown'}; max tokens {cfg.max_tokens}; concurrency {cfg.concurrency}")
            await self.execute(client)
            self.progress.print_block(summary_table([p.stats for p in self.plans], time.monotonic() - started))
            return self.exit_code()
        finally:
            await client.aclose()
            for reader in self._readers.values():
                reader.close()
            for plan in self.plans:
                if plan.store is not None:
                    plan.store.close()
            self.progress.close()

    def exit_code(self) -> int:
        if self.fatal is not None:
            raise self.fatal
        if self.signal_name is not None:
            self.progress.message(f"stopped by {self.signal_name}; rerun the same command to resume")
            return EXIT_SIGINT if self.signal_name == "SIGINT" else EXIT_SIGTERM
        if any(p.stats.failed for p in self.plans):
            failed = sum(p.stats.failed for p in self.plans)
            self.progress.message(f"{failed} prompts failed (see outputs/<dataset>/errors.jsonl); "
                                  "rerun the same command to retry them")
            return EXIT_FAILURES
        return EXIT_OK
