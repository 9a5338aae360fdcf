"""A run through the real sglang-router (0.3.2, round robin) in front of two real SGLang servers,
one of which is killed mid-run and restarted on its port: nothing is lost, nothing duplicated,
no prompt marked failed (the session's shared router: the restarted worker stays in it for the tests
after). And what the client's health check sees behind the router: /health stays 200 with every
worker down, healthy() does not (a router of its own, whose one worker it kills)."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from simharness import wait_until
from workspace import Workspace

from synthgen.server.client import SGLangClient, behind_router
from tests.integration import realserver

pytestmark = [pytest.mark.router, pytest.mark.real_sglang]

DEADLINE = 300.0


def healthy(url: str) -> tuple[bool, bool]:
    """(healthy(), behind_router()) of a fresh client."""

    async def ask() -> tuple[bool, bool]:
        client = SGLangClient(url, None, concurrency=1, request_timeout=30.0)
        try:
            return await client.healthy(), behind_router(client)
        finally:
            await client.aclose()

    return asyncio.run(ask())


def kill(proc) -> None:
    """SIGKILL the server's whole process group, as a crash (or the OOM killer) would."""
    proc.running = False
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    realserver.stop(proc.pid)  # reaps the group and forgets the registration


def test_a_worker_killed_and_restarted_mid_run_loses_nothing_and_fails_nothing(ws: Workspace, real_router, real_shared):
    router, _, b = real_router
    assert healthy(router.url) == (True, True)
    ids = ws.dataset("short", "d", 40)
    out = ws.root / "run.out"
    proc = ws.start(
        "--server-url", router.url, "--max-tokens", "24", "--concurrency", "4", "--status-interval", "1", log=out
    )
    try:
        wait_until(lambda: len(ws.raw_lines("d")) >= 4, timeout=DEADLINE, interval=0.2, what="first rows")
        kill(b)
        # Restarted on its port: the router knows the worker by its URL.
        b2 = real_shared.restart(b)
        assert proc.wait(DEADLINE) == 0, out.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    rows = ws.assert_exactly_once("d", ids)
    assert all(row["finish_reason"] in ("stop", "length") for row in rows)
    assert ws.errors("d") == []
    assert b2.get("/health").status_code == 200


def test_behind_the_router_health_follows_the_workers_not_the_routers_own_health(real_procs, real_parser_server):
    # Its worker stays down: the shared parser server, which nothing needs after test_real_conversations.py
    # (its flags do not matter here; a later test that asks for it gets it started again).
    worker = real_parser_server
    router = real_procs.router([worker])
    assert healthy(router.url) == (True, True)
    assert healthy(worker.url) == (True, False)
    kill(worker)
    # The router's liveness stays up; a request through it finds no worker.
    assert router.get("/health").status_code == 200
    assert healthy(router.url) == (False, True)
