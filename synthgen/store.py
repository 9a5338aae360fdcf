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

RESULTS = "raw_responses.jsonl"
ERRORS = "errors.jsonl"
LOCK = ".lock"


def _row_id(line: bytes) -> str | None:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if isinstance(row, dict) and isinstance(row.get("id"), str):
        return row["id"]
    return None


def iter_rows(path: Path) -> Iterator[dict]:
    """Read-only: every complete JSON object row of a results file (a torn tail is passed over)."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(row, dict):
                yield row


@dataclass
class ResumeState:
    """What earlier runs left in raw_responses.jsonl."""

    done: set[str] = field(default_factory=set)
    completion_tokens: int = 0  # over done rows, kept current by the run: --max-tokens-per-dataset counts them
    duplicate_rows: int = 0  # should stay 0; reported if another tool wrote the file
    bad_lines: list[int] = field(default_factory=list)  # unreadable lines other than the last
    repaired: str | None = None  # what recover() did to the last line, if anything

    @property
    def mean_completion_tokens(self) -> float | None:
        return self.completion_tokens / len(self.done) if self.done else None


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
        if _row_id(fragment) is not None:
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
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            row = None
        if not (isinstance(row, dict) and isinstance(row.get("id"), str)):
            state.bad_lines.append(lineno)
            return
        if row["id"] in state.done:
            state.duplicate_rows += 1
            return
        state.done.add(row["id"])
        tokens = row.get("completion_tokens")
        if isinstance(tokens, int):
            state.completion_tokens += tokens

    def compact_errors(self, drop: set[str]) -> None:
        """Rewrite errors.jsonl (atomically) without the rows of ``drop``, the prompts that are
        done or that this run tries again, keeping one row, the latest, per remaining prompt."""
        if not self.errors_path.exists():
            return
        latest: dict = {}
        for row in iter_rows(self.errors_path):
            latest.pop(row.get("id"), None)  # re-insert so the order follows the latest attempt
            latest[row.get("id")] = row
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
    def append_result(self, row: dict) -> None:
        self._append(self.results_path, row)

    def append_error(self, row: dict) -> None:
        self._append(self.errors_path, row)

    def _append(self, path: Path, row: dict) -> None:
        self._write_raw(path, orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))

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
