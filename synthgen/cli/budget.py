"""compute_budget.py: arguments, reading prompts and results, printing the plan, writing budget.json.

The math and the table live in ``budget``; this module does the I/O around them. Prompts
are counted with ``prompts.discover`` and ``prompts.scan_dataset``, the same calls the
runner makes, so "available" here is what a run would see (unique ids after de-duplication).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from synthgen.budget import plan as budget
from synthgen.budget import teacher
from synthgen.budget.file import write_budget
from synthgen.data.prompts import DatasetSource, discover, scan_dataset
from synthgen.data.readers.base import NO_COLUMNS, Columns
from synthgen.data.samples import MAX_SAMPLES_PER_PROMPT
from synthgen.data.store import RESULTS, iter_done, iter_rows
from synthgen.data.tokenrows import ExistingSource, parse_existing, scan_token_rows
from synthgen.errors import InputFileError, OneLineParser, UsageError, run_guarded

PROG = "compute_budget.py"
DEFAULT_TOKENS = "10M"
DEFAULT_THROUGHPUT = "1000-1500"
DEFAULT_PROMPTS_DIR = Path("prompts")
DEFAULT_OUTPUT_DIR = Path("outputs")
MEASURE_SAMPLES = 50

EXAMPLES = f"""\
Examples:
  # 10M output tokens per dataset, averages measured from outputs/<dataset>/{RESULTS}
  python compute_budget.py

  # write the plan, then run it
  python compute_budget.py --tokens-per-dataset 5M --out budget.json
  python run_inference.py --partition all --budget budget.json

  # no measurements yet: give the averages
  python compute_budget.py --partition short --avg-tokens glaive=3793 --default-avg 2000

  # a dataset generated elsewhere counts toward the total tokens, not the generation time
  python compute_budget.py --fixed wiki_rewrites=120M --throughput 1200

  # 4 samples of each prompt (each counts), and a file of token rows already made
  python compute_budget.py --samples-per-prompt 4 --existing A1_deepswekimi=deepswe_tokens.jsonl
