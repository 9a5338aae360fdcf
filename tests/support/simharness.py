"""Start, stop and query ``tests/support/sglang_sim.py`` processes from tests.

This module owns the simulator's process lifecycle as seen by a test: ``start_sim`` launches
``python tests/support/sglang_sim.py`` with the current interpreter, waits for its ``SIM READY`` line and
returns a ``Sim`` handle. The handle carries an httpx client bound to the simulator's URL, wraps
the ``/sim/*`` control endpoints, stops or kills the process (by its own pid only) and can restart
it on the same port, as a server restart test needs. A ``Sim`` is a context manager that stops
the process on exit.

Usage::

    with start_sim(tokenizer_dir, "--context-length", "256") as sim:
        sim.client.post("/generate", json={"input_ids": [1, 2, 3]})
        sim.configure(rate_503=0.5)
        wait_until(lambda: sim.stats()["in_flight"] == 0)

The simulator's stderr goes to an anonymous temporary file (``sim.log_text()`` reads it), so a
chatty server can never block on a full pipe.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx

SIM_SCRIPT = Path(__file__).with_name("sglang_sim.py")
HOST = "127.0.0.1"
# Generous: a loaded CI machine can take seconds to start Python and load the tokenizer.
READY_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
CLIENT_TIMEOUT = 60.0

T = TypeVar("T")


class SimStartError(RuntimeError):
    """The simulator exited or stayed silent instead of announcing that it listens."""


class Sim:
    """A running simulator process; build it with ``start_sim``."""

    def __init__(self, tokenizer_dir: Path, args: list[str], env: dict[str, str] | None):
        self.tokenizer_dir = Path(tokenizer_dir)
        self.args = list(args)
        self.env = None if env is None else {**os.environ, **env}
        self._log = tempfile.TemporaryFile()
        self.proc: subprocess.Popen
        self.port = 0
        self._launch(port=None)
        # Shared and kept alive: a fresh httpx client per request costs ~25 ms building its SSL context.
        self.client = httpx.Client(base_url=self.url, timeout=CLIENT_TIMEOUT)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    # -- querying

    def stats(self) -> dict:
        """``GET /sim/stats``: generate_requests, completed, in_flight, by_outcome, prompt_counts,
        and the load figures (running, waiting, peaks, busy_time, queue times, retractions, ...)."""
        return self._control("GET", "/sim/stats")

    def pause(self, mode: str = "in_place") -> None:
        """``POST /pause_generation``: requests queue (and, in place, stop) until ``resume``."""
        self._control("POST", "/pause_generation", json={"mode": mode})

    def resume(self) -> None:
        """``POST /continue_generation``."""
        self._control("POST", "/continue_generation", json={})

    def configure(self, **changes) -> dict:
        """``POST /sim/config`` (rate_503, rate_drop, rate_abort, rate_slow, slow_seconds,
        token_delay, fail_first_n, malformed, no_workers, reject_all); returns the whole new configuration."""
        return self._control("POST", "/sim/config", json=changes)

    def reset(self) -> None:
        """``POST /sim/reset``: zero the statistics and restore the start-up fault settings."""
        self._control("POST", "/sim/reset")

    def log_text(self) -> str:
        """Everything the simulator wrote to stderr so far."""
        fd = self._log.fileno()
        # pread leaves the offset the child shares with us untouched.
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    # -- lifecycle

    def stop(self) -> int:
        """SIGTERM, then SIGKILL if it does not exit in time; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self.proc.wait()

    def kill(self) -> int:
        """SIGKILL, as a crashed server would vanish; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait()

    def wait_exit(self, timeout: float = STOP_TIMEOUT) -> int:
        """Wait for the process to exit on its own (e.g. after a crash); returns the exit code."""
        return self.proc.wait(timeout)

    def restart(self, *args: str) -> None:
        """Stop the server (if it still runs) and start a fresh one on the same port.

        With ``args`` the new process gets these options instead of the old ones, e.g. another
        ``--served-model-name`` to play a different model behind the same URL.
        """
        self.stop()
        self._stdout().close()
        if args:
            self.args = list(args)
        self._launch(port=self.port)

    def close(self) -> None:
        """Stop the process and release the handle's resources."""
        self.stop()
        self._stdout().close()
        self.client.close()
        self._log.close()

    def __enter__(self) -> Sim:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- internals

    def _launch(self, port: int | None) -> None:
        command = [sys.executable, str(SIM_SCRIPT), "--tokenizer-dir", str(self.tokenizer_dir)]
        # A later --port wins over one in args, which is how a restart pins the old port.
        pinned = [] if port is None else ["--port", str(port)]
        self.proc = subprocess.Popen(
            [*command, *self.args, *pinned],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=self.env,
        )
        line = self._read_ready_line()
        if not line.startswith("SIM READY port="):
            self.kill()
            raise SimStartError(f"simulator did not start: {line!r}\n{self.log_text()}")
        self.port = int(line.split()[2].removeprefix("port="))

    def _stdout(self):
        assert self.proc.stdout is not None  # always a pipe: _launch asks for one
        return self.proc.stdout

    def _read_ready_line(self) -> str:
        fd = self._stdout().fileno()
        deadline = time.monotonic() + READY_TIMEOUT
        received = b""
        while b"\n" not in received:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                break
            chunk = os.read(fd, 4096)
            if not chunk:  # the process exited
                break
            received += chunk
        return received.decode(errors="replace").strip()

    def _control(self, method: str, path: str, json: dict | None = None) -> dict:
        response = self.client.request(method, path, json=json)
        response.raise_for_status()
        return response.json()


