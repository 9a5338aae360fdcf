"""Progress on stderr (a tqdm bar on a TTY, newline-terminated status lines otherwise), the
optional --log-file, and the end-of-run summary.

The bar advances when a request *finishes*. Under nohup there is no TTY, so no ``\\r``
redraws reach the log: a status line every ``interval`` seconds with done/total, output
tok/s over the last minute and since the start, in-flight requests, failures and ETA.

Writing progress never raises: stderr may be a pipe whose reader is gone (``| tee run.log``
after Ctrl-C, ``| head -1``). The first failed write stops all writing to the stream and
points its descriptor at /dev/null, so later writes anywhere in the process (the final error
line, the interpreter's flush at exit) cannot fail either; the log file is still written.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from synthgen.config import RunConfig
from synthgen.data.failures import kind_of, lasting
from synthgen.data.openfiles import open_output
from synthgen.data.records import ErrorRecord
from synthgen.errors import StoreWriteError
from synthgen.fmt import fmt_duration, plural
from synthgen.redact import redact
from synthgen.run.ledger import TokenLedger

WINDOW = 60.0  # seconds of history behind the "recent" rate
ETA_MIN_ANSWERS = 20  # answers before the status line gives an ETA ("estimating" until then)


@dataclass
class DatasetStats:
    name: str
    target: int = 0  # prompts the dataset's output should hold when complete
    already_done: int = 0  # found in raw_responses.jsonl at start
    pending: int = 0  # taken by this run
    done: int = 0
    skipped: int = 0
    failed: int = 0
    completion_tokens: int = 0  # this run
    tokens_before: int = 0  # output tokens of the rows earlier runs left
    prompt_tokens: int = 0  # this run, every turn
    cached_tokens: int = 0  # of prompt_tokens, served from the server's prefix cache
    first_start: float | None = None
    last_finish: float | None = None
    token_budget: int | None = None
    budget_stopped: bool = False
    skip_kinds: dict[str, int] = field(default_factory=dict)  # this run's skips by kind
    skip_example: dict[str, str] = field(default_factory=dict)  # kind -> the first reason (and id)
    # Skips an earlier run settled (run.settled): not taken again, listed at the end with their fix.
    settled: dict[str, int] = field(default_factory=dict)
    cut: int = 0  # rows of this run with an answer that stopped at --max-tokens (finish_reason length)
    finishes: dict[str, int] = field(default_factory=dict)  # rows of this run by their last turn's finish reason
    in_flight: int = 0  # prompts of the dataset in flight
    tokens: TokenLedger = field(default_factory=TokenLedger)  # where this run's output tokens went

    def hold_settled(self, records: Iterable[ErrorRecord]) -> None:
        for record in records:
            self.settled[record.error_type] = self.settled.get(record.error_type, 0) + 1
            self.skip_example.setdefault(record.error_type, f"{record.id}: {record.error}")

    @property
    def budget_tokens_done(self) -> int:
        """Output tokens of the dataset, earlier runs included: what --max-tokens-per-dataset counts."""
        return self.tokens_before + self.completion_tokens

    @property
    def wall(self) -> float:
        if self.first_start is None or self.last_finish is None:
            return 0.0
        return max(self.last_finish - self.first_start, 0.0)


@dataclass
class Tally:
    """The one tally of a run: each dataset's counts (``DatasetStats`` with its token ledger), changed by the
    writer alone (run/writer.py), and their sums, which the status line, the ETA and the timeline read."""

    datasets: list[DatasetStats] = field(default_factory=list)

    @property
    def done(self) -> int:
        return sum(s.done for s in self.datasets)

    @property
    def failed(self) -> int:
        return sum(s.failed for s in self.datasets)

    @property
    def skipped(self) -> int:
        return sum(s.skipped for s in self.datasets)

    @property
    def tokens(self) -> int:
        """Output tokens of the turns finished this run."""
        return sum(s.completion_tokens for s in self.datasets)

    @property
    def in_flight(self) -> int:
        return sum(s.in_flight for s in self.datasets)


class Progress:
    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        interval: float = 10.0,
        log_file: Path | None = None,
        tty: bool | None = None,
    ):
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.total = total
        self.interval = interval
        self.tally = Tally()  # the run's counts, which the writer changes (``watch``)
        self.outage_since: float | None = None  # set while the server is down
        self.started = time.monotonic()
        self._recent: deque[tuple[float, int, int]] = deque()  # (time, tokens, prompts)
        self._first_answer: float | None = None  # when this run's first prompt finished (the ETA's start)
        self._log = None
        if log_file is not None:
            try:
                # --log-file outputs/run.log on a first run: the folder is not there yet.
                log_file.parent.mkdir(parents=True, exist_ok=True)
                fd = open_output(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # not through a link
                self._log = open(fd, "a", encoding="utf-8", buffering=1)
            except OSError as exc:
                raise StoreWriteError(f"{log_file}: cannot open the log file ({exc.strerror})") from exc
        self._bar = None
        self._stream_ok = True  # False after the first failed write: the reader is gone

    @classmethod
    def of_run(cls, cfg: RunConfig, stream: TextIO | None = None, tty: bool | None = None) -> Progress:
        """The progress of a run of ``cfg``: its status interval and --log-file; ``tty`` None: ask ``stream``."""
        return cls(0, stream, cfg.status_interval, cfg.log_file, tty)

    def watch(self, tally: Tally) -> None:
        """The tally the figures are read from, which only the writer changes (run/writer.py); it tells
        progress of each change through the events below."""
        self.tally = tally

    def start(self, total: int) -> None:
        """Begin counting: the bar (on a TTY) and the rates start now."""
        self.total = total
        self.started = time.monotonic()
        if self.tty and total and self._stream_ok:
            from tqdm import tqdm

            try:
                self._bar = tqdm(
                    total=total, file=self.stream, unit="prompt", dynamic_ncols=True, mininterval=1.0, smoothing=0.1
                )
            except (OSError, ValueError):
                self._stream_lost()

    # --- the stream: every write goes through these ----------------------------------------------------
    def _write(self, text: str) -> None:
        if not self._stream_ok:
            return
        try:
            print(text, file=self.stream, flush=True)
        except (OSError, ValueError):  # a closed pipe (BrokenPipeError) or a closed file
            self._stream_lost()

    def _on_bar(self, action: Callable[[Any], object]) -> None:
        """``action(bar)`` on the tqdm bar, if there is one and the stream still takes writes."""
        if self._bar is None or not self._stream_ok:
            return
        try:
            action(self._bar)
        except (OSError, ValueError):
            self._stream_lost()

    def _stream_lost(self) -> None:
        self._stream_ok = False
        if self._bar is not None:
            self._bar.disable = True  # tqdm then writes nothing, not even when closed
            self._bar = None
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stream.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):
            pass  # no descriptor (a closed or in-memory stream): not writing to it is all we can do

    # --- events: the writer changed the tally --------------------------------------------------------
    def turn_finished(self, completion_tokens: int) -> None:
        """A turn of a conversation that has more to generate: its tokens in the rate, the prompt not done yet."""
        self._recent.append((time.monotonic(), completion_tokens, 0))

    def finished(self, completion_tokens: int) -> None:
        """A prompt answered: the bar advances, its tokens and the answer in the rates."""
        if self._first_answer is None:
            self._first_answer = time.monotonic()
        self._recent.append((time.monotonic(), completion_tokens, 1))
        self._advance()

    def failed_one(self) -> None:
        self._advance()

    def skipped_one(self) -> None:
        self._advance()

    def budget_closed(self, dataset: str, cap: int, done_tokens: int, in_flight: int, withdrawn: int) -> None:
        """A dataset takes no new requests: its untried prompts leave the total (which never drops
        below what is processed or in flight, so done/total and the ETA stay sane)."""
        self._set_total(self.total - max(withdrawn, 0))
        self.message(
            f"{dataset}: token budget {cap:,} reached ({done_tokens:,} done + {in_flight} in flight); "
            "no new requests for this dataset"
        )

    def outage_began(self, url: str, reason: str, wait: float) -> None:
        self.outage_since = time.monotonic()
        self.message(
            f"OUTAGE: server {url} is not healthy ({reason}); waiting up to {fmt_duration(wait)} for it to come back"
        )

    def outage_ended(self, seconds: float) -> None:
        self.outage_since = None
        self.message(f"RECOVERED: server is healthy again after {fmt_duration(seconds)} of outage; resuming")

    def gave_up(self, why: str) -> None:
        self.message(f"GIVE UP: {why}")

    def _set_total(self, total: int) -> None:
        self.total = max(total, self.tally.done + self.tally.failed + self.tally.skipped + self.tally.in_flight)

        def resize(bar: Any) -> None:
            bar.total = self.total
            bar.refresh()

        self._on_bar(resize)

    def _advance(self) -> None:
        def advance(bar: Any) -> None:
            bar.update(1)
            bar.set_postfix_str(self._postfix(), refresh=False)

        self._on_bar(advance)

    def message(self, text: str) -> None:
        """An event line (outage, recovery, warning) on stderr and in the log file."""
        line = redact(f"{self._stamp()} {text}")
        if self._bar is not None:
            self._on_bar(lambda bar: bar.write(line, file=self.stream))
        else:
            self._write(line)
        self._to_log(line)

    # --- figures -----------------------------------------------------------------------------------
    def rates(self) -> tuple[float, float]:
        """(recent, lifetime) output tokens per second."""
        now = time.monotonic()
        while self._recent and now - self._recent[0][0] > WINDOW:
            self._recent.popleft()
        elapsed = max(now - self.started, 1e-9)
        window = min(WINDOW, elapsed)
        recent = sum(t for _, t, _ in self._recent) / window
        return recent, self.tally.tokens / elapsed

    def eta(self) -> float | None:
        """Seconds left at the answers per second of the last minute, counted from the first answer; None
        ("estimating") until ETA_MIN_ANSWERS answers came. Counting from the start instead read the wait for the
        first wave of answers as the rate: with hundreds in flight the first answer after a minute made
        "ETA 8h45m" of a run that took two."""
        now = time.monotonic()
        remaining = self.total - self.tally.done - self.tally.failed - self.tally.skipped
        if remaining <= 0:
            return 0.0
        if self._first_answer is None or self.tally.done < min(ETA_MIN_ANSWERS, self.total):
            return None
        window = min(WINDOW, now - self._first_answer)
        recent_prompts = sum(p for at, _, p in self._recent if now - at <= window)
        if window <= 0 or not recent_prompts:
            return None
        return remaining / (recent_prompts / window)

    def _eta_text(self) -> str:
        eta = self.eta()
        return "estimating" if eta is None else fmt_duration(eta)

    def _postfix(self) -> str:
        recent, _ = self.rates()
        return f"tok/s {recent:,.0f} | in-flight {self.tally.in_flight} | failed {self.tally.failed}"

    def status_line(self) -> str:
        recent, lifetime = self.rates()
        # The share is of done prompts, as the count before it (failed and skipped are counted apart).
        pct = min(100.0 * self.tally.done / self.total, 100.0) if self.total > 0 else 100.0
        return (
            f"{self._stamp()} done {self.tally.done}/{self.total} ({pct:.1f}%) | "
            f"out tok/s 1m {recent:,.0f} avg {lifetime:,.0f} | in-flight {self.tally.in_flight} | "
            f"failed {self.tally.failed} | skipped {self.tally.skipped} | ETA {self._eta_text()}"
            + (
                f" | SERVER DOWN {fmt_duration(time.monotonic() - self.outage_since)}"
                if self.outage_since is not None
                else ""
            )
        )

    def tick(self, server: str | None = None) -> None:
        """Periodic: a status line where there is no bar; the log file always gets one.
        ``server``: the server's state (running / waiting, KV, rate, in-flight target), if known."""
        line = redact(self.status_line() + (f" | {server}" if server else ""))
        if self._bar is None:
            self._write(line)
        else:
            self._on_bar(lambda bar: bar.set_postfix_str(self._postfix()))
        self._to_log(line)

    def print_block(self, text: str) -> None:
        """Multi-line output (plan, summary) to stderr and the log."""
        self._on_bar(lambda bar: bar.clear())
        text = redact(text)
        self._write(text)
        self._to_log(text)

    def close_bar(self) -> None:
        """The bar draws its last line now and is gone; later lines go to the stream as they are."""
        self._on_bar(lambda bar: bar.close())
        self._bar = None

    def close(self) -> None:
        self.close_bar()
        if self._log is not None:
            self._log.close()
            self._log = None

    @staticmethod
    def _stamp() -> str:
        return datetime.now().strftime("%Y-%m-%d %H:%M:%S")

    def _to_log(self, line: str) -> None:
        if self._log is None:
            return
        try:
            self._log.write(line + "\n")
        except OSError:
            pass  # the log is a convenience; a full disk is caught where results are written


