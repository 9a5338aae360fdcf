"""The exception tree, and the exit code each branch maps to.

    SynthgenError                  anything a user can cause or fix; printed as one line
    ├── UsageError            (2)  bad arguments, unknown dataset, bad budget file, a bad config
    ├── InputFileError        (2)  a malformed prompt line: "file:line: what is wrong"
    ├── TokenizerError        (2)  tokenizer missing or unusable
    ├── ServerError           (3)  server unreachable at start, bad API key
    │   ├── AuthError         (3)  401/403 from the server
    │   ├── ServerGone        (3)  down for longer than --server-wait          (server.discovery)
    │   ├── ServerChanged     (3)  back from an outage changed (model, context) (server.discovery)
    │   ├── ServerLaunchError (3)  --launch-server: exited or never ready      (launch.procs)
    │   │   └── ForeignServer (3)  another process answers at the URL          (launch.launcher)
    │   └── DemoSetupError    (3)  the demo server cannot be installed         (demo.install)
    ├── RunLockedError        (4)  another run holds a dataset's lock
    ├── StoreWriteError       (5)  an output file could not be written (disk full, permissions)
    ├── DriftError            (1)  export --fail-on-drift: rows do not render to their ids (export.exporter)
    └── StoppedBySignal (128+sig)  a signal while the launched server started or stopped (launch.supervisor)

The run's own ends are exit codes, not exceptions: 1 (prompts failed; rerun retries them), 130/143/129
(stopped by SIGINT/SIGTERM/SIGHUP: ``synthgen.signals``; rerun resumes). Foreign exceptions (httpx,
OSError, transformers) are translated into these where they are caught, with ``raise ... from exc``;
nothing matches on the text of an error.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import threading
from collections.abc import Callable
from typing import NoReturn, TextIO

from synthgen.redact import redact

EXIT_OK = 0
EXIT_FAILURES = 1  # the run finished, but some prompts failed (see errors.jsonl); rerun retries them
EXIT_USAGE = 2
EXIT_SERVER = 3
EXIT_LOCKED = 4
EXIT_WRITE = 5
EXIT_SIGINT = 130  # 128 + SIGINT: stopped by Ctrl-C; rerun to resume
EXIT_SIGTERM = 143  # 128 + SIGTERM: stopped by kill/timeout; rerun to resume
EXIT_SIGHUP = 129  # 128 + SIGHUP: the terminal went away (no nohup); handled like SIGTERM


class SynthgenError(Exception):
    """Base of every error a user can cause; its message is a single line naming the fix."""

    exit_code = EXIT_USAGE


class UsageError(SynthgenError):
    exit_code = EXIT_USAGE


class InputFileError(SynthgenError):
    exit_code = EXIT_USAGE

    def __init__(self, path: str | os.PathLike[str], line: int | None, problem: str) -> None:
        self.path, self.line, self.problem = str(path), line, problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


class TokenizerError(SynthgenError):
    exit_code = EXIT_USAGE


class ServerError(SynthgenError):
    exit_code = EXIT_SERVER


class AuthError(ServerError):
    exit_code = EXIT_SERVER


class RunLockedError(SynthgenError):
    exit_code = EXIT_LOCKED


class StoreWriteError(SynthgenError):
    exit_code = EXIT_WRITE


def run_guarded(prog: str, body: Callable[[], int], stream: TextIO, debug: bool = False) -> int:
    """The one error path of every entry script: our errors become one line and their exit code
    (``debug`` re-raises them with the traceback); Ctrl-C before a run installs its own handler
    is a plain "interrupted"."""
    try:
        return body()
    except SynthgenError as exc:
        if debug:
            raise
        _say(f"{prog}: error: {exc}", stream)
        return exc.exit_code
    except KeyboardInterrupt:
        _say(f"{prog}: interrupted", stream)
        return EXIT_SIGINT


def exit_process(code: int) -> NoReturn:
    """The end of an entry script. A worker thread the run stopped waiting for (a render or a
    tokenization under way when a signal came) must not keep the process alive: every file is
    closed by now, so the process ends at once, without waiting for it."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    main = threading.main_thread()
    if any(t is not main and t.is_alive() and not t.daemon for t in threading.enumerate()):
        os._exit(code)
    sys.exit(code)


def _say(line: str, stream: TextIO) -> None:
    """The last line of a run; a closed stderr (``| head -1`` gone) must not turn it into a traceback."""
    try:
        print(redact(line), file=stream, flush=True)
    except (OSError, ValueError):
        pass


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose mistakes are one line (a UsageError, exit 2) instead of a usage block,
    with the closest valid flag or value when the mistake looks like a typo (``--partiton``,
    ``--regenerate al``)."""

    def error(self, message: str) -> NoReturn:
        hint = self._closest(message)
        raise UsageError(f"{message}{hint} (see {self.prog} --help)")

    def _closest(self, message: str) -> str:
        """'; did you mean --partition?' for argparse's unknown-flag and bad-choice messages, else ''."""
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice:
            options = re.findall(r"'([^']*)'", choice.group(2)) or [o.strip() for o in choice.group(2).split(",")]
            wanted = choice.group(1)
        else:
            unknown = re.match(r"unrecognized arguments: (\S+)", message)
            if unknown is None or not unknown.group(1).startswith("--"):
                return ""
            wanted = unknown.group(1).split("=", 1)[0]
            options = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        # A cut-short flag (--tokens for --tokens-per-dataset) first, then the nearest spelling.
        match = sorted((o for o in options if o.startswith(wanted)), key=len)[:1]
        match = match or difflib.get_close_matches(wanted, options, n=1, cutoff=0.6)
        return f"; did you mean {match[0]}?" if match else ""
