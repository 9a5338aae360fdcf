"""The inference server that a run launches and supervises itself.

This module owns that server's process lifecycle: starting one command in its own process group
with its output appended to a log file, waiting until it is healthy, restarting it with capped
exponential backoff after it dies, and stopping the whole group so that nothing is orphaned. It
also owns the decision whether to launch at all (a healthy server already at the URL is used
instead). What "healthy" means is the caller's: it passes an async predicate (the HTTP client's
/health check), so this module does no HTTP.

    server = ServerProcess("python -m sglang.launch_server --port 30000 ...", Path("out/server.log"))
    server.start()
    try:
        await server.wait_ready(client.is_healthy, timeout=600, on_status=progress.status)
        ...                                  # when the server dies mid-run:
        await server.restart("connection refused")
        await server.wait_ready(client.is_healthy, timeout=600)
    finally:
        server.close()                       # stop(), unless server.keep is set

Errors: ServerLaunchError (a ServerError, exit code 3) with one line naming what happened, the
exit code and the last lines of the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

from synthgen.data.openfiles import open_output_file
from synthgen.errors import ServerError
from synthgen.redact import redact

DEFAULT_GRACE = 30.0  # SGLang drains for about 5 s after SIGTERM; give it room
KILL_WAIT = 10.0  # after SIGKILL only a process stuck in the kernel survives this long
STATUS_INTERVAL = 5.0
POLL_INTERVAL = 0.5
TAIL_LINES = 3
TAIL_LINE_CHARS = 160
TAIL_READ_BYTES = 16384
# At a start, a log this big moves to <log>.1 (replacing the one before), so restarts and reruns keep
# at most two of them on disk.
LOG_ROTATE_BYTES = 64 * 1024 * 1024
# Lines of a server's start-up log that are not its progress: warnings, their continuation lines and
# tracebacks (SGLang on a CPU: "Cannot detect CUDA architecture.", a bare "warnings.warn(").
NOT_PROGRESS = re.compile(
    r"warn|deprecat|cannot detect|traceback|^\s|^file \"|^\^|^~|\"GET /health", re.IGNORECASE
)  # and the access log of our own /health polls
# The exec shim a server starts through on Linux: it asks the kernel to SIGTERM it when the run dies
# (prctl PR_SET_PDEATHSIG, even on SIGKILL), then becomes the server command (same pid). A shim
# instead of preexec_fn: no Python code runs between fork and exec in a process that has threads.
PDEATHSIG_SHIM = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)\n"  # 1: PR_SET_PDEATHSIG
    "if os.getppid() != int(sys.argv[1]):\n"  # the run died before the line above: nobody to serve
    "    os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


class ServerLaunchError(ServerError):
    """The launched server exited, never became ready, crashed too often, or would not die."""


# ---------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------


def split_command(command: str | Sequence[str]) -> list[str]:
    """A shell-style string split like a shell would (no expansion), or an argv list as is."""
    argv = shlex.split(command) if isinstance(command, str) else [str(part) for part in command]
    if not argv:
        raise ServerLaunchError("the server command is empty")
    return argv


def describe_exit(code: int) -> str:
    """'code 1', or 'code -9 (killed by SIGKILL)' for a death by signal."""
    if code < 0:
        try:
            return f"code {code} (killed by {signal.Signals(-code).name})"
        except ValueError:
            return f"code {code} (killed by signal {-code})"
    return f"code {code}"


def restart_delay(attempt: int, initial: float, cap: float) -> float:
    """Seconds to wait before restart number `attempt` (1-based): initial, 2x, 4x, ... up to cap."""
    return min(cap, initial * 2.0 ** (attempt - 1))


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


def url_host_port(url: str) -> tuple[str, int]:
    """Host and port a server URL points at (the scheme's default port when none is given)."""
    parts = urlsplit(url)
    if not parts.hostname:
        raise ServerLaunchError(f"cannot launch a server for {url!r}: no host in the URL")
    try:
        port = parts.port
    except ValueError as exc:
        raise ServerLaunchError(f"cannot launch a server for {url!r}: bad port") from exc
    return parts.hostname, port if port is not None else (443 if parts.scheme == "https" else 80)


@dataclass(frozen=True, slots=True)
class LaunchDecision:
    launch: bool
    message: str  # for the log/status line; empty when there is nothing to say


def decide_launch(url: str, healthy: bool, port_taken: bool) -> LaunchDecision:
    """Whether to start a server for `url`, given what a probe found there.

    A healthy server is used as it is (a second one could not bind the port anyway); a port that
    something holds without answering healthy is an error the user must resolve; a free port is
    where the launched server goes.
    """
    if healthy:
        return LaunchDecision(False, f"a server already answers at {url}; using it instead of launching one")
    if port_taken:
        _host, port = url_host_port(url)
        raise ServerLaunchError(
            f"port {port} of {url} is taken by something that is not a healthy server "
            "(a server still loading, or another program): wait for it, stop it, or use another --url port"
        )
    return LaunchDecision(True, "")


def port_taken(host: str, port: int, timeout: float = 2.0) -> bool:
    """True when something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# Process groups (Linux /proc)
# ---------------------------------------------------------------------------------------------


def live_members(pgid: int) -> list[int]:
    """Pids of the process group's members that are not zombies: a zombie has stopped running,
    and in a container it may wait forever for a reaper, so it must not count as alive."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command name (which may hold spaces): state ppid pgrp ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def kill_group(pgid: int, grace: float, reap: Callable[[], object] = lambda: None) -> list[int]:
    """SIGTERM the group, SIGKILL whatever is left after `grace` seconds; returns the members
    still alive after that (empty: the group is gone). `reap` is called while waiting so that a
    leader which is our own child does not linger as a zombie."""
    if pgid in (0, 1, os.getpgrp()):
        raise ServerLaunchError(f"refusing to kill process group {pgid}")
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, KILL_WAIT)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return []
        deadline = time.monotonic() + wait
        while True:
            reap()
            if not live_members(pgid):
                return []
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    return live_members(pgid)


