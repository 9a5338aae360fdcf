"""export_training.py: arguments -> ExportRequest -> ``export.pipeline.export``; errors as one line and an exit code.

This module only parses (and reads a --budget file, which the export layer does not import); choosing the
datasets, the checks, the scan, the report and the writing live in ``synthgen.export``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from synthgen.budget.file import read_budget
from synthgen.data.store import RESULTS
from synthgen.data.tokenrows import parse_existing
from synthgen.errors import OneLineParser, run_guarded
from synthgen.export import formats
from synthgen.export.config import DEFAULT_OUTPUT_DIR, DEFAULT_PROMPTS_DIR, PROG, ExportRequest, Plan
from synthgen.export.pipeline import export

EXAMPLES = f"""\
exit codes:
  0 done   1 rows drift under --fail-on-drift (nothing written)
  2 bad arguments, unknown dataset, no results at all, nothing to export, --out is an input   5 write error

examples:
  # what would be exported, why rows are dropped, length distributions (writes nothing)
  python export_training.py --partition short --report

  # the exact token ids the model saw and wrote, with the loss mask on the generated ones
  # (SpecForge: data.prompts_path; speculators: pre-tokenized data)
  python export_training.py --dataset glaive --dataset ultrachat --format tokens --out tokens.jsonl

  # SpecForge conversations of every dataset in the plan, shuffled, 2% held out in train.val.jsonl;
  # render-checked with SpecForge's own parser (train with data.train_only_last_turn: true)
  python export_training.py --budget budget.json --format specforge --out train.jsonl \\
        --shuffle --seed 1 --val-fraction 0.02 --specforge-template qwen3-thinking

  # the same as one HTML page (histograms, finish reasons, errors, the run's timeline), to open anywhere
  python export_training.py --partition short --report --html outputs/report.html

  # SFT messages, render-checked with the model's chat template
  python export_training.py --partition all --format messages --out sft.jsonl --tokenizer /models/Kimi-K2.5

