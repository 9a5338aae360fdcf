"""Streamed /generate (docs/sglang_api.md §10): cumulative and incremental chunks, progress, cut streams,
aborts, error events, and a gateway that drops ``stream_interval`` — answers scripted in-process."""

import asyncio
from collections.abc import AsyncIterator, Callable

import httpx
import orjson
import pytest

from synthgen.server.client import Closer, Progress, Rejected, SGLangClient, Transient, sse_data

SSE = {"content-type": "text/event-stream; charset=utf-8"}
IDS = list(range(10, 30))  # 20 output ids
TEXT = "".join(f"t{i} " for i in IDS)


def meta(total: int, finish: dict | None = None) -> dict:
    return {"id": "r", "finish_reason": finish, "prompt_tokens": 3, "completion_tokens": total, "cached_tokens": 0}


def text_of(ids: list[int]) -> str:
    return "".join(f"t{i} " for i in ids)


def chunks(ends: list[int], incremental: bool = False, finish: dict | None = None, ids: list[int] = IDS) -> list[bytes]:
    """SGLang's events for output cut at ``ends`` (cumulative counts); the last one finishes."""
    finish = finish or {"type": "stop", "matched": ids[ends[-1] - 1]}
    events, sent = [], 0
    for n, end in enumerate(ends):
        part = ids[sent:end] if incremental else ids[:end]
        item = {
            "text": text_of(part),
            "output_ids": part,
            "meta_info": meta(end, finish if n == len(ends) - 1 else None),
        }
        events.append(b"data: " + orjson.dumps(item) + b"\n\n")
        sent = end
    return [*events, b"data: [DONE]\n\n"]


class Body(httpx.AsyncByteStream):
    """A response body sent piece by piece; ``then`` is raised after the last piece (a cut stream)."""

    def __init__(self, pieces: list[bytes], then: Exception | None = None):
        self.pieces, self.then, self.closed, self.read_to_end = pieces, then, False, False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        if self.then:
            raise self.then
        self.read_to_end = True

    async def aclose(self) -> None:
        self.closed = True


def run(
    answer: Callable[[httpx.Request], httpx.Response],
    progress: Progress | None = None,
    interval: int = 4,
    then: Callable[[SGLangClient], object] | None = None,
):
    """generate() once against ``answer``; returns (result or exception, progress calls, client)."""
    seen: list[list[int]] = []

    def record(ids: list[int]) -> None:
        seen.append(list(ids))

    async def scenario():
        client = SGLangClient("http://x", None, 4, 60.0, transport=httpx.MockTransport(answer))
        try:
            result = await client.generate({"input_ids": [1, 2, 3]}, progress or record, stream_interval=interval)
        except Exception as exc:
            result = exc
        finally:
            await client.aclose()
        return result, seen, client

    return asyncio.run(scenario())


def streaming(pieces: list[bytes], then: Exception | None = None, status: int = 200, headers=SSE):
    body = Body(pieces, then)

    def answer(request: httpx.Request) -> httpx.Response:
        answer.payload = orjson.loads(request.content)  # type: ignore[attr-defined]
        return httpx.Response(status, headers=headers, stream=body)

    answer.body = body  # type: ignore[attr-defined]
    return answer


def test_a_streamed_request_asks_for_sse_at_the_given_interval_and_keeps_the_sampling_params():
    answer = streaming(chunks([1, 5, 20]))

    async def scenario():
        client = SGLangClient("http://x", None, 4, 60.0, transport=httpx.MockTransport(answer))
        payload = {"input_ids": [1], "sampling_params": {"max_new_tokens": 20, "temperature": 0.6}, "rid": "a"}
        await client.generate(payload, lambda ids: None, stream_interval=256)
        await client.aclose()
        return payload

    sent = asyncio.run(scenario())
    assert answer.payload == {
        "input_ids": [1],
        "sampling_params": {"max_new_tokens": 20, "temperature": 0.6, "stream_interval": 256},
        "rid": "a",
        "stream": True,
    }
    assert "stream" not in sent and "stream_interval" not in sent["sampling_params"]  # the caller's dict


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
def test_cumulative_and_incremental_chunks_give_the_same_generation_and_progress(incremental):
    gen, seen, client = run(streaming(chunks([1, 5, 9, 13, 17, 20], incremental)))
    assert (gen.output_ids, gen.text, gen.finish_type, gen.completion_tokens) == (IDS, TEXT, "stop", 20)
    assert seen == [IDS[:1], IDS[:5], IDS[:9], IDS[:13], IDS[:17]]  # the last chunk is the answer
    assert client.stream_interval_honoured is True