"""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description=(
            "Turn a per-dataset output-token budget into the number of prompts to run from each dataset:\n"
            "min(available, floor(budget / average completion length)), so in expectation no dataset\n"
            "exceeds its budget. Prints the plan as a table; --out writes it for run_inference.py --budget."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # so --debug is found in argv even when parsing fails
    )
    _which_datasets(parser.add_argument_group("which datasets"))
    _budget_and_averages(parser.add_argument_group("budget and averages"))
    _output(parser.add_argument_group("output"))
    return parser


def _which_datasets(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--prompts-dir",
        type=Path,
        default=DEFAULT_PROMPTS_DIR,
        metavar="DIR",
        help="folder holding <partition>/<dataset>.jsonl (default: prompts)",
    )
    g.add_argument(
        "--partition",
        default="all",
        metavar="{short,long,all|<folder>}",
        help="partition folder under --prompts-dir (e.g. short, long), or 'all' (default: all, as the runner)",
    )
    g.add_argument(
        "--dataset",
        action="append",
        default=[],
        metavar="NAME",
        help="plan only this dataset (repeatable; default: every dataset of the partition)",
    )
    g.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="count around malformed prompt lines instead of stopping, as the runner does",
    )
    g.add_argument(
        "--columns",
        metavar="FIELD=COLUMN,...",
        help="which column holds each field, e.g. prompt=question,id=uid, as the runner's --columns",
    )


def _budget_and_averages(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--tokens-per-dataset",
        default=DEFAULT_TOKENS,
        metavar="N",
        help="output-token budget of each dataset: 10M, 2.5B, 500K or a plain integer (default: 10M)",
    )
    g.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_OUTPUT_DIR,
        metavar="DIR",
        help=f"where measured averages are read from: DIR/<dataset>/{RESULTS} (default: outputs)",
    )
    g.add_argument(
        "--avg-tokens",
        action="append",
        default=[],
        metavar="NAME=N",
        help="average completion tokens of one dataset; wins over a measurement (repeatable)",
    )
    g.add_argument(
        "--default-avg", metavar="N", help="average for datasets with neither --avg-tokens nor a measurement"
    )
    g.add_argument(
        "--fixed",
        action="append",
        default=[],
        metavar="NAME=TOKENS",
        help="a dataset generated elsewhere: counted in the total tokens, not in the generation "
        "time; need not exist under --prompts-dir (repeatable)",
    )
    g.add_argument(
        "--existing",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a file of token rows (input_ids + loss_mask, as export_training.py --format tokens writes): "
        "its rows and trained tokens count in the totals, no inference is planned for it (repeatable)",
    )
    g.add_argument(
        "--samples-per-prompt",
        type=int,
        default=1,
        metavar="N",
        help="samples run_inference.py makes of each prompt; every sample counts toward the budget (default: 1)",
    )
    g.add_argument(
        "--throughput",
        default=DEFAULT_THROUGHPUT,
        metavar="N|LOW-HIGH",
        help="output tokens/s of the server, one figure or a range (default: 1000-1500)",
    )


def _output(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        help="also write the plan as JSON (atomically) for run_inference.py --budget FILE",
    )
    g.add_argument(
        "--teacher-topk",
        type=int,
        metavar="K",
        help="also say what scoring the planned rows with the teacher costs (score_teacher.py --top-k K): "
        "prefill tokens and side-file size per dataset, in the table and budget.json",
    )
    g.add_argument("--debug", action="store_true", help="show the traceback of an error instead of one line")


@dataclass(frozen=True)
class BudgetConfig:
    """compute_budget.py's one configuration object, parsed and checked before any file is read."""

    # --- which datasets
    prompts_dir: Path = DEFAULT_PROMPTS_DIR
    partition: str = "all"
    datasets: tuple[str, ...] = ()
    skip_bad_lines: bool = False
    columns: Columns = NO_COLUMNS
    # --- budget and averages
    tokens_per_dataset: int = 10_000_000
    output_dir: Path = DEFAULT_OUTPUT_DIR
    avg_tokens: dict[str, Fraction] = field(default_factory=dict)
    default_avg: Fraction | None = None
    fixed: dict[str, int] = field(default_factory=dict)
    existing: tuple[ExistingSource, ...] = ()
    samples_per_prompt: int = 1
    throughput: tuple[Fraction, ...] = (Fraction(1000), Fraction(1500))
    # --- output
    out: Path | None = None
    teacher_topk: int | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> BudgetConfig:
        tokens = budget.parse_count(args.tokens_per_dataset, "--tokens-per-dataset")
        throughput = budget.parse_throughput(args.throughput)
        default_avg = budget.parse_amount(args.default_avg, "--default-avg") if args.default_avg is not None else None
        given = budget.parse_assignments(args.avg_tokens, "--avg-tokens", budget.parse_amount)
        fixed = budget.parse_assignments(args.fixed, "--fixed", budget.parse_count)
        both = [name for name in given if name in fixed]
        if both:
            raise UsageError(
                f"'{both[0]}' has both --fixed and --avg-tokens; a fixed dataset needs no average, drop one"
            )
        existing = parse_existing(args.existing)
        for source in existing:
            other = "--fixed" if source.name in fixed else "--avg-tokens" if source.name in given else None
            if other:
                raise UsageError(
                    f"'{source.name}' has both --existing and {other}; an existing file is counted, drop one"
                )
        per_prompt = args.samples_per_prompt
        if not 1 <= per_prompt <= MAX_SAMPLES_PER_PROMPT:
            raise UsageError(f"--samples-per-prompt must be between 1 and {MAX_SAMPLES_PER_PROMPT:,}, got {per_prompt}")
        return cls(
            prompts_dir=args.prompts_dir,
            partition=args.partition,
            datasets=tuple(dict.fromkeys(args.dataset)),
            skip_bad_lines=args.skip_bad_lines,
            columns=Columns.parse(args.columns) if args.columns else NO_COLUMNS,
            tokens_per_dataset=tokens,
            output_dir=args.output_dir,
            avg_tokens=given,  # type: ignore[arg-type]
            default_avg=default_avg,
            fixed=fixed,  # type: ignore[arg-type]
            existing=existing,
            samples_per_prompt=per_prompt,
            throughput=throughput,
            out=args.out,
            teacher_topk=args.teacher_topk,
        )


