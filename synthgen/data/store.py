"""Result files of one dataset: the resume scan, torn-line repair, whole-line appends, the lock.

    outputs/<dataset>/raw_responses.jsonl   one line per completed prompt (the training data)
    outputs/<dataset>/errors.jsonl          the latest failure or skip of each prompt not yet done
    outputs/<dataset>/.lock                 the pid of the run writing this dataset
    outputs/.locks                          the locks themselves: one byte-range lock per dataset

Every record is one ``os.write`` of a whole line on an O_APPEND descriptor, made from the
event-loop thread, so a kill leaves at most one torn last line. ``scan`` finds it and
``repair`` fixes it before anything is appended (``recover`` does both): a complete record
missing only its newline gets the newline, a fragment is moved to ``raw_responses.jsonl.torn``
and cut off. A run scans first and repairs only once it has decided to write, so a run that
refuses changes nothing. A failed write is cut back to where it began, so an error never
leaves half a line behind.

Descriptors are few whatever the number of datasets: the append descriptors of all datasets
share a small LRU pool (``WRITE_POOL``), and the locks of all datasets of an output folder sit
on one open file, as open-file-description byte-range locks (Linux; the kernel drops them
when the process dies, like flock). Where those do not exist, POSIX record locks stand in.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson

from synthgen.data.openfiles import FilePool, create_new, limit_error, open_output, open_output_file, pool_size
from synthgen.data.records import DoneEntry, ErrorRecord, ResultRecord, json_line, parse_line
from synthgen.data.rowread import Outcome, done_entry, from_dict, read_row
from synthgen.data.rowscan import lines
from synthgen.data.samples import split_key
from synthgen.errors import RunLockedError, StoreWriteError, SynthgenError

RESULTS = "raw_responses.jsonl"
ERRORS = "errors.jsonl"
LOCK = ".lock"
LOCK_TABLE = ".locks"
BOM = b"\xef\xbb\xbf"  # an editor's UTF-8 byte order mark: not part of the first row

# What a scan hands each row it reads to (scan_results): the reader's outcome of it, read without token ids.
RowSink = Callable[[Outcome], None]

# Append descriptors of every dataset's output files; a small share of the descriptor limit.
WRITE_POOL: FilePool[int] = FilePool(pool_size(8), os.close)


def _open_error(exc: OSError, path: Path, problem: str, fix: str) -> SynthgenError:
    """The one-line error of a failed open: the descriptor limit, or ``problem`` with ``fix``."""
    if exc.errno == errno.EISDIR:
        fix = "it is a folder: move it aside and rerun"
    return limit_error(exc, path) or StoreWriteError(f"{path}: {problem} ({exc.strerror}); {fix}")


def _done_entry(line: bytes) -> DoneEntry | None:
    return done_entry(read_row(line, lean=True))


def iter_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Read-only: every complete JSON object row of a results file (a torn tail is passed over).

    A missing file has no rows; a link is refused (UsageError); any other failure to read raises
    OSError for the caller to name."""
    try:
        fh = open_output_file(path, os.O_RDONLY, "rb")
    except FileNotFoundError:
        return
    with fh:
        for lineno, line in enumerate(fh, start=1):
            row = parse_line(line.removeprefix(BOM) if lineno == 1 else line)
            if row is not None:
                yield row


def iter_done(path: Path) -> Iterator[DoneEntry]:
    """Read-only: what resume needs of every result row of a results file, in file order (duplicates too)."""
    for row in iter_rows(path):
        entry = done_entry(from_dict(row))
        if entry is not None:
            yield entry


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
    repaired: str | None = None  # what recover() did (or, without repair, would do) to the last line
    bom: bool = False  # the file starts with a UTF-8 byte order mark (passed over, left in place)
    # The repair the last line needs, until ``DatasetStore.repair`` makes it: (offset, the line, complete).
    tail: tuple[int, bytes, bool] | None = field(default=None, repr=False)
    # (st_dev, st_ino, offset): the file scanned and where its counted lines end once the tail's repair is
    # made, so that a reader given every row the scan read (the run report) can go on from there.
    read: tuple[int, int, int] | None = field(default=None, repr=False)

    def without(self, ids: set[str]) -> ResumeState:
        """This state once the rows of ``ids`` are moved out of the results file."""
        entries = {rid: e for rid, e in self.entries.items() if rid not in ids}
        return ResumeState(
            done=self.done - ids,
            entries=entries,
            completion_tokens=sum(e.completion_tokens for e in entries.values()),
            duplicate_rows=self.duplicate_rows,
            bad_lines=self.bad_lines,
            repaired=self.repaired,
            bom=self.bom,
            tail=self.tail,
        )  # no ``read``: the moved rows were read, and the file is rewritten


