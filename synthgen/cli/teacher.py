"""score_teacher.py: arguments -> the scoring pass (synthgen.teacher); errors as one line and an exit code."""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from synthgen.cli.launchflags import launch_flags
from synthgen.config import RunConfig, default_of
from synthgen.data import teacherfile
from synthgen.data.prompts import discover
from synthgen.data.shards import ENV_HINTS, check_shards, dataset_names, merge, parse_shard, shard_folders
from synthgen.data.store import RESULTS
from synthgen.data.teacherfile import left_out_text
from synthgen.data.tokenrows import FLAG, parse_existing
from synthgen.errors import OneLineParser, UsageError, run_guarded
from synthgen.launch.supervisor import Supervisor
from synthgen.report.folder import REPORT, FolderReport, write_page
from synthgen.signals import exit_code
from synthgen.teacher import cost
from synthgen.teacher.scorer import DatasetOutcome, ScoreConfig, Scorer, UnitsOf, has_work, run_dataset
from synthgen.teacher.units import UnitCounts, dataset_units, existing_units

PROG = "score_teacher.py"
EPILOG = """\
exit codes:
  0 every row scored   1 some rows failed (rerun to score them)   2 bad arguments   3 server problem
  128+N stopped by signal N (rerun to go on: what was written stays, nothing is scored twice)

examples:
  # top-20 teacher logprobs of every stored row of a partition, into outputs/<dataset>/teacher/
  python score_teacher.py --partition short --server-url http://127.0.0.1:30000

  # a sharded run (run_inference.py --shard I/N): on each host, its own shard, as the run was given
  python score_teacher.py --output-dir outputs --shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT

  # start the teacher server only if something needs scoring, stop it at the end (as run_inference.py does)
  python score_teacher.py --partition short --launch-server \\
        'python -m sglang.launch_server --model-path Qwen/Qwen3-8B --port 30000'

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
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=Path("outputs"),
        help="the run's output folder; one of a sharded run's is scored shard by shard (default outputs)",
    )
    parser.add_argument(
        "--shard",
        metavar="I/N",
        help="score only shard I of a sharded run's --output-dir (its folder shard-I-of-N), as run with --shard I/N",
    )
    parser.add_argument("--server-url", action="append", default=[], help="SGLang server (repeatable)")
    parser.add_argument("--api-key", default=None)
    launch_flags(
        parser, "start this server command (or demo) when something needs scoring, watch it, stop it at the end", ""
    )
    parser.add_argument("--top-k", type=int, default=20, help="distribution entries per position (default 20)")
    parser.add_argument(
        "--concurrency",
        default="auto",
        help="scoring requests in flight: a number, or auto (default: follow the server's load, as a run does)",
    )
    parser.add_argument("--transport", choices=("auto", "b64", "flat", "nested"), default="auto")
    parser.add_argument("--part-rows", type=int, default=512, help="rows per parquet part (default 512)")
    parser.add_argument(
        "--status-interval",
        type=float,
        default=default_of("status_interval"),
        metavar="SECONDS",
        help="seconds between progress lines on stderr (default %(default)s)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the cost of scoring what is stored")
    parser.add_argument("--debug", action="store_true")
    return parser


def folders(args: argparse.Namespace) -> list[Path]:
    """The output folders to score: --output-dir itself, or the shard folders of a sharded run under it
    (every one, or that of --shard I/N). Each shard's side files go beside its rows."""
    if args.shard is not None:
        shard = parse_shard(args.shard)
        path = args.output_dir / shard.folder
        if not path.is_dir():
            raise UsageError(
                f"--shard {shard}: no folder {path}; run run_inference.py --shard {shard} "
                f"--output-dir {args.output_dir} first (or check --output-dir)"
            )
        return [path]
    found = shard_folders(args.output_dir)
    if not found:
        return [args.output_dir]
    try:  # every shard read as one, as the export reads them: the same refusals, before anything is sent
        records = check_shards(args.output_dir)
        assert records is not None
        merge(args.output_dir, requested(args) or dataset_names(args.output_dir, records), records)
    except UsageError as exc:
        raise UsageError(f"{exc}; or score each shard there is on its own: --shard I/N") from None
    for names, how in ENV_HINTS:
        if all(os.environ.get(name) for name in names):
            print(
                f"note: {', '.join(f'{n}={os.environ[n]}' for n in names)} is set but --shard is not: scoring "
                f"every shard under {args.output_dir}; pass {how} to score this task's shard only",
                file=sys.stderr,
            )
            break
    return [found[shard] for shard in sorted(found, key=lambda shard: shard.index)]


def requested(args: argparse.Namespace) -> list[str]:
    """The datasets --dataset and --partition name (none: every one with results)."""
    names = list(dict.fromkeys(args.dataset))
    if args.partition is not None:
        names = [source.name for source in discover(args.prompts_dir, args.partition, names)]
    return names


def datasets(args: argparse.Namespace, output_dir: Path) -> list[str]:
    names = requested(args)
    if args.partition is None and not names and not args.existing:
        names = sorted(p.parent.name for p in output_dir.glob(f"*/{RESULTS}"))
    return [n for n in names if (output_dir / n / RESULTS).is_file()]


Source = tuple[str, Path, UnitsOf]


def label(args: argparse.Namespace, name: str, folder: Path) -> str:
    """A dataset as messages name it: with its shard folder when the shards of --output-dir are scored."""
    return name if folder == args.output_dir else f"{folder.name}/{name}"


