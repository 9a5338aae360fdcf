"""One dataset's run: its input index, what earlier runs left, the prompts this run takes, the
result store, its tally (``counts``, which the writer alone changes), and the token budget.

    claim_dataset()       lock the output folder, read what is done (nothing is written)
    open_dataset()        scan + validate the prompt file, decide about changed prompts, select
                          this run's prompts (still nothing is written)
    DatasetRun.begin      once the whole run has decided to go: repair a torn line, move changed
                          rows aside, tidy partial_turns.jsonl; a run that refuses changes nothing

What a request makes is written and counted by run/writer.py alone (rows, errors, partial outputs,
the tally ``counts``); here are the dataset's stores and state, read by it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from synthgen.config import RunConfig
from synthgen.data import provenance
from synthgen.data.partials import Partial, PartialOutputs, usable
from synthgen.data.prompts import DatasetIndex, DatasetSource, scan_dataset
from synthgen.data.readers import label_stem
from synthgen.data.samples import sample_key, sample_work, split_key, touched_prompts
from synthgen.data.selection import Selection, select
from synthgen.data.shards import shard_selection
from synthgen.data.store import DatasetStore, PartialTurn, PartialTurns, ResumeState, RowSink, move_rows
from synthgen.errors import UsageError
from synthgen.fmt import plural
from synthgen.run.ledger import TokenLedger
from synthgen.run.mix import Mix
from synthgen.run.progress import DatasetStats, Progress
from synthgen.run.settled import set_aside, settled_skips

LOOPED_ROWS = "looped_rows.jsonl"  # --redo repetition: where the rows the loop guard ended are moved


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True)
class Begun:
    """What ``DatasetRun.begin`` found for the tally: the output tokens of the rows and kept turns
    (--regenerate all: None otherwise), and the earlier partial outputs' tokens it discarded."""

    tokens_before: int | None
    discarded: int


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
    budget: TokenBudget | None = None
    partial: dict[str, list[PartialTurn]] = field(default_factory=dict)  # regenerate=all: turns to continue from
    partial_store: PartialTurns | None = None
    partial_rows: list[PartialTurn] = field(default_factory=list)  # regenerate=all: what partial_turns.jsonl held
    moving: list[str] = field(default_factory=list)  # --changed-prompts regenerate: rows begin() moves aside
    redoing: list[str] = field(default_factory=list)  # --redo repetition: the loop guard's rows begin() moves aside
    settings: str | None = None  # the settings id rows of this run carry
    partial_outputs: PartialOutputs | None = None  # requests ended early, kept to continue (data/partials.py)
    partial_output_rows: list[Partial] = field(default_factory=list)  # what partial_outputs.jsonl held
    continuing: dict[str, Partial] = field(default_factory=dict)  # earlier runs' partials to continue, by id
    keeps_partials: bool = False  # --keep-partials on
    mix: Mix | None = None  # samples and recipes: what each (prompt, sample) is sent with
    begun: bool = False  # begin() ran: the run writes this dataset's files
    _turns: dict[str, asyncio.Event] = field(default_factory=dict, init=False, repr=False)

    @property
    def name(self) -> str:
        return self.index.source.name

    @property
    def source(self) -> DatasetSource:
        return self.index.source

    @property
    def tokens(self) -> TokenLedger:
        """Where this run's output tokens of the dataset went (part of its tally, run/writer.py counts)."""
        return self.counts.tokens

    @property
    def closed(self) -> bool:
        """No new requests (the token budget is reached)."""
        return self.counts.budget_stopped

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

    @property
    def budget_spent(self) -> int:
        """What --max-tokens-per-dataset charges: the rows' output tokens (earlier runs included), and
        what this run generated besides (partial outputs, waste): what the GPU spent."""
        t = self.tokens
        return self.counts.budget_tokens_done + t.partials + t.lost

    def settle(self, settings: str) -> None:
        """The settings id this run's rows of the dataset carry (known once the server was asked)."""
        self.settings = settings

    # --- partial outputs -------------------------------------------------------------------------
    def take_partial(self, prompt_id: str, turn: int) -> Partial | None:
        """An earlier run's partial output of this prompt's turn, to continue (once)."""
        partial = self.continuing.get(prompt_id)
        if partial is None or partial.turn != turn:
            return None
        del self.continuing[prompt_id]
        return partial

    # --- reporting -----------------------------------------------------------------------------
    def plan_lines(self) -> list[str]:
        return plan_lines(self)

    # --- writing -------------------------------------------------------------------------------
    def begin(self, progress: Progress) -> Begun:
        """The run goes ahead (every check passed, the server answered): make what the plan decided
        before the first append. Until now nothing of the dataset folder was written but its lock.
        Called by the writer (``writer.Writer.begin``), which counts the figures it returns."""
        store = self.store
        assert store is not None and not self.begun
        self.begun = True
        if self.resume.tail is not None:
            store.repair(self.resume)
            progress.message(f"{self.name}: {self.resume.repaired}")
        if self.moving:
            moved = move_rows(store.results_path, set(self.moving))
            progress.message(f"{self.name}: moved {plural(moved, 'row')} of changed prompts to changed_rows.jsonl")
        if self.redoing:
            moved = move_rows(store.results_path, set(self.redoing), LOOPED_ROWS)
            progress.message(f"{self.name}: moved {plural(moved, 'row')} the loop guard ended to {LOOPED_ROWS}")
        tokens_before = 0
        if self.index.mode == "all":
            partial = PartialTurns(store.dir)
            self.partial = PartialTurns.usable(self.partial_rows, self.resume.done, self.index.hashes, self.settings)
            partial.open(self.partial)
            self.partial_store = partial
            self.partial_rows = []
            tokens_before = self.resume.completion_tokens + partial_tokens(self.partial)
        discarded = self._open_partial_outputs(progress) if self.keeps_partials else 0
        return Begun(tokens_before if self.index.mode == "all" else None, discarded)

    def _open_partial_outputs(self, progress: Progress) -> int:
        """The earlier runs' partial outputs this run continues; those made for another prompt text or
        under other settings are discarded (said once) and their prompts start again."""
        assert self.store is not None
        outputs = PartialOutputs(self.store.dir)
        self.continuing, discard = usable(self.partial_output_rows, self.resume.done, self.index.hashes, self.settings)
        outputs.open(self.continuing)
        self.partial_outputs, self.partial_output_rows = outputs, []
        lost = sum(p.tokens for p in discard)
        if discard:
            progress.message(
                f"{self.name}: {len(discard):,} partial outputs ({lost:,} tokens) discarded: their prompt or the "
                "settings changed since they were kept; those prompts start again"
            )
        if self.continuing:
            kept = sum(p.tokens for p in self.continuing.values())
            progress.message(
                f"{self.name}: continuing {plural(len(self.continuing), 'partial output')} ({plural(kept, 'token')})"
            )
        return lost

    def close(self, tidy: bool = True) -> None:
        """The dataset's files closed, its lock released; a run that went ahead also tidies them (each
        file rewritten without what is done), unless ``tidy`` is False: after a write the disk refused,
        a rewrite (a second copy) would be refused too, and the next run tidies them. A failed tidying
        raises once every file is closed."""
        tidy = tidy and self.begun
        try:
            if self.partial_store is not None:
                self.partial_store.close()
                if tidy:
                    self.partial_store.compact(self.resume.done)
            if self.partial_outputs is not None:
                self.partial_outputs.close()
                if tidy:
                    self.partial_outputs.compact(self.resume.done)
            if self.store is not None and tidy:
                # Only a run that went ahead tidies errors.jsonl: one that refused or stopped before
                # sending anything leaves it as it was.
                self.store.compact_errors(self.resume.done)
        finally:
            if self.store is not None:
                self.store.close()


