"""While a run goes on: the launched server watched and restarted, and the signals that stop it.

    task = asyncio.create_task(watch(server, client, ready, timeout, message, on_fatal))
    guard = SignalGuard(message, server_pid=lambda: server.pid)
    guard.install(main_task)   # SIGINT/SIGTERM/SIGHUP: cancel `main_task`; a second one SIGKILLs the server
    guard.remove()             # on the way out: later signals are swallowed

`watch` restarts the server when its process exits or /health fails for `unhealthy_after` seconds in
a row (the runner waits out the gap with its own outage logic); once the restarts are used up it hands
the error to `on_fatal` and ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from synthgen import signals
from synthgen.launch.launcher import ForeignServer, ServerLaunchError, ServerProcess
from synthgen.server.client import SGLangClient

WATCH_INTERVAL = 1.0
# /health may fail for a moment under load; this long in a row, with the process still there,
# means a hung server that only a restart brings back.
UNHEALTHY_RESTART_AFTER = 120.0


async def watch(
    server: ServerProcess,
    client: SGLangClient,
    ready: Callable[[], Awaitable[bool]],
    timeout: float,
    message: Callable[[str], None],
    on_fatal: Callable[[BaseException], None],
    unhealthy_after: float = UNHEALTHY_RESTART_AFTER,
) -> None:
    """Restart the server when it dies or stays unhealthy; report the end of restarts to `on_fatal`."""
    loop = asyncio.get_running_loop()
    unhealthy_since: float | None = None
    while True:
        await asyncio.sleep(WATCH_INTERVAL)
        code = server.exited()
        if code is None:
            if await client.healthy():
                unhealthy_since = None
                continue
            now = loop.time()
            unhealthy_since = unhealthy_since if unhealthy_since is not None else now
            if now - unhealthy_since < unhealthy_after:
                continue
            reason = f"/health failing for {now - unhealthy_since:.0f} s"
        else:
            reason = "died during the run"
            await asyncio.to_thread(server.settle_log)  # its last lines are in the log before they are quoted
        unhealthy_since = None
        try:
            await recover(server, reason, ready, timeout, message)
        except ServerLaunchError as exc:
            message(str(exc))
            on_fatal(exc)
            return


async def recover(
    server: ServerProcess,
    reason: str,
    ready: Callable[[], Awaitable[bool]],
    timeout: float,
    message: Callable[[str], None],
) -> None:
    """Restart until the server is ready again; ServerLaunchError once restarts are used up."""
    while True:
        await server.restart(reason)
        try:
            took = await server.wait_ready(ready, timeout, on_status=message)
        except ForeignServer:
            raise
        except ServerLaunchError:
            reason = "exited while starting" if server.exited() is not None else f"not ready within {timeout:.0f} s"
            continue
        message(f"{server.name} is back (restart {server.restarts}/{server.max_restarts}, ready in {took:.0f} s)")
        return


class SignalGuard:
    """SIGINT, SIGTERM and SIGHUP while no runner handles them (server start-up, end of run): the first
    cancels the main task (the caller then stops the server), a second SIGKILLs the server's group.
    The signals are held through ``synthgen.signals``, their one owner: the runner holds them between."""

    def __init__(self, message: Callable[[str], None], server_pid: Callable[[], int | None]) -> None:
        self.message = message
        self.server_pid = server_pid
        self.caught: tuple[str, int] | None = None
        self.main: asyncio.Task[Any] | None = None
        self._holding = False

    def install(self, main: asyncio.Task[Any] | None) -> None:
        self.main = main
        if not self._holding:
            signals.hold(self._on_signal)
            self._holding = True

    def release(self) -> None:
        """The server is ready: the signals go back to whoever held them before (the runner's come next)."""
        self.main = None
        if self._holding:
            signals.release(self._on_signal)
            self._holding = False

    def remove(self) -> None:
        """Only on the way out (the server is stopped): a signal from here on is one more request to stop
        a process that is already stopping, so it is swallowed rather than left to its default, which
        would kill us mid-exit with 128+signal unreported."""
        if self._holding:
            signals.release(self._on_signal, swallow=True)
            self._holding = False

    def _on_signal(self, sig: signal.Signals) -> None:
        if self.caught is None:
            self.caught = (sig.name, int(sig))
            self.message(f"{sig.name}: stopping the server (send {sig.name} again to kill it at once)")
            if self.main is not None and not self.main.done():
                self.main.cancel()
            return
        pid = self.server_pid()
        if pid is not None:
            self.message(f"second {sig.name}: killing the server's process group now")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
