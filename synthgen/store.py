"""Result files of one dataset: the resume scan, torn-line repair, whole-line appends, the lock.

    outputs/<dataset>/raw_responses.jsonl   one line per completed prompt (the training data)
    outputs/<dataset>/errors.jsonl          the latest failure or skip of each prompt not yet done
    outputs/<dataset>/.lock                 held (flock) by the run writing this dataset

Every record is one ``os.write`` of a whole line on an O_APPEND descriptor, made from the
event-loop thread, so a kill leaves at most one torn last line. ``recover`` finds it before
anything is appended: a complete record missing only its newline gets the newline, a
fragment is moved to ``raw_responses.jsonl.torn`` and cut off. A failed write is cut back
to where it began, so an error never leaves half a line behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from .errors import RunLockedError, StoreWriteError
from .records import DoneEntry, ErrorRecord, ResultRecord, parse_line

RESULTS = "raw_responses.jsonl"
ERRORS = "errors.jsonl"
LOCK = ".lock"


def _done_entry(line: bytes) -> DoneEntry | None:
    row = parse_line(line)
    return None if row is None else DoneEntry.from_dict(row)


def iter_rows(path: Path) -> Iterator[dict]:
    """Read-only: every complete JSON object row of a results file (a torn tail is passed over)."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            row = parse_line(line)
            if row is not None:
                yield row


def iter_results(path: Path) -> Iterator[ResultRecord]:
    """Read-only: every result row of a results file, as records (old rows included)."""
    for row in iter_rows(path):
        if isinstance(row.get("id"), str):
            yield ResultRecord.from_dict(row)


@dataclass
class ResumeState:
    """What earlier runs left in raw_responses.jsonl."""

    done: set[str] = field(default_factory=set)  # kept current by the run as prompts finish
    entries: dict[str, DoneEntry] = field(default_factory=dict)  # the rows found, by id (first wins)
    completion_tokens: int = 0  # over the rows found: --max-tokens-per-dataset counts them
    duplicate_rows: int = 0  # should stay 0; reported if another tool wrote the file
    bad_lines: list[int] = field(default_factory=list)  # unreadable lines other than the last
    repaired: str | None = None  # what recover() did to the last line, if anything


class DatasetStore:
    def __init__(self, output_dir: Path, dataset: str):
        self.dataset = dataset
        self.dir = Path(output_dir) / dataset
        self.results_path = self.dir / RESULTS
        self.errors_path = self.dir / ERRORS
        self._lock_fd: int | None = None
        self._fds: dict[Path, int] = {}

    # --- lock ------------------------------------------------------------------------------------
    def lock(self) -> None:
        """Take the dataset's lock or refuse; the OS releases it when this process dies."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreWriteError(f"{self.dir}: cannot create the output folder ({exc.strerror})") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunLockedError(
                f"{self.dir}: another run (pid {holder}) is writing dataset '{self.dataset}'; "
                f"wait for it to finish or stop it (kill {holder}) before starting this one"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    # --- resume ------------------------------------------------------------------------------------
    def recover(self, repair: bool = True) -> ResumeState:
        """Scan completed ids; with ``repair``, fix a torn last line before any append."""
        state = ResumeState()
        try:
            fh = open(self.results_path, "rb")
        except FileNotFoundError:
            return state
        offset = 0
        tail: tuple[int, bytes] | None = None
        with fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.endswith(b"\n"):
                    tail = (offset, line)  # only the last line can lack its newline
                    break
                offset += len(line)
                if not line.strip():
                    continue
                self._count(state, line, lineno)
        if tail is None:
            return state
        start, fragment = tail
        if _done_entry(fragment) is not None:
            # The whole record made it; only the newline is missing.
            self._count(state, fragment, lineno)
            state.repaired = "added the missing newline after the last record"
            if repair:
                self._write_raw(self.results_path, b"\n")
        else:
            state.repaired = f"moved a torn last line ({len(fragment)} bytes) to {RESULTS}.torn"
            if repair:
                self._write_raw(self.results_path.with_name(RESULTS + ".torn"), fragment + b"\n")
                try:
                    os.truncate(self.results_path, start)
                except OSError as exc:
                    problem = f"cannot repair the torn last line ({exc.strerror})"
                    raise StoreWriteError(f"{self.results_path}: {problem}") from exc
        return state

    @staticmethod
    def _count(state: ResumeState, line: bytes, lineno: int) -> None:
        entry = _done_entry(line)
        if entry is None:
            state.bad_lines.append(lineno)
            return
        if entry.id in state.done:
            state.duplicate_rows += 1
            return
        state.done.add(entry.id)
        state.entries[entry.id] = entry
        state.completion_tokens += entry.completion_tokens

    def compact_errors(self, drop: set[str]) -> None:
        """Rewrite errors.jsonl (atomically) without the rows of ``drop``, the prompts that are
        done or that this run tries again, keeping one row, the latest, per remaining prompt."""
        if not self.errors_path.exists():
            return
        latest: dict = {}
        for row in iter_rows(self.errors_path):
            key = row.get("id")
            key = key if isinstance(key, str) else orjson.dumps(key)  # a hand-edited id of another type
            latest.pop(key, None)  # re-insert so the order follows the latest attempt
            latest[key] = row
        keep = [row for key, row in latest.items() if key not in drop]
        tmp = self.errors_path.with_suffix(".jsonl.tmp")
        try:
            with open(tmp, "wb") as fh:
                for row in keep:
                    fh.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.errors_path)
        except OSError as exc:
            raise StoreWriteError(f"{self.errors_path}: cannot rewrite ({exc.strerror})") from exc

    # --- appends ------------------------------------------------------------------------------------
    def append_result(self, record: ResultRecord) -> None:
        self._write_raw(self.results_path, record.to_json())

    def append_error(self, record: ErrorRecord) -> None:
        self._write_raw(self.errors_path, record.to_json())

    def _fd(self, path: Path) -> int:
        fd = self._fds.get(path)
        if fd is None:
            try:
                self.dir.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError as exc:
                raise StoreWriteError(f"{path}: cannot open for writing ({exc.strerror})") from exc
            self._fds[path] = fd
        return fd

    def _write_raw(self, path: Path, data: bytes) -> None:
        fd = self._fd(path)
        start = os.fstat(fd).st_size
        view = memoryview(data)
        try:
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError as exc:
            # Cut back to where this record began: a full disk must not leave half a line.
            try:
                os.ftruncate(fd, start)
            except OSError:
                pass
            reason = "disk full" if exc.errno == errno.ENOSPC else exc.strerror
            raise StoreWriteError(
                f"{path}: write failed ({reason}); everything before this record is intact, "
                "free space or fix permissions and rerun to resume"
            ) from exc

    def sync(self) -> None:
        for fd in self._fds.values():
            try:
                os.fsync(fd)
            except OSError:
                pass

    def close(self) -> None:
        self.sync()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None