# --- reading ---------------------------------------------------------------------------------------
def measure_outputs(output_dir: Path, dataset: str) -> budget.Measurement | None:
    """completion_tokens of the completed rows: one per id, the first, as the resume scan counts them."""
    path = Path(output_dir) / dataset / RESULTS
    seen: set[str] = set()
    tokens: list[int] = []
    truncated = 0
    try:
        for entry in iter_done(path):
            if entry.id in seen:
                continue
            seen.add(entry.id)
            if entry.measured:
                tokens.append(entry.completion_tokens)
                truncated += entry.truncated
    except OSError as exc:
        raise InputFileError(
            path, None, f"cannot read ({exc.strerror}); fix it or pass --avg-tokens {dataset}=N"
        ) from exc
    return budget.measure(tokens, truncated)


def _measure_hint(source: DatasetSource, args: BudgetConfig) -> str:
    command = f"python run_inference.py --partition {source.partition} --dataset {source.name}"
    if args.prompts_dir != DEFAULT_PROMPTS_DIR:
        command += f" --prompts-dir {args.prompts_dir}"
    if args.output_dir != DEFAULT_OUTPUT_DIR:
        command += f" --output-dir {args.output_dir}"
    return (
        f"{source.name}: no average completion length, so no sample count; run a small measurement first: "
        f"{command} --max-samples {MEASURE_SAMPLES}, or pass --avg-tokens {source.name}=N / --default-avg N"
    )


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _refuse_existing_names_of_prompt_datasets(cfg: BudgetConfig) -> None:
    """An --existing file named like a dataset of prompts would stand in for it: the plan would count the file
    and never generate that dataset, and its export would hold the file's rows under the dataset's name."""
    if not cfg.existing:
        return
    try:
        prompt_sets = {s.name: s for s in discover(cfg.prompts_dir, cfg.partition)}
    except UsageError:  # no prompts here at all: nothing to clash with
        return
    for source in cfg.existing:
        clash = prompt_sets.get(source.name)
        if clash is not None:
            raise UsageError(
                f"--existing {source.name}={source.path}: '{source.name}' is also the dataset {clash.path}; name "
                f"the file apart, e.g. --existing {source.name}_tokens={source.path}"
            )


def build_plan(cfg: BudgetConfig) -> budget.Plan:
    # A --fixed or --existing dataset is never generated, so its prompt file (if any) is not scanned.
    given = cfg.avg_tokens
    fixed = {**cfg.fixed, **{e.name: 0 for e in cfg.existing}}
    wanted = [name for name in cfg.datasets if name not in fixed]
    sources = discover(cfg.prompts_dir, cfg.partition, wanted) if wanted or not cfg.datasets else []
    sources = [s for s in sources if s.name not in fixed]
    unknown = [name for name in given if name not in {s.name for s in sources}]
    if unknown:
        planned = ", ".join(s.name for s in sources) or "none"
        raise UsageError(
            f"--avg-tokens: unknown dataset '{unknown[0]}' (datasets in this plan: {planned}); "
            "check the name, --partition and --dataset"
        )

    _refuse_existing_names_of_prompt_datasets(cfg)
    # The token files first: a bad one stops the plan before the prompt files are scanned.
    existing = []
    for declared in cfg.existing:
        scan = scan_token_rows(declared.path)
        existing.append(
            budget.existing_dataset(
                declared.name, scan.rows, scan.trained_tokens, scan.total_tokens, str(declared.path)
            )
        )
    rows = []
    for source in sources:
        index = scan_dataset(source, skip_bad_lines=cfg.skip_bad_lines, columns=cfg.columns)
        if index.bad_lines:
            _warn(f"{source.path}: skipped {index.bad_lines:,} bad {index.reader.unit}(s); first: {index.first_bad[0]}")
        if index.duplicates:
            _note(f"{source.name}: {index.duplicates:,} repeated id(s) counted once, as the runner does")
        measured = None if source.name in given else measure_outputs(cfg.output_dir, source.name)
        estimate = budget.choose_estimate(given.get(source.name), measured, cfg.default_avg)
        if estimate is None:
            _note(_measure_hint(source, cfg))
        elif estimate.source == "measured" and measured is not None and measured.truncated:
            _note(
                f"{source.name}: {measured.truncated:,} of {measured.rows:,} measured rows stopped at max_tokens "
                "(finish_reason 'length'); the average counts them at their capped length"
            )
        rows.append(
            budget.plan_dataset(
                source.name, len(index.ids), estimate, cfg.tokens_per_dataset, source.partition, cfg.samples_per_prompt
            )
        )
    rows += [budget.fixed_dataset(name, value) for name, value in cfg.fixed.items()]
    rows += existing
    return budget.Plan(cfg.tokens_per_dataset, tuple(rows), cfg.throughput, cfg.samples_per_prompt)