def write_last(text: str, stream: TextIO, log_file: Path | None) -> None:
    """The run's last lines, after its Progress is closed (to stderr and the log file); never raises."""
    if not text:
        return
    try:
        print(text, file=stream, flush=True)
    except (OSError, ValueError):
        pass
    if log_file is not None:
        try:
            with open(log_file, "a", encoding="utf-8") as log:
                log.write(text + "\n")
        except OSError:
            pass


# The summary's columns after the dataset's name: the rows (done, owed, this run's), how this run's prompts
# ended (its rows by finish reason, then the prompts that failed or were skipped), its output tokens generated
# and kept (TokenLedger.kept), and its rate and wall time.
FINISHES = ("stop", "length", "repetition")
SUMMARY_HEADER = ("dataset", "done", "total", "this run", *FINISHES, "failed", "skipped", "generated", "kept")


def _summary_cells(s: DatasetStats) -> list[int]:
    return [
        s.already_done + s.done,
        s.target,
        s.done,
        *(s.finishes.get(finish, 0) for finish in FINISHES),
        s.failed,
        s.skipped,
        s.tokens.generated,
        s.tokens.kept,
    ]


def summary_table(stats: list[DatasetStats], wall: float) -> str:
    header = (*SUMMARY_HEADER, "tok/s", "wall")
    rows = []
    for s in stats:
        rate = s.tokens.generated / s.wall if s.wall > 0 else 0.0
        rows.append((s.name, *(f"{n:,}" for n in _summary_cells(s)), f"{rate:,.0f}", fmt_duration(s.wall)))
    totals = [sum(column) for column in zip(*map(_summary_cells, stats), strict=True)] or [0] * (
        len(SUMMARY_HEADER) - 1
    )
    total_tokens = sum(s.tokens.generated for s in stats)
    rate = total_tokens / wall if wall > 0 else 0
    rows.append(("TOTAL", *(f"{n:,}" for n in totals), f"{rate:,.0f}", fmt_duration(wall)))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def fmt(row: Sequence[str]) -> str:
        cells = zip(row, widths, strict=True)
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(cells))

    lines = [fmt(r) for r in [header, *rows]]
    lines.insert(1, "-" * len(lines[0]))
    lines.insert(len(lines) - 1, "-" * len(lines[0]))
    notes = []
    prompt_tokens = sum(s.prompt_tokens for s in stats)
    if prompt_tokens:
        shares = ", ".join(f"{s.name} {100 * s.cached_tokens / s.prompt_tokens:.0f}%" for s in stats if s.prompt_tokens)
        notes.append(
            f"prompt tokens served from the server's prefix cache: "
            f"{100 * sum(s.cached_tokens for s in stats) / prompt_tokens:.0f}% ({shares})"
        )
    for s in stats:
        if s.token_budget is not None:
            over = s.budget_tokens_done - s.token_budget
            state = f"overshot by {over:,}" if over > 0 else f"{-over:,} under" if over < 0 else "exactly the budget"
            reached = "reached" if s.budget_stopped else "not reached"
            notes.append(
                f"{s.name}: token budget {s.token_budget:,} {reached}; "
                f"{s.budget_tokens_done:,} output tokens in total ({state})"
            )
    cut = sum(s.cut for s in stats)
    if cut:
        where = ", ".join(f"{s.name} {s.cut:,}" for s in stats if s.cut)
        notes.append(
            f"cut at --max-tokens: {cut:,} of the {sum(s.done for s in stats):,} answers of this run ({where}); "
            "the export leaves them out unless --keep-truncated"
        )
    return "\n".join(lines + notes)


