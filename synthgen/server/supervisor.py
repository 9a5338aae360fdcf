"""The server a run launches itself (--launch-server): start it, watch it, restart it, stop it.

This module owns the policy around one launched server for the length of a run; the process
mechanics (process group, log, backoff, killing the group) are synthgen.server.launcher's, the demo
install is synthgen.server.demo's, and "healthy" is the HTTP client's. The CLI wraps the runner in it:

    stop = RunStop(progress, config.drain_timeout)
    async with Supervisor(config, progress.message, on_fatal=stop.fail, lazy=True) as supervisor:
        return await Runner(config, progress, stop=stop, before_connect=supervisor.start).run()

On enter (only with --launch-server): a server already healthy at --server-url is used as it is
and never stopped; otherwise the command (or the demo server) is started and waited for, with a
status line every few seconds. While the body runs, a watcher restarts the server when its
process exits or /health fails for UNHEALTHY_RESTART_AFTER seconds in a row (the runner waits
out the gap with its own outage logic); once --server-restarts are used up it reports the error
to `on_fatal`. On exit the server is stopped (whole process group) unless --keep-server.

Signals: while the server starts (and again on exit) the supervisor holds SIGINT, SIGTERM and
SIGHUP (``synthgen.signals``; the runner has them between the two): they stop the server and end
the run with StoppedBySignal (exit 128 + signal); a second signal SIGKILLs the server's group at once.

Errors: ServerLaunchError (exit 3) when the server exits or never becomes ready at start;
DemoSetupError (exit 3) when the demo server cannot be installed; StoppedBySignal.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from types import TracebackType
from typing import Any

from synthgen import signals
from synthgen.config import RunConfig
from synthgen.errors import SynthgenError
from synthgen.server.client import SGLangClient
from synthgen.server.demo import SERVER_READY_LINE, demo_command
from synthgen.server.launcher import (
    DEFAULT_GRACE,
    LaunchRecord,
    ServerLaunchError,
    ServerProcess,
    decide_launch,
    kill_group,
    port_taken,
    read_record,
    remove_record,
    url_host_port,
)

DEMO = "demo"
# The demo's tiny model ends its turns within about 50 tokens; the cap keeps a sampled answer that
# wanders (a chance of about 1e-19 per answer) from running to its 2048-token context on two CPU cores.
DEMO_MAX_TOKENS = 256
WATCH_INTERVAL = 1.0
# /health may fail for a moment under load; this long in a row, with the process still there,
# means a hung server that only a restart brings back.
UNHEALTHY_RESTART_AFTER = 120.0
PROBE_TIMEOUT = 30.0
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# In the output folder: what this folder's runs launched, so a rerun after a SIGKILL (or --keep-server)
# recognises the server it finds as its own.
RECORD = "launched_server.json"


def is_demo(launch_server: str | None) -> bool:
    return launch_server is not None and launch_server.strip() == DEMO


def default_max_tokens(launch_server: str | None) -> int:
    """--max-tokens when the user gave none: RunConfig's default, or the demo's smaller one."""
    return DEMO_MAX_TOKENS if is_demo(launch_server) else RunConfig.max_tokens


class StoppedBySignal(SynthgenError):
    """A signal arrived while no runner handled it (server start-up, end of run); the server was stopped."""

    def __init__(self, name: str, signum: int):
        super().__init__(f"stopped by {name}; the launched server was stopped too. Rerun the same command to resume")
        self.exit_code = 128 + signum


class Supervisor:
    """Launches and supervises `cfg.launch_server` around the body of an `async with`.

    `message` receives every event line (start, status while loading, restarts, stop).
    `on_fatal(exc)` is called from the watcher task when the server cannot be brought back
    (restarts used up); the caller should end the run with that error.
    """

    def __init__(
        self,
        cfg: RunConfig,
        message: Callable[[str], None],
        on_fatal: Callable[[BaseException], None] | None = None,
        unhealthy_restart_after: float = UNHEALTHY_RESTART_AFTER,
        lazy: bool = False,
    ):
        self.cfg = cfg
        self.message = message
        self.on_fatal = on_fatal
        self.unhealthy_restart_after = unhealthy_restart_after
        self.lazy = lazy
        self._started = False
        self.server: ServerProcess | None = None
        self.client: SGLangClient | None = None
        self.fatal: BaseException | None = None
        self._demo = is_demo(cfg.launch_server)
        self._watcher: asyncio.Task[None] | None = None
        self._main: asyncio.Task[Any] | None = None
        self._signal: tuple[str, int] | None = None
        self.record_path = cfg.output_dir / RECORD
        self.adopted: LaunchRecord | None = None  # a server an earlier run launched, found still running

    # ------------------------------------------------------------------ enter / exit
    async def __aenter__(self) -> Supervisor:
        if not self.lazy:
            await self.start()
        return self

    async def start(self) -> None:
        """Use or launch the server (once; later calls return at once). With `lazy`, the body calls
        this when it knows there is work, so a run with nothing to do starts no server."""
        cfg = self.cfg
        if cfg.launch_server is None or self._started:
            return
        self._started = True
        self.client = SGLangClient(
            cfg.server_url, cfg.api_key, concurrency=1, request_timeout=PROBE_TIMEOUT, connect_timeout=5.0
        )
        try:
            await self._start()
        except BaseException:
            await self._close_client()
            self.client = None
            raise

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.client is None:
            if not self._started and exc is None:
                await self._stop_leftover()  # nothing to do: still, an earlier run's server is not left behind
            return
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        # The runner removed its handlers on its way out (back to the defaults): ours again, so a
        # signal while the server is stopping does not kill us and orphan it.
        self._main = None  # from here a first signal has nothing to interrupt: the stop is under way
        self._install_signals()
        try:
            await self._finish()
        finally:
            self._remove_signals()
            await self._close_client()
        if self._signal is not None and (exc is None or isinstance(exc, asyncio.CancelledError)):
            raise StoppedBySignal(*self._signal) from None

    async def _start(self) -> None:
        cfg, client = self.cfg, self.client
        assert cfg.launch_server is not None and client is not None
        host, port = url_host_port(cfg.server_url)
        healthy = await client.healthy()
        own = self._own_record()
        if own is not None and healthy:
            self.adopted = own
            self.message(
                f"the {own.name} an earlier run launched (pid {own.pid}, {own.started_at}) answers at "
                f"{cfg.display_url}; using it, and stopping it at the end"
                + (" unless --keep-server" if not cfg.keep_server else " (not: --keep-server)")
            )
            return
        decision = decide_launch(cfg.display_url, healthy, await asyncio.to_thread(port_taken, host, port))
        if not decision.launch:
            self.message(decision.message)
            return
        if self._demo:
            if host not in LOOPBACK:
                raise ServerLaunchError(
                    f"--launch-server demo listens on 127.0.0.1; --server-url {cfg.display_url} "
                    "points elsewhere (use http://127.0.0.1:PORT)"
                )
            # The first use installs for minutes; the later ones only check a stamp.
            argv: list[str] | str = await asyncio.to_thread(demo_command, port, self.message)
        else:
            argv = cfg.launch_server
        assert cfg.server_log is not None  # RunConfig.validate() derives it
        self.server = ServerProcess(
            argv,
            cfg.server_log,
            name="demo server" if self._demo else "server",
            max_restarts=cfg.server_restarts,
            on_event=self.message,
            keep=cfg.keep_server,
            record_path=self.record_path,
        )
        self._main = asyncio.current_task()
        self._install_signals()
        try:
            self.server.start()
            self.message(
                f"started {self.server.name} (pid {self.server.pid}) for {cfg.display_url}; log {cfg.server_log}"
            )
            took = await self.server.wait_ready(self._ready, cfg.server_start_timeout, on_status=self.message)
        except BaseException as exc:
            await self._stop_after_failed_start()
            if self._signal is not None and isinstance(exc, asyncio.CancelledError):
                raise StoppedBySignal(*self._signal) from None
            raise
        signals.release(self._on_signal)  # ready: the signals go back to whoever held them before (the runner)
        self.message(f"{self.server.name} ready in {took:.0f} s")
        if self._demo and cfg.max_tokens == DEMO_MAX_TOKENS:
            self.message(
                f"demo server: at most {DEMO_MAX_TOKENS} tokens per answer (its tiny model's turns end within "
                "about 50); pass --max-tokens N to change that"
            )
        self._watcher = asyncio.create_task(self._watch())

    async def _stop_after_failed_start(self) -> None:
        assert self.server is not None
        try:
            await asyncio.to_thread(self.server.stop, DEFAULT_GRACE)
        finally:
            self._remove_signals()

    def _own_record(self) -> LaunchRecord | None:
        """The record of a server this folder's runs launched that is still running and whose run is gone
        (killed, or it ended with --keep-server); a stale one is removed. The server of a run that still
        runs is that run's: it is used like any server already there, and never stopped."""
        record = read_record(self.record_path)
        if record is not None and not record.alive():
            remove_record(self.record_path, record.pid)
            return None
        return None if record is None or record.owner_alive() else record

    async def _stop_leftover(self) -> None:
        own = self._own_record() if self.cfg.launch_server is not None else None
        if own is not None:
            self.adopted = own
            await self._finish()

    def _keep_hint(self, name: str, pid: int) -> str:
        cfg = self.cfg
        same = f"--server-url {cfg.display_url}"
        if cfg.max_tokens != RunConfig.max_tokens:
            same += f" --max-tokens {cfg.max_tokens}"
        return (
            f"{name} left running (pid {pid}, --keep-server). The same command uses it again (and stops it at "
            f"the end unless --keep-server); without --launch-server, use it with the same settings: {same}; "
            f"stop it with: kill -TERM -{pid}"
        )

    async def _finish(self) -> None:
        server = self.server
        adopted = self.adopted
        if server is None and adopted is not None:
            if self.cfg.keep_server:
                self.message(self._keep_hint(adopted.name, adopted.pid))
                return
            self.message(f"stopping the {adopted.name} an earlier run launched (pid {adopted.pid})")
            survivors = await asyncio.to_thread(kill_group, adopted.pid, DEFAULT_GRACE)
            if survivors:
                raise ServerLaunchError(f"{adopted.name}'s processes {survivors} survived SIGKILL; end them by hand")
            remove_record(self.record_path, adopted.pid)
            return
        if server is None:
            return  # a server that was already there is not ours to stop
        if self.cfg.keep_server and server.exited() is None:
            self.message(self._keep_hint(server.name, server.pid or 0))
            return
        if server.exited() is None:
            self.message(f"stopping {server.name} (pid {server.pid})")
        await asyncio.to_thread(server.stop, DEFAULT_GRACE)

    async def _close_client(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    # ------------------------------------------------------------------ readiness and watching
    async def _ready(self) -> bool:
        assert self.client is not None and self.server is not None
        if not await self.client.healthy():
            return False
        # The real server answers /health only after its warm-up, and logs this line then;
        # both are checked because SGLang does not promise their order.
        return not self._demo or self.server.log_contains(SERVER_READY_LINE)

    async def _watch(self) -> None:
        """Restart the server when it dies or stays unhealthy; report the end of restarts."""
        server, client = self.server, self.client
        assert server is not None and client is not None
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
                if now - unhealthy_since < self.unhealthy_restart_after:
                    continue
                reason = f"/health failing for {now - unhealthy_since:.0f} s"
            else:
                reason = "died during the run"
            unhealthy_since = None
            try:
                await self._recover(reason)
            except ServerLaunchError as exc:
                self.fatal = exc
                self.message(str(exc))
                if self.on_fatal is not None:
                    self.on_fatal(exc)
                return

    async def _recover(self, reason: str) -> None:
        """Restart until the server is ready again; ServerLaunchError once restarts are used up."""
        server = self.server
        assert server is not None
        timeout = self.cfg.server_start_timeout
        while True:
            await server.restart(reason)
            try:
                took = await server.wait_ready(self._ready, timeout, on_status=self.message)
            except ServerLaunchError:
                reason = "exited while starting" if server.exited() is not None else f"not ready within {timeout:.0f} s"
                continue
            self.message(
                f"{server.name} is back (restart {server.restarts}/{server.max_restarts}, ready in {took:.0f} s)"
            )
            return

    # ------------------------------------------------------------------ signals
    def _install_signals(self) -> None:
        signals.hold(self._on_signal)  # the one owner of the signals: synthgen.signals

    def _remove_signals(self) -> None:
        """Only on the way out (the server is stopped): a signal from here on is one more request to stop
        a process that is already stopping, so it is swallowed rather than left to its default, which
        would kill us mid-exit with 128+signal unreported."""
        signals.release(self._on_signal, swallow=True)

    def _on_signal(self, sig: signal.Signals) -> None:
        if self._signal is None:
            self._signal = (sig.name, int(sig))
            self.message(f"{sig.name}: stopping the server (send {sig.name} again to kill it at once)")
            if self._main is not None and not self._main.done():
                self._main.cancel()
            return
        pid = self.server.pid if self.server is not None else None
        if pid is not None:
            self.message(f"second {sig.name}: killing the server's process group now")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
