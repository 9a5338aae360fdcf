"""Streaming, abort and continuation against the real SGLang 0.5.23 server on this CPU (docs/sglang_api.md
§10): chunks are cumulative at the asked interval, an abort answers 200 with the output so far, and
a continuation from prompt + partial ids under greedy sampling is the uninterrupted answer.

The tiny model writes ~29 tokens and its EOS; ``ignore_eos`` makes it write as many as asked (15 to
well over 100 tokens a second here, by the machine's load), so the answers are kept short, and a
request to be aborted asks for nearly the whole context, so it is still running when the abort
arrives whatever the speed. Waits poll the server; none decides an outcome by its length.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from simharness import wait_until

from synthgen.server.client import SGLangClient, Transient

pytestmark = pytest.mark.real_sglang

PROMPT = [1, 872, 198, 100, 201, 300, 2, 198, 1, 77, 198]  # <|im_start|>user ... <|im_start|>assistant
GREEDY = {"temperature": 0, "ignore_eos": True}


def plain(server, max_new: int, input_ids: list[int] = PROMPT) -> dict:
    response = server.post(
        "/generate", {"input_ids": input_ids, "sampling_params": {**GREEDY, "max_new_tokens": max_new}}
    )
    assert response.status_code == 200, response.text
    return response.json()


def running(server) -> int:
    return sum(load["num_running_reqs"] for load in server.get("/v1/loads").json()["loads"])


def test_streamed_chunks_are_cumulative_and_come_at_the_asked_interval(real_server):
    whole = plain(real_server, 20)["output_ids"]
    payload = {
        "input_ids": PROMPT,
        "stream": True,
        "sampling_params": {**GREEDY, "max_new_tokens": 20, "stream_interval": 4},
    }
    with httpx.stream("POST", real_server.url + "/generate", json=payload, timeout=120, trust_env=False) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(item) for item in data[:-1]]
    assert [len(chunk["output_ids"]) for chunk in chunks] == [1, 5, 9, 13, 17, 20]
    assert all(chunk["output_ids"] == whole[: len(chunk["output_ids"])] for chunk in chunks)
    assert [chunk["meta_info"]["finish_reason"] for chunk in chunks[:-1]] == [None] * 5


def test_an_aborted_stream_returns_its_partial_and_the_continuation_is_the_uninterrupted_answer(real_server):
    # Room for far more tokens than the abort can take to arrive, so the stream never ends by itself
    # first (on an idle machine the tiny model writes 48 tokens before an abort is through); the
    # uninterrupted answer to compare with is asked for afterwards, as long as the partial and a rest.
    total, rest_len = 2000, 16
    seen: list[list[int]] = []

    async def scenario():
        client = SGLangClient(real_server.url, None, 4, 120.0)

        async def progress(ids: list[int]) -> None:
            seen.append(list(ids))
            if len(seen) == 2:
                assert await client.abort("real-stream-abort")

        payload = {
            "input_ids": PROMPT,
            "rid": "real-stream-abort",
            "sampling_params": {**GREEDY, "max_new_tokens": total},
        }
        try:
            with pytest.raises(Transient) as caught:
                await client.generate(payload, progress, stream_interval=4)
            return caught.value, client.stream_interval_honoured
        finally:
            await client.aclose()

    exc, honoured = asyncio.run(scenario())
    assert exc.kind == "abort" and "Aborted" in exc.message
    partial = exc.partial
    # The abort is asked at the second chunk; the server may send a chunk more before it takes effect.
    lengths = [len(ids) for ids in seen]
    assert lengths[:2] == [1, 5] and lengths == [1 + 4 * i for i in range(len(lengths))]
    assert partial is not None and lengths[-1] <= len(partial) < total
    assert real_server.post("/flush_cache", {}).status_code == 200  # each answer below from its own prefill
    whole = plain(real_server, len(partial) + rest_len)["output_ids"]
    assert partial == whole[: len(partial)]
    assert honoured is True  # the second chunk came at the interval, not a token after the first
    # Without the prefix cache the continuation recomputes the partial's KV in one prefill.
    assert real_server.post("/flush_cache", {}).status_code == 200
    rest = plain(real_server, rest_len, PROMPT + partial)
    assert partial + rest["output_ids"] == whole
    assert rest["meta_info"]["finish_reason"] == {"type": "length", "length": rest_len}


def test_an_aborted_plain_request_answers_200_with_the_output_so_far(real_server):
    async def scenario():
        client = SGLangClient(real_server.url, None, 4, 120.0)
        payload = {
            "input_ids": PROMPT,
            "rid": "real-plain-abort",
            "sampling_params": {**GREEDY, "max_new_tokens": 1500},
        }
        try:
            task = asyncio.create_task(client.generate(payload))
            while not await asyncio.to_thread(running, real_server):
                await asyncio.sleep(0.05)
            assert await client.abort("real-plain-abort")
            with pytest.raises(Transient) as caught:
                await task
            return caught.value
        finally:
            await client.aclose()

    exc = asyncio.run(scenario())
    assert exc.kind == "abort" and exc.partial and len(exc.partial) < 1500
    assert exc.partial == plain(real_server, len(exc.partial))["output_ids"]


def test_a_client_that_leaves_a_stream_ends_its_request_on_the_server(real_server):
    payload = {"input_ids": PROMPT, "stream": True, "sampling_params": {**GREEDY, "max_new_tokens": 1500}}
    with httpx.stream("POST", real_server.url + "/generate", json=payload, timeout=120, trust_env=False) as response:
        lines = response.iter_lines()  # kept: a generator dropped early closes the connection
        assert next(lines).startswith("data: ")
        wait_until(lambda: running(real_server) == 1, timeout=60, what="the server to report the request")
    # 1,500 tokens would take minutes; the abort on disconnect ends it at once.
    wait_until(lambda: running(real_server) == 0, timeout=60, what="the server to drop the request")
