"""Payloads and the classification of every SGLang answer shape (docs/sglang_api.md §1.4, §2)."""

import asyncio
from collections import Counter

import httpx
import orjson
import pytest

from synthgen.errors import AuthError
from synthgen.server.client import (
    Rejected,
    SGLangClient,
    SpreadTransport,
    Transient,
    build_payload,
    error_message,
    parse_generation,
)
from synthgen.server.discovery import fit_max_new_tokens


def body(obj) -> bytes:
    return orjson.dumps(obj)


OK = {
    "text": "<think>r</think>a",
    "output_ids": [1, 2, 3],
    "meta_info": {
        "id": "rid-1",
        "finish_reason": {"type": "stop", "matched": 2},
        "prompt_tokens": 17,
        "completion_tokens": 3,
        "cached_tokens": 4,
        "e2e_latency": 0.4,
    },
}


def test_payload_always_sends_max_new_tokens_and_keeps_special_tokens():
    payload = build_payload([1, 2], 100, {"temperature": 0.6}, "r1")
    assert payload == {
        "input_ids": [1, 2],
        "rid": "r1",
        "sampling_params": {"max_new_tokens": 100, "skip_special_tokens": False, "temperature": 0.6},
    }


def test_a_normal_answer_is_parsed():
    gen = parse_generation(200, body(OK))
    assert (gen.text, gen.finish_type, gen.prompt_tokens, gen.completion_tokens, gen.cached_tokens) == (
        "<think>r</think>a",
        "stop",
        17,
        3,
        4,
    )


def test_an_answer_without_output_ids_is_accepted():
    gen = parse_generation(
        200,
        body(
            {
                "text": "x",
                "meta_info": {
                    "finish_reason": {"type": "length", "length": 5},
                    "prompt_tokens": 1,
                    "completion_tokens": 5,
                },
            }
        ),
    )
    assert gen.output_ids is None and gen.finish_type == "length"


@pytest.mark.parametrize(
    "finish",
    [
        {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None},
        {"type": "abort", "message": "Abort in waiting queue"},
    ],
)
def test_an_aborted_200_is_retryable_not_a_result(finish):
    with pytest.raises(Transient) as info:
        parse_generation(200, body({**OK, "meta_info": {**OK["meta_info"], "finish_reason": finish}}))
    assert info.value.kind == "abort" and not info.value.outage


@pytest.mark.parametrize(
    "status,outage", [(500, False), (502, True), (503, True), (504, True), (408, False), (429, False)]
)
def test_server_errors_are_retryable(status, outage):
    err = {
        "object": "error",
        "message": "The request queue is full.",
        "type": str(status),
        "param": None,
        "code": status,
    }
    with pytest.raises(Transient) as info:
        parse_generation(status, body(err))
    assert info.value.outage is outage and "The request queue is full." in info.value.message


@pytest.mark.parametrize(
    "payload,message",
    [
        (
            {"error": {"message": "The input (4000 tokens) is longer than the model's context length (2048 tokens)."}},
            "HTTP 400: The input (4000 tokens) is longer than the model's context length (2048 tokens).",
        ),
        (
            {"error": "unknown field `seed`, expected one of `max_new_tokens`"},
            "HTTP 400: unknown field `seed`, expected one of `max_new_tokens`",
        ),
        ({"object": "error", "message": "bad", "type": "Bad Request", "param": None, "code": 400}, "HTTP 400: bad"),
    ],
)
def test_client_errors_are_permanent_with_the_servers_message(payload, message):
    with pytest.raises(Rejected) as info:
        parse_generation(400, body(payload))
    assert info.value.message == message


def test_401_stops_the_run_with_advice_about_the_key():
    with pytest.raises(AuthError, match=r"set SGLANG_API_KEY \(or --api-key\) to the key"):
        parse_generation(401, body({"error": "Unauthorized"}))


def test_plain_text_error_bodies_are_kept():
    assert error_message(b"Internal Server Error") == "Internal Server Error"


