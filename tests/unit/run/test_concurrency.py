"""Load-driven concurrency: parsing load reports, the movable in-flight limit, the controller on
scripted loads (the monitor against the simulator's scheduler: tests/e2e/test_concurrency_on_simulator.py)."""

from __future__ import annotations

import asyncio
import contextlib
import io

import httpx
import orjson
import pytest
from tokenizers import Tokenizer

from synthgen.config import RunConfig
from synthgen.run.concurrency import (
    AutoConcurrency,
    InFlightLimit,
    LoadMonitor,
    ServerLoad,
    interleave,
    parse_loads,
)
from synthgen.run.progress import Progress
from synthgen.run.runner import Runner
from synthgen.server.client import SGLangClient
from synthgen.server.gateways.sglang_router import worker_urls as router_worker_urls


def rank(
    running: int,
    waiting: int,
    usage: float = 0.1,
    pool: int = 10000,
    max_running: int = 256,
    throughput: float = 100.0,
    retracted: int = 0,
    dp_rank: int = 0,
) -> dict:
    """One /v1/loads entry with the keys SGLang 0.5.23 reports (core + queues)."""
    return {
        "timestamp": 1.0, "dp_rank": dp_rank, "num_running_reqs": running, "num_waiting_reqs": waiting,
        "num_waiting_uncached_tokens": 0, "num_used_tokens": int(usage * pool), "num_total_tokens": 0,
        "num_active_tokens": 0, "num_prealloc_ready_tokens": 0, "max_total_num_tokens": pool,
        "max_running_requests": max_running, "token_usage": usage, "gen_throughput": throughput,
        "cache_hit_rate": 0.0, "utilization": 0.0, "total_prefill_uncached_tokens": 0,
        "total_prefill_busy_us": 0, "decode_moments": None,
        "queues": {"waiting": waiting, "grammar": 0, "paused": 0, "retracted": retracted, "prealloc_ready": 0},
    }  # fmt: skip


def body(*ranks: dict) -> dict:
    return {
        "timestamp": "2026-01-01T00:00:00+00:00",
        "version": "0.5.23",
        "accelerator": None,
        "num_accelerators": 1,
        "loads": list(ranks),
    }


def load(
    running: int,
    waiting: int,
    usage: float = 0.1,
    max_running: int | None = 256,
    retracted: int = 0,
    pool: int | None = 10000,
) -> ServerLoad:
    return ServerLoad(
        running=running,
        waiting=waiting,
        token_usage=usage,
        max_total_tokens=pool,
        max_running=max_running,
        gen_throughput=0.0,
        retracted=retracted,
        ranks=1,
    )


# ------------------------------------------------------------------------------ parse_loads
def test_one_rank_report_is_read_as_the_server_load():
    assert parse_loads(body(rank(12, 3, usage=0.25, throughput=512.5, retracted=2))) == ServerLoad(
        running=12,
        waiting=3,
        token_usage=0.25,
        max_total_tokens=10000,
        max_running=256,
        gen_throughput=512.5,
        retracted=2,
        ranks=1,
    )


def test_data_parallel_ranks_are_summed_and_kv_usage_is_weighted_by_pool_size():
    report = parse_loads(
        body(
            rank(10, 1, usage=0.5, pool=1000, max_running=8),
            rank(30, 5, usage=0.1, pool=3000, max_running=8, dp_rank=1),
        )
    )
    assert report is not None
    assert (report.running, report.waiting, report.max_total_tokens, report.max_running, report.ranks) == (
        40,
        6,
        4000,
        16,
        2,
    )
    assert report.token_usage == pytest.approx((500 + 300) / 4000)
    assert report.gen_throughput == 200.0


def test_router_worker_reports_given_as_a_list_are_summed_like_ranks():
    report = parse_loads([body(rank(4, 0)), body(rank(6, 2))])
    assert report is not None and (report.running, report.waiting, report.ranks) == (10, 2, 2)


