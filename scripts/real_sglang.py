#!/usr/bin/env python3
"""Install and run the real SGLang 0.5.23 server and sglang-router on a CPU-only machine.

The command line over synthgen/demo/ (install.py owns the pinned install and the tiny model,
commands.py the server flags; read their docstrings), for the integration tests and for trying things by hand.
Everything lives in <repo>/.cache/real-sglang, or in $SYNTHGEN_CACHE/real-sglang (also --cache),
so a fresh checkout installs what it needs and nothing is left elsewhere. `start` and
`start-router` register each process under run/, and `stop` only kills what is registered.

Examples:
    python3 scripts/real_sglang.py setup
    python3 scripts/real_sglang.py start --port 0                   # prints {"pid":..,"port":..,"url":..,"log":..}
    python3 scripts/real_sglang.py start --port 0 -- --api-key sk-test
    python3 scripts/real_sglang.py start-router --port 0 --worker-urls http://127.0.0.1:P1 http://127.0.0.1:P2
    python3 scripts/real_sglang.py stop --pid PID
    python3 scripts/real_sglang.py status
    SYNTHGEN_CACHE=/tmp/c python3 scripts/real_sglang.py setup      # a second, separate install
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from synthgen.demo import commands, install  # noqa: E402  (after the path: any python3 runs this script)
from synthgen.launch.launcher import ServerLaunchError, ServerProcess  # noqa: E402
from synthgen.launch.procs import kill_group, live_members  # noqa: E402


class HarnessError(Exception):
    """A failure the user can act on; printed as one line."""


def say(msg: str) -> None:
    print(f"[real_sglang] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# setup / status
# ---------------------------------------------------------------------------------------------


def cmd_setup(args: argparse.Namespace) -> int:
    if not install.setup(args.paths, say, force=args.force):
        say(f"already set up ({args.paths.cache}); `setup --force` rebuilds")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    running = []
    for info in registered(args.paths):
        if live_members(info["pid"]):
            running.append(info)
        else:  # died without `stop` (crash, reboot): forget it
            (args.paths.run / f"{info['pid']}.json").unlink(missing_ok=True)
    if install.is_setup(args.paths):
        print(f"setup complete: {args.paths.cache}")
    else:
        print(f"setup not done: run `python3 {Path(__file__).relative_to(REPO)} setup` (about 2-4 min, 3 GB)")
    for info in running:
        print(f"running: {info['kind']} pid {info['pid']} {info['url']} log {info['log']}")
    return 0 if install.is_setup(args.paths) else 1


# ---------------------------------------------------------------------------------------------
# start / start-router / stop
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> int:
    """Status code of a GET, or 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return 0