def startup_line(before: float, server: float | None) -> str:
    """The summary's line on the time before the first request, which its figures leave out: ``server`` the
    part a launched server's start took (None: no server was launched), the rest asking the server what it
    serves and loading the tokenizer."""
    asking = "asking the server and loading the tokenizer"
    if server is None:
        what = asking
    else:
        what = f"server start-up {fmt_duration(server)}, then {asking} {fmt_duration(max(before - server, 0.0))}"
    return f"not in these figures: {fmt_duration(before)} before the first request ({what})"


SHOWN_PATHS = 3


def _unusable(stats: list[DatasetStats]) -> str:
    """What of this run's answers the exports leave out, and what to do about it (the last line's note)."""
    answers = sum(s.done for s in stats)
    cut, looped = sum(s.cut for s in stats), sum(s.finishes.get("repetition", 0) for s in stats)
    notes = []
    if cut:
        notes.append(
            f"{cut:,} of this run's {answers:,} answers cut at --max-tokens: raise --max-tokens for whole answers, "
            "or export the cut ones too with --keep-truncated"
        )
    if looped:
        notes.append(
            f"{looped:,} of this run's {answers:,} answers ended in a loop by the loop guard: left out of every "
            "export; --redo repetition generates them again"
        )
    return f" ({'; '.join(notes)})" if notes else ""


