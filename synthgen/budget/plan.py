"""Token budgets turned into per-dataset sample counts: parsing, math and the table (pure, no I/O).

A dataset with budget B output tokens and an average completion length A gets
``min(available, floor(B / A))`` samples, so in expectation it never exceeds its budget.
Arithmetic is exact (``Fraction``): a budget that is an exact multiple of the average
gives exactly that many samples, with no float rounding at the boundary.

Where the average comes from, first that applies:

    avg-tokens   --avg-tokens NAME=N
    measured     mean completion_tokens of the rows already in outputs/<dataset>/raw_responses.jsonl
    default-avg  --default-avg N
    (none)       no estimate: the dataset gets no sample count

``--fixed NAME=TOKENS`` datasets were generated elsewhere: they count toward the token
total but not toward the generation time. ``--existing NAME=PATH`` datasets are files of token
rows (``--format tokens``): their rows count as samples and their trained tokens (``loss_mask`` 1)
as tokens, and no inference is planned for them.

With ``--samples-per-prompt N`` every prompt is answered N times, so a dataset gets
``min(available, floor(B / (N * A)))`` prompts: 10M tokens at 4 samples per prompt select a
quarter of the prompts 1 sample would. ``max_samples`` stays a count of prompts, as
``--max-samples`` is; ``samples`` is prompts times N.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

from synthgen.errors import UsageError

SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9}
AVG_SOURCES = ("avg-tokens", "measured", "default-avg")
FIXED = "fixed"
EXISTING = "existing"

_NUMBER = re.compile(r"(\d+(?:\.\d+)?|\.\d+)([a-z]*)", re.IGNORECASE)
_EXAMPLES = "e.g. 10M, 2.5B, 500K or 10000000"


# --- parsing ---------------------------------------------------------------------------------------
def parse_amount(text: str, flag: str) -> Fraction:
    """A positive number, optionally with a K/M/B suffix (case-insensitive); decimals allowed."""
    raw = text.strip()
    match = _NUMBER.fullmatch(raw)
    if match is None:
        if raw.startswith("-") and _NUMBER.fullmatch(raw[1:]):
            raise UsageError(f"{flag} must be positive, got '{text}'")
        raise UsageError(f"{flag}: '{text}' is not a number; use {_EXAMPLES}")
    digits, suffix = match.groups()
    if suffix.lower() not in SUFFIXES:
        raise UsageError(f"{flag}: unknown suffix '{suffix}' in '{text}'; use K, M or B ({_EXAMPLES})")
    value = Fraction(digits) * SUFFIXES[suffix.lower()]
    if value <= 0:
        raise UsageError(f"{flag} must be positive, got '{text}'")
    return value


def parse_count(text: str, flag: str) -> int:
    """A positive whole number of tokens: ``10M``, ``2.5B``, ``500K``, ``10m``, ``10000000``."""
    value = parse_amount(text, flag)
    if value.denominator != 1:
        match = _NUMBER.fullmatch(text.strip())
        comes_to = "" if match is None or match.group(2) == "" else f" ({fmt_number(value)})"
        raise UsageError(f"{flag}: '{text}'{comes_to} is not a whole number of tokens")
    return int(value)


def parse_throughput(text: str) -> tuple[Fraction, ...]:
    """``1200`` -> (1200,); ``1000-1500`` -> (1000, 1500). Output tokens per second."""
    flag = "--throughput"
    if text.strip().startswith("-"):
        raise UsageError(f"{flag} must be positive, got '{text}'")
    parts = text.split("-")
    if len(parts) > 2 or not all(p.strip() for p in parts):
        raise UsageError(f"{flag}: '{text}' is not a figure or a range; use e.g. 1200 or 1000-1500")
    ends = tuple(parse_amount(p, flag) for p in parts)
    if len(ends) == 2:
        low, high = ends
        if low > high:
            raise UsageError(f"{flag}: range '{text}' goes down; put the lower figure first ({parts[1]}-{parts[0]})")
        if low == high:
            return (low,)
    return ends


def parse_assignment(text: str, flag: str) -> tuple[str, str]:
    """``NAME=VALUE`` -> (name, value text); the caller parses the value."""
    name, sep, value = text.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise UsageError(f"{flag}: '{text}' is not NAME=N; write it like {flag} math=3793")
    return name, value


def parse_assignments(texts: Sequence[str], flag: str, parse: Callable[[str, str], object]) -> dict[str, object]:
    """Every ``NAME=VALUE`` of a repeatable flag, each name once; ``parse(value_text, flag)``."""
    out: dict[str, object] = {}
    for text in texts:
        name, value = parse_assignment(text, flag)
        parsed = parse(value, f"{flag} {name}")
        if name in out:
            raise UsageError(f"{flag}: '{name}' is given twice; keep one")
        out[name] = parsed
    return out


# --- averages --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Measurement:
    """completion_tokens of the rows already generated for a dataset."""

    rows: int
    mean: Fraction
    p50: int
    p90: int
    truncated: int = 0  # rows that stopped at max_tokens (finish_reason "length")


def percentile(sorted_values: Sequence[int], p: int) -> int:
    """Nearest-rank percentile: the smallest value with at least p% of the values at or below it."""
    rank = max(1, math.ceil(p * len(sorted_values) / 100))
    return sorted_values[rank - 1]


def measure(tokens: Sequence[int], truncated: int = 0) -> Measurement | None:
    if not tokens:
        return None
    ordered = sorted(tokens)
    return Measurement(
        rows=len(ordered),
        mean=Fraction(sum(ordered), len(ordered)),
        p50=percentile(ordered, 50),
        p90=percentile(ordered, 90),
        truncated=truncated,
    )


@dataclass(frozen=True, slots=True)
class Estimate:
    avg: Fraction
    source: str  # one of AVG_SOURCES
    measurement: Measurement | None = None


def choose_estimate(given: Fraction | None, measured: Measurement | None, default: Fraction | None) -> Estimate | None:
    """--avg-tokens, else the measured mean, else --default-avg, else no estimate."""
    if given is not None:
        return Estimate(Fraction(given), "avg-tokens")
    if measured is not None:
        return Estimate(measured.mean, "measured", measured)
    if default is not None:
        return Estimate(Fraction(default), "default-avg")
    return None


# --- the plan --------------------------------------------------------------------------------------
def samples_for(budget: int, avg: Fraction, available: int, per_prompt: int = 1) -> int:
    """Prompts: min(available, floor(budget / (per_prompt * avg))): the expected output never exceeds the budget."""
    return min(available, math.floor(Fraction(budget) / (per_prompt * Fraction(avg))))


def expected_tokens(samples: int, avg: Fraction, per_prompt: int = 1) -> int:
    """samples * per_prompt * avg, rounded half up to a whole token."""
    return math.floor(samples * per_prompt * Fraction(avg) + Fraction(1, 2))


@dataclass(frozen=True, slots=True)
class DatasetPlan:
    name: str
    available: int | None  # unique prompts; None for a fixed dataset
    estimate: Estimate | None  # None: fixed, or no estimate
    max_samples: int | None  # None: no estimate; 0 for a fixed dataset
    expected_tokens: int | None
    fixed: bool = False  # generated elsewhere: in the token total, not in the generation time
    partition: str | None = None
    per_prompt: int = 1  # samples of each prompt
    rows: int | None = None  # an --existing dataset: its token rows (fixed is then True)
    total_tokens: int | None = None  # an --existing dataset: all its tokens, prompts included
    path: str | None = None  # an --existing dataset: its file, as given (the export of the plan merges it)

    @property
    def has_estimate(self) -> bool:
        return self.max_samples is not None

    @property
    def existing(self) -> bool:
        return self.rows is not None

    @property
    def samples(self) -> int | None:
        """Rows this dataset brings: prompts times samples per prompt, or an existing file's rows."""
        if self.existing:
            return self.rows
        if self.fixed or self.max_samples is None:
            return None
        return self.max_samples * self.per_prompt


