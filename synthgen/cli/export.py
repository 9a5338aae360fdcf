"""export_training.py: arguments -> ExportConfig -> scan, report, write; errors as one line and an exit code.

The conversions, filters, split and report live in ``export``; this module chooses the datasets
(by partition, by name or from a budget file), refuses a destination that is an input, loads the
tokenizer and the route of the render check, and prints.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from synthgen.budget.file import read_budget
from synthgen.data.prompts import discover
from synthgen.data.provenance import recorded_sets
from synthgen.data.store import RESULTS
from synthgen.errors import OneLineParser, StoreWriteError, TokenizerError, UsageError, run_guarded
from synthgen.export.exporter import (
    FORMATS,
    HINTS,
    DatasetRef,
    DatasetScan,
    DriftError,
    ExportConfig,
    check_kept,
    format_report,
    mixed_settings_warning,
    render_notes,
    scan_dataset,
    val_path,
    vocab_size,
    write_export,
)
from synthgen.export.rendercheck import SpecForgeRoute, TemplateRoute, specforge_available
from synthgen.report.folder import FolderReport, token_budgets, write_page

# Columns of a specforge row that are not template variables (the trainer pops or ignores them).
TEMPLATE_SKIP_KEYS = frozenset({"id", "conversations", "tools", "status", "synthgen_meta"})

PROG = "export_training.py"
DEFAULT_PROMPTS_DIR = Path("prompts")
DEFAULT_OUTPUT_DIR = Path("outputs")

EXAMPLES = f"""\
exit codes:
  0 done   1 rows drift under --fail-on-drift (nothing written)
  2 bad arguments, unknown dataset, missing results, nothing to export, --out is an input   5 write error

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

    out = parser.add_argument_group("output")
    out.add_argument(
        "--format",
        choices=FORMATS,
        default="specforge",
        help="specforge: {id, conversations, tools?, synthgen_meta}; tokens: {id, input_ids, "
        "loss_mask} from the stored ids; messages: {id, messages, tools?} (default: specforge)",
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
        help="keep rows cut at --max-tokens (finish_reason length), even with unclosed reasoning",
    )

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
    return parser


# --- choosing datasets -----------------------------------------------------------------------------
def choose_datasets(args: argparse.Namespace) -> list[DatasetRef]:
    names = list(args.dataset)
    if args.budget is not None:
        names += read_budget(args.budget).generated
    names = list(dict.fromkeys(names))
    output_dir = Path(args.output_dir)
    if args.partition is not None:
        names = [source.name for source in discover(args.prompts_dir, args.partition, names)]
    elif not names:
        found = sorted(p.parent.name for p in output_dir.glob(f"*/{RESULTS}"))
        if not found:
            raise UsageError(
                f"no results under {output_dir}/*/{RESULTS}; run run_inference.py first, or pass --output-dir DIR"
            )
        names = found
    refs = [DatasetRef(name, output_dir / name / RESULTS) for name in names]
    for ref in refs:
        if not ref.path.is_file():
            raise UsageError(
                f"{ref.path}: no results for dataset '{ref.name}'; run it first "
                f"(python run_inference.py --dataset {ref.name}) or leave it out"
            )
    return refs


def config_from_args(args: argparse.Namespace) -> ExportConfig:
    if args.out is None and not args.report:
        raise UsageError("--out FILE is required (or --report to only see what would be exported)")
    if not 0 <= args.val_fraction < 1:
        raise UsageError(f"--val-fraction must be at least 0 and below 1, got {args.val_fraction}")
    if args.out is not None and args.val_fraction > 0 and val_path(args.out) == Path(args.out):
        raise UsageError(f"--out {args.out}: cannot name the validation file beside it; give FILE a name")
    datasets = tuple(choose_datasets(args))
    if args.out is not None:
        targets = [Path(args.out)] + ([val_path(args.out)] if args.val_fraction > 0 else [])
        inputs = [Path(args.budget)] if args.budget is not None else []
        for target in targets:
            refuse_input_destination(target, datasets, inputs)
    tokenizer, checkers, vocabs = render_setup(args, datasets)
    return ExportConfig(
        datasets=datasets,
        format=args.format,
        out=args.out,
        keep_truncated=args.keep_truncated,
        shuffle=args.shuffle,
        seed=args.seed,
        val_fraction=args.val_fraction,
        tokenizer=tokenizer,
        vocabs=vocabs,
        checkers=checkers,
        fail_on_drift=args.fail_on_drift,
        settings=None if args.settings is None else ("" if args.settings == "unrecorded" else args.settings),
    )