results are read from --output-dir/<dataset>/{RESULTS}
"""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=PROG,
        description=(
            "Turn the results of run_inference.py into training files: SpecForge conversations, token ids with a\n"
            "loss mask, or OpenAI-style messages for SFT. Rows cut at --max-tokens, with unclosed reasoning, an\n"
            "empty answer or stray think/channel markers are dropped and counted; --report shows the counts and\n"
            "the length distributions without writing anything."
        ),
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # so --debug is found in argv even when parsing fails
    )
    _which_datasets(parser)
    _output(parser)
    _report(parser)
    return parser


def _which_datasets(parser: argparse.ArgumentParser) -> None:
    """--partition, --dataset, --budget and where they are read."""
    which = parser.add_argument_group("which datasets (default: every dataset with results under --output-dir)")
    which.add_argument(
        "--partition",
        metavar="{short,long,all|<folder>}",
        help="the datasets of a partition folder under --prompts-dir, or 'all'",
    )
    which.add_argument(
        "--dataset", action="append", default=[], metavar="NAME", help="export this dataset (repeatable)"
    )
    which.add_argument("--budget", type=Path, metavar="FILE", help="the datasets of a compute_budget.py plan file")
    which.add_argument(
        "--prompts-dir",
        type=Path,
        default=DEFAULT_PROMPTS_DIR,
        metavar="DIR",
        help="folder holding <partition>/<dataset>.jsonl, for --partition (default: prompts)",
    )
    which.add_argument(
        "--output-dir",
        type=Path,
        default=DEFAULT_OUTPUT_DIR,
        metavar="DIR",
        help=f"where results are read: DIR/<dataset>/{RESULTS} (default: outputs)",
    )


def _output(parser: argparse.ArgumentParser) -> None:
    """The format, the file and which rows go into it."""
    out = parser.add_argument_group("output")
    out.add_argument(
        "--format",
        choices=formats.names(),
        default=formats.DEFAULT,
        help="; ".join(f"{f.name}: {f.shape}" for f in formats.FORMATS.values()) + f" (default: {formats.DEFAULT})",
    )
    out.add_argument("--out", type=Path, metavar="FILE", help="the JSONL file to write (required unless --report)")
    out.add_argument(
        "--val-fraction",
        type=float,
        default=0.0,
        metavar="F",
        help="hold out this share of rows (chosen by a hash of --seed and the conversation) in FILE with .val "
        "before its extension (default: 0)",
    )
    out.add_argument(
        "--existing",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="merge a file of token rows made elsewhere (input_ids + loss_mask) into a --format tokens export, "
        "as rows with ids NAME/<line> (repeatable)",
    )
    out.add_argument("--shuffle", action="store_true", help="shuffle the rows (by --seed) instead of input order")
    out.add_argument("--seed", type=int, default=0, help="seed of --shuffle and --val-fraction (default: 0)")
    out.add_argument(
        "--settings",
        metavar="ID",
        help="export only the rows of this settings set (ids as --report lists them, from "
        "<dataset>/settings.jsonl; 'unrecorded' for rows written before settings ids)",
    )
    out.add_argument(
        "--keep-truncated",
        action="store_true",
        help="keep rows cut at --max-tokens (finish_reason length), even with unclosed reasoning; specforge "
        "leaves out those cut before any answer (cut_empty: SpecForge's validator refuses them)",
    )


def _report(parser: argparse.ArgumentParser) -> None:
    """The report, the render check and the error path."""
    report = parser.add_argument_group("report")
    report.add_argument(
        "--report",
        "--dry-run",
        dest="report",
        action="store_true",
        help="print what would be exported, drop reasons, the render check and length histograms; "
        "writes nothing unless --out is given too",
    )
    report.add_argument(
        "--html",
        type=Path,
        metavar="FILE",
        help="with --report: also write the report of the chosen datasets as one self-contained HTML page "
        "(the run writes <output-dir>/report.html itself)",
    )
    report.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="the model's tokenizer folder, for the render check and the vocabulary (default: the one each "
        "dataset's settings.jsonl records, when that folder is here)",
    )
    report.add_argument(
        "--specforge-template",
        metavar="NAME",
        help="render-check with SpecForge's own parser and this template of its registry (its "
        "data.chat_template, e.g. qwen3-thinking); needs the specforge package (default: the model's chat template)",
    )
    report.add_argument(
        "--fail-on-drift",
        action="store_true",
        help="write nothing and exit 1 when any exported row does not render to the stored ids",
    )
    report.add_argument(
        "--no-render-check", action="store_true", help="skip the render check (it is on when a tokenizer is known)"
    )
    report.add_argument("--trust-remote-code", action="store_true", help="allow the tokenizer's own code")
    report.add_argument("--debug", action="store_true", help="show the traceback of an error instead of one line")


def request_from_args(args: argparse.Namespace) -> ExportRequest:
    """The parsed arguments as a request; a --budget file is read here (the export does not import budgets)."""
    plan = None
    if args.budget is not None:
        budget = read_budget(args.budget)
        plan = Plan(tuple(budget.generated), budget.caps, budget.averages, budget.existing)
    return ExportRequest(
        partition=args.partition,
        datasets=tuple(args.dataset),
        budget=args.budget,
        plan=plan,
        prompts_dir=args.prompts_dir,
        output_dir=args.output_dir,
        format=args.format,
        out=args.out,
        val_fraction=args.val_fraction,
        shuffle=args.shuffle,
        seed=args.seed,
        settings=None if args.settings is None else ("" if args.settings == "unrecorded" else args.settings),
        keep_truncated=args.keep_truncated,
        report=args.report,
        html=args.html,
        tokenizer=args.tokenizer,
        specforge_template=args.specforge_template,
        fail_on_drift=args.fail_on_drift,
        render_check=not args.no_render_check,
        trust_remote_code=args.trust_remote_code,
        existing=parse_existing(args.existing),
    )


def run(argv: list[str]) -> int:
    return export(request_from_args(build_parser().parse_args(argv)))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return run_guarded(PROG, lambda: run(argv), sys.stderr, debug="--debug" in argv)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