def http_get_json(url: str, timeout: float = 5.0) -> dict:
    """Body of a GET as a JSON object, or {} when there is none."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = json.loads(resp.read())
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


class PortTaken(Exception):
    """The server could not bind its port: another process took it between free_port() and the bind."""


BIND_FAILED = "address already in use"


def spawn_and_wait(
    args: argparse.Namespace,
    kind: str,
    cmd: list[str],
    env: dict[str, str],
    port: int,
    log: Path,
    ready: Callable[[str, ServerProcess], bool],
) -> int:
    """Start `cmd` in its own process group, wait until `ready(url, server)` holds, register it
    and print its JSON line; a server that exits or misses the timeout is killed and reported."""
    # keep: the server outlives this command by design (`stop` ends it), so it must not die with it.
    server = ServerProcess(cmd, log, name=kind, env=env, cwd=args.paths.cache, keep=True)
    url = f"http://127.0.0.1:{port}"

    async def is_ready() -> bool:
        return ready(url, server)

    started = time.monotonic()
    try:
        server.start()
        say(f"{kind} pid {server.pid} starting on {url} (log {log})")
        asyncio.run(server.wait_ready(is_ready, args.timeout))
    except ServerLaunchError as exc:
        server.stop(grace=10.0)
        raise HarnessError(str(exc)) from exc
    except PortTaken:
        server.stop(grace=10.0)
        raise
    info = {"pid": server.pid, "port": port, "url": url, "log": str(log)}
    args.paths.run.mkdir(parents=True, exist_ok=True)
    entry = {**info, "kind": kind, "cmd": cmd}
    (args.paths.run / f"{server.pid}.json").write_text(json.dumps(entry) + "\n", encoding="utf-8")
    say(f"{kind} ready in {time.monotonic() - started:.1f} s")
    print(json.dumps(info), flush=True)
    return 0


def require_setup(paths: commands.DemoPaths) -> None:
    if not install.is_setup(paths):
        raise HarnessError(f"real SGLang is not set up: run `python3 {Path(__file__).relative_to(REPO)} setup`")


def cmd_start(args: argparse.Namespace) -> int:
    paths = args.paths
    require_setup(paths)
    # A port picked free can be taken by another test's process while SGLang loads (minutes on a
    # busy machine) before it binds: then SGLang logs the bind error and lingers. With --port 0 a
    # new port is picked and the server started again.
    attempts = 1 if args.port else 3
    for attempt in range(1, attempts + 1):
        port = args.port or free_port()
        try:
            return start_server_on(args, paths, port)
        except PortTaken:
            if attempt == attempts:
                raise HarnessError(f"sglang could not bind port {port}: {BIND_FAILED}") from None
            say(f"port {port} was taken before sglang bound it; starting again on another port")
    raise AssertionError("unreachable")


def start_server_on(args: argparse.Namespace, paths: commands.DemoPaths, port: int) -> int:
    log = Path(args.log) if args.log else paths.logs / f"sglang-{port}.log"
    cmd = commands.server_command(paths, port, model=args.model, extra=args.extra)

    # Seen here: connection refused for ~19 s, then /health 503 for ~2 s while SGLang sends
    # itself a warm-up /generate, then the ready line and /health 200. Both are checked so that
    # readiness does not hang on that order, which SGLang does not promise.
    def ready(url: str, server: ServerProcess) -> bool:
        if server.log_contains(BIND_FAILED):
            raise PortTaken(port)
        return server.log_contains(commands.SERVER_READY_LINE) and http_get(url + "/health") == 200

    env = commands.child_env(paths, **commands.server_env(paths))
    return spawn_and_wait(args, "sglang", cmd, env, port, log, ready)


def cmd_start_router(args: argparse.Namespace) -> int:
    paths = args.paths
    require_setup(paths)
    port = args.port or free_port()
    log = Path(args.log) if args.log else paths.logs / f"router-{port}.log"
    cmd = commands.router_command(paths, port, args.worker_urls, prometheus_port=free_port(), extra=args.extra)

    # /health is only the router's own liveness, and it registers workers in the background:
    # until one is in, proxied routes fail. /get_model_info proves a worker answers through it;
    # /readiness that every worker is registered, so round-robin tests see all of them.
    def ready(url: str, server: ServerProcess) -> bool:
        if http_get(url + "/health") != 200 or http_get(url + "/get_model_info") != 200:
            return False
        status = http_get_json(url + "/readiness")
        return status.get("healthy_workers") == len(args.worker_urls)

    return spawn_and_wait(args, "router", cmd, commands.child_env(paths), port, log, ready)


def registered(paths: commands.DemoPaths) -> list[dict]:
    infos = []
    for path in sorted(paths.run.glob("*.json")) if paths.run.exists() else []:
        try:
            infos.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return infos


def cmd_stop(args: argparse.Namespace) -> int:
    entry = args.paths.run / f"{args.pid}.json"
    # Only groups started by this script are killed; a mistyped pid must not take anything else down.
    if not entry.exists():
        raise HarnessError(f"pid {args.pid} was not started by this script (no {entry}); not killing it")
    if args.pid in (0, 1, os.getpgrp()):
        raise HarnessError(f"refusing to kill process group {args.pid}")
    if not live_members(args.pid):
        say(f"pid {args.pid}: already stopped")
    else:
        survivors = kill_group(args.pid, args.grace)
        if survivors:
            raise HarnessError(f"process group {args.pid} survived SIGKILL: {survivors}")
        say(f"pid {args.pid}: stopped")
    entry.unlink(missing_ok=True)
    return 0


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def port_arg(text: str) -> int:
    port = int(text)
    if not 0 <= port < 65536:
        raise argparse.ArgumentTypeError("port must be 0..65535 (0 picks a free one)")
    return port


def build_parser() -> argparse.ArgumentParser:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(
        prog="real_sglang.py",
        description=doc.split("\n\n")[0],
        epilog="Examples:\n" + doc.split("Examples:\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    parser.add_argument(
        "--cache",
        type=Path,
        help=f"cache root holding real-sglang/ (default ${commands.CACHE_ENV}, else .cache in the repo)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("setup", help="install SGLang, sglang-router and the tiny model (idempotent)")
    p.add_argument("--force", action="store_true", help="delete the venv and model first and rebuild")
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("status", help="say whether setup is complete (exit 0) or not (exit 1); list running servers")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "start",
        help="start an SGLang server, wait until ready, print its JSON line",
        epilog="Arguments after `--` go to sglang.launch_server unchanged, e.g. -- --api-key KEY",
    )
    p.add_argument("--port", type=port_arg, default=0, help="port on 127.0.0.1; 0 picks a free one (default)")
    p.add_argument("--model", type=Path, help="model directory (default: the tiny model in the cache)")
    p.add_argument("--log", help="log file, appended to (default .cache/real-sglang/logs/sglang-PORT.log)")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness (default 180)")
    p.set_defaults(func=cmd_start)

    p = sub.add_parser(
        "start-router",
        help="start sglang-router in front of workers, wait, print its JSON line",
        epilog="Arguments after `--` go to sglang_router.launch_router unchanged",
    )
    p.add_argument("--port", type=port_arg, default=0, help="port on 127.0.0.1; 0 picks a free one (default)")
    p.add_argument("--worker-urls", nargs="+", required=True, metavar="URL", help="worker base URLs")
    p.add_argument("--log", help="log file, appended to (default .cache/real-sglang/logs/router-PORT.log)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for readiness (default 60)")
    p.set_defaults(func=cmd_start_router)

    p = sub.add_parser("stop", help="stop a server or router started here (SIGTERM its group, then SIGKILL)")
    p.add_argument("--pid", type=int, required=True, help="the pid printed by start / start-router")
    p.add_argument("--grace", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL (default 30)")
    p.set_defaults(func=cmd_stop)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    args.extra = extra
    args.paths = commands.DemoPaths(args.cache / "real-sglang") if args.cache else commands.DemoPaths.default()
    try:
        return args.func(args)
    except (HarnessError, install.DemoSetupError) as exc:
        if args.debug:
            raise
        hint = f"; set {commands.SKIP_REAL_ENV}=1 to skip the real-server tests" if args.command == "setup" else ""
        print(f"real_sglang: {exc}{hint}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