def recorded_tokenizer(ref: DatasetRef) -> str | None:
    """The tokenizer folder the dataset's latest settings set names, when it is a folder here."""
    for entry in reversed(recorded_sets(ref.path.parent)):
        path = entry["settings"].get("tokenizer")
        if isinstance(path, str) and path and Path(path).expanduser().is_dir():
            return path
    return None


def render_setup(
    args: argparse.Namespace, datasets: tuple[DatasetRef, ...]
) -> tuple[Any, dict[str, Any], dict[str, int]]:
    """(the --tokenizer, the render check's route per dataset, the vocabulary size per dataset).

    The tokenizer is --tokenizer, else the one each dataset's settings record (when its folder is here);
    a recorded one that does not load is a note, not an error. The vocabulary is the model's config.json
    vocab_size, else the tokenizer's length."""
    from synthgen.chat.templating import model_config, model_vocab_size

    paths = {ref.name: args.tokenizer or recorded_tokenizer(ref) for ref in datasets}
    check = args.format != "tokens" and not args.no_render_check
    if args.specforge_template and not check:
        raise UsageError("--specforge-template is for the render check of specforge/messages rows; drop it")
    if args.specforge_template and not specforge_available():
        raise UsageError(
            f"--specforge-template {args.specforge_template}: the specforge package does not import here "
            "(pip install --no-deps specforge, with torch, transformers and datasets); drop the flag to check "
            "with the model's chat template"
        )
    loaded: dict[str, Any] = {}
    checkers: dict[str, Any] = {}
    vocabs: dict[str, int] = {}
    for name, path in paths.items():
        if path is None:
            continue
        vocab = model_vocab_size(model_config(path))
        if (check or vocab is None) and path not in loaded:
            loaded[path] = _load(args, path, explicit=args.tokenizer is not None)
        tokenizer = loaded.get(path)
        if vocab is None and tokenizer is not None:
            vocab = vocab_size(tokenizer)
        if vocab is not None:
            vocabs[name] = vocab
        if check and tokenizer is not None:
            _check_template(name, tokenizer, datasets)
            try:
                checkers[name] = (
                    SpecForgeRoute(tokenizer, args.specforge_template)
                    if args.specforge_template
                    else TemplateRoute(tokenizer, TEMPLATE_SKIP_KEYS)
                )
            except KeyError as exc:
                raise UsageError(f"--specforge-template {exc.args[0]}") from None
    tokenizer = loaded.get(args.tokenizer) if args.tokenizer else None
    return tokenizer, checkers, vocabs


def _check_template(name: str, tokenizer: Any, datasets: tuple[DatasetRef, ...]) -> None:
    """A note when the tokenizer's chat template is not the one the dataset's latest settings set rendered with."""
    from synthgen.chat.templating import ChatRenderer

    [ref] = [r for r in datasets if r.name == name]
    sets = recorded_sets(ref.path.parent)
    recorded = sets[-1]["settings"].get("chat_template_sha256") if sets else None
    try:
        used = ChatRenderer(tokenizer).template_hash
    except TokenizerError:
        return
    if recorded and recorded != used:
        _note(
            f"{name}: the tokenizer's chat template is not the one the run rendered with (settings.jsonl "
            "chat_template_sha256); the render check compares with another template"
        )


def _load(args: argparse.Namespace, path: str, explicit: bool) -> Any:
    from synthgen.chat.templating import load_tokenizer  # transformers only when a tokenizer is used

    try:
        return load_tokenizer(path, trust_remote_code=args.trust_remote_code)
    except TokenizerError as exc:
        if explicit:
            raise
        _note(f"render check skipped for the recorded tokenizer {path}: {exc}")
        return None


def refuse_input_destination(target: Path, datasets: tuple[DatasetRef, ...], inputs: list[Path]) -> None:
    """An export written over an input file, or into a dataset folder being read, would replace what it reads
    (the results, the run's lock or settings): refused before anything is read or written."""
    where = target.resolve()
    for path in inputs:
        if where == path.resolve():
            raise UsageError(f"--out {target}: is the input file {path}; write the export to another file")
    for ref in datasets:
        folder = ref.path.parent.resolve()
        if where == folder or folder in where.parents:
            raise UsageError(
                f"--out {target}: is inside the dataset folder {ref.path.parent} being read; "
                "write the export outside the output folders (e.g. --out train.jsonl)"
            )


def _note(message: str) -> None:
    print(f"note: {message}", file=sys.stderr)