def _paths(paths: list[str]) -> str:
    shown = ", ".join(paths[:SHOWN_PATHS])
    return shown + (f" and {len(paths) - SHOWN_PATHS} more" if len(paths) > SHOWN_PATHS else "")


# What the run prints as the next step: the exact route (the ids the model saw and wrote, for drafters), and the
# re-rendered one for SFT trainers, whose render check says where the template renders other ids.
EXACT_EXPORT = ("tokens", "tokens.jsonl")
SFT_EXPORT = ("messages", "sft.jsonl")


def export_command(
    output_dir: Path,
    names: list[str],
    partition: str,
    whole_partition: bool,
    prompts_dir: Path,
    route: tuple[str, str] = EXACT_EXPORT,
) -> str:
    """The export_training.py command for the rows of these datasets in one route (format, file), runnable as
    printed."""
    parts = ["python", "export_training.py"]
    if whole_partition:
        parts += ["--partition", partition]
        if prompts_dir != Path("prompts"):
            parts += ["--prompts-dir", str(prompts_dir)]
    else:
        for name in names:
            parts += ["--dataset", name]
    if output_dir != Path("outputs"):
        parts += ["--output-dir", str(output_dir)]
    fmt, out = route
    return " ".join(shlex.quote(p) for p in [*parts, "--format", fmt, "--out", out])