def rewrite_lines(path: Path, lines: list[bytes]) -> None:
    """Replace ``path`` atomically with ``lines`` (fsynced before the rename); no lines: no file."""
    tmp = path.with_suffix(".jsonl.tmp")
    try:
        if not lines:
            path.unlink(missing_ok=True)
            return
        with create_new(tmp) as fh:
            for line in lines:
                fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):  # a disk-full rewrite left a half-written (or empty) temp file
            tmp.unlink(missing_ok=True)
        reason = "disk full" if exc.errno == errno.ENOSPC else exc.strerror
        raise limit_error(exc, path) or StoreWriteError(f"{path}: cannot rewrite ({reason})") from exc


def scan_results(results_path: Path, tense: str = "will", on_row: RowSink | None = None) -> ResumeState:
    """Read-only: the completed ids of a results file, and in ``tail`` the repair its last line
    needs (``repaired`` says it in ``tense``: would, will). ``on_row`` gets every row counted or
    passed over, in file order (duplicates too), as the reader's outcome read without its token ids
    (``rowread.read_row``): the run report's figures are made from the one read."""
    state = ResumeState()
    try:
        fh = open_output_file(results_path, os.O_RDONLY, "rb")
    except FileNotFoundError:
        return state
    except OSError as exc:
        raise _open_error(
            exc,
            results_path,
            "cannot read the results file",
            f"make it readable and writable (chmod u+rw {results_path}) and rerun",
        ) from exc
    offset = 0
    tail: tuple[int, bytes] | None = None
    lineno = 0
    with fh:
        st = os.fstat(fh.fileno())
        for lineno, line in enumerate(lines(fh), start=1):
            parsed = line
            if lineno == 1 and line.startswith(BOM):
                state.bom = True
                parsed = line[len(BOM) :]
            if not line.endswith(b"\n"):
                tail = (offset, parsed)  # only the last line can lack its newline
                break
            offset += len(line)
            if parsed.isspace():  # a blank line (it ends with its newline); strip() would copy every row
                continue
            _count_line(state, parsed, lineno, on_row)
    if tail is None:
        state.read = (st.st_dev, st.st_ino, offset)
        return state
    start, fragment = tail
    complete = _done_entry(fragment) is not None
    if complete:  # the whole record made it; only the newline is missing
        _count_line(state, fragment, lineno, on_row)
    # The repair adds the newline after a complete last line, or moves a torn one out (truncating to it).
    state.read = (st.st_dev, st.st_ino, start + len(fragment) + 1 if complete else start)
    state.tail = (start, fragment, complete)
    state.repaired = _repair_note(fragment, complete, tense)
    return state


def _count_line(state: ResumeState, line: bytes, lineno: int, on_row: RowSink | None = None) -> None:
    outcome = read_row(line, lean=True)
    if on_row is not None:
        on_row(outcome)
    entry = done_entry(outcome)
    if entry is None:
        state.bad_lines.append(lineno)
        return
    if entry.id in state.done:
        state.duplicate_rows += 1
        return
    state.done.add(entry.id)
    state.entries[entry.id] = entry
    state.completion_tokens += entry.completion_tokens


def _repair_note(fragment: bytes, complete: bool, tense: str) -> str:
    """What the repair of a last line does, in a tense: would (a dry run), will (planned), did."""
    if complete:
        verb = {"would": "would add", "will": "will add", "did": "added"}[tense]
        return f"{verb} the missing newline after the last record"
    verb = {"would": "would move", "will": "will move", "did": "moved"}[tense]
    return f"{verb} a torn last line ({len(fragment)} bytes) to {RESULTS}.torn"


