"""The simulator's streaming, abort, disconnect and continuation protocol, over real HTTP, against
docs/sglang_api.md §10 (SGLang 0.5.23 as measured), and the client's streaming against it.

Waits poll ``/sim/stats`` or the stream itself and end by an explicit ``/abort_request`` or
disconnect; no outcome depends on timing.
"""

from __future__ import annotations

import asyncio
import json
import socket
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from simharness import Sim, start_sim, wait_until
from tiny_tokenizers import chat_ids

from synthgen.run.loopguard import LoopGuard
from synthgen.server.client import SGLangClient, Transient

ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}


@pytest.fixture(scope="module")
def sims(tokenizers):
    """Cumulative (per-request engine), incremental, and the scheduler engine."""
    directory = tokenizers["chatml"]
    with (
        start_sim(directory, "--disconnect-check", "0.05") as plain,
        start_sim(directory, "--incremental-streaming-output") as incremental,
        start_sim(directory, "--max-total-tokens", "20000", "--stream-interval", "3") as scheduler,
    ):
        yield {"cumulative": plain, "incremental": incremental, "scheduler": scheduler}


@pytest.fixture
def sim(sims) -> Sim:
    sims["cumulative"].reset()
    return sims["cumulative"]


@pytest.fixture
def background():
    with ThreadPoolExecutor(max_workers=2) as pool:
        yield pool


def events(response: httpx.Response) -> list:
    """The decoded ``data:`` events of a whole SSE body, ``[DONE]`` as the string."""
    out = []
    for block in response.text.split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def plain(sim: Sim, payload: dict) -> dict:
    response = sim.client.post("/generate", json=payload)
    assert response.status_code == 200, response.text
    return response.json()


def streamed(sim: Sim, payload: dict) -> tuple[httpx.Response, list]:
    response = sim.client.post("/generate", json={**payload, "stream": True})
    return response, events(response)


def test_cumulative_chunks_come_at_the_first_token_then_every_interval_and_end_with_done(sim, tokenizers):
    payload = {"input_ids": chat_ids(tokenizers["chatml"]), "sampling_params": {"max_new_tokens": 20}}
    whole = plain(sim, payload)
    response, chunks = streamed(sim, {**payload, "sampling_params": {"max_new_tokens": 20, "stream_interval": 4}})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert chunks[-1] == "[DONE]"
    items = chunks[:-1]
    assert [len(item["output_ids"]) for item in items] == [1, 5, 9, 13, 17, 20]  # docs/sglang_api.md §10
    assert [item["meta_info"]["completion_tokens"] for item in items] == [1, 5, 9, 13, 17, 20]
    assert [item["meta_info"]["finish_reason"] for item in items[:-1]] == [None] * 5
    assert all(item["output_ids"] == whole["output_ids"][: len(item["output_ids"])] for item in items)
    assert (items[-1]["text"], items[-1]["meta_info"]["finish_reason"]) == (
        whole["text"],
        whole["meta_info"]["finish_reason"],
    )


def test_the_servers_stream_interval_applies_when_the_request_sets_none(sim, tokenizers):
    payload = {"input_ids": chat_ids(tokenizers["chatml"]), "sampling_params": {"max_new_tokens": 6}}
    _, chunks = streamed(sim, payload)
    assert [len(item["output_ids"]) for item in chunks[:-1]] == [1, 2, 3, 4, 5, 6]


def test_incremental_chunks_carry_deltas_that_add_up_to_the_plain_answer(sims, tokenizers):
    sim = sims["incremental"]
    payload = {"input_ids": chat_ids(tokenizers["chatml"]), "sampling_params": {"max_new_tokens": 30}}
    whole = plain(sim, payload)
    _, chunks = streamed(sim, {**payload, "sampling_params": {"max_new_tokens": 30, "stream_interval": 8}})
    items, total = chunks[:-1], len(whole["output_ids"])
    assert 25 < total <= 30
    assert [len(item["output_ids"]) for item in items] == [1, 8, 8, 8, total - 25]
    assert [item["meta_info"]["completion_tokens"] for item in items] == [1, 9, 17, 25, total]
    assert [i for item in items for i in item["output_ids"]] == whole["output_ids"]
    assert "".join(item["text"] for item in items) == whole["text"]


