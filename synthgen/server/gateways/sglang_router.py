"""sglang-router (0.3.x, "SGLang Model Gateway"), as measured against SGLang 0.5.23
(``docs/server.md``):

- **Its workers.** ``GET /workers`` lists them with their URLs (it has no ``/v1/loads``, and its
  ``/get_loads`` answers ``load: -1`` per worker): the load monitor polls each worker's ``/v1/loads``.
- **Its health.** ``/health`` stays 200 while every worker is down; ``GET /readiness`` answers
  ``{"status": "ready", "healthy_workers": n, "total_workers": m}`` (200 or 503) but lags its own
  health checks, so a request sent now is known to get through only by a one-token probe.
- One attempt of ours is up to its ``--retry-max-retries`` attempts at workers.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from synthgen.server.gateways import Gateway

HEALTH_TIMEOUT = 30.0
# SGLang's own /health_generate probes with this: token 0 exists in every vocabulary.
PROBE_PAYLOAD = {"input_ids": [0], "sampling_params": {"max_new_tokens": 1}}


def worker_urls(body: object) -> list[str]:
    """Worker URLs from sglang-router's ``GET /workers`` (0.3.x): ``{"workers": [{"url": ...}]}``."""
    workers = body.get("workers") if isinstance(body, dict) else None
    if not isinstance(workers, list):
        return []
    urls = []
    for worker in workers:
        url = worker.get("url") if isinstance(worker, dict) else None
        # A prefill worker of a PD pair holds no decode queue; its load would mislead.
        if isinstance(url, str) and url.startswith(("http://", "https://")) and worker.get("worker_type") != "prefill":
            urls.append(url.rstrip("/"))
    return urls


PROFILE = Gateway(name="sglang-router 0.3", workers_path="/workers", worker_urls=worker_urls)


async def readiness(http: httpx.AsyncClient) -> dict[str, Any] | None:
    """The router's GET /readiness ({"status": "ready", "healthy_workers": n, "total_workers": m},
    200 or 503), or None when the server does not answer it that way (an SGLang server: 404)."""
    response = await http.get("/readiness", timeout=httpx.Timeout(HEALTH_TIMEOUT))
    try:
        data = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("healthy_workers"), int) else None


async def detect(http: httpx.AsyncClient) -> bool | None:
    """True behind sglang-router, False in front of a server, None when it cannot be told yet."""
    try:
        return await readiness(http) is not None
    except httpx.HTTPError:
        return None


async def ready(http: httpx.AsyncClient) -> bool:
    """The router has a healthy worker and a one-token request gets through it now.

    Its /readiness alone lags: it follows the router's periodic health checks (every 60 s, 3
    failures, by default), so it still says ready after a worker died, while the circuit breaker
    answers 503 "no available workers" well after a worker came back. The probe goes the way a
    request goes; any answer below 500 means a worker took it."""
    try:
        answer = await readiness(http)
        if answer is None or answer["healthy_workers"] < 1:
            return False
        probe = await http.post(
            "/generate",
            content=orjson.dumps(PROBE_PAYLOAD),
            headers={"Content-Type": "application/json"},
            timeout=httpx.Timeout(HEALTH_TIMEOUT),
        )
    except httpx.HTTPError:
        return False
    return probe.status_code < 500