def test_a_report_with_only_core_keys_has_no_retractions():
    entry = rank(5, 1)
    del entry["queues"]
    report = parse_loads(body(entry))
    assert report is not None and report.retracted == 0


@pytest.mark.parametrize("answer", [
    None,
    {"detail": "Not Found"},
    {"workers": [{"worker": "http://127.0.0.1:1", "load": -1}]},  # sglang-router 0.3.2's /get_loads
    body(),
    {"loads": "many"},
    body({"num_running_reqs": 3}),
    body({"num_running_reqs": True, "num_waiting_reqs": 0}),
    body({"num_running_reqs": -1, "num_waiting_reqs": 0}),
    body(rank(1, 0), "rank"),
    [body(rank(1, 0)), None],
])  # fmt: skip
def test_anything_but_a_complete_load_report_reads_as_no_report(answer):
    assert parse_loads(answer) is None


def test_missing_pool_and_limit_sizes_read_as_unknown():
    entry = rank(5, 1, usage=0.3)
    del entry["max_total_num_tokens"], entry["max_running_requests"]
    report = parse_loads(body(entry))
    assert report is not None
    assert (report.max_total_tokens, report.max_running, report.token_usage) == (None, None, 0.3)


def test_router_workers_list_gives_the_worker_urls_and_leaves_out_prefill_workers():
    # The shape sglang-router 0.3.2 answered at GET /workers (trimmed).
    answer = {"workers": [
        {"id": "a", "url": "http://127.0.0.1:52689", "worker_type": "regular", "is_healthy": True, "load": 0},
        {"id": "b", "url": "http://127.0.0.1:40641/", "worker_type": "regular", "is_healthy": True, "load": 0},
        {"id": "c", "url": "http://10.0.0.1:8000", "worker_type": "prefill"},
        {"id": "d", "url": "grpc://10.0.0.2:8000", "worker_type": "regular"},
    ], "total": 4}  # fmt: skip
    assert router_worker_urls(answer) == ["http://127.0.0.1:52689", "http://127.0.0.1:40641"]
    assert router_worker_urls(None) == [] and router_worker_urls({"urls": ["x"]}) == []


# ------------------------------------------------------------------------------ the controller
def run_against_capacity(controller: AutoConcurrency, capacities: list[int]) -> list[int]:
    """A client that always fills its limit, against a server that runs at most ``capacity``:
    running = min(capacity, target), the rest waits. Returns the target after each poll."""
    targets = []
    for capacity in capacities:
        running = min(capacity, controller.target)
        waiting = controller.target - running
        room = running < capacity
        targets.append(controller.update(load(running, waiting, usage=0.5 if room else 0.95), held_back=True))
    return targets


def test_a_starved_server_makes_the_target_grow_multiplicatively():
    controller = AutoConcurrency(initial=16)
    targets = [controller.update(load(running=t, waiting=0), held_back=True) for t in (16, 28, 43)]
    assert targets == [28, 43, 62]  # 16 * 1.25 + 8, ...
    assert controller.state == "starved"


def test_a_starved_server_does_not_grow_the_target_when_the_client_is_not_held_back():
    controller = AutoConcurrency(initial=16)
    assert controller.update(load(running=5, waiting=0), held_back=False) == 16


def test_a_deep_queue_makes_the_target_shrink_towards_running_plus_a_margin():
    controller = AutoConcurrency(initial=200)
    targets = [controller.update(load(running=40, waiting=160), held_back=True) for _ in range(30)]
    assert targets[0] == 200 - (200 - 48) // 4  # a quarter of the excess over 40 + 8
    assert all(later <= earlier for earlier, later in zip(targets, targets[1:], strict=False))
    assert targets[-1] == 48 and controller.state == "queued"


def test_retractions_shrink_the_target_even_with_a_short_queue():
    controller = AutoConcurrency(initial=100)
    for _ in range(40):
        controller.update(load(running=80, waiting=5, retracted=3), held_back=True)
    assert controller.target == 88 and controller.state == "retracting"


