"""``run_inference.py --status``: what the report's first cards say about an output folder, as text, from
another shell, while a run writes it or after: per dataset its rows, failed and skipped prompts, rows cut, ended
in a loop or with an empty answer, output tokens generated and kept, and the pid of the live run holding its
lock.

It only reads: the results and error files a block at a time, each row without its token ids (the report's
``FolderReport``), the partial outputs waiting, and whether a run holds each dataset's lock (``lock_holder``
asks without taking it). It writes, repairs, locks and creates nothing, so it is safe beside a live run; a
line the run is still writing is left for the next look.

Tokens *generated* are those in rows plus the partial outputs waiting to be continued; *kept* leaves out the
rows the exports drop whatever the flags: ended by the loop guard, or cut before their answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from synthgen.data.partials import PartialOutputs, merged
from synthgen.data.prompts import discover
from synthgen.data.store import ERRORS, LOCK, RESULTS, lock_holder
from synthgen.errors import UsageError
from synthgen.report.figures import DatasetFigures
from synthgen.report.folder import FolderReport

COLUMNS = ("dataset", "rows", "failed", "skipped", "cut", "loops", "empty", "generated", "kept", "run")


@dataclass(frozen=True, slots=True)
class DatasetStatus:
    figures: DatasetFigures
    waiting: int  # output tokens of the partial outputs waiting to be continued
    holder: str | None  # the pid of the live run holding the dataset's lock

    @property
    def generated(self) -> int:
        return self.figures.output_tokens + self.waiting

    @property
    def kept(self) -> int:
        return self.generated - self.figures.looped_tokens - self.figures.cut_unanswered_tokens

    def numbers(self) -> tuple[int, ...]:
        f = self.figures
        return (f.rows, f.failed, f.skipped, f.cut, f.looped, f.empty, self.generated, self.kept)


def _cells(name: str, numbers: Sequence[int], pids: Sequence[str]) -> list[str]:
    return [name, *(f"{n:,}" for n in numbers), f"live, pid {', '.join(pids)}" if pids else "-"]


def folder_datasets(output_dir: Path) -> list[str]:
    """Every dataset folder of an output folder: those holding results, errors or a run's lock note."""
    names = {p.parent.name for kind in (RESULTS, ERRORS, LOCK) for p in Path(output_dir).glob(f"*/{kind}")}
    return sorted(names)


def selected(output_dir: Path, prompts_dir: Path, partition: str | None, datasets: Sequence[str]) -> list[str]:
    """The datasets to show: ``datasets``, else the partition's (when one was asked for), else every one of
    the output folder."""
    if datasets:
        return list(datasets)
    if partition is not None:
        return [source.name for source in discover(prompts_dir, partition)]
    return folder_datasets(output_dir)


def read_status(output_dir: Path, names: Sequence[str]) -> list[DatasetStatus]:
    folder = FolderReport(output_dir, names)
    return [
        DatasetStatus(
            figures,
            sum(p.tokens for p in merged(PartialOutputs(output_dir / figures.name).load()).values()),
            lock_holder(output_dir, figures.name),
        )
        for figures in folder.refresh()
    ]


def status_text(output_dir: Path, statuses: Sequence[DatasetStatus]) -> str:
    rows = [list(COLUMNS)] + [_cells(s.figures.name, s.numbers(), [s.holder] if s.holder else []) for s in statuses]
    if len(statuses) > 1:
        total = [sum(column) for column in zip(*(s.numbers() for s in statuses), strict=True)]
        rows.append(_cells("TOTAL", total, sorted({s.holder for s in statuses if s.holder})))
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = [
        "  ".join(
            cell.ljust(w) if i in (0, len(COLUMNS) - 1) else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in rows
    ]
    live = [s for s in statuses if s.holder]
    lines.append(
        f"{output_dir}: "
        + (f"a run is writing ({len(live)} of {len(statuses)} datasets locked)" if live else "no run is writing")
        + "; generated: output tokens in rows and partial outputs waiting; kept: without loops and answers cut "
        "before their end. The page: report.html; the rows in detail: export_training.py --report"
    )
    return "\n".join(lines) + "\n"


def show_status(output_dir: Path, names: Sequence[str], out: TextIO) -> int:
    """Print the status of ``names`` (datasets of ``output_dir``); 0, or UsageError when there is nothing."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        raise UsageError(f"--status: {output_dir} is no folder; pass the --output-dir a run writes")
    if not names:
        raise UsageError(f"--status: {output_dir} holds no dataset folder yet; pass the --output-dir a run writes")
    out.write(status_text(output_dir, read_status(output_dir, names)))
    return 0