@pytest.mark.parametrize(
    "prompt,max_tokens,context,max_input,expected",
    [
        (100, 1000, None, None, (1000, None)),  # nothing known: send as asked
        (100, 1000, 4096, None, (1000, None)),
        (3000, 2000, 4096, None, (1095, None)),  # reduced to fit: 3000 + 1095 = 4095 < 4096
        (4089, 10, 4096, None, (6, None)),  # last length the scheduler accepts (< 4096 - 6)
        (4090, 10, 4096, None, (None, "prompt has 4090 tokens; the server accepts fewer than 4090")),
        (5000, 10, 4096, None, (None, "prompt has 5000 tokens; the server accepts fewer than 4090")),
        (500, 10, 4096, 400, (None, "prompt has 500 tokens; the server accepts fewer than 400")),
    ],
)
def test_max_new_tokens_is_fitted_under_the_context(prompt, max_tokens, context, max_input, expected):
    assert fit_max_new_tokens(prompt, max_tokens, context, max_input) == expected


# ---------------------------------------------------------------------------------------------
# SpreadTransport: httpx's transport as pools of a few connections each


class Body(httpx.AsyncByteStream):
    def __init__(self, data: bytes):
        self.data = data

    async def __aiter__(self):
        yield self.data


def spread_with_held_pools(connections: int, per_pool: int):
    """A SpreadTransport whose pools answer only once ``release`` is set; ``seen`` lists the pool
    each request went to, and a request to /fail raises httpx's ConnectError."""
    transport = SpreadTransport(connections, per_pool)
    release, seen = asyncio.Event(), []
    for index, pool in enumerate(transport._pools):

        async def handle(request: httpx.Request, index: int = index) -> httpx.Response:
            seen.append(index)
            await release.wait()
            if request.url.path == "/fail":
                raise httpx.ConnectError("refused")
            return httpx.Response(200, stream=Body(b"ok"))  # a body still to read, as a socket's

        pool.handle_async_request = handle
    return transport, release, seen


def test_the_spread_transport_gives_each_pool_at_most_its_share_and_frees_it_when_a_body_is_read():
    async def scenario() -> None:
        transport, release, seen = spread_with_held_pools(40, 8)
        assert transport.pools == 5
        async with httpx.AsyncClient(transport=transport) as client:
            tasks = [asyncio.create_task(client.get("http://x/")) for _ in range(40)]
            for _ in range(1000):
                if len(seen) == 40:
                    break
                await asyncio.sleep(0)
            assert Counter(seen) == {pool: 8 for pool in range(5)}
            release.set()
            assert [r.content for r in await asyncio.gather(*tasks)] == [b"ok"] * 40
            assert transport._open == [0] * 5

    asyncio.run(scenario())


def test_a_failed_request_frees_its_pool_slot_and_keeps_httpxs_exception():
    async def scenario() -> None:
        transport, release, _ = spread_with_held_pools(4, 2)
        release.set()
        async with httpx.AsyncClient(transport=transport) as client:
            for _ in range(3):
                with pytest.raises(httpx.ConnectError):
                    await client.get("http://x/fail")
            assert transport._open == [0, 0]

    asyncio.run(scenario())


def test_a_response_read_in_full_by_the_transport_frees_its_slot_at_once():
    async def scenario() -> None:
        transport = SpreadTransport(2, 1)
        for pool in transport._pools:

            async def handle(request: httpx.Request) -> httpx.Response:
                return httpx.Response(200, content=b"ok")  # read at construction

            pool.handle_async_request = handle
        async with httpx.AsyncClient(transport=transport) as client:
            assert (await client.get("http://x/")).content == b"ok"
            assert transport._open == [0, 0]

    asyncio.run(scenario())


def test_abort_posts_the_rid_to_abort_request_and_never_raises():
    seen: list[tuple[str, bytes]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.content))
        if request.content == b'{"rid":"down"}':
            raise httpx.ConnectError("refused")
        return httpx.Response(200)

    async def scenario() -> tuple[bool, bool]:
        client = SGLangClient("http://x", None, 4, 60.0, transport=httpx.MockTransport(handle))
        try:
            return await client.abort("synthgen-1"), await client.abort("down")
        finally:
            await client.aclose()

    assert asyncio.run(scenario()) == (True, False)
    assert seen == [("/abort_request", b'{"rid":"synthgen-1"}'), ("/abort_request", b'{"rid":"down"}')]