def test_a_stream_is_read_to_the_end_of_its_body_after_done_so_its_connection_is_kept():
    # httpcore reuses a connection only once the response's body was read to its end; one closed
    # after [DONE] with the body's end unread costs a new connection for every request.
    answer = streaming([*chunks([1, 20]), b": the body ends after [DONE]\n\n"])
    gen, _, _ = run(answer)
    assert gen.output_ids == IDS
    assert answer.body.read_to_end


def test_a_stream_split_anywhere_and_with_crlf_separators_reads_the_same():
    whole = b"".join(chunks([1, 5, 20])).replace(b"\n\n", b"\r\n\r\n")
    pieces = [whole[i : i + 7] for i in range(0, len(whole), 7)]
    gen, seen, _ = run(streaming(pieces))
    assert gen.output_ids == IDS and seen == [IDS[:1], IDS[:5]]


def test_sse_data_skips_comments_and_joins_multi_line_data():
    async def collect() -> list[bytes]:
        async def source() -> AsyncIterator[bytes]:
            yield b": keep-alive\n\nevent: x\ndata: a\ndata: b\n\ndata:c"

        return [data async for data in sse_data(source())]

    assert asyncio.run(collect()) == [b"a\nb", b"c"]


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
def test_a_stream_cut_mid_way_is_transient_and_carries_the_ids_it_delivered(incremental):
    answer = streaming(chunks([1, 5, 9, 20], incremental)[:3], then=httpx.RemoteProtocolError("peer closed"))
    exc, seen, _ = run(answer)
    assert isinstance(exc, Transient) and exc.kind == "connection" and exc.outage
    assert exc.partial == IDS[:9] and seen[-1] == IDS[:9]


def test_a_stream_that_ends_without_its_last_chunk_is_an_outage_with_the_partial():
    exc, _, _ = run(streaming(chunks([1, 5, 9, 20])[:2]))
    assert isinstance(exc, Transient) and exc.kind == "connection" and exc.outage
    assert exc.partial == IDS[:5]
    assert "before its last chunk" in exc.message


def test_a_read_timeout_between_chunks_is_an_outage_with_the_partial():
    exc, _, _ = run(streaming(chunks([1, 5, 20])[:2], then=httpx.ReadTimeout("slow")))
    assert isinstance(exc, Transient) and exc.kind == "timeout" and exc.partial == IDS[:5]


@pytest.mark.parametrize("incremental", [False, True], ids=["cumulative", "incremental"])
def test_an_aborted_stream_raises_abort_with_the_output_so_far(incremental):
    aborted = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    exc, seen, _ = run(streaming(chunks([1, 9, 13], incremental, finish=aborted)))
    assert isinstance(exc, Transient) and exc.kind == "abort" and not exc.outage
    assert exc.partial == IDS[:13] and seen == [IDS[:1], IDS[:9]]


def test_an_incremental_abort_that_repeats_the_last_id_adds_nothing():
    # 0.5.23's waiting-queue abort sends [last id] with the whole text under incremental streaming.
    events = chunks([1, 5], incremental=True)[:2]
    quirk = {"text": TEXT, "output_ids": [IDS[4]], "meta_info": meta(5, {"type": "abort", "message": "Abort"})}
    exc, _, _ = run(streaming([*events, b"data: " + orjson.dumps(quirk) + b"\n\n", b"data: [DONE]\n\n"]))
    assert isinstance(exc, Transient) and exc.kind == "abort" and exc.partial == IDS[:5]


def test_a_non_streaming_abort_answer_carries_its_partial_ids_too():
    body = {"text": "x", "output_ids": [7, 8], "meta_info": meta(2, {"type": "abort", "message": "Aborted"})}

    async def scenario():
        client = SGLangClient(
            "http://x", None, 4, 60.0, transport=httpx.MockTransport(lambda r: httpx.Response(200, json=body))
        )
        try:
            await client.generate({"input_ids": [1]})
        except Transient as exc:
            return exc
        finally:
            await client.aclose()

    exc = asyncio.run(scenario())
    assert exc.kind == "abort" and exc.partial == [7, 8]


@pytest.mark.parametrize(
    ("error", "kind", "rejected"),
    [
        (
            {"message": "The input (5000 tokens) is longer than the model's context length", "code": 400},
            "http_400",
            True,
        ),
        ({"message": "overloaded", "code": 503}, "http_503", False),
        ({"message": "no code"}, "http_400", True),
    ],
)
def test_an_error_event_before_any_token_is_classified_by_its_code(error, kind, rejected):
    exc, _, _ = run(streaming([b"data: " + orjson.dumps({"error": error}) + b"\n\n", b"data: [DONE]\n\n"]))
    assert isinstance(exc, Rejected if rejected else Transient) and exc.kind == kind
    assert error["message"] in exc.message


def test_an_error_event_after_tokens_keeps_them_as_a_partial():
    error = b'data: {"error": {"message": "boom", "code": 400}}\n\n'
    exc, _, _ = run(streaming([*chunks([1, 5, 20])[:2], error, b"data: [DONE]\n\n"]))
    assert isinstance(exc, Transient) and exc.kind == "stream_error" and exc.partial == IDS[:5]


