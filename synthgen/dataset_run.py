"""One dataset's run: its input index, what earlier runs left, the prompts this run takes, the
result store, the one set of counts, and the token-budget gate.

    open_dataset()        scan + validate the prompt file, lock the output folder, read what is
                          done, select this run's prompts, tidy errors.jsonl
    DatasetRun.record_result / record_error
                          the only places a finished prompt is written and counted
    DatasetRun.may_send   the --max-tokens-per-dataset gate

Progress hears about everything through events; nothing here writes its fields.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .client import Generation
from .config import RunConfig
from .progress import DatasetStats, Progress
from .prompts import DatasetIndex, DatasetSource, Prompt, scan_dataset
from .reasoning import split_reasoning
from .records import ErrorRecord, ResultRecord
from .selection import Selection, select
from .store import DatasetStore, ResumeState


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class WorkItem:
    """One prompt ready to send: rendered, tokenized and fitted to the context."""

    run: DatasetRun
    prompt: Prompt
    input_ids: list[int]
    opens_reasoning: bool
    max_new_tokens: int


@dataclass
class TokenBudget:
    """--max-tokens-per-dataset: output tokens of the dataset, earlier runs included."""

    cap: int
    max_tokens: int  # the worst case of a request, until answers tell us better

    def allows(self, done_tokens: int, done_rows: int, in_flight: int) -> bool:
        expected = done_tokens / done_rows if done_rows else self.max_tokens
        return done_tokens + in_flight * expected < self.cap


@dataclass
class DatasetRun:
    index: DatasetIndex
    selection: Selection
    resume: ResumeState
    store: DatasetStore | None  # None in a dry run
    counts: DatasetStats
    progress: Progress
    budget: TokenBudget | None = None
    in_flight: int = 0
    closed: bool = False  # no new requests (token budget reached)
    _done_rows: int = field(default=0, init=False)

    @property
    def name(self) -> str:
        return self.index.source.name

    @property
    def source(self) -> DatasetSource:
        return self.index.source

    # --- requests ----------------------------------------------------------------------------
    def may_send(self) -> bool:
        """False once the token budget is reached; the dataset then takes no new requests."""
        if self.closed:
            return False
        budget = self.budget
        if budget is None:
            return True
        done_rows = len(self.resume.done)
        if budget.allows(self.counts.budget_tokens_done, done_rows, self.in_flight):
            return True
        self.closed = self.counts.budget_stopped = True
        c = self.counts
        withdrawn = c.pending - c.done - c.failed - c.skipped - self.in_flight
        self.progress.budget_closed(self.name, budget.cap, c.budget_tokens_done, self.in_flight, withdrawn)
        return False

    def request_started(self) -> None:
        self.in_flight += 1
        if self.counts.first_start is None:
            self.counts.first_start = time.monotonic()
        self.progress.request_started()

    def request_ended(self) -> None:
        self.in_flight -= 1
        self.progress.request_ended()

    # --- outcomes ------------------------------------------------------------------------------
    def record_result(self, item: WorkItem, gen: Generation, sampling_params: dict, attempts: int,
                      latency: float, rid: str, cfg: RunConfig, model: str | None) -> None:
        split = split_reasoning(gen.text, item.opens_reasoning, cfg.think_start, cfg.think_end)
        assistant = {"role": "assistant", "content": split.content}
        if split.had_reasoning:
            assistant["reasoning_content"] = split.reasoning
        record = ResultRecord(
            id=item.prompt.id,
            dataset=self.name,
            partition=self.source.partition,
            messages=[*item.prompt.messages, assistant],
            reasoning_content=split.reasoning,
            content=split.content,
            finish_reason=gen.finish_type,
            finish_detail=gen.finish_reason,
            reasoning_complete=split.reasoning_closed,
            prompt_tokens=gen.prompt_tokens or len(item.input_ids),
            completion_tokens=gen.completion_tokens,
            cached_tokens=gen.cached_tokens,
            output_text=gen.text,
            model=model,
            sampling_params=sampling_params,
            chat_template_kwargs=cfg.chat_template_kwargs or None,
            latency_s=round(latency, 3),
            server_latency_s=gen.server_latency,
            attempts=attempts,
            request_id=gen.request_id or rid,
            created_at=now_iso(),
        )
        assert self.store is not None
        self.store.append_result(record)
        self.resume.done.add(item.prompt.id)
        c = self.counts
        c.done += 1
        c.completion_tokens += gen.completion_tokens
        c.last_finish = time.monotonic()
        self.progress.finished(gen.completion_tokens)

    def record_error(self, prompt_id: str, status: str, kind: str, message: str, attempts: int,
                     http_status: int | None = None) -> None:
        record = ErrorRecord(prompt_id, self.name, status, kind, message, attempts, http_status, now_iso())
        assert self.store is not None
        self.store.append_error(record)
        self.counts.last_finish = time.monotonic()
        if status == "skipped":
            self.counts.skipped += 1
            self.progress.skipped_one()
        else:
            self.counts.failed += 1
            self.progress.failed_one()

    # --- reporting -----------------------------------------------------------------------------
    def plan_lines(self) -> list[str]:
        ix, sel, resume = self.index, self.selection, self.resume
        cap = "no cap" if sel.cap is None else f"cap {sel.cap:,}"
        extra = []
        if ix.duplicates:
            extra.append(f"{ix.duplicates} duplicate ids ignored (first wins)")
        if ix.bad_lines:
            extra.append(f"{ix.bad_lines} bad lines skipped")
        if resume.repaired:
            extra.append(resume.repaired)
        if resume.bad_lines:
            extra.append(f"unreadable result lines {resume.bad_lines[:5]}")
        if resume.duplicate_rows:
            extra.append(f"{resume.duplicate_rows} duplicate result rows")
        lines = [
            f"  {self.name} ({ix.source.partition}): {sel.available:,} prompts, {cap}, "
            f"{sel.already_done:,} already done, {len(sel.pending):,} to run"
            + (f" [{'; '.join(extra)}]" if extra else "")
        ]
        lines += [f"    skipped {bad}" for bad in ix.first_bad]
        return lines

    def close(self) -> None:
        if self.store is not None:
            self.store.close()


def open_dataset(source: DatasetSource, cfg: RunConfig, progress: Progress) -> DatasetRun:
    """Scan, lock, resume and select one dataset (nothing is locked or repaired in a dry run)."""
    index = scan_dataset(source, cfg.skip_bad_lines)
    store = DatasetStore(cfg.output_dir, source.name)
    if cfg.dry_run:
        resume = store.recover(repair=False)
        writer: DatasetStore | None = None
    else:
        store.lock()
        resume = store.recover(repair=True)
        writer = store
    selection = select(index.ids, resume.done, cfg.cap_for(source.name), cfg.sample, cfg.seed)
    if writer is not None:
        writer.compact_errors(resume.done | set(selection.pending))
    counts = DatasetStats(source.name, target=selection.target, already_done=selection.already_done,
                          pending=len(selection.pending), token_budget=cfg.max_tokens_per_dataset,
                          tokens_before=resume.completion_tokens)
    budget = None
    if cfg.max_tokens_per_dataset is not None:
        budget = TokenBudget(cfg.max_tokens_per_dataset, cfg.max_tokens)
    return DatasetRun(index, selection, resume, writer, counts, progress, budget)
