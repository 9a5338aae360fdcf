"""The inference server that a run launches and supervises itself.

This module owns that server's process lifecycle: starting one command in its own process group
with its output piped through the log pump (synthgen.launch.logpump) into a bounded log file,
waiting until it is healthy, restarting it with capped exponential backoff after it dies, and
stopping the whole group so that nothing is orphaned. It also owns the decision whether to launch
at all (a healthy server already at the URL is used instead). What "healthy" means is the caller's:
it passes an async predicate (the HTTP client's /health check), so this module does no HTTP.

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
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from synthgen.launch.logpump import start_pump
from synthgen.launch.procs import ServerLaunchError, kill_group, live_members
from synthgen.launch.record import TOKEN_ENV, remove_record, write_record
from synthgen.launch.serverlog import StartLog, log_cap, note, rotate_log
from synthgen.redact import redact

__all__ = ["ServerLaunchError", "ServerProcess", "decide_launch", "describe_exit", "split_command"]

DEFAULT_GRACE = 30.0  # SGLang drains for about 5 s after SIGTERM; give it room
STATUS_INTERVAL = 5.0
SAME_STATUS_EVERY = 60.0  # a loading line whose log line has not changed is said again at most this often
POLL_INTERVAL = 0.5
PUMP_WAIT = 10.0  # after the server's group is gone, the pump has this long to write what is left
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


class ForeignServer(ServerLaunchError):
    """Another process than the launched server answers at the URL (it holds the port)."""


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


def decide_launch(url: str, healthy: bool, port_taken: bool, holder: str = "") -> LaunchDecision:
    """Whether to start a server for `url`, given what a probe found there.

    A healthy server is used as it is (a second one could not bind the port anyway); a port that
    something holds without answering healthy is an error the user must resolve; a free port is
    where the launched server goes. `holder` names the process that listens there ("pid 12: python ...").
    """
    which = f" ({holder})" if holder else ""
    if healthy:
        return LaunchDecision(False, f"a server already answers at {url}{which}; using it instead of launching one")
    if port_taken:
        _host, port = url_host_port(url)
        raise ServerLaunchError(
            f"port {port} of {url} is taken by something that is not a healthy server{which} "
            "(a server still loading, or another program): wait for it, stop it, or use another --url port"
        )
    return LaunchDecision(True, "")


# ---------------------------------------------------------------------------------------------
# ServerProcess
# ---------------------------------------------------------------------------------------------


class ServerProcess:
    """One server command, started in its own process group, its output pumped into `log_path`.

    `max_restarts` bounds `restart()` over the object's life; restart n waits
    restart_delay(n, backoff_initial, backoff_max) seconds first. `on_event` receives one line
    per restart ("server exited with code -9; restart 1/3 in 2 s (reason): log tail"). `keep`
    makes `close()` leave the server running, and lets it outlive this process (no PDEATHSIG).
    `env` replaces the environment when given. `secrets` are masked in the log (the run's key).
    `record_path`: where the launch is recorded for a rerun (synthgen.launch.record).
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
        max_log_bytes: int | None = None,
        secrets: Sequence[str] = (),
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
        self.max_log_bytes = max_log_bytes if max_log_bytes is not None else log_cap()
        self.secrets = [s for s in secrets if s]
        self.restarts = 0
        self.token = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._pump: subprocess.Popen[bytes] | None = None
        self._log = StartLog(self.log_path)
        self._stopping = False

    @property
    def pid(self) -> int | None:
        """Pid of the current process, which is also its process group id."""
        return self._proc.pid if self._proc else None

    def exited(self) -> int | None:
        """The exit code once the process has exited (negative: killed by that signal), else None."""
        return self._proc.poll() if self._proc else None

    def settle_log(self) -> None:
        """Once the process has exited: the pump writes its last lines (a crash's) before the tail is read."""
        if self.exited() is not None:
            self._reap_pump(PUMP_WAIT)

    def log_tail(self) -> str:
        """The last lines this start wrote to the log, as one short line."""
        return self._log.tail()

    def log_contains(self, needle: str) -> bool:
        """True when this start's output contains `needle` (e.g. a server's "ready" line)."""
        return self._log.contains(needle)

    def start(self) -> None:
        """Start the command (again, after it exited). Raises ServerLaunchError when it cannot be
        executed at all (missing program, permissions) or is still running."""
        if self._proc is not None and self._proc.poll() is None:
            raise ServerLaunchError(f"{self.name} is already running (pid {self._proc.pid})")
        self._reap_pump(0.0)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        rotated = rotate_log(self.log_path, self.max_log_bytes)
        argv = self._exec_argv()
        self.token = secrets.token_hex(16)
        env = {**(self.env if self.env is not None else os.environ), TOKEN_ENV: self.token}
        shown = redact(shlex.join(self.argv))  # --api-key VALUE is not for the log
        for secret in self.secrets:
            shown = shown.replace(secret, "***")
        try:
            self._log = StartLog.begin(self.log_path, f"starting {self.name}: {shown}", rotated)
            read_end, write_end = os.pipe()
            try:
                self._pump = start_pump(read_end, self.log_path, self.max_log_bytes, self.secrets)
                self._proc = subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=write_end,
                    stderr=write_end,
                    env=env,
                    cwd=self.cwd,
                    # Its own process group: stop() can kill the server's workers too, and a
                    # Ctrl-C in our terminal reaches only us, so we decide how the server ends.
                    start_new_session=True,
                )
            finally:
                os.close(read_end)
                os.close(write_end)
        except OSError as exc:
            self._reap_pump(PUMP_WAIT)
            raise ServerLaunchError(f"could not start {self.name} ({self.argv[0]}): {exc.strerror or exc}") from exc
        self._stopping = False
        self.record(shown)

    def record(self, shown: str | None = None) -> None:
        """Write (again) what was launched: after the start, and once ready (the command line after any exec)."""
        if self.record_path is not None and self._proc is not None and self._proc.poll() is None:
            write_record(
                self.record_path, self._proc.pid, self.token, shown or redact(shlex.join(self.argv)), self.name
            )

    def _reap_pump(self, wait: float) -> None:
        """Wait up to `wait` s for the pump to write the rest (it ends when the server's group is gone)."""
        pump, self._pump = self._pump, None
        if pump is None:
            return
        try:
            pump.wait(wait)
        except subprocess.TimeoutExpired:
            if not self.keep:  # something outside the group still holds the pipe: the log stops here
                pump.kill()
                pump.wait()
            else:
                self._pump = pump

    def _exec_argv(self) -> list[str]:
        """The command, or on Linux the command behind the PDEATHSIG shim: only from the main thread (the
        kernel signals when the *thread* that forked dies), and not with `keep` (meant to outlive the run)."""
        if self.cwd is None and shutil.which(self.argv[0]) is None:  # Popen's error, not a traceback in the log
            raise ServerLaunchError(f"could not start {self.name} ({self.argv[0]}): No such file or directory")
        if self.keep or sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
            return self.argv
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
        "loading, 37 s: <last log line>" at most every `status_interval` s (an unchanged one every minute). Raises
        ServerLaunchError when the process exits first or `timeout` passes; the process is left
        as it is (the caller's close()/stop() ends it).
        """
        if self._proc is None:
            raise ServerLaunchError(f"{self.name} was never started")
        loop = asyncio.get_running_loop()
        started = last_status = loop.time()
        last_text, last_said = "", started
        while True:
            code = self._proc.poll()
            if code is not None:
                if not live_members(self._proc.pid):  # the whole group is gone: the pump writes the rest
                    await asyncio.to_thread(self._reap_pump, PUMP_WAIT)
                raise ServerLaunchError(
                    f"{self.name} exited with {describe_exit(code)} before it was ready (log {self.log_path}): "
                    f"{self.log_tail() or 'no output'}"
                )
            if await is_healthy():
                self.record()
                return loop.time() - started
            now = loop.time()
            if now - started >= timeout:
                raise ServerLaunchError(
                    f"{self.name} never became ready within {timeout:.0f} s (log {self.log_path}): "
                    f"{self.log_tail() or 'no output'}"
                )
            if on_status is not None and now - last_status >= status_interval:
                last_status = now
                text = self._log.progress() or "starting"
                if text != last_text or now - last_said >= SAME_STATUS_EVERY:  # news, or a sign of life
                    last_text, last_said = text, now
                    on_status(f"{self.name} loading, {now - started:.0f} s: {text}")
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
            note(
                self.log_path,
                f"stopped {self.name} (SIGTERM to its process group, exit {describe_exit(proc.returncode or 0)}); "
                "lines above about SIGTERM or exit code -15 are its normal shutdown",
            )

    def close(self, grace: float = DEFAULT_GRACE) -> None:
        """End of a run: stop() unless `keep` is set (then the server keeps running for the next run)."""
        if not self.keep:
            self.stop(grace)

    def _forget(self) -> None:
        self._reap_pump(PUMP_WAIT)
        if self.record_path is not None:
            remove_record(self.record_path, self._proc.pid if self._proc else None)
