"""The client behind a gateway or a fleet: the worker of each answer, a gateway's shed, the routing key header."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from synthgen.server.client import SGLangClient, Transient, build_payload

ANSWER = {"text": "hi", "output_ids": [5, 6], "meta_info": {"finish_reason": {"type": "stop"}, "prompt_tokens": 2}}


def generate(handle, routing_key=None):
    async def scenario():
        client = SGLangClient("http://x", None, 4, 60.0, transport=httpx.MockTransport(handle))
        try:
            return await client.generate(build_payload([1, 2], 8, {}), routing_key=routing_key), client
        finally:
            await client.aclose()

    return asyncio.run(scenario())


def test_the_worker_is_the_server_url_direct_and_smgs_header_behind_it():
    gen, client = generate(lambda r: httpx.Response(200, json=ANSWER))
    assert gen.worker == "http://x" and not client.gateway_seen
    header = {"x-smg-routed-worker-id": "http://10.0.0.7:30000"}
    gen, client = generate(lambda r: httpx.Response(200, json=ANSWER, headers=header))
    assert gen.worker == "http://10.0.0.7:30000" and client.gateway_seen


@pytest.mark.parametrize(
    ("status", "headers", "body", "shed"),
    [
        (429, {"Retry-After": "2"}, {"error": "busy"}, 2.0),
        (503, {"Retry-After": "5"}, {"error": "queue timeout"}, 5.0),
        (429, {"x-smg-error-code": "admission_queue_full"}, {"error": "full"}, 2.0),
        (429, {}, {"error": "concurrency limit reached and queuing is disabled"}, 2.0),
        (503, {}, {"error": "Service Unavailable"}, None),  # a server going down: an outage, not a shed
        (429, {}, {"error": "too many"}, None),
    ],
)
def test_a_429_or_503_with_retry_after_or_smgs_admission_code_is_a_shed(status, headers, body, shed):
    headers = {**headers, "x-smg-routed-worker-id": "w1"}
    with pytest.raises(Transient) as caught:
        generate(lambda r: httpx.Response(status, json=body, headers=headers))
    assert caught.value.shed == shed
    assert caught.value.worker == "w1"
    assert caught.value.outage == (shed is None and status == 503)


def test_a_routing_key_goes_out_as_smgs_header_and_not_in_the_body():
    seen = []

    def handle(request):
        seen.append(request)
        return httpx.Response(200, json=ANSWER)

    generate(handle, routing_key="k1")
    generate(handle)
    assert seen[0].headers["x-smg-routing-key"] == "k1" and b"k1" not in seen[0].content
    assert "x-smg-routing-key" not in seen[1].headers
