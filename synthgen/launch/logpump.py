"""The pump between a launched server and its log: the server's stdout and stderr go into a pipe, and
this small process copies them to server.log, bounded while the server runs and with credentials
masked (an `--api-key` in SGLang's printed arguments, the run's own key).

It is a process of its own (not a thread of the run) so that a server kept with --keep-server, or one
whose run was killed, still has its output written; it reads until every writer of the pipe is gone
(the server's whole process group has exited) and then ends. It ignores SIGINT, SIGTERM and SIGHUP:
the server's last lines (its shutdown) still reach the log.

    python -m synthgen.launch.logpump LOG CAP     # stdin: the server's output; SYNTHGEN_PUMP_SECRETS:
                                                  # values to mask, one per line (the run's key)

The log moves to <LOG>.1 whenever it reaches CAP bytes, so the two never hold more than 2 x CAP. The
pipe is read by a thread of its own into at most CAP bytes waiting to be masked: the server never blocks
on its output, however slow the masking (a loaded machine); what does not fit is dropped, and a line says
how much.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import synthgen
from synthgen.data.openfiles import open_output_file
from synthgen.launch.serverlog import APPEND, dropped_line, rotated_line
from synthgen.redact import redact, remember

SECRETS_ENV = "SYNTHGEN_PUMP_SECRETS"
CHUNK = 65536
# At most this much output waits to be masked (the log's cap if smaller): the pump's memory.
BACKLOG_MAX = 16 * 1024 * 1024
# A line longer than this is written in pieces.
MAX_LINE = 4 * CHUNK
# redact() takes time quadratic in a line's length (0.15 s at 2,000 characters, 2 s at 8,000) and about
# 4 ms per 2 kB of plain log lines: the text is masked in pieces of at most this many characters, cut after
# a newline, a space or a comma (SGLang's printed arguments, `api_key='...', port=...`, stay whole), and
# only a piece that shows the shape of a credential (HINT, a flag named like one, a remembered value).
MASK_PIECE = 2048
SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "pwd", "credentials", "credential")
# After a secret word: `: "v"`, `='v'`, `=v` (redact's JSON, repr, environment and query shapes).
AFTER_WORD = re.compile(r"""['"]?\s*[:=]\s*['"]|\s*=""")
URL_USER = re.compile(r"://[^\s/?#@]*@")
BEARER = re.compile(r"\b(?:bearer|basic)\s")
_secrets: list[str] = []


class BoundedLog:
    """An append-only log that moves itself to <name>.1 when the next write would pass `cap` bytes."""

    def __init__(self, path: Path, cap: int) -> None:
        self.path, self.cap = path, cap
        self._fh: BinaryIO | None = None
        self._size = 0

    def _open(self) -> BinaryIO:
        if self._fh is None:
            self._fh = open_output_file(self.path, APPEND, "ab")
            self._size = os.fstat(self._fh.fileno()).st_size
        return self._fh

    def write(self, data: bytes) -> None:
        """Append `data` (whole lines); the move happens between lines."""
        if self._size + len(data) <= self.cap:
            self._append(data)
            return
        for line in data.splitlines(keepends=True):
            if self._size and self._size + len(line) > self.cap:
                self._move()
            self._append(line[: max(0, self.cap - self._size)])  # a line longer than the cap is cut

    def _append(self, data: bytes) -> None:
        fh = self._open()
        fh.write(data)
        fh.flush()
        self._size += len(data)

    def _move(self) -> None:
        self._open().close()
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))
        self._fh = None
        self._append(rotated_line(self.path))

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _pieces(text: str) -> list[str]:
    pieces = []
    while len(text) > MASK_PIECE:
        cut = max(text.rfind(sep, 0, MASK_PIECE) for sep in "\n ,") + 1 or MASK_PIECE
        pieces.append(text[:cut])
        text = text[cut:]
    return [*pieces, text]


def _hinted(piece: str) -> bool:
    """The piece may hold a credential redact() masks (a superset of its shapes, found in linear time)."""
    if any(secret in piece for secret in _secrets):
        return True
    low = piece.lower()
    for word in SECRET_WORDS:
        start = low.find(word)
        while start >= 0:
            end = start + len(word)
            if AFTER_WORD.match(low, end):
                return True
            # A flag named like a credential: --api-key V, --hf-token=V.
            if low[end : end + 1] in ("", " ", "\t", "=", "'", '"'):
                word_start = max(low.rfind(c, 0, start) for c in " \t\n") + 1
                if low.startswith("-", word_start):
                    return True
            start = low.find(word, end)
    return (
        any(param in low for param in ("sig=", "signature=", "auth="))
        or ("://" in low and URL_USER.search(low) is not None)
        or (("bearer" in low or "basic" in low) and BEARER.search(low) is not None)
    )