def plan_dataset(
    name: str,
    available: int,
    estimate: Estimate | None,
    budget: int,
    partition: str | None = None,
    per_prompt: int = 1,
) -> DatasetPlan:
    if estimate is None:
        return DatasetPlan(name, available, None, None, None, partition=partition, per_prompt=per_prompt)
    prompts = samples_for(budget, estimate.avg, available, per_prompt)
    tokens = expected_tokens(prompts, estimate.avg, per_prompt)
    return DatasetPlan(name, available, estimate, prompts, tokens, partition=partition, per_prompt=per_prompt)


def fixed_dataset(name: str, tokens: int) -> DatasetPlan:
    return DatasetPlan(name, None, None, 0, tokens, fixed=True)


def existing_dataset(
    name: str, rows: int, trained_tokens: int, total_tokens: int, path: str | None = None
) -> DatasetPlan:
    """A file of token rows: in the samples and the tokens, never generated."""
    estimate = Estimate(Fraction(trained_tokens, rows), EXISTING)
    return DatasetPlan(
        name, None, estimate, 0, trained_tokens, fixed=True, rows=rows, total_tokens=total_tokens, path=path
    )


@dataclass(frozen=True, slots=True)
class Plan:
    tokens_per_dataset: int
    datasets: tuple[DatasetPlan, ...]
    throughput: tuple[Fraction, ...]
    samples_per_prompt: int = 1

    @property
    def generated(self) -> list[DatasetPlan]:
        return [d for d in self.datasets if not d.fixed and d.has_estimate]

    @property
    def no_estimate(self) -> list[DatasetPlan]:
        return [d for d in self.datasets if not d.has_estimate]

    @property
    def fixed_tokens(self) -> int:
        return sum(d.expected_tokens or 0 for d in self.datasets if d.fixed and not d.existing)

    @property
    def existing_tokens(self) -> int:
        return sum(d.expected_tokens or 0 for d in self.datasets if d.existing)

    @property
    def existing_rows(self) -> int:
        return sum(d.rows or 0 for d in self.datasets if d.existing)

    @property
    def generation_tokens(self) -> int:
        return sum(d.expected_tokens or 0 for d in self.generated)

    @property
    def total_tokens(self) -> int:
        return self.generation_tokens + self.fixed_tokens + self.existing_tokens

    @property
    def total_prompts(self) -> int:
        return sum(d.max_samples or 0 for d in self.generated)

    @property
    def total_samples(self) -> int:
        """Rows the plan makes: every sample of every prompt, and the existing rows."""
        return sum(d.samples or 0 for d in self.generated) + self.existing_rows

    @property
    def total_available(self) -> int:
        return sum(d.available or 0 for d in self.datasets if not d.fixed)

    def hours(self) -> tuple[float, ...]:
        """Generation time at each throughput figure, in the order given (slowest first)."""
        return generation_hours(self.generation_tokens, self.throughput)


