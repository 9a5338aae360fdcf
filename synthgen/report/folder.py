"""Reading an output folder for the page, writing the page, and the run's live report.

    FolderReport   the datasets of an output folder, read incrementally: each refresh parses only the rows
                   appended since the last one (a file that shrank or was replaced is read again), so a
                   page rewritten every few minutes costs each row one parse per run; the file is read a
                   block at a time and each row read without its token ids (``rowread.read_row``'s lean read), so
                   a 5 GB results file costs the page neither 5 GB of memory nor its ids' parse; a run
                   seeds it with the figures its resume scan made (``seed``), so rows are parsed once
    write_page     the page, atomically: a fresh temporary file beside it, then a rename over the page (a
                   reader never sees half a page; a link in its place is replaced, never written through)
    LiveReport     what the run calls: a timeline sample every status interval, the page at the start,
                   every ``--report-interval`` seconds (in a worker thread) and at the end

A page that cannot be written (a full disk, a folder in its place) is said once on the run's log and the
run goes on: the report is a view of the rows, never a reason to lose them.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from synthgen.config import RunConfig
from synthgen.data.openfiles import create_new, open_output
from synthgen.data.records import parse_line
from synthgen.data.rowread import Outcome, read_row
from synthgen.errors import UsageError
from synthgen.report.figures import DatasetFigures
from synthgen.report.page import PageData, build_page
from synthgen.report.teacher import teacher_records
from synthgen.report.timeline import TIMELINE, TimelineWriter, read_timeline, run_id

REPORT = "report.html"
RESULTS, ERRORS = "raw_responses.jsonl", "errors.jsonl"
READ_CHUNK = 8 << 20


class _Tail:
    """Where reading a growing JSONL file got to: the file's identity and the offset of its next line."""

    def __init__(self) -> None:
        self.ident: tuple[int, int] | None = None
        self.offset = 0

    def new_lines(self, path: Path) -> tuple[bool, Iterator[bytes]]:
        """(whether to start over, the whole lines appended since the last call), read a block at a time
        as they are consumed: a 5 GB results file is never held whole."""
        try:
            fd = open_output(path, os.O_RDONLY)
        except FileNotFoundError:
            restart = self.ident is not None
            self.ident, self.offset = None, 0
            return restart, iter(())
        fh = os.fdopen(fd, "rb")
        try:
            st = os.fstat(fh.fileno())
            ident = (st.st_dev, st.st_ino)
            restart = ident != self.ident or st.st_size < self.offset
            if restart:
                self.ident, self.offset = ident, 0
            fh.seek(self.offset)
        except BaseException:
            fh.close()
            raise
        return restart, self._read(fh)

    def _read(self, fh: BinaryIO) -> Iterator[bytes]:
        with fh:
            rest = b""
            while chunk := fh.read(READ_CHUNK):
                data = rest + chunk
                cut = data.rfind(b"\n") + 1
                rest = data[cut:]
                yield from data[:cut].splitlines()
                self.offset += cut  # once its lines are taken
            # a line still being written (no newline yet) waits for the next call


def parse_rows(lines: Iterable[bytes]) -> Iterator[dict[str, Any] | None]:
    """Each non-blank line of errors.jsonl as a dict, None for a line that is not a JSON object."""
    for line in lines:
        if line.strip():
            yield parse_line(line)


def read_rows(lines: Iterable[bytes]) -> Iterator[Outcome]:
    """Each non-blank line of a results file as the row reader's outcome, read without its token ids (the page
    counts tokens, it never reads ids)."""
    for line in lines:
        if line and not line.isspace():
            yield read_row(line, lean=True)


class FolderReport:
    """The figures of the datasets under ``output_dir``: ``names``, or every folder holding results."""

    def __init__(
        self,
        output_dir: Path,
        names: Iterable[str] | None = None,
        budgets: Mapping[str, tuple[int, str]] | None = None,
    ):
        self.output_dir = Path(output_dir)
        self.names = None if names is None else list(names)
        self.budgets = dict(budgets or {})
        self._figures: dict[str, DatasetFigures] = {}
        self._tails: dict[str, _Tail] = {}
        self.lock = threading.Lock()  # a periodic write in a worker thread and the final one

    def dataset_names(self) -> list[str]:
        if self.names is not None:
            return self.names
        return sorted(p.parent.name for p in self.output_dir.glob(f"*/{RESULTS}"))

    def _budgeted(self, figures: DatasetFigures) -> DatasetFigures:
        """``figures`` with the dataset's output-token budget, if it has one."""
        budget = self.budgets.get(figures.name)
        if budget is not None:
            figures.budget, figures.budget_kind = budget
        return figures

    def seed(self, figures: DatasetFigures, read: tuple[int, int, int]) -> None:
        """``figures`` made from every row of the dataset's results file up to offset ``read[2]`` of the file
        ``read[:2]`` (st_dev, st_ino): the next refresh reads on from there, or, when the file was replaced
        or cut shorter meanwhile, reads it again from the start."""
        self._figures[figures.name] = self._budgeted(figures)
        tail = self._tails[figures.name] = _Tail()
        tail.ident, tail.offset = read[:2], read[2]

    def refresh(self) -> list[DatasetFigures]:
        out = []
        for name in self.dataset_names():
            tail = self._tails.setdefault(name, _Tail())
            restart, lines = tail.new_lines(self.output_dir / name / RESULTS)
            figures = self._figures.get(name)
            if figures is None or restart:
                figures = self._figures[name] = self._budgeted(DatasetFigures(name))
            for outcome in read_rows(lines):
                figures.add(outcome)
            figures.set_errors(r for r in parse_rows(_Tail().new_lines(self.output_dir / name / ERRORS)[1]) if r)
            out.append(figures)
        return out

    def page(self, live_every: float | None, source: str, title: str | None = None) -> str:
        with self.lock:
            datasets = self.refresh()
            timeline = read_timeline(self.output_dir / TIMELINE)
            teacher = teacher_records(self.output_dir, [d.name for d in datasets])
            data = PageData(
                title or str(self.output_dir), datasets, timeline, time.time(), live_every, source, teacher=teacher
            )
            return build_page(data)