# --- running ---------------------------------------------------------------------------------------
def summary_line(scan: DatasetScan) -> str:
    """``<dataset>: K of N rows (dropped: ...; U unreadable lines)``: every line of the file is in it."""
    dropped = ", ".join(f"{n:,} {reason}" for reason, n in sorted(scan.dropped.items()) if n)
    notes = [f"dropped: {dropped}"] if dropped else []
    if scan.unreadable:
        notes.append(f"{scan.unreadable:,} unreadable line{'s' if scan.unreadable != 1 else ''} skipped")
    return f"{scan.ref.name}: {len(scan.kept):,} of {scan.rows:,} rows" + (f" ({'; '.join(notes)})" if notes else "")


def check_settings_filter(scans: list[DatasetScan], config: ExportConfig) -> None:
    if config.settings is None or any(config.settings in s.settings for s in scans):
        return
    found = sorted({sid or "unrecorded" for s in scans for sid in s.settings})
    raise UsageError(
        f"--settings {config.settings or 'unrecorded'}: no rows of this settings set "
        f"(sets found: {', '.join(found) or 'none'}); see them with --report"
    )


def show_render_check(scans: list[DatasetScan], config: ExportConfig, report: bool) -> None:
    """After an export: the whole report (--report), else the render check's lines and the notes on stderr."""
    if report:
        sys.stdout.write(format_report(scans, config))
        return
    for scan in scans:
        if scan.render is not None:
            print(f"{scan.ref.name}: {scan.render.summary()}", file=sys.stderr)
            for kind, example in scan.render.examples.items():
                print(f"  first {kind}: {example}", file=sys.stderr)
    for line in render_notes(scans, config):
        _note(line)


def write_html(args: argparse.Namespace, datasets: tuple[DatasetRef, ...]) -> None:
    """--html FILE: the page of these datasets (and the timeline of their output folder), written atomically."""
    target = Path(args.html)
    for ref in datasets:
        folder = ref.path.parent.resolve()
        if target.resolve() == folder or folder in target.resolve().parents:
            raise UsageError(
                f"--html {target}: is inside the dataset folder {ref.path.parent} being read; write the page "
                f"outside it (e.g. --html {Path(args.output_dir) / 'report.html'})"
            )
    budget = read_budget(args.budget) if args.budget is not None else None
    names = [ref.name for ref in datasets]
    budgets = token_budgets(names, None, budget.caps, budget.averages) if budget else {}
    page = FolderReport(Path(args.output_dir), names, budgets).page(
        None, PROG, f"{args.output_dir} ({', '.join(names)})"
    )
    try:
        write_page(target, page)
    except OSError as exc:
        raise StoreWriteError(f"--html {target}: cannot write the page ({exc.strerror or exc})") from exc
    print(f"wrote {target} (the report as a page)", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if args.html is not None and not args.report:
        raise UsageError("--html FILE goes with --report (e.g. --report --html outputs/report.html)")
    config = config_from_args(args)
    if args.html is not None:
        write_html(args, config.datasets)
    scans = [scan_dataset(ref, config) for ref in config.datasets]
    check_settings_filter(scans, config)
    if config.out is None:
        check_kept(scans, config)
        sys.stdout.write(format_report(scans, config))
        return 0
    read = sum(s.rows for s in scans)
    kept = sum(len(s.kept) for s in scans)
    if not args.report:
        for scan in scans:
            print(summary_line(scan), file=sys.stderr)
        for scan in scans:
            if len(scan.settings) > 1:
                print(f"warning: {mixed_settings_warning(scan)}", file=sys.stderr)
    # What brings dropped rows back, once per reason (e.g. --keep-truncated for rows cut at --max-tokens).
    for reason, hint in HINTS.items():
        n = sum(scan.dropped[reason] for scan in scans)
        if n:
            _note(f"{n:,} rows dropped as {reason}: {hint}")
    if not kept:
        if args.report:
            sys.stdout.write(format_report(scans, config))
        raise UsageError(f"nothing to export: {read:,} rows read, none kept; see why with --report")
    try:
        written = write_export(scans, config)
    except DriftError:
        show_render_check(scans, config, args.report)
        raise
    for path, rows in written.items():
        print(f"wrote {path} ({rows:,} rows, {config.format})", file=sys.stderr)
        if not rows:
            _note(f"{path} is empty: too few rows for --val-fraction {config.val_fraction}")
    show_render_check(scans, config, args.report)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        return run_guarded(PROG, lambda: run(build_parser().parse_args(argv)), sys.stderr, debug="--debug" in argv)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