def fmt_hours(hours: float) -> str:
    """Hours with one decimal; under six minutes, minutes; under one, seconds: a small plan never reads 0.0."""
    if hours >= 0.1:
        return f"{hours:,.1f} h"
    if hours * 60 >= 1:
        return f"{hours * 60:.1f} min"
    seconds = hours * 3600
    return f"{seconds:.0f} s" if seconds >= 1 or seconds == 0 else "<1 s"


def generation_hours(tokens: int, throughput: Sequence[Fraction]) -> tuple[float, ...]:
    return tuple(float(Fraction(tokens) / Fraction(rate) / 3600) for rate in throughput)


# --- output ----------------------------------------------------------------------------------------
def fmt_number(value: int | Fraction | float) -> str:
    """Thousands separators; one decimal only when the value is not whole (two significant
    digits below 1, so 0.04 tok/s does not read 0.0)."""
    if isinstance(value, int) or Fraction(value).denominator == 1:
        return f"{int(value):,}"
    if abs(float(value)) < 1:
        return f"{float(value):.2g}"
    return f"{float(value):,.1f}"


def source_label(plan: DatasetPlan) -> str:
    if plan.existing:
        return f"existing pre-tok, {fmt_number(plan.total_tokens or 0)} in all"
    if plan.fixed:
        return "fixed (generated elsewhere)"
    if plan.estimate is None:
        return "no estimate"
    if plan.estimate.source == "measured":
        m = plan.estimate.measurement
        assert m is not None  # a measured estimate carries its measurement
        rows = "row" if m.rows == 1 else "rows"
        return f"measured: {m.rows:,} {rows}, p50 {m.p50:,}, p90 {m.p90:,}"
    return f"--{plan.estimate.source}"


