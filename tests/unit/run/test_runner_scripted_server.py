"""The runner driven in-process through httpx.MockTransport: retries, aborts, outages and a refused
API key, decided by a scripted server, with no subprocess and no simulator."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from pathlib import Path

import httpx
import orjson
import pytest
from tokenizers import Tokenizer

from synthgen.config import RunConfig
from synthgen.data.records import ResultRecord
from synthgen.errors import AuthError
from synthgen.run.progress import Progress
from synthgen.run.runner import Runner
from synthgen.server.client import SGLangClient
from synthgen.server.gateway import routing_key

URL = "http://sglang.test"


def answer(text: str = "<think>r</think>a", finish: dict | None = None, completion: int = 5) -> httpx.Response:
    meta = {
        "id": "x",
        "finish_reason": finish or {"type": "stop", "matched": 1},
        "prompt_tokens": 3,
        "completion_tokens": completion,
        "cached_tokens": 0,
        "e2e_latency": 0.01,
    }
    return httpx.Response(200, json={"text": text, "output_ids": [1] * completion, "meta_info": meta})


class ScriptedServer:
    """Answers the informational endpoints; /generate answers come from ``script`` in order,
    then ``answer()``; /health follows ``healthy``."""

    def __init__(self, tokenizer: Path, script: list[Callable[[], httpx.Response]] | None = None):
        self.tokenizer = tokenizer
        self.script = list(script or [])
        self.healthy = True
        self.generate_calls = 0
        self.payloads: list[dict] = []  # every /generate body, in order

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/model_info":
            return httpx.Response(200, json={"model_path": str(self.tokenizer), "tokenizer_path": str(self.tokenizer)})
        if path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m", "max_model_len": 4096}]})
        if path == "/server_info":
            return httpx.Response(200, json={"max_req_input_len": 4000})
        if path == "/health":
            if self.healthy:
                return httpx.Response(200)
            self.healthy = True  # down for one check, then back
            raise httpx.ConnectError("connection refused")
        if path == "/generate":
            self.generate_calls += 1
            self.payloads.append(orjson.loads(request.content))
            if self.script:
                return self.script.pop(0)()
            return answer()
        return httpx.Response(404, json={"detail": "Not Found"})


def run(tmp_path: Path, server: ScriptedServer, **overrides) -> tuple[int, str]:
    folder = tmp_path / "prompts" / "p"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "d.jsonl").write_bytes(
        b"".join(
            orjson.dumps({"id": f"q{i}", "prompt": f"question {i}"}) + b"\n" for i in range(overrides.pop("prompts", 1))
        )
    )
    cfg = RunConfig(
        partition="p",
        prompts_dir=tmp_path / "prompts",
        output_dir=tmp_path / "out",
        server_url=URL,
        concurrency=2,
        backoff_base=0.001,
        backoff_max=0.001,
        **overrides,
    ).validate()
    out = io.StringIO()
    client = SGLangClient(URL, None, cfg.concurrency, 30.0, transport=httpx.MockTransport(server))

    async def main() -> int:
        try:
            return await Runner(cfg, Progress.of_run(cfg, out, tty=False), client=client).run()
        finally:
            await client.aclose()

    return asyncio.run(main()), out.getvalue()


def rows(tmp_path: Path, name: str = "raw_responses.jsonl") -> list[dict]:
    path = tmp_path / "out" / "d" / name
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


@pytest.fixture
def tok(tokenizers) -> Path:
    return tokenizers["chatml"]


def test_a_503_is_retried_and_the_second_attempt_is_saved(tmp_path, tok):
    server = ScriptedServer(tok, [lambda: httpx.Response(500, json={"error": {"message": "boom"}})])
    code, _ = run(tmp_path, server)
    assert code == 0 and server.generate_calls == 2
    (row,) = rows(tmp_path)
    record = ResultRecord.from_dict(row)
    assert (record.attempts, record.reasoning_content, record.content) == (2, "r", "a")


def aborted(text: str = "<think>pa", ids: int = 3) -> httpx.Response:
    return answer(text, {"type": "abort", "message": "Aborted", "status_code": None}, completion=ids)


def text_of(tok: Path, ids: list[int]) -> str:
    return Tokenizer.from_file(str(tok / "tokenizer.json")).decode(ids, skip_special_tokens=False)


def test_an_aborted_answer_is_continued_from_its_partial_output(tmp_path, tok):
    server = ScriptedServer(tok, [aborted, lambda: answer("rt</think>a", completion=4)])
    code, _ = run(tmp_path, server, max_tokens=100)
    assert code == 0
    first, second = server.payloads
    # The prompt, then the partial output ids but the last (sampled again: it may have been a stop token).
    assert second["input_ids"] == first["input_ids"] + [1, 1]
    assert (first["sampling_params"]["max_new_tokens"], second["sampling_params"]["max_new_tokens"]) == (100, 98)
    (row,) = rows(tmp_path)
    # The text of the whole output's ids decoded at once (the matched stop id left out, as SGLang's
    # text leaves it out), not the partial's text joined to the server's text of the rest.
    assert row["output_text"] == text_of(tok, [1] * 5)
    assert row["output_ids"] == [1] * 6 and row["segments"] == [2, 4] and row["completion_tokens"] == 6
    sent = {k: v for k, v in second["sampling_params"].items() if k != "stream_interval"}  # how, not what
    assert row["input_ids"] == first["input_ids"] and row["sampling_params"] == sent
    assert not (tmp_path / "out" / "d" / "partial_outputs.jsonl").exists()  # tidied once the row is written


def test_with_keep_partials_off_an_aborted_answer_restarts(tmp_path, tok):
    server = ScriptedServer(tok, [aborted])
    code, out = run(tmp_path, server, keep_partials=False)
    assert code == 0
    assert server.payloads[0] == server.payloads[1] | {"rid": server.payloads[0]["rid"]}
    (row,) = rows(tmp_path)
    assert row["output_text"] == "<think>r</think>a" and row["segments"] is None
    assert "3 lost (3 failed attempts)" in out


def test_a_penalty_that_counts_output_tokens_restarts_an_aborted_answer_and_says_so_once(tmp_path, tok):
    server = ScriptedServer(tok, [aborted, aborted])
    code, out = run(tmp_path, server, extra_sampling={"presence_penalty": 0.5}, prompts=2)
    assert code == 0
    assert out.count("restart instead of continuing (presence_penalty 0.5: it counts output tokens") == 1
    assert all(len(p["input_ids"]) == len(server.payloads[0]["input_ids"]) for p in server.payloads)
    assert all(r["segments"] is None for r in rows(tmp_path))


def test_a_prompt_that_keeps_failing_is_recorded_after_max_attempts(tmp_path, tok):
    server = ScriptedServer(tok, [lambda: httpx.Response(500, json={"error": "boom"})] * 3)
    code, _ = run(tmp_path, server, max_attempts=3)
    assert code == 1 and rows(tmp_path) == []
    (error,) = rows(tmp_path, "errors.jsonl")
    assert (error["status"], error["error_type"], error["attempts"]) == ("failed", "http_500", 3)


def test_a_400_is_recorded_at_once_without_retrying(tmp_path, tok):
    server = ScriptedServer(tok, [lambda: httpx.Response(400, json={"error": {"message": "bad"}})])
    code, _ = run(tmp_path, server)
    assert code == 1 and server.generate_calls == 1
    assert rows(tmp_path, "errors.jsonl")[0]["error_type"] == "http_400"


def test_an_outage_is_waited_out_and_does_not_count_as_an_attempt(tmp_path, tok):
    server = ScriptedServer(tok)

    def refused() -> httpx.Response:
        server.healthy = False
        raise httpx.ConnectError("connection refused")

    server.script = [refused]
    code, log = run(tmp_path, server, max_attempts=1)
    assert code == 0, log
    assert "OUTAGE" in log and "RECOVERED" in log
    assert rows(tmp_path)[0]["attempts"] == 1


def test_a_refused_api_key_stops_the_whole_run(tmp_path, tok):
    server = ScriptedServer(tok, [lambda: httpx.Response(401, json={"error": "Unauthorized"})] * 5)
    with pytest.raises(AuthError, match="refused the API key"):
        run(tmp_path, server, prompts=3)
    assert rows(tmp_path) == []


def test_datasets_with_the_longest_expected_answers_start_first():
    from types import SimpleNamespace

    from synthgen.run.runner import longest_first

    def run(name: str, rows: int, tokens: int):
        return SimpleNamespace(name=name, resume=SimpleNamespace(done=set(range(rows)), completion_tokens=tokens))

    runs = [run("short", 10, 1_500 * 10), run("unknown", 0, 0), run("agent", 10, 8_000 * 10), run("planned", 0, 0)]
    order = [r.name for r in longest_first(runs, {"planned": 3_000.0})]  # type: ignore[arg-type]
    assert order == ["unknown", "agent", "planned", "short"]


def test_a_server_that_returns_no_output_ids_is_named_in_the_row_not_re_tokenized(tmp_path, tok):
    def no_ids() -> httpx.Response:
        body = answer().json()
        del body["output_ids"]
        return httpx.Response(200, json=body)

    code, _ = run(tmp_path, ScriptedServer(tok, [no_ids]))
    assert code == 0
    (row,) = rows(tmp_path)
    assert row["output_ids"] is None and "returned no output_ids" in row["ids_note"]
    assert row["input_ids"] and all(isinstance(i, int) for i in row["input_ids"])


def test_rows_carry_the_ids_sent_and_returned(tmp_path, tok):
    code, _ = run(tmp_path, ScriptedServer(tok))
    assert code == 0
    (row,) = rows(tmp_path)
    assert row["output_ids"] == [1] * 5 and row["ids_note"] is None
    assert row["source"] == "p/d.jsonl" and len(row["prompt_hash"]) == 64 and row["regenerate"] == "last"


def test_each_mode_sends_a_turn_only_after_the_turn_before_it_is_answered(tmp_path, tok):
    """Turns sent together are prefilled together, so none would reuse the shared history from the cache."""
    from tokenizers import Tokenizer

    decode = Tokenizer.from_file(str(tok / "tokenizer.json")).decode
    server = ScriptedServer(tok)
    folder = tmp_path / "prompts" / "p"
    folder.mkdir(parents=True)
    for_conversation = [
        [
            m
            for k in range(3)
            for m in (
                {"role": "user", "content": f"conv {c} turn {k}"},
                {"role": "assistant", "content": f"answer {k}"},
            )
        ]
        for c in range(4)
    ]
    (folder / "d.jsonl").write_bytes(
        b"".join(
            orjson.dumps({"id": f"c{c}", "messages": messages}) + b"\n" for c, messages in enumerate(for_conversation)
        )
    )
    cfg = RunConfig(
        partition="p",
        prompts_dir=tmp_path / "prompts",
        output_dir=tmp_path / "out",
        server_url=URL,
        concurrency=8,
        regenerate="each",
    ).validate()
    answered: set[tuple[str, int]] = set()
    violations = []
    other_conversation = asyncio.Event()

    class Transport(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path != "/generate":
                return server(request)
            text = decode(orjson.loads(request.content)["input_ids"])
            conv, turn = text.rsplit("conv ", 1)[1].split(" turn ")
            key = (conv, int(turn[0]))
            if key[1] and (conv, key[1] - 1) not in answered:
                violations.append(key)
            if conv != "0":
                other_conversation.set()
            if key == ("0", 0):
                # Hold the first turn until another conversation's request arrives: an ungated runner
                # would send conv 0's next turns meanwhile. (The timeout only keeps a broken runner from hanging.)
                await asyncio.wait_for(other_conversation.wait(), timeout=60)
            answered.add(key)
            return answer()

    async def main() -> int:
        client = SGLangClient(URL, None, 8, 30.0, transport=Transport())
        try:
            return await Runner(cfg, Progress.of_run(cfg, io.StringIO(), tty=False), client=client).run()
        finally:
            await client.aclose()

    assert asyncio.run(main()) == 0
    assert sorted(r["id"] for r in rows(tmp_path)) == sorted(f"c{c}#{k}" for c in range(4) for k in range(3))
    assert violations == []


# --- gateways and fleets: sheds, garbage, the routing key, the worker -----------------------------


def shed() -> httpx.Response:
    return httpx.Response(
        429, json={"error": "full"}, headers={"Retry-After": "0", "x-smg-error-code": "admission_queue_full"}
    )


def garbage() -> httpx.Response:
    meta = {"finish_reason": {"type": "length", "length": 40}, "prompt_tokens": 3, "completion_tokens": 40}
    return httpx.Response(200, json={"text": "!" * 40, "output_ids": [9] * 40, "meta_info": meta})


def test_sheds_use_no_attempt_and_garbage_is_retried_not_written(tmp_path, tokenizers):
    server = ScriptedServer(tokenizers["chatml"], [shed, shed, shed, garbage])
    code, out = run(tmp_path, server, max_attempts=2)
    assert code == 0, out
    (row,) = rows(tmp_path)
    assert row["attempts"] == 2 and row["output_text"] != "!" * 40
    assert row["worker"] == "http://sglang.test"
    assert "the gateway is shedding load" in out and "answered garbage" in out


def test_regenerate_all_sends_one_routing_key_per_conversation(tmp_path, tokenizers):
    seen = []
    server = ScriptedServer(tokenizers["chatml"])

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/generate":
            seen.append(request.headers.get("x-smg-routing-key"))
            return answer()
        return server(request)

    code, out = run(tmp_path, handle, regenerate="all", prompts=2)
    assert code == 0, out
    assert sorted(seen) == sorted([routing_key("d", "q0"), routing_key("d", "q1")])
    seen.clear()
    code, out = run(tmp_path / "last", handle, prompts=1)
    assert code == 0 and seen == [None]
