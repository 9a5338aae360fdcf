"""The server a run launches itself (--launch-server): start it, watch it, restart it, stop it.

This module owns the policy around one launched server for the length of a run; the process
mechanics (process group, log, backoff, killing the group) are synthgen.launch.launcher's, the
watching and the signals synthgen.launch.watch's, the demo install synthgen.demo's, and "healthy"
is the HTTP client's. The CLI wraps the runner in it:

    runner = Runner(config, out, tty)
    async with Supervisor(config, runner.progress.message, on_fatal=runner.fail_run):
        return await runner.run()

On enter (only with --launch-server): a server already healthy at --server-url is used as it is
and never stopped (the message names the process that listens there); otherwise the command (or the
demo server) is started and waited for, with a status line every few seconds. A server that answers
at the URL while ours loads but is not ours (it holds the port: another run's demo server) is used,
and ours, which could not bind, is stopped. While the body runs, synthgen.launch.watch restarts the
server; once --server-restarts are used up it reports the error to `on_fatal`. On exit the server is
stopped (whole process group) unless --keep-server. A server an earlier run of the folder left
(launched_server.json) is used and stopped like our own, but only once synthgen.launch.record has
checked that it is the very process this tool launched; otherwise it is never signalled.

Signals: from enter until the runner installs its own handlers (and again on exit) SIGINT,
SIGTERM and SIGHUP stop the server and end the run with StoppedBySignal (exit 128 + signal); a
second signal SIGKILLs the server's group at once.

Errors: ServerLaunchError (exit 3) when the server exits or never becomes ready at start;
DemoSetupError (exit 3) when the demo server cannot be installed; StoppedBySignal.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from types import TracebackType

from synthgen.config import RunConfig
from synthgen.demo.commands import SERVER_READY_LINE
from synthgen.demo.install import demo_command
from synthgen.errors import SynthgenError
from synthgen.launch.launcher import (
    DEFAULT_GRACE,
    ForeignServer,
    ServerLaunchError,
    ServerProcess,
    decide_launch,
    url_host_port,
)
from synthgen.launch.procs import (
    Unreadable,
    describe_process,
    environ_value,
    kill_group,
    live_members,
    port_listeners,
    port_taken,
    serving_on,
)
from synthgen.launch.record import TOKEN_ENV, LaunchRecord, check_record, read_record, remove_record
from synthgen.launch.watch import UNHEALTHY_RESTART_AFTER, SignalGuard, watch
from synthgen.server.client import SGLangClient

DEMO = "demo"
# The demo's tiny model ends its turns within about 50 tokens; the cap keeps a sampled answer that
# wanders (a chance of about 1e-19 per answer) from running to its 2048-token context on two CPU cores.
DEMO_MAX_TOKENS = 256
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


def keep_hint(cfg: RunConfig, name: str, pid: int) -> str:
    same = f"--server-url {cfg.display_url}"
    if cfg.max_tokens != RunConfig.max_tokens:
        same += f" --max-tokens {cfg.max_tokens}"
    return (
        f"{name} left running (pid {pid}, --keep-server). The same command uses it again (and stops it at "
        f"the end unless --keep-server); without --launch-server, use it with the same settings: {same}; "
        f"stop it with: kill -TERM -{pid}"
    )


def listener(host: str, port: int) -> str:
    """The process that listens at a local URL, for a message ("pid 12: python -m ..."); '' if unknown."""
    pids = port_listeners(port) if host in LOOPBACK else None
    return describe_process(pids[0]) if pids else ""


class Supervisor:
    """Launches and supervises `cfg.launch_server` around the body of an `async with`.

    `message` receives every event line (start, status while loading, restarts, stop).
    `on_fatal(exc)` is called from the watcher task when the server cannot be brought back
    (restarts used up); the caller should end the run with that error. With `lazy`, nothing starts
    on enter: the body calls start() once it knows there is work.
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
        self._signals = SignalGuard(message, lambda: self.server.pid if self.server is not None else None)
        self.record_path = cfg.output_dir / RECORD
        self.adopted: LaunchRecord | None = None  # a server an earlier run launched, found still running

    async def __aenter__(self) -> Supervisor:
        if not self.lazy:
            await self.start()
        return self

    async def start(self) -> None:
        """Use or launch the server (once; later calls return at once)."""
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
        # signal while the server is stopping does not kill us and orphan it; from here a first
        # signal has nothing to interrupt (no main task): the stop is under way.
        self._signals.install(None)
        try:
            await self._finish()
        finally:
            self._signals.remove()
            await self._close_client()
        if self._signals.caught is not None and (exc is None or isinstance(exc, asyncio.CancelledError)):
            raise StoppedBySignal(*self._signals.caught) from None

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
        taken = await asyncio.to_thread(port_taken, host, port)
        holder = listener(host, port) if healthy or taken else ""
        decision = decide_launch(cfg.display_url, healthy, taken, holder)
        if not decision.launch:
            self.message(decision.message)
            return
        if self._demo and host not in LOOPBACK:
            raise ServerLaunchError(
                f"--launch-server demo listens on 127.0.0.1; --server-url {cfg.display_url} "
                "points elsewhere (use http://127.0.0.1:PORT)"
            )
        starting = serving_on("sglang.launch_server", port) if self._demo else []
        if starting:  # another run's demo server, still loading: a second one could never bind the port
            raise ServerLaunchError(
                f"another SGLang server is starting on port {port} ({describe_process(starting[0])}): rerun once it "
                "answers (this run then uses it), or pass another --server-url port"
            )
        await self._launch(port)

    async def _launch(self, port: int) -> None:
        cfg = self.cfg
        # The demo's first use installs for minutes; the later ones only check a stamp.
        argv = await asyncio.to_thread(demo_command, port, self.message) if self._demo else cfg.launch_server
        assert argv is not None and cfg.server_log is not None  # RunConfig.validate() derives the log
        server = self.server = ServerProcess(
            argv,
            cfg.server_log,
            name="demo server" if self._demo else "server",
            max_restarts=cfg.server_restarts,
            on_event=self.message,
            keep=cfg.keep_server,
            record_path=self.record_path,
            secrets=[cfg.api_key or ""],
        )
        self._signals.install(asyncio.current_task())
        try:
            server.start()
            self.message(f"started {server.name} (pid {server.pid}) for {cfg.display_url}; log {cfg.server_log}")
            took = await server.wait_ready(self._ready, cfg.server_start_timeout, on_status=self.message)
        except ForeignServer as exc:
            await self._stop_after_failed_start()
            self.server = None  # the one that answers is not ours: used, never stopped
            self.message(str(exc))
            return
        except BaseException as exc:
            await self._stop_after_failed_start()
            if self._signals.caught is not None and isinstance(exc, asyncio.CancelledError):
                raise StoppedBySignal(*self._signals.caught) from None
            raise
        self._signals.release()  # ready: the signals go back to whoever held them before (the runner)
        self.message(f"{server.name} ready in {took:.0f} s")
        if self._demo and cfg.max_tokens == DEMO_MAX_TOKENS:
            self.message(
                f"demo server: at most {DEMO_MAX_TOKENS} tokens per answer (its tiny model's turns end within "
                "about 50); pass --max-tokens N to change that"
            )
        assert self.client is not None
        ready, timeout, fatal = self._ready, cfg.server_start_timeout, self._fatal
        self._watcher = asyncio.create_task(
            watch(server, self.client, ready, timeout, self.message, fatal, self.unhealthy_restart_after)
        )

    def _fatal(self, exc: BaseException) -> None:
        self.fatal = exc
        if self.on_fatal is not None:
            self.on_fatal(exc)

    async def _stop_after_failed_start(self) -> None:
        assert self.server is not None
        try:
            await asyncio.to_thread(self.server.stop, DEFAULT_GRACE)
        finally:
            self._signals.remove()

    def _own_record(self) -> LaunchRecord | None:
        """The record of a server this folder's runs launched that is still running and whose run is gone
        (killed, or it ended with --keep-server), once checked to be the very process this tool launched;
        a stale one is removed. The server of a run that still runs is that run's: used, never stopped."""
        record = read_record(self.record_path)
        if record is not None and not record.alive():
            remove_record(self.record_path, record.pid)
            return None
        if record is None or record.owner_alive():
            return None
        refusal = check_record(record)
        if refusal is None:
            return record
        if not refusal.foreign_user:
            remove_record(self.record_path, record.pid)
        self.message(
            f"{self.record_path} names pid {record.pid}, which is not a server this tool launched "
            f"({refusal.reason}): not signalling it"
        )
        return None

    async def _stop_leftover(self) -> None:
        own = self._own_record() if self.cfg.launch_server is not None else None
        if own is not None:
            self.adopted = own
            await self._finish()

    async def _finish(self) -> None:
        server, adopted = self.server, self.adopted
        if server is None and adopted is not None:
            if self.cfg.keep_server:
                self.message(keep_hint(self.cfg, adopted.name, adopted.pid))
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
            self.message(keep_hint(self.cfg, server.name, server.pid or 0))
            return
        if server.exited() is None:
            self.message(f"stopping {server.name} (pid {server.pid})")
        await asyncio.to_thread(server.stop, DEFAULT_GRACE)

    async def _close_client(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    async def _ready(self) -> bool:
        """Healthy, and ours: a server answering at the URL that does not hold the port is another's."""
        assert self.client is not None and self.server is not None
        if not await self.client.healthy():
            return False
        server = self.server
        holder = self._foreign_holder(server)
        if holder is not None:
            raise ForeignServer(
                f"another server answers at {self.cfg.display_url} ({holder}), not the {server.name} this run "
                f"started (pid {server.pid}), which cannot bind the port: using that one, and stopping ours"
            )
        # The real server answers /health only after its warm-up, and logs this line then;
        # both are checked because SGLang does not promise their order.
        return not self._demo or server.log_contains(SERVER_READY_LINE)

    def _foreign_holder(self, server: ServerProcess) -> str | None:
        """Who holds the port when it is not our server: for the demo anything else; for a command of
        the user's (which may listen through a proxy, docker's) only a server another run launched."""
        host, port = url_host_port(self.cfg.server_url)
        if host not in LOOPBACK or server.pid is None or port_listeners(port, live_members(server.pid)) != []:
            return None  # ours, or nothing listens on this machine (or /proc cannot say)
        for pid in port_listeners(port) or []:
            with contextlib.suppress(Unreadable):
                token = environ_value(pid, TOKEN_ENV)
                if self._demo or (token and token != server.token):
                    return describe_process(pid)
        return "a process this run cannot see" if self._demo else None