# ---------------------------------------------------------------------------------------------
# ServerProcess
# ---------------------------------------------------------------------------------------------


class ServerProcess:
    """One server command, started in its own process group, output appended to `log_path`.

    `max_restarts` bounds `restart()` over the object's life; restart n waits
    restart_delay(n, backoff_initial, backoff_max) seconds first. `on_event` receives one line
    per restart ("server exited with code -9; restart 1/3 in 2 s (reason): log tail"). `keep`
    makes `close()` leave the server running, and lets it outlive this process (no PDEATHSIG).
    `env` replaces the environment when given.
    """

    def __init__(
        self,
        command: str | Sequence[str],
        log_path: Path,
        *,
        name: str = "server",
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        max_restarts: int = 3,
        backoff_initial: float = 2.0,
        backoff_max: float = 30.0,
        on_event: Callable[[str], None] | None = None,
        keep: bool = False,
        record_path: Path | None = None,
        max_log_bytes: int = LOG_ROTATE_BYTES,
    ) -> None:
        self.argv = split_command(command)
        self.log_path = Path(log_path)
        self.name = name
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.max_restarts = max_restarts
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.on_event = on_event
        self.keep = keep
        self.record_path = record_path  # what was launched, for a rerun after this process is gone
        self.max_log_bytes = max_log_bytes
        self.restarts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0  # where this start's output begins in the log
        self._stopping = False

    # -- state

    @property
    def pid(self) -> int | None:
        """Pid of the current process, which is also its process group id."""
        return self._proc.pid if self._proc else None

    def exited(self) -> int | None:
        """The exit code once the current process has exited (negative: killed by that signal);
        None while it runs or before start()."""
        return self._proc.poll() if self._proc else None

    def log_tail(self, lines: int = TAIL_LINES) -> str:
        """The last lines this start wrote to the log, as one short line."""
        return short_tail(self._read_log(TAIL_READ_BYTES), lines)

    def log_contains(self, needle: str) -> bool:
        """True when this start's output contains `needle` (e.g. a server's "ready" line)."""
        return needle in self._read_log(None)

    # -- lifecycle

    def start(self) -> None:
        """Start the command (again, after it exited). Raises ServerLaunchError when it cannot be
        executed at all (missing program, permissions) or is still running."""
        if self._proc is not None and self._proc.poll() is None:
            raise ServerLaunchError(f"{self.name} is already running (pid {self._proc.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        rotated = rotate_log(self.log_path, self.max_log_bytes)
        stamp = _stamp()
        argv = self._exec_argv()
        try:
            with open_output_file(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "ab") as log:
                if rotated:
                    log.write(f"===== synthgen {stamp}: the log before is in {self.log_path.name}.1\n".encode())
                command = redact(shlex.join(self.argv))  # --api-key VALUE is not for the log
                log.write(f"\n===== synthgen {stamp}: starting {self.name}: {command}\n".encode())
                log.flush()
                self._log_offset = log.tell()
                self._proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    cwd=self.cwd,
                    # Its own process group: stop() can kill the server's workers too, and a
                    # Ctrl-C in our terminal reaches only us, so we decide how the server ends.
                    start_new_session=True,
                )
        except OSError as exc:
            raise ServerLaunchError(f"could not start {self.name} ({self.argv[0]}): {exc.strerror or exc}") from exc
        self._stopping = False
        if self.record_path is not None:
            write_record(self.record_path, self._proc.pid, shlex.join(self.argv), self.name)

    def _exec_argv(self) -> list[str]:
        """The argv to start: the command itself, or on Linux the command behind the PDEATHSIG shim.
        The kernel signals when the *thread* that forked dies, so the shim is used only from the
        main thread (the event loop's), which lives as long as the run; and not with `keep`, whose
        server is meant to outlive the run (the output folder's record finds it again)."""
        if self.keep or sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
            return self.argv
        if self.cwd is None and shutil.which(self.argv[0]) is None:  # Popen's error, not a traceback in the log
            raise ServerLaunchError(f"could not start {self.name} ({self.argv[0]}): No such file or directory")
        return [sys.executable, "-c", PDEATHSIG_SHIM, str(os.getpid()), *self.argv]

    async def wait_ready(
        self,
        is_healthy: Callable[[], Awaitable[bool]],
        timeout: float,
        on_status: Callable[[str], None] | None = None,
        status_interval: float = STATUS_INTERVAL,
        poll_interval: float = POLL_INTERVAL,
    ) -> float:
        """Poll `is_healthy()` until it returns True; returns the seconds that took.

        `is_healthy` must return False (not raise) while nothing answers. `on_status` gets
        "loading, 37 s: <last log line>" at most every `status_interval` seconds. Raises
        ServerLaunchError when the process exits first or `timeout` passes; the process is left
        as it is (the caller's close()/stop() ends it).
        """
        if self._proc is None:
            raise ServerLaunchError(f"{self.name} was never started")
        loop = asyncio.get_running_loop()
        started = last_status = loop.time()
        while True:
            code = self._proc.poll()
            if code is not None:
                raise ServerLaunchError(
                    f"{self.name} exited with {describe_exit(code)} before it was ready (log {self.log_path}): "
                    f"{self.log_tail() or 'no output'}"
                )
            if await is_healthy():
                return loop.time() - started
            now = loop.time()
            if now - started >= timeout:
                raise ServerLaunchError(
                    f"{self.name} never became ready within {timeout:.0f} s (log {self.log_path}): "
                    f"{self.log_tail() or 'no output'}"
                )
            if on_status is not None and now - last_status >= status_interval:
                last_status = now
                shown = progress_line(self._read_log(TAIL_READ_BYTES)) or "starting"
                on_status(f"{self.name} loading, {now - started:.0f} s: {shown}")
            await asyncio.sleep(poll_interval)

    async def restart(self, reason: str, grace: float = DEFAULT_GRACE) -> None:
        """Stop what is left of the current process, wait the backoff, start again. Call
        wait_ready() afterwards. Raises ServerLaunchError once `max_restarts` are used up."""
        code = self.exited()
        tail = self.log_tail()
        state = f"exited with {describe_exit(code)}" if code is not None else "is unresponsive"
        if self.restarts >= self.max_restarts:
            self.stop(grace)
            raise ServerLaunchError(
                f"{self.name} {state} ({reason}) and was already restarted {self.restarts} times; giving up "
                f"(log {self.log_path}): {tail or 'no output'}"
            )
        self.restarts += 1
        delay = restart_delay(self.restarts, self.backoff_initial, self.backoff_max)
        if self.on_event is not None:
            self.on_event(
                f"{self.name} {state} ({reason}); restart {self.restarts}/{self.max_restarts} in {delay:.0f} s: "
                f"{tail or 'no output'}"
            )
        # stop() blocks for up to `grace`; keep the event loop (progress, signals) turning.
        await asyncio.to_thread(self.stop, grace)
        await asyncio.sleep(delay)
        self.start()

    def stop(self, grace: float = DEFAULT_GRACE) -> None:
        """SIGTERM the whole process group, SIGKILL it after `grace` seconds, reap the leader and
        check that no member is left. Idempotent; a second call while one is under way (a second
        Ctrl-C) sends SIGKILL at once. Raises ServerLaunchError only when members survive SIGKILL."""
        proc = self._proc
        if proc is None:
            return
        if self._stopping:
            if proc.poll() is None or live_members(proc.pid):
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
        if proc.returncode is not None and not live_members(proc.pid):
            self._forget()
            return  # stopped (or died and reaped) before, and nothing of its group is left
        self._stopping = True
        running = proc.poll() is None
        survivors = kill_group(proc.pid, grace, reap=proc.poll)
        proc.poll()
        if survivors:
            raise ServerLaunchError(f"{self.name}'s processes {survivors} survived SIGKILL; end them by hand")
        self._forget()
        if running:
            # SGLang reports its children's SIGTERM as "crashed with exit code -15": say it was us.
            self._note(
                f"stopped {self.name} (SIGTERM to its process group, exit {describe_exit(proc.returncode or 0)}); "
                "lines above about SIGTERM or exit code -15 are its normal shutdown"
            )

    def close(self, grace: float = DEFAULT_GRACE) -> None:
        """End of a run: stop() unless `keep` is set (then the server keeps running for the next run)."""
        if not self.keep:
            self.stop(grace)

    # -- internals

    def _forget(self) -> None:
        if self.record_path is not None:
            remove_record(self.record_path, self._proc.pid if self._proc else None)

    def _note(self, text: str) -> None:
        with (
            contextlib.suppress(OSError),
            open_output_file(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, "ab") as log,
        ):
            log.write(f"===== synthgen {_stamp()}: {text}\n".encode())

    def _read_log(self, limit: int | None) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                start = self._log_offset if limit is None else max(self._log_offset, size - limit)
                fh.seek(start)
                return fh.read().decode("utf-8", errors="replace")
        except OSError:
            return ""


