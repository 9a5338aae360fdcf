"""The pump between a launched server and its log: the server's stdout and stderr go into a pipe, and
this small process copies them to server.log, bounded while the server runs and with credentials
masked (an `--api-key` in SGLang's printed arguments, the run's own key).

It is a process of its own (not a thread of the run) so that a server kept with --keep-server, or one
whose run was killed, still has its output written; it reads until every writer of the pipe is gone
(the server's whole process group has exited) and then ends. It ignores SIGINT, SIGTERM and SIGHUP:
the server's last lines (its shutdown) still reach the log.

    python -m synthgen.launch.logpump LOG CAP     # stdin: the server's output; SYNTHGEN_PUMP_SECRETS:
                                                  # values to mask, one per line (the run's key)

The log moves to <LOG>.1 whenever it reaches CAP bytes, so the two never hold more than 2 x CAP.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import BinaryIO

from synthgen.data.openfiles import open_output_file
from synthgen.launch.serverlog import APPEND, rotated_line
from synthgen.redact import redact, remember

SECRETS_ENV = "SYNTHGEN_PUMP_SECRETS"
CHUNK = 65536
# A line longer than this is written in pieces (each masked on its own).
MAX_LINE = 65536


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
        fh = self._open()
        if self._size and self._size + len(data) > self.cap:
            fh.close()
            os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            self._fh = None
            fh = self._open()
            fh.write(rotated_line(self.path))
            self._size += len(rotated_line(self.path))
        data = data[: self.cap]  # one write never passes the cap on its own
        fh.write(data)
        fh.flush()
        self._size += len(data)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def mask(line: bytes) -> bytes:
    return redact(line.decode("utf-8", errors="replace")).encode("utf-8")


def pump(source: int, log: BoundedLog) -> None:
    """Copy `source` (a file descriptor) to `log` line by line, masked, until end of file."""
    pending = b""
    while True:
        try:
            chunk = os.read(source, CHUNK)
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            log.write(mask(line) + b"\n")
        while len(pending) > MAX_LINE:
            log.write(mask(pending[:MAX_LINE]) + b"\n")
            pending = pending[MAX_LINE:]
    if pending:
        log.write(mask(pending) + b"\n")
    log.close()


def main(argv: list[str]) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    for secret in os.environ.get(SECRETS_ENV, "").splitlines():
        remember(secret)
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