def test_a_check_made_after_the_stream_began_is_a_200_with_an_error_event(sim):
    response, chunks = streamed(sim, {"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 5000}})
    assert response.status_code == 200
    assert chunks[0]["error"]["code"] == 400 and "maximum context length" in chunks[0]["error"]["message"]
    assert chunks[1:] == ["[DONE]"]


def test_the_request_contract_is_still_checked_before_the_stream(sim):
    response = sim.client.post("/generate", json={"input_ids": [1], "stream": True, "sampling_params": {"n": "2"}})
    assert response.status_code == 400 and response.json() == {"error": 'invalid type: string "2", expected i64'}


@pytest.mark.parametrize("engine", ["cumulative", "scheduler"])
def test_abort_ends_a_stream_with_a_last_chunk_holding_the_output_so_far(sims, tokenizers, background, engine):
    sim = sims[engine]
    sim.reset()
    sim.configure(token_delay=0.05)
    payload = {
        "input_ids": chat_ids(tokenizers["chatml"], "write [sim:long=3000]"),
        "rid": f"stream-{engine}",
        "stream": True,
        "sampling_params": {"max_new_tokens": 3000, "stream_interval": 2},
    }
    with sim.client.stream("POST", "/generate", json=payload) as response:
        lines = response.iter_lines()
        first = json.loads(next(line for line in lines if line.startswith("data: "))[6:])
        assert first["output_ids"] and first["meta_info"]["finish_reason"] is None
        assert sim.client.post("/abort_request", json={"rid": f"stream-{engine}"}).status_code == 200
        rest = [line[6:] for line in lines if line.startswith("data: ")]
    sim.configure(token_delay=0)
    last = json.loads(rest[-2])
    assert rest[-1] == "[DONE]"
    assert last["meta_info"]["finish_reason"] == ABORTED
    assert 0 < len(last["output_ids"]) < 3000 and last["meta_info"]["completion_tokens"] == len(last["output_ids"])
    assert sim.stats()["by_outcome"] == {"aborted": 1}


def read_until_first_chunk(sim: Sim, payload: dict) -> socket.socket:
    """Send ``payload`` on a raw socket and return it once the first chunk has arrived."""
    sock = socket.create_connection(("127.0.0.1", sim.port))
    body = json.dumps(payload).encode()
    sock.sendall(
        b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    seen = b""
    while b"data: " not in seen:
        seen += sock.recv(65536)
    return sock


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "plain"])
def test_a_client_that_disconnects_aborts_its_request(sim, tokenizers, stream):
    sim.configure(token_delay=0.05)
    ids = chat_ids(tokenizers["chatml"], "write [sim:long=3000]")
    payload = {"input_ids": ids, "stream": stream, "sampling_params": {"max_new_tokens": 3000}}
    if stream:
        sock = read_until_first_chunk(sim, payload)
    else:
        sock = socket.create_connection(("127.0.0.1", sim.port))
        body = json.dumps(payload).encode()
        sock.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        wait_until(lambda: sim.stats()["in_flight"] == 1, what="in flight")
    sock.close()
    wait_until(lambda: sim.stats()["by_outcome"] == {"disconnected": 1}, what="the request aborted")
    sim.configure(token_delay=0)
    stats = sim.stats()
    assert stats["in_flight"] == 0 and 0 < stats["tokens_generated"] < 3000


def test_a_continuation_from_prompt_plus_partial_ids_equals_the_uninterrupted_answer(sim, tokenizers):
    ids = chat_ids(tokenizers["chatml"], "write [sim:long=300]")
    whole = plain(sim, {"input_ids": ids, "sampling_params": {"max_new_tokens": 400}})
    assert len(whole["output_ids"]) == 300 and whole["meta_info"]["finish_reason"]["type"] == "stop"
    for cut in (1, 2, 150, 299):
        partial = whole["output_ids"][:cut]
        rest = plain(sim, {"input_ids": ids + partial, "sampling_params": {"max_new_tokens": 400 - cut}})
        assert partial + rest["output_ids"] == whole["output_ids"], cut


def test_a_looping_prompt_loops_and_a_long_one_does_not_for_the_loop_guard(sim, tokenizers):
    def answer(user: str) -> dict:
        payload = {"input_ids": chat_ids(tokenizers["chatml"], user), "sampling_params": {"max_new_tokens": 3000}}
        return plain(sim, payload)

    looping, long = answer("think [sim:loop]"), answer("write [sim:long=2500]")
    assert looping["meta_info"]["finish_reason"] == {"type": "length", "length": 3000}
    assert looping["text"].count("Wait, let me check that step again.") > 100
    assert LoopGuard(3000).check(looping["output_ids"]) is not None
    assert len(long["output_ids"]) == 2500 and long["meta_info"]["finish_reason"]["type"] == "stop"
    guard, ids = LoopGuard(min_tokens=0), long["output_ids"]
    assert all(guard.check(ids[:end]) is None for end in range(64, len(ids) + 1, 64))


def run_client(sim: Sim, payload: dict, interval: int, abort_after: int | None = None):
    """SGLangClient.generate with progress; with ``abort_after`` chunks, /abort_request by rid."""
    seen: list[list[int]] = []

    async def scenario():
        client = SGLangClient(sim.url, None, 4, 60.0)

        async def progress(ids: list[int]) -> None:
            seen.append(list(ids))
            if abort_after is not None and len(seen) == abort_after:
                assert await client.abort(payload["rid"])

        try:
            return await client.generate(payload, progress, stream_interval=interval), client
        except Transient as exc:
            return exc, client
        finally:
            await client.aclose()

    result, client = asyncio.run(scenario())
    return result, seen, client


@pytest.mark.parametrize("mode", ["cumulative", "incremental", "scheduler"])
def test_the_client_streams_every_mode_to_the_plain_answer(sims, tokenizers, mode):
    sim = sims[mode]
    payload = {"input_ids": chat_ids(tokenizers["chatml"], "write [sim:long=100]"), "sampling_params": {}}
    payload["sampling_params"]["max_new_tokens"] = 200
    whole = plain(sim, payload)
    gen, seen, client = run_client(sim, payload, interval=16)
    assert (gen.output_ids, gen.text, gen.finish_type) == (whole["output_ids"], whole["text"], "stop")
    assert [len(ids) for ids in seen] == [1, 17, 33, 49, 65, 81, 97]
    assert client.stream_interval_honoured is True


def test_the_client_gets_the_partial_ids_of_a_stream_it_aborts(sim, tokenizers):
    sim.configure(token_delay=0.01)
    ids = chat_ids(tokenizers["chatml"], "write [sim:long=3000]")
    payload = {"input_ids": ids, "rid": "client-abort", "sampling_params": {"max_new_tokens": 3000}}
    exc, seen, _ = run_client(sim, payload, interval=4, abort_after=2)
    sim.configure(token_delay=0)
    assert isinstance(exc, Transient) and exc.kind == "abort"
    whole = plain(sim, payload)["output_ids"]
    assert exc.partial is not None and len(seen[-1]) <= len(exc.partial) < 3000
    assert exc.partial == whole[: len(exc.partial)]