def _stamp() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------------------------------
# What was launched (<output-dir>/launched_server.json): a rerun recognises its own server
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LaunchRecord:
    pid: int  # also the process group id
    start_ticks: int  # /proc/<pid>/stat starttime: a reused pid has another
    command: str
    name: str
    started_at: str
    owner_pid: int = 0  # the run that launched it
    owner_ticks: int = 0

    def alive(self) -> bool:
        """The very process that was launched is still running (not a later one with its pid)."""
        return start_ticks(self.pid) == self.start_ticks and bool(live_members(self.pid))

    def owner_alive(self) -> bool:
        """The run that launched it still runs (another run's server in use, not a leftover)."""
        return self.owner_pid != os.getpid() and start_ticks(self.owner_pid) == self.owner_ticks


def start_ticks(pid: int) -> int | None:
    """When the process started, in clock ticks since boot (/proc/<pid>/stat field 22); None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 else None


def write_record(path: Path, pid: int, command: str, name: str) -> None:
    ticks = start_ticks(pid)
    if ticks is None:
        return  # already gone: nothing to recognise
    data = {
        "pid": pid,
        "start_ticks": ticks,
        "command": command,
        "name": name,
        "started_at": _stamp(),
        "owner_pid": os.getpid(),
        "owner_ticks": start_ticks(os.getpid()) or 0,
    }
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data) + "\n")
        os.replace(tmp, path)


def read_record(path: Path) -> LaunchRecord | None:
    """The record a run left, or None (none, or unreadable: then it is as good as none)."""
    try:
        data = json.loads(path.read_text())
        return LaunchRecord(
            int(data["pid"]),
            int(data["start_ticks"]),
            str(data["command"]),
            str(data["name"]),
            str(data["started_at"]),
            int(data.get("owner_pid", 0)),
            int(data.get("owner_ticks", 0)),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_record(path: Path, pid: int | None = None) -> None:
    """Remove the record (only the one of `pid` when given: another run's record stays)."""
    record = read_record(path)
    if pid is not None and record is not None and record.pid != pid:
        return
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