def free_port() -> int:
    """A loopback port nothing listens on now (the OS's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_is_free(port: int) -> bool:
    """Nothing accepts connections on this loopback port."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def sim_argv(tokenizer_dir: Path, port: int, *extra: str) -> list[str]:
    """The simulator's command line, as a user (or ``--launch-server``) would start it."""
    return [sys.executable, str(SIM_SCRIPT), "--tokenizer-dir", str(tokenizer_dir), "--port", str(port), *extra]


def sim_command(tokenizer_dir: Path, port: int, *extra: str) -> str:
    """The simulator as a ``--launch-server`` command: one shell-style string."""
    return " ".join(sim_argv(tokenizer_dir, port, *extra))


def start_sim(tokenizer_dir: Path, *args: str, env: dict[str, str] | None = None) -> Sim:
    """Start ``tests/support/sglang_sim.py --tokenizer-dir DIR *args`` and wait until it listens.

    ``args`` are further simulator options as strings (``"--api-key", "k"``). ``env``, if given,
    is added to the current environment. Raises ``SimStartError`` with the simulator's stderr if
    it does not announce readiness within ``READY_TIMEOUT`` seconds.
    """
    return Sim(tokenizer_dir, list(args), env)


def wait_until(predicate: Callable[[], T], timeout: float = 30.0, interval: float = 0.01, what: str = "") -> T:
    """Poll ``predicate`` until it returns something truthy, and return that.

    For event-based waits in tests (``wait_until(lambda: sim.stats()["in_flight"] == 1)``): the
    timeout is a generous safety net, never what decides the outcome.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s: {what or predicate}")
        time.sleep(interval)


def sigterm_in_flight(sim: Sim, proc: subprocess.Popen, first: Callable[[], object] | None = None) -> None:
    """SIGTERM a run (``proc``) once ``first`` holds (if given), four requests are running on ``sim`` (a
    scheduler-mode simulator) and each has had 5 more decode steps; it must exit 143. The run is killed if
    anything fails on the way. Waits are on the simulator's steps, not on time."""
    try:
        if first is not None:
            wait_until(first, timeout=120, what="the run's first condition")
        wait_until(lambda: sim.stats()["running"] >= 4, timeout=120, what="4 running")
        steps = sim.stats()["decode_steps"]
        wait_until(lambda: sim.stats()["decode_steps"] >= steps + 5, timeout=120, what="5 more steps")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 143
    finally:
        if proc.poll() is None:
            proc.kill()