def sources(args: argparse.Namespace) -> list[Source]:
    """(name, output folder, a function iterating its units) per dataset (per shard) and --existing file."""
    out: list[Source] = []
    where = folders(args)
    for folder in where:
        for name in datasets(args, folder):
            path = folder / name / RESULTS
            out.append((name, folder, functools.partial(dataset_units, path)))
    for source in parse_existing(args.existing):
        out.append((source.name, args.output_dir, functools.partial(existing_units, source)))
    if not out:
        shards = f" (shards {', '.join(f.name for f in where)})" if where != [args.output_dir] else ""
        raise UsageError(f"nothing to score under {args.output_dir}{shards}; pass --dataset NAME or --partition P")
    return out


def dry_run(args: argparse.Namespace) -> int:
    print(f"{'dataset':<28} {'rows':>9} {'positions':>12} {'prefill tokens':>15} {'side file':>10}")
    total = cost.Cost()
    for name, folder, units_of in sources(args):
        c = cost.cost_of(units_of(UnitCounts()), args.top_k)
        size = cost.human_bytes(c.side_bytes)
        print(f"{label(args, name, folder):<28} {c.rows:>9} {c.positions:>12} {c.prefill_tokens:>15} {size:>10}")
        for key in ("rows", "positions", "prefill_tokens", "side_bytes"):
            setattr(total, key, getattr(total, key) + getattr(c, key))
    print(
        f"{'total':<28} {total.rows:>9} {total.positions:>12} {total.prefill_tokens:>15} "
        f"{cost.human_bytes(total.side_bytes):>10}   (K={args.top_k}; side file before compression)"
    )
    return 0


def launch_config(args: argparse.Namespace, urls: list[str]) -> RunConfig:
    """The server part of a run's config, for the launched server's supervisor (synthgen.launch). With --shard,
    its record and log go in the shard's folder, as the run's do: hosts sharing the parent never share them."""
    return RunConfig(
        output_dir=args.output_dir / parse_shard(args.shard).folder if args.shard else args.output_dir,
        server_url=urls[0],
        server_urls=tuple(urls),
        api_key=args.api_key,
        launch_server=args.launch_server,
        keep_server=args.keep_server,
        server_log=args.server_log,
        server_start_timeout=args.server_start_timeout,
        server_restarts=args.server_restarts,
    ).validate()


def say(line: str) -> None:
    print(f"teacher: {line}", file=sys.stderr, flush=True)


async def score_all(args: argparse.Namespace) -> int:
    urls = args.server_url or [default_of("server_url")]
    concurrency = None if args.concurrency == "auto" else int(args.concurrency)
    config = ScoreConfig(
        args.output_dir,
        urls,
        api_key=args.api_key,
        top_k=args.top_k,
        concurrency=concurrency,
        transport=args.transport,
        part_rows=args.part_rows,
        progress_every=args.status_interval,
    )
    todo = sources(args)
    scorer = Scorer(config)
    outcomes: list[DatasetOutcome] = []
    # The server (launched only when a row needs scoring) is asked once, before the first row is sent.
    async with Supervisor(launch_config(args, urls), say, on_fatal=scorer.fail, lazy=True) as supervisor:
        try:
            for name, folder, units_of in todo:
                if not scorer.server and has_work(units_of(UnitCounts()), teacherfile.folder(folder, name)):
                    await supervisor.start()
                    await scorer.describe_server()
                outcome = await run_dataset(
                    scorer,
                    label(args, name, folder),
                    units_of,
                    teacherfile.folder(folder, name),
                    teacherfile.meta_path(folder, name),
                )
                outcomes.append(outcome)
                if outcome.stopped:
                    break
        finally:
            await scorer.aclose()
        if not scorer.server and args.launch_server is not None:
            say("every row is scored already: the server was not started")
    for o in outcomes:
        print(
            f"{o.name}: {o.already + o.scored}/{o.units} rows scored ({o.scored} now, {o.rescored} rescored "
            f"after their ids changed, {o.positions} positions), {o.failed} failed"
        )
        if o.left_out:
            print(f"{o.name}: left out: {left_out_text(o.left_out)}")
        for line in o.failures:
            print(f"  failed: {line}", file=sys.stderr)
    write_pages(dict.fromkeys(folder for _, folder, _ in todo))
    if scorer.signal is not None:
        return exit_code(scorer.signal)
    return 1 if any(o.failed for o in outcomes) else 0


def write_pages(where: Iterable[Path]) -> None:
    """Each scored folder's report.html, its teacher section from the teacher.json files just written; a page
    that cannot be written is a note (the side files are what matters)."""
    for folder in where:
        page = folder / REPORT
        try:
            write_page(page, FolderReport(folder).page(None, PROG))
        except (OSError, UsageError) as exc:
            print(f"note: {page}: the report page was not written ({exc})", file=sys.stderr)
            continue
        print(f"report: {page}")


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.concurrency != "auto" and not (args.concurrency.isdigit() and int(args.concurrency) >= 1):
        raise UsageError(f"--concurrency {args.concurrency}: give a number of requests (1 or more) or auto")
    if args.top_k < 1:
        raise UsageError(f"--top-k {args.top_k}: give 1 or more (20 is usual)")
    if not args.status_interval > 0:
        raise UsageError(f"--status-interval {args.status_interval}: give a number of seconds above 0")
    if args.dry_run:
        return dry_run(args)
    return asyncio.run(score_all(args))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return run_guarded(PROG, lambda: run(argv), sys.stderr, debug="--debug" in argv)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