def test_a_thin_queue_at_the_servers_running_limit_raises_the_target_to_running_plus_margin():
    controller = AutoConcurrency(initial=64)
    controller.update(load(running=64, waiting=0, max_running=64), held_back=True)
    assert controller.target == 77 and controller.state == "thin"  # 64 + 64 / 5


def test_the_target_stays_within_one_and_max_concurrency():
    controller = AutoConcurrency(max_concurrency=100, initial=90)
    for _ in range(5):
        controller.update(load(running=90, waiting=0), held_back=True)
    assert controller.target == 100
    small = AutoConcurrency(initial=0, min_margin=0)
    assert small.target == 1
    small.update(load(running=0, waiting=50), held_back=True)
    assert small.target == 1
    with pytest.raises(ValueError):
        AutoConcurrency(max_concurrency=0)


@pytest.mark.parametrize("capacity", [12, 100, 400])
def test_the_target_converges_to_the_capacity_plus_a_margin_and_then_holds(capacity):
    controller = AutoConcurrency(initial=16)
    targets = run_against_capacity(controller, [capacity] * 60)
    settled = targets[-20:]
    assert len(set(settled)) == 1, targets
    margin = max(8, -(-capacity // 8))
    assert capacity < settled[0] <= capacity + 2 * margin, targets  # inside the dead band
    assert max(targets) <= 1.25 * capacity + 16, targets


def test_a_steady_load_with_a_noisy_queue_does_not_move_the_target():
    controller = AutoConcurrency(initial=130)  # 108 running + a margin of 108 / 5
    noise = [12, 5, 30, 9, 24, 0, 11, 32, 7, 13] * 5
    targets = [controller.update(load(running=108, waiting=w, usage=0.95), held_back=True) for w in noise]
    assert set(targets) == {130}, targets


def test_a_momentary_dip_in_running_does_not_shrink_the_target():
    controller = AutoConcurrency(initial=130)
    runs = [108, 108, 60, 108, 108]
    targets = [controller.update(load(running=r, waiting=130 - r, usage=0.95), held_back=True) for r in runs]
    assert set(targets) == {130}, targets


def test_an_empty_queue_while_the_clients_requests_are_still_in_transit_does_not_grow_the_target():
    controller = AutoConcurrency(initial=64)
    assert controller.update(load(running=0, waiting=0), held_back=True, in_flight=64) == 64
    assert controller.update(load(running=60, waiting=0), held_back=True, in_flight=64) == 88


def test_capacity_that_drops_8x_and_recovers_is_followed_both_ways():
    controller = AutoConcurrency(initial=16)
    targets = run_against_capacity(controller, [240] * 30 + [30] * 40 + [240] * 30)
    # Each settles inside its dead band: capacity + up to twice the margin (30 at 240, 8 at 30).
    assert 240 < targets[29] <= 240 + 60
    assert 30 < targets[69] <= 30 + 16
    assert 240 < targets[-1] <= 240 + 60


def test_the_first_report_sizes_the_start_from_kv_and_the_expected_request_length():
    controller = AutoConcurrency(tokens_per_request=500)
    assert controller.start_target(load(0, 0, pool=40000, max_running=4096)) == 80
    assert controller.start_target(load(0, 0, pool=40000, max_running=20)) == 28  # the server's limit + margin
    assert AutoConcurrency().start_target(load(0, 0, pool=40000, max_running=4096)) == 16
    assert AutoConcurrency(initial=7, tokens_per_request=500).start_target(load(0, 0, pool=40000)) == 7


def test_without_a_load_report_the_target_stays_at_the_fallback():
    controller = AutoConcurrency()
    assert [controller.update(None, held_back=True) for _ in range(3)] == [64, 64, 64]
    assert controller.state == "no-load"


# ------------------------------------------------------------------------------ InFlightLimit
def test_acquire_waits_at_the_target_and_release_admits_the_next_in_order():
    async def scenario():
        limit = InFlightLimit(2)
        await limit.acquire()
        await limit.acquire()
        order: list[int] = []

        async def take(i: int) -> None:
            await limit.acquire()
            order.append(i)

        waiters = [asyncio.create_task(take(i)) for i in range(3)]
        await asyncio.sleep(0)
        assert (limit.in_use, limit.waiting, order) == (2, 3, [])
        limit.release()
        await asyncio.sleep(0)
        assert (limit.in_use, order) == (2, [0])
        limit.set_target(4)
        await asyncio.gather(*waiters)
        assert (limit.in_use, order, limit.peak_in_use) == (4, [0, 1, 2], 4)

    asyncio.run(scenario())


def test_lowering_the_target_cancels_nothing_and_admits_no_more_until_below_it():
    async def scenario():
        limit = InFlightLimit(4)
        for _ in range(4):
            await limit.acquire()
        limit.set_target(2)
        assert limit.in_use == 4
        waiter = asyncio.create_task(limit.acquire())
        limit.release()
        limit.release()
        await asyncio.sleep(0)
        assert not waiter.done() and limit.in_use == 2
        limit.release()
        await waiter
        assert limit.in_use == 2

    asyncio.run(scenario())


def test_a_cancelled_acquire_leaves_no_slot_taken():
    async def scenario():
        limit = InFlightLimit(1)
        await limit.acquire()
        waiter = asyncio.create_task(limit.acquire())
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        limit.release()
        assert (limit.in_use, limit.waiting) == (0, 0)
        async with limit:
            assert limit.in_use == 1
        assert limit.in_use == 0

    asyncio.run(scenario())


def test_held_back_reports_whether_the_limit_stopped_the_client_since_the_last_call():
    async def scenario():
        limit = InFlightLimit(1)
        assert not limit.held_back()
        await limit.acquire()
        assert limit.held_back()  # full now
        waiter = asyncio.create_task(limit.acquire())
        await asyncio.sleep(0)
        limit.release()
        await waiter
        limit.release()
        assert limit.held_back()  # an acquirer had to wait since the last call
        assert not limit.held_back()

    asyncio.run(scenario())


def test_release_without_acquire_is_an_error():
    with pytest.raises(RuntimeError):
        InFlightLimit(1).release()


# ------------------------------------------------------------------------------ LoadMonitor (scripted)
class ScriptedServer:
    """A LoadSource answering from a dict of path -> body (or a callable giving it)."""

    def __init__(self, answers: dict):
        self.answers = answers
        self.asked: list[str] = []

    async def loads(self, path: str = "/v1/loads") -> dict | None:
        self.asked.append(path)
        answer = self.answers.get(path)
        return answer() if callable(answer) else answer


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_without_any_load_endpoint_the_monitor_says_so_once_and_keeps_the_target():
    messages: list[str] = []
    limit = InFlightLimit(64)
    monitor = LoadMonitor(ScriptedServer({}), limit, AutoConcurrency(), on_message=messages.append)
    for _ in range(3):
        assert asyncio.run(monitor.poll_once()) is None
    assert limit.target == 64
    assert messages == [
        "the server reports no load (no /v1/loads, nor a router's /workers with reachable workers): "
        "keeping 64 requests in flight; pass --concurrency N to choose another number"
    ]
    assert monitor.status_text() == "server load unknown, target 64"
    assert monitor.summary_line() == "concurrency: no server load report; 64 in flight (fixed)"


def test_behind_a_router_the_monitor_sums_its_workers_loads():
    server = ScriptedServer({
        "/workers": {"workers": [{"url": "http://w1:1"}, {"url": "http://w2:2"}]},
        "http://w1:1/v1/loads": body(rank(3, 1, usage=0.2, pool=1000)),
        "http://w2:2/v1/loads": body(rank(5, 0, usage=0.4, pool=1000)),
    })  # fmt: skip
    monitor = LoadMonitor(server, InFlightLimit(8), AutoConcurrency(initial=8))
    report = asyncio.run(monitor.poll_once())
    assert report is not None and (report.running, report.waiting, report.ranks) == (8, 1, 2)
    assert report.token_usage == pytest.approx(0.3)
    assert monitor.source == "router workers"
    asyncio.run(monitor.poll_once())
    assert server.asked.count("/workers") == 1  # the worker list is kept while the workers answer


def test_status_text_shows_the_servers_queue_kv_rate_and_the_target():
    server = ScriptedServer({"/v1/loads": body(rank(120, 8, usage=0.83, throughput=4210.4, max_running=120))})
    limit = InFlightLimit(130)
    monitor = LoadMonitor(server, limit, AutoConcurrency(initial=130))
    asyncio.run(monitor.poll_once())
    assert monitor.status_text() == f"server 120 run / 8 wait, KV 83%, 4,210 tok/s, target {limit.target}"
    assert monitor.summary()["load_source"] == "server"


def test_a_server_starved_at_max_concurrency_for_a_minute_draws_one_warning():
    messages: list[str] = []
    clock = Clock()
    server = ScriptedServer({"/v1/loads": body(rank(32, 0, usage=0.2))})
    limit = InFlightLimit(32)
    monitor = LoadMonitor(
        server,
        limit,
        AutoConcurrency(max_concurrency=32, initial=32),
        on_message=messages.append,
        clock=clock,
        warn_after=60,
    )

    async def polls(count: int) -> None:
        for _ in range(count):
            for _ in range(limit.target - limit.in_use):
                await limit.acquire()
            await monitor.poll_once()
            clock.now += 10

    asyncio.run(polls(13))
    assert messages == ["the server has had room and almost nothing waiting for 60 s: raise --max-concurrency (now 32)"]
    assert monitor.summary()["starved_seconds"] == 120.0


def test_a_watching_monitor_leaves_a_fixed_target_alone_and_names_concurrency_in_its_warning():
    messages: list[str] = []
    clock = Clock()
    server = ScriptedServer({"/v1/loads": body(rank(16, 0, usage=0.2))})
    limit = InFlightLimit(16)
    monitor = LoadMonitor(
        server, limit, AutoConcurrency(initial=16), on_message=messages.append, clock=clock, warn_after=60, steer=False
    )

    async def polls(count: int) -> None:
        for _ in range(16):
            await limit.acquire()
        for _ in range(count):
            await monitor.poll_once()
            clock.now += 30

    asyncio.run(polls(3))
    assert limit.target == 16
    assert messages == [
        "the server has had room and almost nothing waiting for 60 s: raise --concurrency (now 16) "
        "or use --concurrency auto"
    ]
    assert monitor.summary_line() == (
        "concurrency: fixed, server load, target 16-16 (final 16), peak in flight 16; server peak 16 running "
        "/ 0 waiting, starved 60 s, retracting 0 s"
    )


def test_a_server_retracting_for_a_minute_draws_one_warning_naming_the_fix():
    messages: list[str] = []
    clock = Clock()
    server = ScriptedServer({"/v1/loads": body(rank(50, 10, usage=0.97, retracted=4))})
    monitor = LoadMonitor(
        server, InFlightLimit(64), AutoConcurrency(initial=64), on_message=messages.append, clock=clock, warn_after=60
    )

    async def polls(count: int) -> None:
        for _ in range(count):
            await monitor.poll_once()
            clock.now += 15

    asyncio.run(polls(8))
    assert messages == [
        "the server has been retracting requests for 60 s (its KV cache is too small for what it admits): "
        "lower the server's --max-running-requests, or --max-tokens"
    ]
    summary = monitor.summary()
    assert summary["retracting_seconds"] == 105.0 and summary["server_peak_running"] == 50


# ------------------------------------------------------------------------------ LoadMonitor on the simulator


def test_behind_a_router_the_api_key_goes_only_to_the_server_urls_own_origin():
    # /v1/loads does not answer, so the monitor asks /workers and polls every URL listed there:
    # one on the router's own origin, one elsewhere. Only the first may see the run's key.
    seen: dict[str, str | None] = {}

    def server(request: httpx.Request) -> httpx.Response:
        seen[str(request.url)] = request.headers.get("Authorization")
        if request.url.path == "/workers":
            urls = ["http://router.test:30000", "http://elsewhere.test:30000", "http://router.test:30001"]
            return httpx.Response(200, json={"workers": [{"url": url} for url in urls]})
        router = (request.url.host, request.url.port) == ("router.test", 30000)
        if request.url.path == "/v1/loads" and not router:  # the router has none; its workers do
            return httpx.Response(200, json=body(rank(3, 0)))
        return httpx.Response(404, json={"detail": "Not Found"})

    async def scenario() -> None:
        client = SGLangClient("http://router.test:30000", "s3cret", 8, 30.0, transport=httpx.MockTransport(server))
        try:
            monitor = LoadMonitor(client, InFlightLimit(8), AutoConcurrency(initial=8))
            await monitor.poll_once()
        finally:
            await client.aclose()

    asyncio.run(scenario())
    assert seen["http://router.test:30000/v1/loads"] == "Bearer s3cret"
    assert seen["http://router.test:30000/workers"] == "Bearer s3cret"
    assert seen["http://elsewhere.test:30000/v1/loads"] is None
    assert seen["http://router.test:30001/v1/loads"] is None  # another port is another server


def test_a_fixed_concurrency_sends_without_waiting_for_a_first_load_poll():
    server = ScriptedServer({"/v1/loads": body(rank(3, 0))})
    monitor = LoadMonitor(server, InFlightLimit(48), AutoConcurrency(initial=48), steer=False)
    assert asyncio.run(monitor.first_poll()) is None
    assert server.asked == []  # the poll loop (run) reads the load beside the first requests
    asyncio.run(monitor.poll_once())
    assert server.asked == ["/v1/loads"] and monitor.limit.target == 48


def test_a_load_endpoint_that_does_not_answer_does_not_hold_back_the_first_request(tmp_path, tokenizers):
    # /v1/loads answers only once a /generate has arrived (or, as a guard against a hang, after
    # 20 s): the run must not wait for it before sending. What happened first is recorded.
    events: list[str] = []
    generated = asyncio.Event()
    tok = tokenizers["chatml"]

    async def server(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/loads":
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(generated.wait(), 20.0)
            events.append("loads answered")
            return httpx.Response(200, json=body(rank(0, 0)))
        if path == "/generate":
            events.append("generate")
            generated.set()
            meta = {"id": "x", "finish_reason": {"type": "stop", "matched": 1}, "prompt_tokens": 3,
                    "completion_tokens": 1, "cached_tokens": 0}  # fmt: skip
            return httpx.Response(200, json={"text": "<think>r</think>a", "output_ids": [1], "meta_info": meta})
        if path == "/model_info":
            return httpx.Response(200, json={"model_path": str(tok), "tokenizer_path": str(tok)})
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 4096}]})
        if path in ("/server_info", "/health"):
            return httpx.Response(200, json={})
        return httpx.Response(404, json={"detail": "Not Found"})

    folder = tmp_path / "prompts" / "p"
    folder.mkdir(parents=True)
    (folder / "d.jsonl").write_text('{"id": "q0", "prompt": "question"}\n')
    cfg = RunConfig(
        partition="p", prompts_dir=tmp_path / "prompts", output_dir=tmp_path / "out", server_url="http://sglang.test"
    ).validate()

    async def main() -> int:
        client = SGLangClient(cfg.server_url, None, 8, 30.0, transport=httpx.MockTransport(server))
        try:
            return await Runner(cfg, Progress.of_run(cfg, io.StringIO(), tty=False), client=client).run()
        finally:
            await client.aclose()

    assert asyncio.run(main()) == 0
    assert events[0] == "generate"


