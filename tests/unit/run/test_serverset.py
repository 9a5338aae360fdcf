"""run/serverset.py over httpx.MockTransport servers: a server out and back in, requests moved, loads
kept per server and summed, the servers' answers compared."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from synthgen.run.concurrency import AutoConcurrency, InFlightLimit, LoadMonitor
from synthgen.run.servers import choose
from synthgen.run.serverset import ServerOut, ServerSet
from synthgen.server.client import SGLangClient, Transient, build_payload
from synthgen.server.discovery import ServersDisagree

ANSWER = {"text": "hi", "output_ids": [5, 6], "meta_info": {"finish_reason": {"type": "stop"}, "prompt_tokens": 2}}


class Server:
    """One mock server: answers while ``up``, refuses connections otherwise."""

    def __init__(self, url: str, model: str = "m", running: int | None = 0):
        self.url, self.model, self.running = url, model, running
        self.up = True
        self.generated = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if not self.up:
            raise httpx.ConnectError("refused", request=request)
        path = request.url.path
        if path == "/generate":
            self.generated += 1
            return httpx.Response(200, json=ANSWER)
        if path == "/health":
            return httpx.Response(200)
        if path == "/model_info":
            return httpx.Response(200, json={"model_path": self.model, "tokenizer_path": self.model})
        if path == "/v1/loads" and self.running is not None:
            return httpx.Response(200, json={"loads": [{"num_running_reqs": self.running, "num_waiting_reqs": 1}]})
        return httpx.Response(404)

    def client(self) -> SGLangClient:
        return SGLangClient(self.url, None, 4, 60.0, transport=httpx.MockTransport(self))


def scenario(servers: list[Server], body):
    said: list[str] = []

    async def main():
        group = ServerSet([s.client() for s in servers], said.append)
        try:
            return await body(group)
        finally:
            await group.aclose()

    return asyncio.run(main()), said


def payload() -> dict:
    return build_payload([1, 2], 8, {}, rid="r1")


def test_a_dead_server_is_taken_out_and_its_request_raises_server_out_to_be_sent_elsewhere():
    a, b = Server("http://a"), Server("http://b")
    a.up = False

    async def body(group: ServerSet):
        with pytest.raises(ServerOut) as caught:
            await group.generate(payload())
        assert caught.value.outage
        gens = [await group.generate(payload()) for _ in range(3)]
        return [gen.worker for gen in gens], group.slots[0].moved

    (workers, moved), said = scenario([a, b], body)
    assert workers == ["http://b"] * 3 and moved == 1
    assert said[0].startswith("server http://a is out (ConnectError: refused); its requests go to the other 1 server")


def test_with_every_server_out_the_failure_is_the_plain_outage_and_health_brings_one_back():
    a, b = Server("http://a"), Server("http://b")
    a.up = b.up = False

    async def body(group: ServerSet):
        with pytest.raises(ServerOut):  # b is still in (as far as anyone knows)
            await group.generate(payload())
        for _ in range(2):  # b fails too; then no server is in
            with pytest.raises(Transient) as caught:
                await group.generate(payload())
            assert not isinstance(caught.value, ServerOut) and caught.value.outage
        assert not await group.healthy()
        b.up = True
        assert await group.healthy()
        return (await group.generate(payload())).worker

    worker, said = scenario([a, b], body)
    assert worker == "http://b"
    assert any(line.startswith("server http://b is back after") for line in said)


def test_a_server_back_with_another_model_stays_out():
    a, b = Server("http://a"), Server("http://b")

    async def body(group: ServerSet):
        await group.model_info()
        b.up = False
        with pytest.raises(ServerOut):
            await group.generate(build_payload([1], 8, {}, rid="r2"), routing_key=key_for(group, 1))
        b.up, b.model = True, "another"
        await group.healthy()
        return group.slots[1].up

    up, said = scenario([a, b], body)
    assert up is False
    assert any("answers again but has changed" in line and "it stays out" in line for line in said)


def key_for(group: ServerSet, index: int) -> str:
    """A routing key pinned to server ``index``."""
    return next(k for k in (f"k{i}" for i in range(100)) if choose(group.slots, k) == index)


def test_servers_serving_different_models_are_one_error_naming_both():
    a, b = Server("http://a"), Server("http://b", model="other")

    async def body(group: ServerSet):
        with pytest.raises(ServersDisagree) as caught:
            await group.model_info()
        return str(caught.value)

    message, _ = scenario([a, b], body)
    assert message.startswith("the servers differ in the model they serve: http://a has ('m', None, 'm', None), ")
    assert "http://b has ('other', None, 'other', None)" in message


def test_loads_are_kept_per_server_and_summed_only_when_every_server_reports():
    a, b = Server("http://a", running=5), Server("http://b", running=2)

    async def body(group: ServerSet):
        both = await group.loads()
        b.running = None  # an older server: no /v1/loads
        one = await group.loads()
        return both, one, [slot.reported for slot in group.slots]

    (both, one, reported), _ = scenario([a, b], body)
    assert both is not None and len(both["loads"]) == 2
    assert one is None and reported == [6, None]


def test_a_server_down_at_the_start_is_out_and_the_run_starts_on_the_others():
    a, b = Server("http://a"), Server("http://b")
    a.up = False

    async def body(group: ServerSet):
        info = await group.model_info()
        return info["model_path"], [slot.up for slot in group.slots], (await group.generate(payload())).worker

    (model, up, worker), said = scenario([a, b], body)
    assert model == "m" and up == [False, True] and worker == "http://b"
    assert said[0].startswith("server http://a is out (cannot reach the SGLang server at http://a")


def test_an_abort_goes_to_the_server_the_request_is_on():
    a, b = Server("http://a"), Server("http://b")
    aborted: list[str] = []

    def on_b(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/abort_request":
            aborted.append(request.content.decode())
            return httpx.Response(200)
        return b(request)

    async def body(group: ServerSet):
        await group.clients[1].aclose()
        group.clients[1] = SGLangClient("http://b", None, 4, 60.0, transport=httpx.MockTransport(on_b))
        group._rids["r9"] = 1  # a request in flight on b
        return await group.abort("r9"), await group.abort("unknown")

    (known, unknown), _ = scenario([a, b], body)
    assert known is True and unknown is False and aborted == ['{"rid":"r9"}']


def test_concurrency_auto_reads_the_sum_of_the_servers_loads():
    a, b = Server("http://a", running=5), Server("http://b", running=2)

    async def body(group: ServerSet):
        monitor = LoadMonitor(group, InFlightLimit(8), AutoConcurrency(initial=8))
        load = await monitor.poll_once()
        return load, monitor.source

    (load, source), _ = scenario([a, b], body)
    assert load is not None and (load.running, load.waiting, load.ranks) == (7, 2, 2) and source == "server"
