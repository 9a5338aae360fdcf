"""The launched server's log file (<output-dir>/server.log): its size bound, what a start wrote, its lines.

The log is written by the pump (synthgen.launch.logpump) while the server runs, and by the launcher's
own `===== synthgen ...` lines. It never grows past its cap: a log of `cap` bytes moves to <name>.1
(replacing the one before), at a start and while the server writes, so at most two of them are on disk.

    reader = StartLog(path)        # at a start: remembers where this start's output begins
    reader.tail()                  # its last lines as one short line, for a message
    reader.contains("ready")       # this start's output has that text
"""

from __future__ import annotations

import contextlib
import os
import re
from datetime import datetime, timezone
from pathlib import Path

from synthgen.data.openfiles import open_output_file

# At this size the log moves to <log>.1 (replacing the one before); SYNTHGEN_SERVER_LOG_BYTES sets it.
LOG_ROTATE_BYTES = 64 * 1024 * 1024
LOG_BYTES_ENV = "SYNTHGEN_SERVER_LOG_BYTES"
TAIL_LINES = 3
TAIL_LINE_CHARS = 160
TAIL_READ_BYTES = 16384
# Lines of a server's start-up log that are not its progress: warnings, their continuation lines and
# tracebacks (SGLang on a CPU: "Cannot detect CUDA architecture.", a bare "warnings.warn(").
NOT_PROGRESS = re.compile(
    r"warn|deprecat|cannot detect|traceback|^\s|^file \"|^\^|^~|\"GET /health", re.IGNORECASE
)  # and the access log of our own /health polls
APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT


def log_cap() -> int:
    """The log's cap in bytes: SYNTHGEN_SERVER_LOG_BYTES when set to a whole number (at least 4096)."""
    try:
        return max(4096, int(os.environ[LOG_BYTES_ENV]))
    except (KeyError, ValueError):
        return LOG_ROTATE_BYTES


def stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def short_tail(text: str, lines: int = TAIL_LINES, line_chars: int = TAIL_LINE_CHARS) -> str:
    """The last non-empty lines of a log, each cut to `line_chars`, joined with ' | ' (one line)."""
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(line if len(line) <= line_chars else line[: line_chars - 3] + "..." for line in kept)


def progress_line(text: str, line_chars: int = TAIL_LINE_CHARS) -> str:
    """The last line of a start-up log that says how far the server got (not a warning, a traceback
    line or an indented continuation), cut to `line_chars`; '' when there is none."""
    for line in reversed(text.splitlines()):
        if line.strip() and not NOT_PROGRESS.search(line) and not line.startswith("====="):
            kept = line.strip()
            return kept if len(kept) <= line_chars else kept[: line_chars - 3] + "..."
    return ""


def rotate_log(path: Path, limit: int = LOG_ROTATE_BYTES) -> bool:
    """Move a log of `limit` bytes or more to <name>.1 (replacing it); True when it was moved."""
    try:
        if path.lstat().st_size < limit:
            return False
        os.replace(path, path.with_name(path.name + ".1"))
    except FileNotFoundError:
        return False
    return True


def rotated_line(path: Path) -> bytes:
    return f"===== synthgen {stamp()}: the log before is in {path.name}.1\n".encode()


def dropped_line(size: int) -> bytes:
    return (
        f"===== synthgen {stamp()}: about {size:,} bytes of the server's output dropped here: it wrote faster than "
        "the log could be written (a loaded machine)\n"
    ).encode()


def note(path: Path, text: str) -> None:
    """Append one `===== synthgen <time>: text` line (best effort: a log that cannot be written is no error)."""
    with contextlib.suppress(OSError), open_output_file(path, APPEND, "ab") as log:
        log.write(f"===== synthgen {stamp()}: {text}\n".encode())


class StartLog:
    """What one start of the server wrote to the log: from the offset where it began, in that file
    (after a rotation, the new file holds only this start's output)."""

    def __init__(self, path: Path, offset: int = 0) -> None:
        self.path = path
        self.offset = offset
        self.inode = self._inode()

    @classmethod
    def begin(cls, path: Path, header: str, rotated: bool) -> StartLog:
        """Write a start's `===== synthgen <time>: header` line (after the note of a move); its output follows."""
        with open_output_file(path, APPEND, "ab") as log:
            if rotated:
                log.write(rotated_line(path))
            log.write(f"\n===== synthgen {stamp()}: {header}\n".encode())
            log.flush()
            return cls(path, log.tell())

    def _inode(self) -> int | None:
        try:
            return self.path.stat().st_ino
        except OSError:
            return None

    def read(self, limit: int | None) -> str:
        """This start's output (its last `limit` bytes when given)."""
        try:
            with open(self.path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                begin = self.offset if os.fstat(fh.fileno()).st_ino == self.inode else 0
                start = begin if limit is None else max(begin, size - limit)
                fh.seek(min(start, size))
                return fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = TAIL_LINES) -> str:
        return short_tail(self.read(TAIL_READ_BYTES), lines)

    def contains(self, needle: str) -> bool:
        return needle in self.read(None)

    def progress(self) -> str:
        return progress_line(self.read(TAIL_READ_BYTES))