class _LockTable:
    """The locks of every dataset of one output folder, on one open file: a one-byte lock per
    dataset at an offset hashed from its name. One per output folder per process."""

    _open: dict[str, _LockTable] = {}

    def __init__(self, key: str, fd: int):
        self.key, self.fd = key, fd
        self.held: set[str] = set()

    @classmethod
    def of(cls, output_dir: Path) -> _LockTable:
        key = os.path.realpath(output_dir)
        table = cls._open.get(key)
        if table is None:
            path = Path(output_dir) / LOCK_TABLE
            try:
                fd = open_output(path, os.O_RDWR | os.O_CREAT)
            except OSError as exc:
                raise _open_error(
                    exc, path, "cannot open the lock file", f"make it writable (chmod u+rw {path}) or remove it"
                ) from exc
            table = cls._open[key] = cls(key, fd)
        return table

    @staticmethod
    def _offset(dataset: str) -> int:
        return int.from_bytes(hashlib.sha256(dataset.encode()).digest()[:8], "big") >> 2

    def _set(self, dataset: str, kind: int) -> None:
        offset = self._offset(dataset)
        if hasattr(fcntl, "F_OFD_SETLK"):
            # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padding.
            fcntl.fcntl(self.fd, fcntl.F_OFD_SETLK, struct.pack("hhqqi4x", kind, os.SEEK_SET, offset, 1, 0))
        else:
            fcntl.lockf(
                self.fd, {fcntl.F_WRLCK: fcntl.LOCK_EX | fcntl.LOCK_NB, fcntl.F_UNLCK: fcntl.LOCK_UN}[kind], 1, offset
            )

    def acquire(self, dataset: str) -> bool:
        """Lock ``dataset``; False if another run (or another store of this process) holds it."""
        if dataset in self.held:
            return False
        try:
            self._set(dataset, fcntl.F_WRLCK)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise StoreWriteError(f"{Path(self.key) / LOCK_TABLE}: cannot lock ({exc.strerror})") from exc
        self.held.add(dataset)
        return True

    def release(self, dataset: str) -> None:
        if dataset not in self.held:
            return
        self.held.discard(dataset)
        try:
            self._set(dataset, fcntl.F_UNLCK)
        except OSError:
            pass  # closing the table below drops it anyway
        self.close_if_idle()

    def close_if_idle(self) -> None:
        if not self.held and self._open.get(self.key) is self:
            del self._open[self.key]
            os.close(self.fd)


def lock_holder(output_dir: Path, dataset: str) -> str | None:
    """Read-only: the pid (as ``<dataset>/.lock`` records it; "unknown" where it does not) of the live run that
    holds the dataset's lock, or None when no run does. Asks the lock table whether the dataset's byte is locked
    (F_OFD_GETLK, F_GETLK) on a descriptor opened for reading: takes no lock, creates and writes nothing."""
    try:
        fd = open_output(Path(output_dir) / LOCK_TABLE, os.O_RDONLY)
    except OSError:  # no lock table: no run ever locked this folder (or none can be asked)
        return None
    try:
        flock = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, _LockTable._offset(dataset), 1, 0)
        answer = fcntl.fcntl(fd, getattr(fcntl, "F_OFD_GETLK", fcntl.F_GETLK), flock)
        held = struct.unpack("hhqqi4x", answer)[0] != fcntl.F_UNLCK
    except OSError:
        return None
    finally:
        os.close(fd)
    if not held:
        return None
    try:
        text = Path(output_dir, dataset, LOCK).read_text(errors="replace").strip()
    except OSError:
        text = ""
    return text if text.isdigit() else "unknown"


