"""Fixtures for the tests against the real SGLang server and sglang-router (see realserver.py).

    real_setup       session: install SGLang + the tiny model once (seconds when already done)
    real_shared      session: the RealProcs that owns the shared servers and router below
    real_server      ONE real server shared by every test (started once per session)
    real_router      sglang-router in front of two servers, (router, a, b): a is `real_server`,
                     b a second shared server; started once per session
    real_parser_server  a shared server started with PARSER_ARGS (--reasoning-parser qwen3
                     --tool-call-parser qwen25); started once per session
    real_tokenizer   session: the tiny model's tokenizer, to compute what the runner must send
    real_procs       function: dedicated servers and routers, stopped after the test

Each server start costs about 25 s of this machine's two cores and 2 GB of memory, so tests
share `real_server` and `real_router`, even a test that stops or kills a shared server: it
starts it again on its port with `real_shared.restart(proc)`, which keeps the Proc (and so
its URL and log) for the tests after it; a shared server found stopped is restarted before
the next test that asks for it. Only a test whose server must stay down starts its own. A
setup that cannot be done (no network on a fresh machine) fails these tests with the reason;
SYNTHGEN_SKIP_REAL=1 skips them instead.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.integration import realserver

HERE = Path(__file__).resolve().parent
SKIP_ENV = "SYNTHGEN_SKIP_REAL"
GENERATE_LINE = b'"POST /generate HTTP/1.1"'  # uvicorn's access line, one per answered request
# real_parser_server's flags: test_real_conversations.py checks what /server_info reports for them.
PARSER_ARGS = ("--reasoning-parser", "qwen3", "--tool-call-parser", "qwen25")


def pytest_collection_modifyitems(config, items):
    if os.environ.get(SKIP_ENV) != "1":
        return
    skip = pytest.mark.skip(reason=f"{SKIP_ENV}=1: tests against the real SGLang server are skipped")
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(skip)


class Proc:
    """A server or router started by realserver: its URL, port, pid and log file (and, for a
    server, the extra flags it was started with, which a restart gives it again)."""

    def __init__(self, info: dict, extra_args: Sequence[str] = ()):
        self.extra_args = tuple(extra_args)
        self.pid: int = info["pid"]
        self.port: int = info["port"]
        self.url: str = info["url"]
        self.log = Path(info["log"])
        self.running = True

    def mark(self) -> int:
        """A position in the log; `generate_requests(mark)` counts what was answered after it."""
        return self.log.stat().st_size

    def generate_requests(self, since: int) -> int:
        with open(self.log, "rb") as fh:
            fh.seek(since)
            return fh.read().count(GENERATE_LINE)

    def get(self, path: str) -> httpx.Response:
        return httpx.get(self.url + path, timeout=30.0, trust_env=False)

    def post(self, path: str, body: dict) -> httpx.Response:
        return httpx.post(self.url + path, json=body, timeout=120.0, trust_env=False)


def _started(start, *args, **kwargs) -> Proc:
    try:
        return Proc(start(*args, **kwargs), kwargs.get("extra_args", ()))
    except realserver.RealServerError as exc:
        failure = str(exc)
    pytest.fail(f"could not start the real server: {failure}", pytrace=False)  # outside `except`: no chained traceback


@pytest.fixture(scope="session")
def real_setup(request) -> None:
    if realserver.is_setup():
        return
    capture = request.config.pluginmanager.getplugin("capturemanager")
    # The first install takes minutes: say so on the terminal, and let its progress show.
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        print(
            "\n[real_sglang] first run on this machine: installing SGLang 0.5.23, sglang-router and a tiny "
            "model into .cache/real-sglang (about 3 GB, 2-4 minutes; later runs skip this)",
            file=sys.stderr,
            flush=True,
        )
        try:
            realserver.ensure_setup()
            return
        except realserver.RealServerError as exc:
            failure = str(exc)
    hint = "" if SKIP_ENV in failure else f"; set {SKIP_ENV}=1 to skip them"
    message = f"the real SGLang server could not be set up, so these tests cannot run: {failure}{hint}"
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def real_tokenizer(real_setup):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(realserver.model_dir()))


class RealProcs:
    """Dedicated servers and routers for one test; `close()` stops whatever is still running."""

    def __init__(self):
        self.procs: list[Proc] = []

    def server(self, port: int = 0, extra_args: Sequence[str] = ()) -> Proc:
        proc = _started(realserver.start_server, port=port, extra_args=extra_args)
        self.procs.append(proc)
        return proc

    def servers(self, count: int) -> list[Proc]:
        # In parallel: two starts overlap well on two cores (one waits on imports, one on I/O).
        with ThreadPoolExecutor(max_workers=count) as pool:
            futures = [pool.submit(realserver.start_server) for _ in range(count)]
        started, failures = [], []
        for future in futures:
            try:
                started.append(Proc(future.result()))
            except realserver.RealServerError as exc:
                failures.append(str(exc))
        self.procs += started
        if failures:
            pytest.fail(f"could not start the real server: {failures[0]}", pytrace=False)
        return started

    def router(self, workers: list[Proc]) -> Proc:
        proc = _started(realserver.start_router, [w.url for w in workers])
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc) -> None:
        proc.running = False
        realserver.stop(proc.pid)

    def restart(self, proc: Proc) -> Proc:
        """Start a server again on `proc`'s port (stopping it first if it runs). `proc` then stands
        for the new process: same URL and log file, so whoever shares it keeps working."""
        if proc.running:
            self.stop(proc)
        again = _started(realserver.start_server, port=proc.port, extra_args=proc.extra_args)
        proc.pid, proc.running = again.pid, True
        return proc

    def close(self) -> None:
        # In parallel: SGLang drains for about 5 s after SIGTERM.
        running = [proc for proc in self.procs if proc.running]
        with ThreadPoolExecutor(max_workers=max(1, len(running))) as pool:
            list(pool.map(self.stop, running))


@pytest.fixture
def real_procs(real_setup):
    procs = RealProcs()
    yield procs
    procs.close()


@pytest.fixture(scope="session")
def real_shared(real_setup):
    procs = RealProcs()
    yield procs
    procs.close()


@pytest.fixture(scope="session")
def _shared_server(real_shared) -> Proc:
    return real_shared.server()


@pytest.fixture(scope="session")
def _shared_router(real_shared, _shared_server) -> tuple[Proc, Proc, Proc]:
    b = real_shared.server()
    return real_shared.router([_shared_server, b]), _shared_server, b


def _running(shared: RealProcs, *servers: Proc) -> None:
    for server in servers:
        if not server.running:  # stopped by an earlier test that did not (or could not) restart it
            shared.restart(server)


@pytest.fixture
def real_server(real_shared, _shared_server) -> Proc:
    _running(real_shared, _shared_server)
    return _shared_server


@pytest.fixture
def real_router(real_shared, _shared_router) -> tuple[Proc, Proc, Proc]:
    _running(real_shared, *_shared_router[1:])
    return _shared_router


@pytest.fixture(scope="session")
def _shared_parser_server(real_shared) -> Proc:
    return real_shared.server(extra_args=PARSER_ARGS)


@pytest.fixture
def real_parser_server(real_shared, _shared_parser_server) -> Proc:
    _running(real_shared, _shared_parser_server)
    return _shared_parser_server