def plan_lines(run: DatasetRun) -> list[str]:
    """The plan of one dataset as a run prints it: what it holds, what was passed over, what this run takes."""
    ix, sel, resume = run.index, run.selection, run.resume
    per_prompt = run.mix.per_prompt if run.mix is not None else 1
    cap = "no cap" if sel.cap is None else f"cap {plural(sel.cap, 'prompt') if per_prompt > 1 else f'{sel.cap:,}'}"
    extra = []
    if ix.duplicates:
        extra.append(f"{plural(ix.duplicates, 'duplicate id')} ignored (first wins)")
    if ix.bad_lines:
        extra.append(f"{plural(ix.bad_lines, f'bad {ix.reader.unit}')} skipped")
    if ix.dropped_empty_system:
        extra.append(f"{plural(ix.dropped_empty_system, 'empty system turn')} dropped")
    if resume.repaired:
        extra.append(resume.repaired)
    if resume.bom:
        extra.append("a byte order mark at the start of raw_responses.jsonl was skipped")
    if resume.bad_lines:
        extra.append(f"unreadable result lines {resume.bad_lines[:5]}")
    if resume.duplicate_rows:
        extra.append(plural(resume.duplicate_rows, "duplicate result row"))
    if ix.changed:
        how = "to generate again (old rows to changed_rows.jsonl)" if run.moving else "kept"
        extra.append(f"{plural(len(ix.changed), 'changed prompt')} {how}")
    if run.redoing:
        redo = plural(len(run.redoing), "row")
        extra.append(f"{redo} the loop guard ended to generate again (old rows to {LOOPED_ROWS})")
    if run.counts.settled:
        kinds = ", ".join(sorted(run.counts.settled))
        extra.append(f"{sum(run.counts.settled.values()):,} skipped for good by an earlier run ({kinds})")
    # Several samples of a prompt: what is done and what is to run are samples, and said so.
    held = f"{sel.already_done:,}" if per_prompt == 1 else plural(run.counts.already_done, "sample")
    prompts = plural(sel.available, "prompt") + (f" x {per_prompt:,} samples" if per_prompt > 1 else "")
    lines = [
        f"  {run.name} ({ix.source.partition}): {prompts}, {cap}, {held} already done, {len(sel.pending):,} to run"
        + (f" [{'; '.join(extra)}]" if extra else "")
    ]
    lines += [f"    skipped {bad}" for bad in ix.first_bad]
    return lines