def write_page(path: Path, html: str) -> None:
    """``html`` to ``path`` atomically (temporary file + rename); OSError or UsageError when it cannot be."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with create_new(tmp) as fh:
            fh.write(html.encode())
            fh.flush()
            os.fsync(fh.fileno())
        if path.is_dir() and not path.is_symlink():
            raise IsADirectoryError(f"{path}: is a folder")
        os.replace(tmp, path)  # renames over a link (never through it)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def token_budgets(
    names: Iterable[str], cap: int | None, caps: Mapping[str, int], averages: Mapping[str, float]
) -> dict[str, tuple[int, str]]:
    """Each dataset's output-token budget: --max-tokens-per-dataset ("cap"), else a budget file's samples
    times its expected tokens per sample ("plan")."""
    out = {}
    for name in names:
        if cap is not None:
            out[name] = (cap, "cap")
        elif name in caps and name in averages:
            out[name] = (round(caps[name] * averages[name]), "plan")
    return out


def start_detail(start: Mapping[str, int]) -> str:
    """A run's start event in words: ``rows_before`` (a resume), ``continuing`` (partial outputs and turns of
    earlier runs), ``continue_cut``."""
    parts = [
        f"resumes over {start['rows_before']:,} rows" if start.get("rows_before") else "",
        f"continues {start['continuing']:,} partial outputs" if start.get("continuing") else "",
        f"--continue-cut {start['continue_cut']:,}" if start.get("continue_cut") else "",
    ]
    return "; ".join(p for p in parts if p)


class LiveReport:
    """The page and timeline of a running run. ``run(sample)`` goes beside the run's requests until
    cancelled; ``finish()`` writes the last page and returns the line naming it."""

    def __init__(
        self,
        output_dir: Path,
        interval: float,
        sample_every: float,
        budgets: Mapping[str, tuple[int, str]] | None = None,
        on_message: Callable[[str], None] = lambda text: None,
        start: Mapping[str, int] | None = None,
    ):
        self.path = Path(output_dir) / REPORT
        self.interval, self.sample_every, self.on_message = interval, sample_every, on_message
        self.folder = FolderReport(output_dir, None, budgets)
        self.timeline = TimelineWriter(Path(output_dir) / TIMELINE, run_id(), on_message)
        self._told = False
        self._final = False  # once the last page is written, a periodic write still under way is dropped
        self._writing = threading.Lock()
        self.timeline.event("start", start_detail(start or {}), **(start or {}))

    @classmethod
    def for_run(
        cls,
        cfg: RunConfig,
        names: list[str],
        on_message: Callable[[str], None],
        seeds: Iterable[tuple[DatasetFigures, tuple[int, int, int]]] = (),
        start: Mapping[str, int] | None = None,
    ) -> LiveReport:
        """The live report of a run: its output folder, intervals and datasets' budgets; ``seeds``: the
        figures the resume scan made of each dataset's rows (``FolderReport.seed``), so that the first page
        does not read them again; ``start``: what the run goes on from (``start_detail``), on its start event."""
        budgets = token_budgets(names, cfg.max_tokens_per_dataset, cfg.budget, cfg.expected_tokens)
        report = cls(cfg.output_dir, cfg.report_interval, cfg.status_interval, budgets, on_message, start)
        for figures, read in seeds:
            report.folder.seed(figures, read)
        return report

    def event(self, kind: str, detail: str = "") -> None:
        self.timeline.event(kind, detail)

    def write(self, live: bool) -> bool:
        with self._writing:
            if self._final:
                return False
            self._final = not live
            try:
                write_page(self.path, self.folder.page(self.interval if live else None, "run_inference.py"))
            except (OSError, UsageError) as exc:
                self._failed(exc)
                return False
            return True

    def _failed(self, exc: Exception) -> None:
        if not self._told:
            self._told = True
            self.on_message(f"note: the run report is not written ({self.path}: {exc}); the run goes on")

    async def run(self, sample: Callable[[], dict[str, Any]]) -> None:
        """A timeline sample every ``sample_every`` seconds, the page at once and then every ``interval``
        (0: only at the end), written in a worker thread so the requests never wait for it."""
        loop = asyncio.get_running_loop()
        next_sample = next_write = loop.time()
        while True:
            now = loop.time()
            if now >= next_sample:
                self.timeline.sample(sample())
                next_sample = now + self.sample_every
            if self.interval > 0 and now >= next_write:
                await asyncio.to_thread(self.write, True)
                next_write = now + self.interval
            wake = min(next_sample, next_write) if self.interval > 0 else next_sample
            await asyncio.sleep(max(0.01, wake - loop.time()))

    def finish(self, last_sample: dict[str, Any] | None, stopped: str = "") -> str:
        """The last sample and the end of the run on the timeline (``stopped``: why it stopped early, as
        "stopped by SIGTERM"), the final page; the line to print."""
        if last_sample is not None:
            self.timeline.sample(last_sample)
        self.timeline.event("end", stopped)
        self.timeline.close()
        return f"report: {self.path}" if self.write(False) else ""
