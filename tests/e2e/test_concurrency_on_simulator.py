"""The load monitor and the auto-concurrency controller against the simulator's scheduler over real HTTP:
the target rises while the server has free slots and falls when a restart leaves it fewer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import httpx

from synthgen.run.concurrency import AutoConcurrency, InFlightLimit, LoadMonitor
from synthgen.server.client import SGLangClient


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60.0) -> None:
    """Wait for a condition; the deadline is a safety net, never what decides the outcome."""
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.01)


def test_on_the_simulator_the_target_rises_until_requests_wait_and_falls_when_capacity_shrinks(make_sim):
    # Requests of 2,000 tokens at 50 ms a step never finish during the test: the server's state
    # changes only when the client sends more or the server restarts with fewer running slots.
    sim_args = [
        "--max-total-tokens",
        "200000",
        "--step-time",
        "0.05",
        "--output-len-dist",
        "fixed:2000",
        "--context-length",
        "4096",
    ]
    sim = make_sim("chatml", *sim_args, "--max-running-requests", "12")
    prompt = {"input_ids": list(range(5, 25)), "sampling_params": {"max_new_tokens": 2000}}

    async def scenario() -> None:
        client = SGLangClient(sim.url, None, concurrency=64, request_timeout=600)
        limit = InFlightLimit(2)
        monitor = LoadMonitor(client, limit, AutoConcurrency(max_concurrency=64, initial=2))

        async def one() -> None:
            try:
                await client.http.post("/generate", json=prompt)
            except httpx.HTTPError:
                await asyncio.sleep(0.05)  # the server is restarting: do not spin
            finally:
                limit.release()

        async def producer() -> None:
            while True:
                await limit.acquire()
                tasks.add(task := asyncio.create_task(one()))
                task.add_done_callback(tasks.discard)

        async def server_holds(count: int, slots: int) -> bool:
            """The server has every one of ``count`` requests and runs as many as its slots allow."""
            stats = (await client.http.get("/sim/stats")).json()
            running = min(count, slots)
            return (stats["http_in_flight"], stats["running"], stats["waiting"]) == (count, running, count - running)

        tasks: set[asyncio.Task] = set()
        feeder = asyncio.create_task(producer())
        try:
            seen = []
            for _ in range(10):
                await until(lambda: server_holds(limit.target, 12), "the server holds every request sent")
                report = await monitor.poll_once()
                assert report is not None
                seen.append((report.running, report.waiting, limit.target))
                if report.waiting > 0:
                    break
            assert seen[0] == (2, 0, 11), seen  # starved: 2 * 1.25 + 8 and at least running + 8
            assert seen[-1][0] == 12 and seen[-1][1] > 0, seen
            risen = limit.target
            assert risen >= 12

            await asyncio.to_thread(sim.restart, *sim_args, "--max-running-requests", "4")
            await until(lambda: server_holds(risen, 4), "the restarted server holds every request resent")
            targets = []
            for _ in range(12):
                report = await monitor.poll_once()
                assert report is not None and report.running == 4
                targets.append(limit.target)
            assert targets[-1] == 12 and targets == sorted(targets, reverse=True), targets  # 4 running + 8
            assert limit.in_use == risen  # nothing in flight was cancelled
            assert monitor.controller.state == "queued"
        finally:
            feeder.cancel()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(feeder, *tasks, return_exceptions=True)
            await client.aclose()

    asyncio.run(scenario())