def end_of_run(stats: list[DatasetStats], output_dir: Path, rerun: str, export: str, sft: str = "") -> tuple[str, bool]:
    """What to do next, as the run's last lines: the skips no rerun changes (by reason, with the fix and the
    real path), the failures a rerun retries (with the command), where the rows are and the export command.
    Returns (text, whether the exit code says "something is left": failures, retryable skips, or skips and
    not one row)."""
    lines: list[str] = []
    retry: list[str] = []
    failed = retry_skips = 0
    for s in stats:
        errors = str(output_dir / s.name / "errors.jsonl")
        lasting_here = {kind: n for kind, n in s.skip_kinds.items() if lasting(kind)}
        every = {kind: lasting_here.get(kind, 0) + s.settled.get(kind, 0) for kind in {*lasting_here, *s.settled}}
        for kind, n in sorted(every.items()):
            entry = kind_of(kind)
            fix = entry.fix if entry is not None else ""
            lines.append(
                f"{s.name}: {plural(n, 'prompt')} skipped ({kind}), a rerun will not change that: {fix} "
                f"(first: {s.skip_example.get(kind, '')}; all in {errors})"
            )
        left = s.failed + s.skipped - sum(lasting_here.values())
        if left:
            retry.append(errors)
            failed += s.failed
            retry_skips += left - s.failed
    rows = [s for s in stats if s.already_done + s.done]
    nothing = not rows and any(s.skipped or s.settled for s in stats)
    if failed or retry_skips:
        ended = ((failed, "failed", "failed"), (retry_skips, "was skipped", "were skipped"))
        what = " and ".join(f"{plural(n, 'prompt')} {one if n == 1 else many}" for n, one, many in ended if n)
        lines.append(f"WARNING: {what} (see {_paths(retry)}); rerun to retry them: {rerun}")
    elif nothing:
        lines.append("WARNING: every selected prompt was skipped, no row was written; see the reasons above")
    if rows:
        where = _paths([str(output_dir / s.name / "raw_responses.jsonl") for s in rows]) + _unusable(stats)
        if sft:
            lines.append(
                "for SFT trainers, the text re-rendered by the chat template (the export's render check counts "
                f"the rows whose text renders to other ids than the model saw): {sft}"
            )
        lines.append(f"rows: {where}; export them with: {export}")
    return "\n".join(lines), bool(failed or retry_skips or nothing)
