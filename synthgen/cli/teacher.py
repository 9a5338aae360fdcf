"""score_teacher.py: arguments -> the scoring pass (synthgen.teacher); errors as one line and an exit code."""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from synthgen.data import teacherfile
from synthgen.data.prompts import discover
from synthgen.data.store import RESULTS
from synthgen.data.tokenrows import FLAG, parse_existing
from synthgen.errors import OneLineParser, UsageError, run_guarded
from synthgen.signals import exit_code
from synthgen.teacher import cost
from synthgen.teacher.scorer import DatasetOutcome, ScoreConfig, Scorer, run_dataset
from synthgen.teacher.units import Unit, UnitCounts, dataset_units, existing_units

PROG = "score_teacher.py"
EPILOG = """\
exit codes:
  0 every row scored   1 some rows failed (rerun to score them)   2 bad arguments   3 server problem
  128+N stopped by signal N (rerun to go on: what was written stays, nothing is scored twice)

examples:
  # top-20 teacher logprobs of every stored row of a partition, into outputs/<dataset>/teacher/
  python score_teacher.py --partition short --server-url http://127.0.0.1:30000

  # what it would cost (prefill tokens, side-file size), sending nothing
  python score_teacher.py --dataset glaive --top-k 20 --dry-run
"""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description="Score every stored row with the teacher: top-k logprobs of each generated token "
        "(see docs/teacher.md).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--partition", help="the datasets of this prompt folder (or 'all')")
    parser.add_argument("--dataset", action="append", default=[], help="a dataset to score (repeatable)")
    parser.add_argument(FLAG, action="append", default=[], metavar="NAME=PATH", help="token rows to score too")
    parser.add_argument("--prompts-dir", type=Path, default=Path("prompts"))
    parser.add_argument("--output-dir", type=Path, default=Path("outputs"))
    parser.add_argument("--server-url", action="append", default=[], help="SGLang server (repeatable)")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--top-k", type=int, default=20, help="distribution entries per position (default 20)")
    parser.add_argument(
        "--concurrency",
        default="auto",
        help="scoring requests in flight: a number, or auto (default: follow the server's load, as a run does)",
    )
    parser.add_argument("--transport", choices=("auto", "b64", "flat", "nested"), default="auto")
    parser.add_argument("--part-rows", type=int, default=512, help="rows per parquet part (default 512)")
    parser.add_argument("--dry-run", action="store_true", help="print the cost of scoring what is stored")
    parser.add_argument("--debug", action="store_true")
    return parser


def datasets(args: argparse.Namespace) -> list[str]:
    names = list(dict.fromkeys(args.dataset))
    if args.partition is not None:
        names = [source.name for source in discover(args.prompts_dir, args.partition, names)]
    elif not names and not args.existing:
        names = sorted(p.parent.name for p in args.output_dir.glob(f"*/{RESULTS}"))
    return [n for n in names if (args.output_dir / n / RESULTS).is_file()]


def sources(args: argparse.Namespace) -> list[tuple[str, Callable[[], Iterator[Unit]]]]:
    """(name, a function iterating its units) per dataset and --existing file."""
    out: list[tuple[str, Callable[[], Iterator[Unit]]]] = []
    for name in datasets(args):
        path = args.output_dir / name / RESULTS
        out.append((name, functools.partial(dataset_units, path, UnitCounts())))
    for source in parse_existing(args.existing):
        out.append((source.name, functools.partial(existing_units, source, UnitCounts())))
    if not out:
        raise UsageError(f"nothing to score under {args.output_dir}; pass --dataset NAME or --partition P")
    return out


def dry_run(args: argparse.Namespace) -> int:
    print(f"{'dataset':<28} {'rows':>9} {'positions':>12} {'prefill tokens':>15} {'side file':>10}")
    total = cost.Cost()
    for name, units_of in sources(args):
        c = cost.cost_of(units_of(), args.top_k)
        print(f"{name:<28} {c.rows:>9} {c.positions:>12} {c.prefill_tokens:>15} {cost.human_bytes(c.side_bytes):>10}")
        for key in ("rows", "positions", "prefill_tokens", "side_bytes"):
            setattr(total, key, getattr(total, key) + getattr(c, key))
    print(
        f"{'total':<28} {total.rows:>9} {total.positions:>12} {total.prefill_tokens:>15} "
        f"{cost.human_bytes(total.side_bytes):>10}   (K={args.top_k}; side file before compression)"
    )
    return 0


async def score_all(args: argparse.Namespace) -> int:
    urls = args.server_url or ["http://127.0.0.1:30000"]
    concurrency = None if args.concurrency == "auto" else int(args.concurrency)
    config = ScoreConfig(
        args.output_dir,
        urls,
        api_key=args.api_key,
        top_k=args.top_k,
        concurrency=concurrency,
        transport=args.transport,
        part_rows=args.part_rows,
    )
    scorer = Scorer(config)
    outcomes: list[DatasetOutcome] = []
    try:
        await scorer.describe_server()
        for name, units_of in sources(args):
            outcome = await run_dataset(
                scorer,
                name,
                units_of,
                teacherfile.folder(args.output_dir, name),
                teacherfile.meta_path(args.output_dir, name),
            )
            outcomes.append(outcome)
            if outcome.stopped:
                break
    finally:
        await scorer.aclose()
    for o in outcomes:
        print(
            f"{o.name}: {o.already + o.scored}/{o.units} rows scored ({o.scored} now, {o.rescored} rescored "
            f"after their ids changed, {o.positions} positions), {o.failed} failed"
        )
        for line in o.failures:
            print(f"  failed: {line}", file=sys.stderr)
    if scorer.signal is not None:
        return exit_code(scorer.signal)
    return 1 if any(o.failed for o in outcomes) else 0


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.concurrency != "auto" and not (args.concurrency.isdigit() and int(args.concurrency) >= 1):
        raise UsageError(f"--concurrency {args.concurrency}: give a number of requests (1 or more) or auto")
    if args.top_k < 1:
        raise UsageError(f"--top-k {args.top_k}: give 1 or more (20 is usual)")
    if args.dry_run:
        return dry_run(args)
    return asyncio.run(score_all(args))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return run_guarded(PROG, lambda: run(argv), sys.stderr, debug="--debug" in argv)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