def mask(line: bytes) -> bytes:
    """The lines with credentials masked (synthgen.redact), in time linear in their length."""
    text = line.decode("utf-8", errors="replace")
    return "".join(redact(p) if _hinted(p) else p for p in _pieces(text)).encode("utf-8")


def remember_secret(secret: str) -> None:
    """Mask this exact value (the run's key) too."""
    if secret:
        remember(secret)
        _secrets.append(secret)


class Backlog:
    """What the server wrote and the log has not taken yet, at most `cap` bytes: the reader thread drains
    the pipe into it at once, whatever the masking costs (a server blocked on a full pipe never becomes
    ready). Past the cap the oldest output is dropped, counted (an int ahead of the chunks), so the newest
    lines, a dying server's last words, are the ones kept. ``None`` ends it (end of file)."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.items: deque[bytes | int | None] = deque()
        self.size = 0
        self.ready = threading.Condition()

    def put(self, chunk: bytes | None) -> None:
        with self.ready:
            if chunk is not None:
                dropped = 0
                while self.size + len(chunk) > self.cap and self.items:
                    first = self.items.popleft()
                    dropped += first if isinstance(first, int) else len(first or b"")
                    self.size -= len(first) if isinstance(first, bytes) else 0
                if dropped:
                    self.items.appendleft(dropped)
                self.size += len(chunk)
            self.items.append(chunk)
            self.ready.notify()

    def take(self) -> bytes | int | None:
        with self.ready:
            while not self.items:
                self.ready.wait()
            item = self.items.popleft()
            if isinstance(item, bytes):
                self.size -= len(item)
            return item


def read_into(source: int, backlog: Backlog) -> None:
    """The reader thread: `source` into `backlog` until end of file (or a read error)."""
    try:
        while chunk := os.read(source, CHUNK):
            backlog.put(chunk)
    finally:
        backlog.put(None)


def pump(source: int, log: BoundedLog) -> None:
    """Copy `source` (a file descriptor) to `log`, masked, until end of file: the complete lines of each
    read at once (a line longer than MAX_LINE in pieces, cut after a space where it has one). The pipe is
    drained by a thread of its own into a Backlog of the log's cap (more than that could not be kept
    anyway) or BACKLOG_MAX, so the server never waits for the masking: a chatty server on a loaded machine becomes ready
    as fast as a quiet one, and what the log could not keep up with is dropped with a line saying so."""
    backlog = Backlog(min(log.cap, BACKLOG_MAX))
    reader = threading.Thread(target=read_into, args=(source, backlog), daemon=True)
    reader.start()
    drain(backlog, log)


def drain(backlog: Backlog, log: BoundedLog) -> None:
    """The writer: `backlog` into `log`, masked, until its end."""
    pending, broken = b"", False
    while (item := backlog.take()) is not None:
        if isinstance(item, int):
            # Only whole lines are written: the pieces of a line cut by the drop could hold half a key,
            # which no mask would recognise.
            log.write(dropped_line(item + len(pending)))
            pending, broken = b"", True
            continue
        if broken:
            cut = item.find(b"\n") + 1
            if not cut:
                continue
            item, broken = item[cut:], False
        pending += item
        end = pending.rfind(b"\n") + 1
        if not end and len(pending) > MAX_LINE:
            end = pending.rfind(b" ", 0, MAX_LINE) + 1 or MAX_LINE
        if end:
            log.write(mask(pending[:end]))
            pending = pending[end:]
    if pending:
        log.write(mask(pending) + b"\n")
    log.close()


def start_pump(read_end: int, log: Path, cap: int, secrets: Sequence[str]) -> subprocess.Popen[bytes]:
    """This module as a process reading the server's output from `read_end` into `log`."""
    package_root = str(Path(synthgen.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, SECRETS_ENV: "\n".join(secrets)}
    return subprocess.Popen(
        [sys.executable, "-m", "synthgen.launch.logpump", str(log), str(cap)],
        stdin=read_end,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        start_new_session=True,  # outlives a Ctrl-C and the run: the server's last lines still land
    )


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    for secret in os.environ.get(SECRETS_ENV, "").splitlines():
        remember_secret(secret)
    log = BoundedLog(Path(argv[0]), int(argv[1]))
    try:
        pump(sys.stdin.fileno(), log)
    except OSError as exc:  # the disk, the folder gone: drain the pipe so the server never blocks on it
        print(f"synthgen log pump: {exc}; the server's output is dropped from here", file=sys.stderr)
        while os.read(sys.stdin.fileno(), CHUNK):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