# ------------------------------------------------------------------------------ the send order
def test_interleave_spreads_every_dataset_over_the_run_longest_first():
    assert list(interleave([2, 6])) == [0, 1, 1, 1, 0, 1, 1, 1]
    assert list(interleave([3, 0, 3])) == [0, 2, 0, 2, 0, 2]  # an empty dataset takes no turn
    order = list(interleave([5, 17, 40]))
    assert [order.count(i) for i in range(3)] == [5, 17, 40]
    half = order[: len(order) // 2]
    assert [half.count(i) for i in range(3)] == [3, 9, 19]  # each dataset about half-sent half-way


def test_a_run_sends_its_datasets_mixed_from_the_first_request_on(tmp_path, tokenizers):
    tok = tokenizers["chatml"]
    tokenizer = Tokenizer.from_file(str(tok / "tokenizer.json"))
    sent: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/generate":
            text = tokenizer.decode(orjson.loads(request.content)["input_ids"])
            sent.append(text.split("question ", 1)[1].split("-", 1)[0])  # the dataset's name
            meta = {"id": "x", "finish_reason": {"type": "stop", "matched": 1}, "prompt_tokens": 3,
                    "completion_tokens": 1, "cached_tokens": 0}  # fmt: skip
            return httpx.Response(200, json={"text": "<think>r</think>a", "output_ids": [1], "meta_info": meta})
        if path == "/model_info":
            return httpx.Response(200, json={"model_path": str(tok), "tokenizer_path": str(tok)})
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 4096}]})
        if path in ("/server_info", "/health"):
            return httpx.Response(200, json={})
        return httpx.Response(404, json={"detail": "Not Found"})

    folder = tmp_path / "prompts" / "p"
    folder.mkdir(parents=True)
    for name, count in (("aa", 2), ("bb", 6)):
        lines = [orjson.dumps({"id": f"{name}{i}", "prompt": f"question {name}-{i}"}) for i in range(count)]
        (folder / f"{name}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    cfg = RunConfig(
        partition="p",
        prompts_dir=tmp_path / "prompts",
        output_dir=tmp_path / "out",
        server_url="http://sglang.test",
        concurrency=1,
    ).validate()

    async def main() -> int:
        client = SGLangClient(cfg.server_url, None, 1, 30.0, transport=httpx.MockTransport(server))
        try:
            return await Runner(cfg, Progress.of_run(cfg, io.StringIO(), tty=False), client=client).run()
        finally:
            await client.aclose()

    assert asyncio.run(main()) == 0
    assert sent == ["aa", "bb", "bb", "bb", "aa", "bb", "bb", "bb"]