def test_a_refused_streamed_request_is_classified_like_a_plain_one():
    exc, _, _ = run(streaming([b'{"error": "unknown field `x`"}'], status=400, headers={}))
    assert isinstance(exc, Rejected) and exc.kind == "http_400" and "unknown field" in exc.message
    exc, _, _ = run(streaming([b"down"], status=503, headers={}))
    assert isinstance(exc, Transient) and exc.outage and exc.partial is None


def test_a_server_that_answers_a_stream_request_with_plain_json_still_gives_the_generation():
    body = {"text": TEXT, "output_ids": IDS, "meta_info": meta(20, {"type": "length", "length": 20})}
    gen, seen, client = run(streaming([orjson.dumps(body)], headers={"content-type": "application/json"}))
    assert gen.output_ids == IDS and seen == [] and client.stream_interval_honoured is None


def test_chunks_every_token_under_a_coarse_interval_mark_the_interval_as_dropped():
    # Behind smg the key is not forwarded: the server streams at its default of 1.
    gen, seen, client = run(streaming(chunks(list(range(1, 21)))), interval=256)
    assert gen.output_ids == IDS and len(seen) == 19
    assert client.stream_interval_honoured is False


def test_a_short_answer_cannot_tell_whether_the_interval_was_kept():
    _, _, client = run(streaming(chunks([1, 3])), interval=256)
    assert client.stream_interval_honoured is None


def test_a_progress_callback_that_raises_ends_the_attempt_and_closes_the_stream():
    answer = streaming(chunks([1, 5, 9, 20]))

    def stop(ids: list[int]) -> None:
        if len(ids) >= 5:
            raise RuntimeError("loop")

    exc, _, _ = run(answer, progress=stop)
    assert isinstance(exc, RuntimeError) and answer.body.closed


def test_an_async_progress_callback_is_awaited():
    calls: list[int] = []

    async def note(ids: list[int]) -> None:
        await asyncio.sleep(0)
        calls.append(len(ids))

    gen, _, _ = run(streaming(chunks([1, 5, 20])), progress=note)
    assert gen.output_ids == IDS and calls == [1, 5]


def test_a_chunk_that_does_not_add_up_is_a_bad_answer_with_the_partial():
    bad = {"text": "x", "output_ids": [1, 2], "meta_info": meta(9)}
    exc, _, _ = run(streaming([*chunks([1, 5, 20])[:2], b"data: " + orjson.dumps(bad) + b"\n\n"]))
    assert isinstance(exc, Transient) and exc.kind == "bad_response" and exc.partial == IDS[:5]


class Parked(Body):
    """Sends its pieces, then waits for ever: a long answer between two chunks."""

    def __init__(self, pieces: list[bytes]):
        super().__init__(pieces)
        self.waiting = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self.pieces:
            yield piece
        self.waiting.set()
        await asyncio.Event().wait()


def test_a_stream_closed_once_ends_after_its_next_chunk_keeping_its_ids():
    closer = Closer()

    def stop_at(ids: list[int]) -> None:
        if len(ids) >= 5:
            closer.close()

    async def scenario():
        client = SGLangClient("http://x", None, 4, 60.0, transport=httpx.MockTransport(answer))
        try:
            await client.generate({"input_ids": [1]}, stop_at, 4, closer=closer)
        except Transient as exc:
            return exc
        finally:
            await client.aclose()

    answer = streaming(chunks([1, 5, 9, 20]))
    exc = asyncio.run(scenario())
    assert exc.kind == "abort" and exc.partial == IDS[:5] and answer.body.closed


@pytest.mark.parametrize("early", [False, True])
def test_a_stream_closed_twice_ends_at_once_as_an_abort_with_the_ids_it_delivered(early):
    async def scenario():
        body = Parked(chunks([1, 5, 20])[:2])
        answer = lambda request: httpx.Response(200, headers=SSE, stream=body)  # noqa: E731
        client = SGLangClient("http://x", None, 4, 60.0, transport=httpx.MockTransport(answer))
        closer = Closer()
        if early:  # before the request went out: it is not sent
            closer.close()
            closer.close()
        attempt = asyncio.create_task(client.generate({"input_ids": [1]}, lambda ids: None, 4, closer=closer))
        if not early:
            await body.waiting.wait()
            closer.close()  # no chunk comes: the stream stays open
            closer.close()
        with pytest.raises(Transient) as caught:
            await attempt
        await client.aclose()
        return caught.value, body

    exc, body = asyncio.run(scenario())
    assert exc.kind == "abort" and exc.partial == ([] if early else IDS[:5])
    assert body.closed is not early  # the connection is closed: the server ends the request at once
