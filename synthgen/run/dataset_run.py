"""One dataset's run: its input index, what earlier runs left, the prompts this run takes, the
result store, the one set of counts, and the token-budget gate.

    claim_dataset()       lock the output folder, read what is done (nothing is written)
    open_dataset()        scan + validate the prompt file, decide about changed prompts, select
                          this run's prompts (still nothing is written)
    DatasetRun.begin      once the whole run has decided to go: repair a torn line, move changed
                          rows aside, tidy partial_turns.jsonl; a run that refuses changes nothing
    DatasetRun.record_result / record_error
                          the only places a finished prompt is written and counted
    DatasetRun.admit      the --max-tokens-per-dataset gate

Progress hears about everything through events; nothing here writes its fields.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from synthgen.chat.parsers import OutputParser
from synthgen.config import RunConfig
from synthgen.data import provenance
from synthgen.data.failures import SKIPPED
from synthgen.data.partials import Partial, PartialOutputs, usable
from synthgen.data.prompts import DatasetIndex, DatasetSource, Prompt, scan_dataset
from synthgen.data.records import ErrorRecord, RowContext, Turn, build_result
from synthgen.data.samples import sample_key, sample_work, split_key, touched_prompts
from synthgen.data.selection import Selection, select
from synthgen.data.shards import shard_selection
from synthgen.data.store import DatasetStore, PartialTurn, PartialTurns, ResumeState, RowSink, move_rows
from synthgen.errors import UsageError
from synthgen.run.ledger import TokenLedger
from synthgen.run.mix import Mix, SampleRequest
from synthgen.run.model import stop_token
from synthgen.run.progress import DatasetStats, Progress
from synthgen.run.settled import set_aside, settled_skips
from synthgen.server.client import Generation

LOOPED_ROWS = "looped_rows.jsonl"  # --redo repetition: where the rows the loop guard ended are moved


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class WorkItem:
    """One request ready to send: rendered, tokenized and fitted to the context. With
    ``--regenerate all`` it is the next turn of a conversation, after ``turns``."""

    run: DatasetRun
    prompt: Prompt
    input_ids: list[int]
    opens_reasoning: bool
    max_new_tokens: int
    messages: list[dict[str, Any]] = field(default_factory=list)  # what was rendered
    turns: list[Turn] = field(default_factory=list)  # regenerate=all: the turns before this one
    payload: dict[str, Any] | None = None  # what the last attempt sent (request.Requests): the row records it
    carried: Partial | None = None  # the output so far of attempts (or runs) that were ended early
    carried_before: int = 0  # of carried: tokens an earlier run generated
    extended_by: int | None = None  # --continue-cut: the tokens a cut answer was given beyond its max
    request: SampleRequest | None = None  # the sample: its seed and recipe (None: the run's flags as they are)

    @property
    def key(self) -> str:
        """Where resume files this work: the prompt id, with the sample after the first."""
        return self.prompt.id if self.request is None else sample_key(self.prompt.id, self.request.sample)

    def turn(self, gen: Generation, parser: OutputParser, attempts: int, latency: float, rid: str) -> Turn:
        """The generated turn, split by the reasoning and tool-call parsers as SGLang would."""
        # SGLang parses tool calls only for requests that declare tools; ours are in the prompt.
        if self.prompt.tools is not None:
            history = sum(len(m.get("tool_calls") or []) for m in self.messages)
            parsed = parser.parse(
                gen.text,
                self.opens_reasoning,
                call_id_prefix=f"{self.prompt.id}/{len(self.turns)}",
                history_tool_calls=history,
                tools=self.prompt.tools,  # undeclared functions dropped, XML arguments typed by the schemas
                stop=stop_token(gen, parser),
            )
            reasoning, content, complete = parsed.reasoning, parsed.content, parsed.reasoning_complete
            had_reasoning, calls = parsed.had_reasoning, parsed.tool_calls or None
        else:  # no tools declared: a tool-call-looking answer stays in the content, as SGLang leaves it
            split = parser.split(gen.text, self.opens_reasoning, stop=stop_token(gen, parser))
            reasoning, content, complete = split.reasoning, split.content, split.reasoning_closed
            had_reasoning, calls = split.had_reasoning, None
        return Turn(
            reasoning_content=reasoning,
            content=content,
            tool_calls=calls,
            had_reasoning=had_reasoning,
            finish_reason=gen.finish_type,
            finish_detail=gen.finish_reason,
            reasoning_complete=complete,
            prompt_tokens=gen.prompt_tokens or len(self.input_ids),
            completion_tokens=gen.completion_tokens,
            cached_tokens=gen.cached_tokens,
            output_text=gen.text,
            input_ids=self.input_ids,
            output_ids=gen.output_ids,
            latency_s=round(latency, 3),
            server_latency_s=gen.server_latency,
            attempts=attempts,
            request_id=gen.request_id or rid,
            worker=gen.worker,
        )

    def conversation_done(self, turn: Turn, positions: int) -> str | None:
        """regenerate=all: None while turns remain, else "" (all done) or why it stopped early."""
        if self.prompt.conversation is None:
            return ""
        if turn.finish_reason == "length":
            return f"turn {len(self.turns) + 1} of {positions} was cut at --max-tokens"
        if turn.finish_reason == "repetition":
            return f"turn {len(self.turns) + 1} of {positions} fell into a loop (the loop guard ended it)"
        return "" if len(self.turns) + 1 >= positions else None


@dataclass
class TokenBudget:
    """--max-tokens-per-dataset: output tokens of the dataset, earlier runs included."""

    cap: int
    max_tokens: int  # the worst case of a request, until answers tell us better

    def reached(self, done_tokens: int) -> bool:
        return done_tokens >= self.cap

    def allows(self, done_tokens: int, done_rows: int, in_flight: int) -> bool:
        """Room for one more request: what is done plus what is in flight, at the mean length so far
        (the worst case, max_tokens, until answers come back), stays under the cap."""
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
    partial: dict[str, list[PartialTurn]] = field(default_factory=dict)  # regenerate=all: turns to continue from
    partial_store: PartialTurns | None = None
    partial_rows: list[PartialTurn] = field(default_factory=list)  # regenerate=all: what partial_turns.jsonl held
    moving: list[str] = field(default_factory=list)  # --changed-prompts regenerate: rows begin() moves aside
    redoing: list[str] = field(default_factory=list)  # --redo repetition: the loop guard's rows begin() moves aside
    settings: str | None = None  # the settings id rows of this run carry
    tokens: TokenLedger = field(default_factory=TokenLedger)  # where this run's output tokens went
    partial_outputs: PartialOutputs | None = None  # requests ended early, kept to continue (data/partials.py)
    partial_output_rows: list[Partial] = field(default_factory=list)  # what partial_outputs.jsonl held
    continuing: dict[str, Partial] = field(default_factory=dict)  # earlier runs' partials to continue, by id
    keeps_partials: bool = False  # --keep-partials on
    mix: Mix | None = None  # samples and recipes: what each (prompt, sample) is sent with
    begun: bool = False  # begin() ran: the run writes this dataset's files
    in_flight: int = 0
    closed: bool = False  # no new requests (token budget reached)
    _ended: asyncio.Event = field(default_factory=asyncio.Event, init=False, repr=False)
    _turns: dict[str, asyncio.Event] = field(default_factory=dict, init=False, repr=False)

    @property
    def name(self) -> str:
        return self.index.source.name

    @property
    def source(self) -> DatasetSource:
        return self.index.source

    @property
    def label(self) -> str:
        """The prompt file as rows record it: partition/name.jsonl."""
        return source_label(self.index.source)

    # --- requests ----------------------------------------------------------------------------
    def turn_order(self, key: str) -> tuple[asyncio.Event | None, asyncio.Event]:
        """(the event of this conversation's previous turn in this run, if any; this prompt's own event).
        Only --regenerate each ids (``<id>#<k>``) have a previous turn, of the same sample."""
        finished = asyncio.Event()
        if self.index.mode != "each":
            return None, finished
        self._turns[key] = finished
        prompt_id, sample = split_key(key)
        base, _, k = prompt_id.rpartition("#")
        return self._turns.pop(sample_key(f"{base}#{int(k) - 1}", sample), None), finished

    async def admit(self) -> bool:
        """Whether one more request of this dataset may go out, waiting while the token budget's
        estimate of what is in flight leaves no room: an estimate never closes a dataset, only
        output tokens that are done reaching the cap do."""
        budget = self.budget
        while not self.closed:
            done_tokens = self.budget_spent
            if budget is None:
                return True
            if budget.reached(done_tokens):
                self.closed = self.counts.budget_stopped = True
                c = self.counts
                withdrawn = c.pending - c.done - c.failed - c.skipped - self.in_flight
                self.progress.budget_closed(self.name, budget.cap, done_tokens, self.in_flight, withdrawn)
                return False
            if self.in_flight == 0 or budget.allows(done_tokens, len(self.resume.done), self.in_flight):
                return True
            self._ended.clear()
            await self._ended.wait()
        return False

    @property
    def budget_spent(self) -> int:
        """What --max-tokens-per-dataset charges: the rows' output tokens (earlier runs included), and
        what this run generated besides (partial outputs, waste): what the GPU spent."""
        t = self.tokens
        return self.counts.budget_tokens_done + t.partials + t.lost

    def request_started(self) -> None:
        self.in_flight += 1
        if self.counts.first_start is None:
            self.counts.first_start = time.monotonic()
        self.progress.request_started()

    def request_ended(self) -> None:
        self.in_flight -= 1
        self._ended.set()
        self.progress.request_ended()

    # --- outcomes ------------------------------------------------------------------------------
    def record_result(
        self, item: WorkItem, turn: Turn, cfg: RunConfig, model: str | None, stopped_early: str | None = None
    ) -> None:
        """Write the row of a finished prompt (every turn of it) and count it."""
        prompt, sample = item.prompt, item.request
        turns = [*item.turns, turn]
        kwargs = cfg.chat_template_kwargs if sample is None else sample.kwargs
        context = RowContext(
            id=prompt.id,
            dataset=self.name,
            partition=self.source.partition,
            source=self.label,
            prompt_hash=prompt.prompt_hash,
            tools=prompt.tools,
            model=model,
            sampling_params=sent_sampling(item),
            chat_template_kwargs=kwargs or None,
            regenerate=cfg.regenerate,
            settings=self.settings,
            mix=None if sample is None else sample.row_fields() or None,
        )
        record = build_result(context, [*item.messages, turn.message()], turns, now_iso(), stopped_early or None)
        assert self.store is not None
        self.store.append_result(record)
        self.resume.done.add(item.key)
        count_turn(self, item, turn)  # earlier turns were counted as they finished (record_turn, or an earlier run)
        self.counts.done += 1
        self.counts.last_finish = time.monotonic()
        self.progress.finished(turn.completion_tokens)

    def record_turn(self, item: WorkItem, turn: Turn) -> None:
        """regenerate=all: a finished turn of an unfinished conversation, kept for the next run too,
        with what it was made for (the prompt's hash, the settings)."""
        assert self.partial_store is not None
        prompt = item.prompt
        self.partial_store.append(
            PartialTurn(item.key, len(item.turns), turn.to_dict(), prompt.prompt_hash, self.settings)
        )
        count_turn(self, item, turn)  # the token budget counts every turn
        self.progress.turn_finished(turn.completion_tokens)

    # --- partial outputs -------------------------------------------------------------------------
    def take_partial(self, prompt_id: str, turn: int) -> Partial | None:
        """An earlier run's partial output of this prompt's turn, to continue (once)."""
        partial = self.continuing.get(prompt_id)
        if partial is None or partial.turn != turn:
            return None
        del self.continuing[prompt_id]
        return partial

    def checkpoint(self, partial: Partial, start: int) -> None:
        """A streaming request's output so far, its ids from ``start`` on (the earlier ones are on disk)."""
        if self.partial_outputs is not None:
            self.partial_outputs.append(partial, start)

    def keep_partial(self, partial: Partial, new_tokens: int) -> None:
        """A request ended early (or cut, to be extended): its output so far, on disk before anything
        else happens to it (with --keep-partials off, in memory only)."""
        if self.partial_outputs is not None:
            self.partial_outputs.append(partial)
        self.tokens.partials += new_tokens

    def record_error(
        self,
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
            prompt_id, self.name, status, kind, message, attempts, http_status, now_iso(), settled, worker
        )
        assert self.store is not None
        self.store.append_error(record)
        self.counts.last_finish = time.monotonic()
        if status == SKIPPED:
            self.counts.skipped += 1
            self.counts.skip_kinds[kind] = self.counts.skip_kinds.get(kind, 0) + 1
            self.counts.skip_example.setdefault(kind, f"{prompt_id}: {message}")
            self.progress.skipped_one()
        else:
            self.counts.failed += 1
            self.progress.failed_one()

    # --- reporting -----------------------------------------------------------------------------
    def plan_lines(self) -> list[str]:
        return plan_lines(self)

    # --- writing -------------------------------------------------------------------------------
    def begin(self, progress: Progress) -> None:
        """The run goes ahead (every check passed, the server answered): make what the plan decided
        before the first append. Until now nothing of the dataset folder was written but its lock."""
        store = self.store
        assert store is not None and not self.begun
        self.begun = True
        if self.resume.tail is not None:
            store.repair(self.resume)
            progress.message(f"{self.name}: {self.resume.repaired}")
        if self.moving:
            moved = move_rows(store.results_path, set(self.moving))
            progress.message(f"{self.name}: moved {moved:,} rows of changed prompts to changed_rows.jsonl")
        if self.redoing:
            moved = move_rows(store.results_path, set(self.redoing), LOOPED_ROWS)
            progress.message(f"{self.name}: moved {moved:,} rows the loop guard ended to {LOOPED_ROWS}")
        if self.index.mode == "all":
            partial = PartialTurns(store.dir)
            self.partial = PartialTurns.usable(self.partial_rows, self.resume.done, self.index.hashes, self.settings)
            partial.open(self.partial)
            self.partial_store = partial
            self.partial_rows = []
            self.counts.tokens_before = self.resume.completion_tokens + partial_tokens(self.partial)
        if self.keeps_partials:
            self._open_partial_outputs(progress)

    def _open_partial_outputs(self, progress: Progress) -> None:
        """The earlier runs' partial outputs this run continues; those made for another prompt text or
        under other settings are discarded (said once) and their prompts start again."""
        assert self.store is not None
        outputs = PartialOutputs(self.store.dir)
        self.continuing, discard = usable(self.partial_output_rows, self.resume.done, self.index.hashes, self.settings)
        outputs.open(self.continuing)
        self.partial_outputs, self.partial_output_rows = outputs, []
        if discard:
            self.tokens.discarded = lost = sum(p.tokens for p in discard)
            progress.message(
                f"{self.name}: {len(discard):,} partial outputs ({lost:,} tokens) discarded: their prompt or the "
                "settings changed since they were kept; those prompts start again"
            )
        if self.continuing:
            kept = sum(p.tokens for p in self.continuing.values())
            progress.message(f"{self.name}: continuing {len(self.continuing):,} partial outputs ({kept:,} tokens)")

    def close(self) -> None:
        if self.partial_store is not None:
            self.partial_store.close()
            if self.begun:
                self.partial_store.compact(self.resume.done)
        if self.partial_outputs is not None:
            self.partial_outputs.close()
            if self.begun:
                self.partial_outputs.compact(self.resume.done)
        if self.store is not None:
            if self.begun:
                # Only a run that went ahead tidies errors.jsonl: one that refused or stopped before
                # sending anything leaves it as it was.
                self.store.compact_errors(self.resume.done)
            self.store.close()


def count_turn(run: DatasetRun, item: WorkItem, turn: Turn) -> None:
    """A finished turn in the dataset's counts and its token ledger; the item's partial output is spent."""
    c = run.counts
    c.completion_tokens += turn.completion_tokens
    c.prompt_tokens += turn.prompt_tokens
    c.cached_tokens += turn.cached_tokens or 0
    t, carried, before = run.tokens, item.carried, item.carried_before
    if turn.finish_reason == "repetition":
        t.loops += turn.completion_tokens - before  # kept as a row, left out of exports
    else:
        t.rows += turn.completion_tokens - before
    t.earlier += before
    if carried is not None:
        t.partials -= carried.tokens - before  # counted as kept when this run kept them
    if turn.finish_reason == "length" and (not turn.reasoning_complete or not turn.content.strip()):
        t.cut += turn.completion_tokens - before
    if turn.extended_by:
        t.extended += 1
    item.carried, item.carried_before = None, 0  # a next turn (regenerate=all) starts afresh


def plan_lines(run: DatasetRun) -> list[str]:
    """The plan of one dataset as a run prints it: what it holds, what was passed over, what this run takes."""
    ix, sel, resume = run.index, run.selection, run.resume
    cap = "no cap" if sel.cap is None else f"cap {sel.cap:,}"
    extra = []
    if ix.duplicates:
        extra.append(f"{ix.duplicates} duplicate ids ignored (first wins)")
    if ix.bad_lines:
        extra.append(f"{ix.bad_lines} bad lines skipped")
    if ix.dropped_empty_system:
        extra.append(f"{ix.dropped_empty_system} empty system turns dropped")
    if run.mix is not None and run.mix.seeded:
        extra.append(f"{run.mix.per_prompt} samples per prompt: 'to run' counts samples")
    if resume.repaired:
        extra.append(resume.repaired)
    if resume.bom:
        extra.append("a byte order mark at the start of raw_responses.jsonl was skipped")
    if resume.bad_lines:
        extra.append(f"unreadable result lines {resume.bad_lines[:5]}")
    if resume.duplicate_rows:
        extra.append(f"{resume.duplicate_rows} duplicate result rows")
    if ix.changed:
        how = "to generate again (old rows to changed_rows.jsonl)" if run.moving else "kept"
        extra.append(f"{len(ix.changed)} changed prompts {how}")
    if run.redoing:
        extra.append(f"{len(run.redoing):,} rows the loop guard ended to generate again (old rows to {LOOPED_ROWS})")
    if run.counts.settled:
        kinds = ", ".join(sorted(run.counts.settled))
        extra.append(f"{sum(run.counts.settled.values()):,} skipped for good by an earlier run ({kinds})")
    lines = [
        f"  {run.name} ({ix.source.partition}): {sel.available:,} prompts, {cap}, "
        f"{sel.already_done:,} already done, {len(sel.pending):,} to run" + (f" [{'; '.join(extra)}]" if extra else "")
    ]
    lines += [f"    skipped {bad}" for bad in ix.first_bad]
    return lines


def sent_sampling(item: WorkItem) -> dict[str, Any]:
    """The sampling params of the payload the row's last request sent (request.Requests built it)."""
    assert item.payload is not None
    params: dict[str, Any] = item.payload["sampling_params"]
    return params


def source_label(source: DatasetSource) -> str:
    return f"{source.partition}/{source.path.name}"


def partial_tokens(partial: dict[str, list[PartialTurn]]) -> int:
    return sum(t.data.get("completion_tokens") or 0 for turns in partial.values() for t in turns)


def claim_dataset(
    source: DatasetSource, cfg: RunConfig, on_row: RowSink | None = None
) -> tuple[DatasetStore, ResumeState]:
    """Lock the dataset's folder (not in a dry run) and read what earlier runs left; nothing is
    written (a torn last line is repaired by ``DatasetRun.begin``). Done rows must belong to this
    prompt file: a row recorded from another file refuses the run. ``on_row`` (not in a dry run) gets
    every row read (``scan_results``)."""
    store = DatasetStore(cfg.output_dir, source.name)
    if cfg.dry_run:
        resume = store.recover(repair=False)
        check_source(store, source, resume)
        return store, resume
    store.lock()
    try:
        store.check_writable()
        resume = store.scan("will", on_row)
        check_source(store, source, resume)
    except BaseException:
        store.close()
        raise
    return store, resume


def recorded_settings(store: DatasetStore, resume: ResumeState) -> dict[str, Any] | None:
    """What the dataset's rows were made with: the latest set of settings.jsonl; for rows from before
    it existed, their mode (rows without one were made with --regenerate last)."""
    latest = provenance.latest(store.dir)
    if latest is not None:
        return latest
    modes = {entry.regenerate or "last" for entry in resume.entries.values()}
    return {"regenerate": modes.pop()} if len(modes) == 1 else None


def open_dataset(
    source: DatasetSource, cfg: RunConfig, progress: Progress, store: DatasetStore, resume: ResumeState
) -> DatasetRun:
    """Scan and select one dataset claimed by ``claim_dataset``; a prompt whose text changed since its
    row was written is handled by --changed-prompts. Decides only: ``DatasetRun.begin`` writes."""
    partial_rows = PartialTurns(store.dir).load() if cfg.regenerate == "all" else []
    outputs = PartialOutputs(store.dir).load() if cfg.keep_partials else []
    settled = settled_skips(store)  # their prompts' hashes are compared: tracked by the scan
    index = scan_dataset(
        source,
        cfg.skip_bad_lines,
        cfg.regenerate,
        resume.entries,
        track={
            split_key(key)[0] for key in [*(row.id for row in partial_rows), *(row.id for row in outputs), *settled]
        },
    )
    moving = changed_to_move(source, index.changed, cfg)
    redoing = [key for key, e in resume.entries.items() if e.looped and key not in moving] if cfg.redo_loops else []
    if moving or redoing:
        resume = resume.without({*moving, *redoing})
    selection, target, already_done = select_samples(index, resume.done, cfg, cfg.cap_for(source.name))
    selection, held = set_aside(selection, settled, index, cfg)
    counts = DatasetStats(
        source.name,
        target=target,
        already_done=already_done,
        pending=len(selection.pending),
        token_budget=cfg.max_tokens_per_dataset,
        tokens_before=resume.completion_tokens,
    )
    counts.hold_settled(held.values())
    budget = None
    if cfg.max_tokens_per_dataset is not None:
        budget = TokenBudget(cfg.max_tokens_per_dataset, cfg.max_tokens)
    run = DatasetRun(index, selection, resume, None if cfg.dry_run else store, counts, progress, budget)
    run.mix = Mix.from_config(cfg)
    run.moving, run.redoing = moving, redoing  # a dry run never begins: nothing moves
    run.keeps_partials, run.partial_output_rows = cfg.keep_partials, outputs
    if cfg.regenerate == "all":
        run.partial_rows = partial_rows
        # The settings are not known before the server is asked: begin() checks them too.
        run.partial = PartialTurns.usable(partial_rows, resume.done, index.hashes, None)
        counts.tokens_before += partial_tokens(run.partial)
    return run


def select_samples(index: DatasetIndex, done: set[str], cfg: RunConfig, cap: int | None) -> tuple[Selection, int, int]:
    """(the selection, whose ``pending`` are the keys of the samples to send; the samples the dataset
    should hold; those it holds). A cap counts prompts (a prompt with any sample done counts); every
    selected prompt is owed its missing samples, so a larger --samples-per-prompt adds only those."""
    per_prompt = cfg.samples_per_prompt
    if per_prompt == 1 and not cfg.mixed:
        selection = select(index.ids, done, cap, cfg.sample, cfg.seed, grouped=cfg.regenerate == "each")
        target, held = selection.target, selection.already_done
    else:
        touched = touched_prompts(done)
        selection = select(index.ids, touched, cap, cfg.sample, cfg.seed, grouped=cfg.regenerate == "each")
        started = [pid for pid in index.ids if pid in touched]
        work = [sample_key(pid, k) for pid, k in sample_work([*started, *selection.pending], done, per_prompt)]
        held = sum(1 for pid in started for k in range(per_prompt) if sample_key(pid, k) in done)
        selection, target = replace(selection, pending=work), selection.target * per_prompt
    if cfg.shard is not None:  # the whole dataset's selection, then this shard's members of it
        how = (cfg.sample, cfg.seed, cfg.regenerate == "each", per_prompt)
        selection, target = shard_selection(selection, index.ids, cap, how, cfg.shard, index.source.name)
    return selection, target, held


def check_source(store: DatasetStore, source: DatasetSource, resume: ResumeState) -> None:
    label = source_label(source)
    other = next((e for e in resume.entries.values() if e.source is not None and e.source != label), None)
    if other is not None:
        raise UsageError(
            f"{store.results_path}: holds rows of prompts from {other.source} (id {other.id}), but this run reads "
            f"{label}: two prompt files share the dataset name '{source.name}'; pass another --output-dir for "
            "this one (or rename one of the files)"
        )


def changed_to_move(source: DatasetSource, changed: list[str], cfg: RunConfig) -> list[str]:
    """The done prompts whose rows go to changed_rows.jsonl (to be generated again): none with
    --changed-prompts keep, all with regenerate; refuse (the default) refuses the run."""
    if not changed:
        return []
    first = ", ".join(changed[:3])
    what = f"{len(changed):,} done prompts of {source.path} changed since their rows were written (first: {first})"
    if cfg.changed_prompts == "refuse":
        raise UsageError(
            f"{what}; pass --changed-prompts keep (keep the old rows) or --changed-prompts regenerate (move them "
            "to changed_rows.jsonl and generate again), or use another --output-dir"
        )
    return [] if cfg.changed_prompts == "keep" else changed
