"""What the page says about one dataset, tallied from its rows (pure: rows in, figures out).

    DatasetFigures.add(outcome)     one line of raw_responses.jsonl as the row reader read it (rowread.read_row)
    DatasetFigures.set_errors(rows) the error rows of errors.jsonl (the latest per prompt counts)
    bins(values_by_key)             shared histogram bins over several series (stacked by finish reason)

Definitions (``synthgen.data.rowread``, the same as ``export_training.py --report``): a row is *cut* when any
generated turn ended with finish_reason ``length``; it has an *empty answer* when any turn closed its reasoning
(or had none) and wrote neither an answer nor a tool call; it *looped* when the loop guard ended a turn. Rows
are counted once per key, ``(id, sample)`` (the first is kept); a malformed row is counted apart.

Rows record their output tokens, not how many of them were reasoning: the reasoning and answer lengths in
tokens are estimates, each turn's output tokens split in proportion to the characters of its reasoning and
its answer (``split_tokens``). Every other figure is exact.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from synthgen.data.rowread import (
    Malformed,
    Outcome,
    Row,
    Unreadable,
    cut,
    cut_unanswered,
    empty_answer,
    from_dict,
    looped,
)
from synthgen.report.examples import Examples
from synthgen.report.mix import MixFigures

STOP = "stop"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def split_tokens(tokens: int, reasoning: str, answer: str) -> tuple[int, int]:
    """(reasoning, answer) tokens of a turn: its output tokens split by the characters of each part."""
    chars = len(reasoning) + len(answer)
    if not chars:
        return 0, tokens
    part = round(tokens * len(reasoning) / chars)
    return part, tokens - part


@dataclass(slots=True)
class RowFigures:
    """What the histograms need of one row."""

    finish: str
    prompt: int
    output: int
    reasoning: int
    answer: int


@dataclass
class DatasetFigures:
    name: str
    rows: int = 0  # unique row keys: (id, sample)
    duplicates: int = 0  # further rows with a key already counted
    unreadable: int = 0  # lines that are not a JSON object (a torn line)
    malformed: int = 0  # JSON objects that are no usable result row (rowread.Malformed)
    finish: Counter[str] = field(default_factory=Counter)  # the row's (last turn's) finish_reason -> rows
    output_tokens: int = 0
    prompt_tokens: int = 0
    cut: int = 0  # rows with a turn cut at the token limit (rowread.cut)
    empty: int = 0  # rows with a turn that answered nothing (rowread.empty_answer)
    looped: int = 0  # rows ended by the loop guard (rowread.looped)
    looped_tokens: int = 0  # their output tokens
    cut_unanswered_tokens: int = 0  # output tokens of rows cut before their answer (rowread.cut_unanswered)
    tool_calls: int = 0
    rows_with_tool_calls: int = 0
    turns: int = 0  # generated turns
    turns_per_row: Counter[int] = field(default_factory=Counter)
    samples: list[RowFigures] = field(default_factory=list)
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)  # (status, error_type) -> prompts
    error_example: dict[tuple[str, str], str] = field(default_factory=dict)
    budget: int | None = None  # output tokens the dataset may use
    by_worker: Counter[tuple[str, str]] = field(default_factory=Counter)  # (worker, finish or error kind) -> rows
    budget_kind: str = ""  # "cap" (--max-tokens-per-dataset) or "plan" (a budget file's expected tokens)
    examples: Examples = field(default_factory=Examples)  # a few rows kept to show (examples.py)
    mix: MixFigures = field(default_factory=MixFigures)  # lengths per recipe and per sample (mix.py)
    worker_tokens: Counter[str] = field(default_factory=Counter)  # worker -> output tokens of its rows
    _ids: set[str] = field(default_factory=set, repr=False)  # the keys of the rows counted
    _answered: set[str] = field(default_factory=set, repr=False)  # the keys of malformed rows

    def add(self, outcome: Outcome) -> None:
        """One line of the results file, as the row reader read it."""
        if isinstance(outcome, Unreadable):
            self.unreadable += 1
        elif isinstance(outcome, Malformed):
            self.malformed += 1
            if outcome.key is not None:  # its prompt is answered (the resume counts it done): no error shows
                self._answered.add(outcome.key)
        elif outcome.key in self._ids:
            self.duplicates += 1
        else:
            self._ids.add(outcome.key)
            self._add_row(outcome)

    def add_row(self, row: dict[str, Any]) -> None:
        """One result row as a dict (as read from raw_responses.jsonl)."""
        self.add(from_dict(row))

    def _add_row(self, row: Row) -> None:
        self.rows += 1
        turns = row.turns  # built once: every figure below is of the same typed turns
        finish = turns[-1].finish_reason or "unknown"
        self.finish[finish] += 1
        self.by_worker[row.worker or "-", finish] += 1
        self.worker_tokens[row.worker or "-"] += row.output_tokens
        output, prompt = row.output_tokens, row.prompt_tokens
        self.output_tokens += output
        self.prompt_tokens += prompt
        reasoning = answer = calls = 0
        was_cut = was_empty = was_looped = False
        for turn in turns:
            r, a = split_tokens(turn.completion_tokens, turn.reasoning_content, turn.content)
            reasoning, answer = reasoning + r, answer + a
            calls += len(turn.tool_calls or ())
            was_cut = was_cut or cut(turn)
            was_empty = was_empty or empty_answer(turn)
            was_looped = was_looped or looped(turn)
        self.samples.append(RowFigures(finish, prompt, output, reasoning, answer))
        self.cut += was_cut
        self.empty += was_empty
        self.looped += was_looped
        if was_looped:
            self.looped_tokens += output
        elif cut_unanswered(turns[-1]):
            self.cut_unanswered_tokens += output
        self.tool_calls += calls
        self.rows_with_tool_calls += calls > 0
        self.turns += len(turns)
        self.turns_per_row[len(turns)] += 1
        self.examples.add(row)
        self.mix.add(row)

    def set_errors(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """errors.jsonl: the latest line of each prompt counts, and only prompts that have no row (an error
        row's id is its sample's key, ``samples.sample_key``, as a result row's key)."""
        latest: dict[str, Mapping[str, Any]] = {}
        for row in rows:
            rid = row.get("id")
            if isinstance(rid, str):
                latest[rid] = row
        self.errors = Counter()
        self.error_example = {}
        self.by_worker = Counter({k: n for k, n in self.by_worker.items() if not k[1].startswith("error ")})
        for rid, row in latest.items():
            if rid in self._ids or rid in self._answered:
                continue
            key = (_text(row.get("status")) or "failed", _text(row.get("error_type")) or "unknown")
            self.errors[key] += 1
            if key[0] == "failed":
                self.by_worker[_text(row.get("worker")) or "-", "error " + key[1]] += 1
            self.error_example.setdefault(key, f"{rid}: {_text(row.get('error'))}")

    @property
    def failed(self) -> int:
        return sum(n for (status, _), n in self.errors.items() if status == "failed")

    @property
    def skipped(self) -> int:
        return sum(n for (status, _), n in self.errors.items() if status != "failed")

    def by_finish(self, attr: str) -> dict[str, list[int]]:
        """``attr`` of every row (prompt, output, reasoning, answer), by the row's finish reason."""
        out: dict[str, list[int]] = {}
        for sample in self.samples:
            out.setdefault(sample.finish, []).append(getattr(sample, attr))
        return out


def share(part: int, whole: int) -> str:
    """``12.5%``; ``-`` of nothing."""
    return f"{100 * part / whole:.1f}%" if whole else "-"


def nice_width(span: int, bins: int) -> int:
    """The smallest of 1, 2 or 5 times a power of ten that covers ``span`` in ``bins`` bins."""
    raw = max(1, math.ceil(span / bins))
    power = 1
    while True:
        for step in (1, 2, 5):
            if step * power >= raw:
                return step * power
        power *= 10


@dataclass(frozen=True)
class Bins:
    edges: list[tuple[int, int]]  # (low, high) inclusive
    counts: dict[str, list[int]]  # series -> count per bin


def bins(values: Mapping[str, Sequence[int]], count: int = 20) -> Bins:
    """Shared bins of round width over every series; each value falls in exactly one bin."""
    every = [v for series in values.values() for v in series]
    if not every:
        return Bins([], {})
    low, high = min(every), max(every)
    width = nice_width(high - low + 1, count)
    start = low // width * width
    n = (high - start) // width + 1
    counts = {}
    for key, series in values.items():
        tally = [0] * n
        for v in series:
            tally[(v - start) // width] += 1
        counts[key] = tally
    return Bins([(start + i * width, start + (i + 1) * width - 1) for i in range(n)], counts)


def quantile(values: Sequence[int], q: float) -> int:
    """Nearest-rank quantile (one of the values); 0 of none."""
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]