def measure_prompts(output_dir: Path, dataset: str) -> Fraction | None:
    """The average prompt_tokens of the stored rows (None without any)."""
    total = count = 0
    for row in iter_rows(Path(output_dir) / dataset / RESULTS):
        value = row.get("prompt_tokens")
        if isinstance(value, int) and not isinstance(value, bool) and isinstance(row.get("id"), str):
            total, count = total + value, count + 1
    return Fraction(total, count) if count else None


def run(cfg: BudgetConfig) -> int:
    plan = build_plan(cfg)
    costs = None
    if cfg.teacher_topk is not None:
        if cfg.teacher_topk < 1:
            raise UsageError(f"--teacher-topk {cfg.teacher_topk}: give 1 or more (20 is usual)")
        prompts = {d.name: measure_prompts(cfg.output_dir, d.name) for d in plan.datasets}
        costs = teacher.plan_costs(plan, prompts, cfg.teacher_topk)
    # The file first: if it cannot be written, no table suggests that the plan was saved.
    if cfg.out is not None:
        extra = None if costs is None else {"teacher": teacher.teacher_json(costs, cfg.teacher_topk or 0)}
        write_budget(cfg.out, plan, extra)
    print(budget.format_table(plan))
    if costs is not None:
        print()
        print(teacher.format_teacher_table(costs, cfg.teacher_topk or 0))
    if cfg.out is not None:
        print(f"wrote {cfg.out}; use it with: {run_hint(cfg, plan)}", file=sys.stderr)
    return 0


def run_hint(cfg: BudgetConfig, plan: budget.Plan) -> str:
    """The run_inference.py command for this plan, runnable as printed: the plan's partition and, when
    not all of it is planned, its datasets (a run would stop at a dataset the file has no entry for)."""
    parts = ["python", "run_inference.py", "--partition", cfg.partition]
    if cfg.prompts_dir != DEFAULT_PROMPTS_DIR:
        parts += ["--prompts-dir", str(cfg.prompts_dir)]
    if cfg.output_dir != DEFAULT_OUTPUT_DIR:
        parts += ["--output-dir", str(cfg.output_dir)]
    # A dataset without an estimate has no entry in the file: the run takes only those that have one.
    if cfg.datasets or any(not d.fixed and not d.has_estimate for d in plan.datasets):
        for row in plan.generated:
            parts += ["--dataset", row.name]
    parts += ["--budget", str(cfg.out)]
    if cfg.samples_per_prompt > 1:  # the run refuses a budget planned for another count
        parts += ["--samples-per-prompt", str(cfg.samples_per_prompt)]
    return " ".join(shlex.quote(p) for p in parts)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return run_guarded(
            PROG,
            lambda: run(BudgetConfig.from_args(build_parser().parse_args(argv))),
            sys.stderr,
            debug="--debug" in argv,
        )
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