def _maybe(value: float | Fraction | None) -> str:
    return "-" if value is None else fmt_number(value)


def _cells(d: DatasetPlan, per_prompt: bool) -> tuple[str, ...]:
    """One dataset's row; ``per_prompt``: the table has a prompts column (more than one sample per prompt)."""
    prompts = "-" if d.fixed else _maybe(d.max_samples)
    samples = _maybe(d.samples) if d.existing or per_prompt else prompts
    head = (d.name, _maybe(d.estimate.avg if d.estimate else None), source_label(d), _maybe(d.available))
    return (*head, *((prompts,) if per_prompt else ()), samples, _maybe(d.expected_tokens))


def format_table(plan: Plan) -> str:
    """The plan as an aligned text table with totals and the generation time."""
    per_prompt = plan.samples_per_prompt > 1
    header = (
        "dataset",
        "avg tokens",
        "source",
        "available",
        *(("prompts",) if per_prompt else ()),
        "samples",
        "expected tokens",
    )
    right = (False, True, False, True, *((True,) if per_prompt else ()), True, True)
    rows = [_cells(d, per_prompt) for d in plan.datasets]
    total = (
        "total",
        "",
        "",
        fmt_number(plan.total_available),
        *((fmt_number(plan.total_prompts),) if per_prompt else ()),
        fmt_number(plan.total_samples),
        fmt_number(plan.total_tokens),
    )
    widths = [max(len(r[i]) for r in (header, *rows, total)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        out = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True)]
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    title = f"Budget: {plan.tokens_per_dataset:,} output tokens per dataset"
    if per_prompt:
        n = plan.samples_per_prompt
        title += f", {n:,} samples per prompt (each counts: prompts = budget / ({n:,} x avg tokens))"
    lines = [title, ""]
    lines += [line(header), rule, *(line(r) for r in rows), rule, line(total), ""]
    return "\n".join(lines + footer(plan))


def footer(plan: Plan) -> list[str]:
    """The generation time, and what the totals hold besides it."""
    times = zip(plan.hours(), plan.throughput, strict=True)
    at = ", ".join(f"{fmt_hours(hours)} at {fmt_number(rate)} tok/s" for hours, rate in times)
    width = len(f"{max(plan.generation_tokens, plan.fixed_tokens, plan.existing_tokens):,}")
    lines = [f"To generate: {plan.generation_tokens:>{width},} tokens -> {at}"]
    if any(d.fixed and not d.existing for d in plan.datasets):
        lines.append(
            f"Fixed:       {plan.fixed_tokens:>{width},} tokens (generated elsewhere: in the total, "
            "not in the generation time)"
        )
    if plan.existing_rows:
        lines.append(
            f"Existing:    {plan.existing_tokens:>{width},} tokens in {plan.existing_rows:,} rows (already tokens: "
            "in the totals, not in the generation time)"
        )
    missing = plan.no_estimate
    if missing:
        names = ", ".join(d.name for d in missing)
        lines.append(f"No estimate: {names} (no sample count, not in the totals; see the notes on stderr)")
    return lines
