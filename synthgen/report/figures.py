"""What the page says about one dataset, tallied from its rows (pure: rows in, figures out).

    DatasetFigures.add_row(row)     one result row (a dict as read from raw_responses.jsonl)
    DatasetFigures.set_errors(rows) the error rows of errors.jsonl (the latest per prompt counts)
    bins(values_by_key)             shared histogram bins over several series (stacked by finish reason)

Definitions (the same as ``export_training.py --report``): a row is *cut* when any generated turn ended
with finish_reason ``length``; it has an *empty answer* when any turn closed its reasoning (or had none)
and wrote neither an answer nor a tool call. Rows are counted once per id (the first is kept).

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

STOP, LENGTH = "stop", "length"


def _count(value: Any) -> int:
    """A token count of a row: a whole number >= 0, anything else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _calls(turn: Mapping[str, Any]) -> int:
    calls = turn.get("tool_calls")
    return len(calls) if isinstance(calls, list) else 0


def turns_of(row: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The generated turns of a row: ``turns`` (regenerate=all), else the row itself as its one turn."""
    turns = row.get("turns")
    if isinstance(turns, list) and turns and all(isinstance(t, dict) for t in turns):
        return turns
    return [row]


def split_tokens(tokens: int, reasoning: str, answer: str) -> tuple[int, int]:
    """(reasoning, answer) tokens of a turn: its output tokens split by the characters of each part."""
    chars = len(reasoning) + len(answer)
    if not chars:
        return 0, tokens
    part = round(tokens * len(reasoning) / chars)
    return part, tokens - part


def is_empty_answer(turn: Mapping[str, Any]) -> bool:
    return turn.get("reasoning_complete") is not False and not _text(turn.get("content")).strip() and not _calls(turn)


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
    rows: int = 0  # unique ids
    duplicates: int = 0  # further rows with an id already counted
    unreadable: int = 0  # lines that are not a JSON object (a torn line)
    finish: Counter[str] = field(default_factory=Counter)  # the row's (last turn's) finish_reason -> rows
    output_tokens: int = 0
    prompt_tokens: int = 0
    cut: int = 0
    empty: int = 0
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
    _ids: set[str] = field(default_factory=set, repr=False)

    def add(self, row: Mapping[str, Any] | None) -> None:
        """One line of the results file: a row, or None for a line that is no JSON object."""
        if row is None:
            self.unreadable += 1
        else:
            self.add_row(row)

    def add_row(self, row: Mapping[str, Any]) -> None:
        rid = row.get("id")
        key = rid if isinstance(rid, str) else repr(rid)
        if key in self._ids:
            self.duplicates += 1
            return
        self._ids.add(key)
        self.rows += 1
        turns = turns_of(row)
        finish = _text(row.get("finish_reason")) or "unknown"
        self.finish[finish] += 1
        self.by_worker[_text(row.get("worker")) or "-", finish] += 1
        output, prompt = _count(row.get("completion_tokens")), _count(row.get("prompt_tokens"))
        self.output_tokens += output
        self.prompt_tokens += prompt
        reasoning = answer = 0
        for turn in turns:
            r, a = split_tokens(
                _count(turn.get("completion_tokens")), _text(turn.get("reasoning_content")), _text(turn.get("content"))
            )
            reasoning, answer = reasoning + r, answer + a
        self.samples.append(RowFigures(finish, prompt, output, reasoning, answer))
        self.cut += any(t.get("finish_reason") == LENGTH for t in turns)
        self.empty += any(is_empty_answer(t) for t in turns)
        calls = sum(_calls(t) for t in turns)
        self.tool_calls += calls
        self.rows_with_tool_calls += calls > 0
        self.turns += len(turns)
        self.turns_per_row[len(turns)] += 1

    def set_errors(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """errors.jsonl: the latest line of each prompt counts, and only prompts that have no row."""
        latest: dict[str, Mapping[str, Any]] = {}
        for row in rows:
            rid = row.get("id")
            if isinstance(rid, str):
                latest[rid] = row
        self.errors = Counter()
        self.error_example = {}
        self.by_worker = Counter({k: n for k, n in self.by_worker.items() if not k[1].startswith("error ")})
        for rid, row in latest.items():
            if rid in self._ids:
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
