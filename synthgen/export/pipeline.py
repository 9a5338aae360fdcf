"""One export, top to bottom: request -> datasets -> config -> scan -> (report | write) -> what was done.

    from synthgen.export.pipeline import export
    export(ExportRequest(partition="short", out=Path("train.jsonl")))   # 0, or raises a SynthgenError

Results go to files, the report to stdout, everything said about the export to stderr. A user's mistake is a
UsageError (one line, exit 2) raised before anything is written.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from synthgen.data.tokenrows import ExistingSource
from synthgen.errors import UsageError
from synthgen.export.config import ExportConfig, ExportRequest
from synthgen.export.existing import scan_existing
from synthgen.export.formats.kd import TeacherJoin
from synthgen.export.page import write_html
from synthgen.export.report import drop_notes, format_report, mixed_settings_warning, render_notes, summary_line
from synthgen.export.routes import resolve
from synthgen.export.scan import DatasetScan, scan_dataset
from synthgen.export.select import choose_datasets, refuse_input_destination
from synthgen.export.write import DriftError, check_kept, write_export
from synthgen.fmt import plural


class Voice:
    """Where the export speaks: the report on ``out``, notes and what was written on ``err``."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None) -> None:
        self.out, self.err = out or sys.stdout, err or sys.stderr

    def say(self, line: str) -> None:
        print(line, file=self.err)

    def note(self, line: str) -> None:
        self.say(f"note: {line}")


def configure(request: ExportRequest, voice: Voice) -> ExportConfig:
    """The checks on the request, the datasets, the refused destinations, then the tokenizer and routes."""
    request.check()
    datasets, missing = choose_datasets(request, voice.note)
    inputs = [request.budget] if request.budget is not None else []
    for target in request.targets():
        refuse_input_destination(target, datasets + missing, inputs)
    config = resolve(request, datasets, voice.note)
    if request.html is not None:
        write_html(request, datasets, voice.say)
    return config


def check_settings_filter(scans: Sequence[DatasetScan], config: ExportConfig) -> None:
    if config.settings is None or any(config.settings in s.settings for s in scans):
        return
    found = sorted({sid or "unrecorded" for s in scans for sid in s.settings})
    raise UsageError(
        f"--settings {config.settings or 'unrecorded'}: no rows of this settings set "
        f"(sets found: {', '.join(found) or 'none'}); see them with --report"
    )


def show_render_check(scans: Sequence[DatasetScan], config: ExportConfig, report: bool, voice: Voice) -> None:
    """After an export: the whole report (--report), else the render check's lines and the notes on stderr."""
    if report:
        voice.out.write(format_report(scans, config))
        return
    for scan in scans:
        if scan.render is not None:
            voice.say(f"{scan.ref.name}: {scan.render.summary()}")
            for kind, example in scan.render.examples.items():
                voice.say(f"  first {kind}: {example}")
    for line in render_notes(scans, config):
        voice.note(line)


def _write(
    scans: Sequence[DatasetScan],
    config: ExportConfig,
    request: ExportRequest,
    existing: Sequence[ExistingSource],
    voice: Voice,
) -> None:
    report = request.report
    for name, found in scan_existing(existing).items():
        voice.say(f"{name}: {found.rows:,} existing token rows ({found.trained_tokens:,} trained tokens) merged")
    join = TeacherJoin.of(Path(request.output_dir), config.datasets) if config.fmt.teacher else None
    try:
        written = write_export(scans, config, existing, join)
    except DriftError:
        show_render_check(scans, config, report, voice)
        raise
    if join is not None:
        voice.say(join.summary())
    for path, rows in written.items():
        voice.say(f"wrote {path} ({plural(rows, 'row')}, {config.format})")
        if not rows:
            voice.note(f"{path} is empty: too few rows for --val-fraction {config.val_fraction}")
    show_render_check(scans, config, report, voice)


def export(request: ExportRequest, voice: Voice | None = None) -> int:
    """Run one export; returns the exit code (0), or raises the SynthgenError that says what is wrong."""
    voice = voice or Voice()
    config = configure(request, voice)
    scans = [scan_dataset(ref, config) for ref in config.datasets]
    check_settings_filter(scans, config)
    if config.out is None:
        check_kept(scans, config)
        voice.out.write(format_report(scans, config))
        return 0
    if not request.report:
        for scan in scans:
            voice.say(summary_line(scan))
        for scan in scans:
            if len(scan.settings) > 1:
                voice.say(f"warning: {mixed_settings_warning(scan)}")
    existing, left_out = request.merged_existing()
    for line in [*drop_notes(scans), *left_out]:
        voice.note(line)
    if not any(scan.kept for scan in scans) and not existing:
        if request.report:
            voice.out.write(format_report(scans, config))
        read = sum(s.rows for s in scans)
        raise UsageError(f"nothing to export: {plural(read, 'row')} read, none kept; see why with --report")
    _write(scans, config, request, existing, voice)
    return 0