class DatasetStore:
    def __init__(self, output_dir: Path, dataset: str):
        self.dataset = dataset
        self.output_dir = Path(output_dir)
        self.dir = self.output_dir / dataset
        self.results_path = self.dir / RESULTS
        self.errors_path = self.dir / ERRORS
        self.lock_path = self.dir / LOCK
        self._locked: _LockTable | None = None
        self._written: set[Path] = set()  # files appended to: synced on close

    # --- lock ------------------------------------------------------------------------------------
    def lock(self) -> None:
        """Take the dataset's lock or refuse; the OS releases it when this process dies."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _open_error(
                exc, self.dir, "cannot create the output folder", "check --output-dir and its permissions"
            ) from exc
        try:
            fd = open_output(self.lock_path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            raise _open_error(
                exc,
                self.lock_path,
                "cannot open the lock file",
                f"make it writable (chmod u+rw {self.lock_path}) or remove it",
            ) from exc
        try:
            table = _LockTable.of(self.output_dir)
            if not table.acquire(self.dataset):
                table.close_if_idle()
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
                raise RunLockedError(
                    f"{self.dir}: another run (pid {holder}) is writing dataset '{self.dataset}'; "
                    f"wait for it to finish or stop it (kill {holder}) before starting this one"
                )
            self._locked = table
            try:
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except OSError as exc:  # the pid is for the message of a refused run; the lock holds without it
                if exc.errno != errno.ENOSPC:
                    raise StoreWriteError(f"{self.lock_path}: cannot write ({exc.strerror})") from exc
        finally:
            os.close(fd)

    def check_writable(self) -> None:
        """Find a read-only results or errors file (or folder) before any request is sent: each
        existing file is opened for appending, without writing; a missing one needs a writable folder."""
        for path in (self.results_path, self.errors_path):
            if path.exists() or path.is_symlink():
                try:
                    os.close(open_output(path, os.O_WRONLY | os.O_APPEND))
                except OSError as exc:
                    raise _open_error(
                        exc, path, "cannot open for writing", f"make it writable (chmod u+w {path}) and rerun"
                    ) from exc
            elif not os.access(self.dir, os.W_OK | os.X_OK):
                raise StoreWriteError(
                    f"{self.dir}: the output folder is not writable; "
                    f"make it writable (chmod u+rwx {self.dir}) and rerun"
                )

    # --- resume ------------------------------------------------------------------------------------
    def recover(self, repair: bool = True) -> ResumeState:
        """Scan completed ids; with ``repair``, fix a torn last line before any append (without,
        ``repaired`` says what a run would do)."""
        state = self.scan("would")
        if repair:
            self.repair(state)
        return state

    def repair(self, state: ResumeState) -> None:
        """Make the repair ``scan`` found the last line needs (if any): before anything is appended."""
        if state.tail is None:
            return
        start, fragment, complete = state.tail
        if complete:
            self._write_raw(self.results_path, b"\n")
        else:
            self._write_raw(self.results_path.with_name(RESULTS + ".torn"), fragment + b"\n")
            try:
                fd = open_output(self.results_path, os.O_WRONLY)  # never through a link
                try:
                    os.ftruncate(fd, start)
                finally:
                    os.close(fd)
            except OSError as exc:
                problem = f"cannot repair the torn last line ({exc.strerror})"
                raise StoreWriteError(f"{self.results_path}: {problem}") from exc
        state.tail = None
        state.repaired = _repair_note(fragment, complete, "did")

    def scan(self, tense: str = "will", on_row: RowSink | None = None) -> ResumeState:
        """Read-only: the completed ids, and in ``tail`` the repair the last line needs (``repaired``
        says it in ``tense``: would, will); ``on_row`` as ``scan_results``."""
        return scan_results(self.results_path, tense, on_row)

    def compact_errors(self, drop: set[str]) -> None:
        """Rewrite errors.jsonl (atomically) without the rows of ``drop``, the prompts that are
        done or that this run tries again, keeping one row, the latest, per remaining prompt."""
        if not (self.errors_path.exists() or self.errors_path.is_symlink()):
            return
        latest: dict[str | bytes, Any] = {}
        try:
            for row in iter_rows(self.errors_path):
                key = row.get("id")
                key = key if isinstance(key, str) else orjson.dumps(key)  # a hand-edited id of another type
                latest.pop(key, None)  # re-insert so the order follows the latest attempt
                latest[key] = row
        except OSError as exc:
            raise _open_error(
                exc,
                self.errors_path,
                "cannot read",
                f"make it readable and writable (chmod u+rw {self.errors_path}) and rerun",
            ) from exc
        keep = [row for key, row in latest.items() if key not in drop]
        tmp = self.errors_path.with_suffix(".jsonl.tmp")
        # An append descriptor would point at the replaced file: close it, the next append reopens.
        WRITE_POOL.release((self, self.errors_path))
        try:
            with create_new(tmp) as fh:
                for row in keep:
                    fh.write(json_line(row))
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.errors_path)
        except OSError as exc:
            raise limit_error(exc, tmp) or StoreWriteError(
                f"{self.errors_path}: cannot rewrite ({exc.strerror})"
            ) from exc

    # --- appends ------------------------------------------------------------------------------------
    def append_result(self, record: ResultRecord) -> None:
        self._write_raw(self.results_path, record.to_json())

    def append_error(self, record: ErrorRecord) -> None:
        self._write_raw(self.errors_path, record.to_json())

    def _open_append(self, path: Path) -> int:
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            return open_output(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except OSError as exc:
            raise _open_error(
                exc, path, "cannot open for writing", f"make it writable (chmod u+w {path}) and rerun to resume"
            ) from exc

    def _write_raw(self, path: Path, data: bytes) -> None:
        with WRITE_POOL.use((self, path), lambda: self._open_append(path)) as fd:
            self._written.add(path)
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
        """fsync every file this store appended to (its descriptor may have left the pool)."""
        for path in self._written:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                os.fsync(fd)
            except OSError:
                pass
            finally:
                os.close(fd)

    def close(self) -> None:
        self.sync()
        for path in self._written:
            WRITE_POOL.release((self, path))
        self._written.clear()
        if self._locked is not None:
            self._mark_free()  # before the release: the next run's pid must not be overwritten
            self._locked.release(self.dataset)
            self._locked = None

    def _mark_free(self) -> None:
        """.lock of a finished run says so, instead of keeping a pid that looks like a live lock."""
        stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
        try:
            fd = os.open(self.lock_path, os.O_WRONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return  # only a note for people; the lock itself is in .locks
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"free: the run with pid {os.getpid()} ended at {stamp}\n".encode(), 0)
        except OSError:
            pass
        finally:
            os.close(fd)


@dataclass(frozen=True, slots=True)
class PartialTurn:
    """One line of partial_turns.jsonl: a finished turn of an unfinished conversation, and what it
    was made for (the conversation's prompt hash and the settings id); a line without them (written
    before they were kept) is made for nothing this run can check, so it is never continued."""

    id: str
    turn: int
    data: dict[str, Any]
    prompt_hash: str | None = None
    settings: str | None = None

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> PartialTurn | None:
        rid, k, data = row.get("id"), row.get("turn"), row.get("data")
        if not isinstance(rid, str) or not isinstance(k, int) or isinstance(k, bool) or not isinstance(data, dict):
            return None
        digest, settings = row.get("prompt_hash"), row.get("settings")
        return cls(
            rid,
            k,
            data,
            digest if isinstance(digest, str) else None,
            settings if isinstance(settings, str) else None,
        )

    def to_json(self) -> bytes:
        row = {"id": self.id, "turn": self.turn, "data": self.data}
        row |= {"prompt_hash": self.prompt_hash, "settings": self.settings}
        return json_line(row)


class PartialTurns:
    """Finished turns of conversations that are not finished yet (``--regenerate all``).

        outputs/<dataset>/partial_turns.jsonl
            {"id", "turn": k, "data": <Turn>, "prompt_hash", "settings"} per generated turn

    A conversation's row reaches raw_responses.jsonl only when its last turn is done; until then
    its turns wait here, so a killed run loses at most the turns in flight. A run continues a
    conversation only from turns made for the prompt its line makes now and under the run's
    settings (``usable``: contiguous from turn 0); ``open`` rewrites the file with those alone
    (atomically), and ``compact`` at the end of a run drops the turns of conversations whose row
    is written, so none is left to be taken up by a later run. A torn last line is dropped like
    any unreadable line.
    """

    NAME = "partial_turns.jsonl"

    def __init__(self, folder: Path):
        self.path = Path(folder) / self.NAME

    def load(self) -> list[PartialTurn]:
        """Read-only: every readable line, in file order."""
        try:
            rows = [turn for row in iter_rows(self.path) if (turn := PartialTurn.from_dict(row)) is not None]
        except OSError as exc:
            raise StoreWriteError(f"{self.path}: cannot read ({exc.strerror})") from exc
        return rows

    @staticmethod
    def usable(
        rows: list[PartialTurn], done: set[str], hashes: dict[str, str], settings: str | None
    ) -> dict[str, list[PartialTurn]]:
        """The turns a run may continue from, by conversation (its key: id and sample): not done, made
        for the prompt of hash ``hashes[prompt id]`` and (unless ``settings`` is None: not known, a dry
        run) under ``settings``, contiguous from turn 0."""
        turns: dict[str, list[PartialTurn]] = {}
        for row in rows:
            if row.id in done or row.prompt_hash is None or row.prompt_hash != hashes.get(split_key(row.id)[0]):
                continue
            if settings is not None and row.settings != settings:
                continue
            have = turns.setdefault(row.id, [])
            if row.turn == len(have):  # a turn out of order (or repeated) is not ours to trust
                have.append(row)
        return {rid: have for rid, have in turns.items() if have}

    def open(self, keep: dict[str, list[PartialTurn]]) -> None:
        """Before the run appends: the file holds ``keep`` alone (a torn last line goes too)."""
        if self.path.exists():
            self._rewrite([turn for turns in keep.values() for turn in turns])

    def compact(self, done: set[str]) -> None:
        """At the end of a run: the turns of conversations whose row is written go (the file too,
        once nothing is left)."""
        WRITE_POOL.release((self, self.path))  # an append descriptor would point at the replaced file
        rows = self.load()
        kept = [row for row in rows if row.id not in done]
        if len(kept) != len(rows):
            self._rewrite(kept)

    def _rewrite(self, rows: list[PartialTurn]) -> None:
        WRITE_POOL.release((self, self.path))
        rewrite_lines(self.path, [row.to_json() for row in rows])

    def append(self, turn: PartialTurn) -> None:
        line = turn.to_json()
        try:
            with WRITE_POOL.use((self, self.path), self._open) as fd:  # shared with the result files: few descriptors
                start = os.fstat(fd).st_size
                try:
                    os.write(fd, line)
                except OSError:
                    os.ftruncate(fd, start)
                    raise
        except OSError as exc:
            limited = limit_error(exc, self.path)
            if limited is not None:
                raise limited from exc
            reason = "disk full" if exc.errno == errno.ENOSPC else exc.strerror
            raise StoreWriteError(f"{self.path}: write failed ({reason}); rerun to resume") from exc

    def _open(self) -> int:
        return open_output(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def close(self) -> None:
        WRITE_POOL.release((self, self.path))


def move_rows(results_path: Path, ids: set[str], to_name: str = "changed_rows.jsonl") -> int:
    """Move the result rows of ``ids`` out of a results file into ``to_name`` beside it (appended and
    synced first, then the results file is replaced atomically): nothing is lost if a kill comes
    between. Returns how many rows moved."""
    keep: list[bytes] = []
    moved: list[bytes] = []
    try:
        with open_output_file(results_path, os.O_RDONLY, "rb") as fh:
            for line in fh:
                entry = _done_entry(line)
                (moved if entry is not None and entry.id in ids else keep).append(line)
        target = results_path.with_name(to_name)
        with open_output_file(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "ab") as fh:
            fh.writelines(moved)
            fh.flush()
            os.fsync(fh.fileno())
        tmp = results_path.with_suffix(".jsonl.tmp")
        with create_new(tmp) as fh:
            fh.writelines(keep)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, results_path)
    except OSError as exc:
        raise StoreWriteError(f"{results_path}: cannot move rows of changed prompts ({exc.strerror})") from exc
    return len(moved)