def source_label(source: DatasetSource) -> str:
    return source.label


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


def open_dataset(source: DatasetSource, cfg: RunConfig, store: DatasetStore, resume: ResumeState) -> DatasetRun:
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
        columns=cfg.columns,
    )
    moving = changed_to_move(source, index.changed, cfg)
    redoing = [key for key, e in resume.entries.items() if e.looped and key not in moving] if cfg.redo_loops else []
    if moving or redoing:
        resume = resume.without({*moving, *redoing})
    selection, target, already_done = select_samples(index, resume.done, cfg, cfg.cap_for(source.name))
    selection, held = set_aside(selection, settled, index, cfg)
    # regenerate=all: the turns to continue from (the settings are not known before the server is
    # asked: begin() checks them too), their output tokens counted with the rows'.
    partial = PartialTurns.usable(partial_rows, resume.done, index.hashes, None) if cfg.regenerate == "all" else {}
    counts = DatasetStats(
        source.name,
        target=target,
        already_done=already_done,
        pending=len(selection.pending),
        token_budget=cfg.max_tokens_per_dataset,
        tokens_before=resume.completion_tokens + partial_tokens(partial),
    )
    counts.hold_settled(held.values())
    budget = None
    if cfg.max_tokens_per_dataset is not None:
        budget = TokenBudget(cfg.max_tokens_per_dataset, cfg.max_tokens)
    return DatasetRun(
        index,
        selection,
        resume,
        None if cfg.dry_run else store,
        counts,
        budget,
        partial=partial,
        partial_rows=partial_rows,
        moving=moving,  # a dry run never begins: nothing moves
        redoing=redoing,
        partial_output_rows=outputs,
        keeps_partials=cfg.keep_partials,
        mix=Mix.from_config(cfg),
    )


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
    # The same partition/name in another format (a JSONL file now a parquet folder) is the same dataset.
    other = next(
        (e for e in resume.entries.values() if e.source is not None and label_stem(e.source) != label_stem(label)),
        None,
    )
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
