"""The load monitor behind the real sglang-router (0.3.2) with two real SGLang 0.5.23 servers.

Recorded answers of that router: ``/v1/loads`` is 404, ``/get_loads`` gives ``load: -1`` for
each worker (it asks them for the ``/get_load`` that 0.5.23 no longer has), and ``/workers``
lists the workers with their URLs; so the monitor reads each worker's ``/v1/loads`` directly.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from synthgen.run.concurrency import AutoConcurrency, InFlightLimit, LoadMonitor, ServerLoad
from synthgen.server.client import SGLangClient

pytestmark = [pytest.mark.router, pytest.mark.real_sglang]


def test_the_router_passes_no_load_report_itself(real_router):
    router, _a, _b = real_router
    assert router.get("/v1/loads").status_code == 404
    workers = router.get("/get_loads").json()["workers"]
    assert sorted(w["load"] for w in workers) == [-1, -1]


def test_behind_the_router_the_monitor_sums_both_workers_loads(real_router):
    router, a, b = real_router
    requests = 6

    async def scenario() -> ServerLoad:
        client = SGLangClient(router.url, None, concurrency=requests, request_timeout=600)
        limit = InFlightLimit(requests)
        monitor = LoadMonitor(client, limit, AutoConcurrency(initial=requests))
        # Long enough to be running at the next poll, and under the tiny model's 2,048-token context.
        prompt = {"text": "Count slowly.", "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True}}
        sent = [asyncio.create_task(client.http.post("/generate", json=prompt)) for _ in range(requests)]
        try:
            deadline = time.monotonic() + 120  # a safety net; the condition decides
            while True:
                report = await monitor.poll_once()
                if report is not None and report.running + report.waiting == requests:
                    break
                if time.monotonic() >= deadline:
                    done = [t.result() for t in sent if t.done() and not t.exception()]
                    answers = [(r.status_code, r.text[:200]) for r in done]
                    raise AssertionError(f"the workers never reported {requests} requests: {report}; answers {answers}")
                await asyncio.sleep(0.2)
            assert monitor.source == "router workers"
            return report
        finally:
            for task in sent:
                task.cancel()
            await asyncio.gather(*sent, return_exceptions=True)
            await client.aclose()

    report = asyncio.run(scenario())
    assert report.ranks == 2
    assert report.max_total_tokens == sum(
        httpx.get(w.url + "/v1/loads", timeout=30).json()["loads"][0]["max_total_num_tokens"] for w in (a, b)
    )