def poll_waits(monkeypatch, monitor: LoadMonitor, polls: int, between=lambda: None) -> list[float]:
    """The waits ``monitor.run()`` takes between its first ``polls`` polls (asyncio.sleep recorded, not slept);
    ``between`` runs at each wait (the client's side changing)."""
    waits: list[float] = []

    async def recorded(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == polls:
            raise asyncio.CancelledError
        between()

    monkeypatch.setattr("synthgen.run.concurrency.asyncio.sleep", recorded)
    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(monitor.run())
    return waits


def test_the_load_is_polled_four_times_a_second_while_the_target_grows_else_once(monkeypatch):
    # A starved server (nothing waits, KV free) whose client has sent all it had: the target cannot move.
    server = ScriptedServer({"/v1/loads": body(rank(4, 0))})
    monitor = LoadMonitor(server, InFlightLimit(16), AutoConcurrency(initial=16))
    assert poll_waits(monkeypatch, monitor, 5) == [1.0] * 5
    assert monitor.controller.state == "starved" and len(server.asked) == 5
    # The same server running all the client sends while its limit is full: the target grows, polled every 0.25 s.
    limit = InFlightLimit(16)
    for _ in range(16):
        assert limit.try_acquire()
    server = ScriptedServer({"/v1/loads": lambda: body(rank(limit.in_use, 0))})
    monitor = LoadMonitor(server, limit, AutoConcurrency(initial=16, max_concurrency=40))
    assert poll_waits(monkeypatch, monitor, 5, between=lambda: [limit.try_acquire() for _ in range(40)]) == [
        0.25,
        0.25,
        1.0,
        1.0,
        1.0,
    ]  # 16 -> 28 -> 40 (the maximum): then it no longer grows
