"""The SGLang HTTP client: payloads, responses, and error classification.

httpx exceptions and HTTP statuses are translated here, and only here, into:

    Transient(outage=True)    connection refused/reset, timeouts, 502/503/504: the server may
                              be down; the runner checks /health and waits for it
    Transient(outage=False)   other 5xx, 408/429 (router queue), and 200 responses whose
                              finish_reason is "abort"
    Rejected                  any other 4xx: this prompt's permanent failure
    AuthError                 401/403: the whole run stops

A Transient carries ``partial``: the output ids the server generated before the attempt ended (an
abort answer's ``output_ids``, or what a stream delivered before it broke), else None.

Streaming (``generate(payload, progress=...)``, sglang_api.md §10): SSE ``data:`` chunks, cumulative
by default, deltas under the server's ``--incremental-streaming-output``; both are told apart by
``meta_info.completion_tokens``, which counts every id so far in either mode.
"""

from __future__ import annotations

import inspect
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, replace
from typing import Any

import httpx
import orjson

from synthgen.data.failures import BAD_RESPONSE, CONNECTION, TIMEOUT, http_kind
from synthgen.errors import AuthError, ServerError
from synthgen.redact import redact
from synthgen.server.gateway import request_headers, shed_delay, worker_of

OUTAGE_STATUSES = frozenset({502, 503, 504})
RETRYABLE_4XX = frozenset({408, 429})  # sglang-router's queue timeout and rate limiter


class RequestFailure(Exception):
    """One attempt at one prompt failed; ``kind`` is a short machine-readable label."""

    def __init__(self, kind: str, message: str, status: int | None = None):
        super().__init__(message)
        self.kind, self.message, self.status = kind, message, status
        self.worker: str | None = None  # the replica that answered, when known (gateway.worker_of)


class Transient(RequestFailure):
    def __init__(
        self,
        kind: str,
        message: str,
        status: int | None = None,
        outage: bool = False,
        partial: list[int] | None = None,
    ):
        super().__init__(kind, message, status)
        self.outage = outage
        self.partial = partial  # output ids generated before the attempt ended, when known
        self.shed: float | None = None  # a gateway shedding load: hold off this many seconds (not a failure)


class Rejected(RequestFailure):
    pass


class NoStreamIds(Transient):
    """A streamed answer's chunks carry text but no ``output_ids`` (a router or proxy that drops them):
    the request is sent again without streaming, whose answer is kept with null ids as before."""


@dataclass(frozen=True, slots=True)
class Generation:
    text: str
    output_ids: list[int] | None  # absent before SGLang 0.5
    finish_reason: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    server_latency: float | None
    request_id: str | None
    worker: str | None = None  # the replica that served it: smg's x-smg-routed-worker-id, else the server URL

    @property
    def finish_type(self) -> str:
        kind = self.finish_reason.get("type", "")
        return kind if isinstance(kind, str) else str(kind)


def build_payload(
    input_ids: list[int], max_new_tokens: int, sampling: dict[str, Any], rid: str | None = None
) -> dict[str, Any]:
    """One prompt per request, as token ids, with only keys SGLang (and its router) accept.

    ``skip_special_tokens`` is off so think tags that are special tokens stay in the text.
    """
    params = {"max_new_tokens": int(max_new_tokens), "skip_special_tokens": False, **sampling}
    payload = {"input_ids": input_ids, "sampling_params": params}
    if rid is not None:
        payload["rid"] = rid
    return payload


def new_rid() -> str:
    """A fresh request id per attempt: SGLang rejects a rid that is still in flight."""
    return f"synthgen-{uuid.uuid4().hex}"


def error_message(body: bytes) -> str:
    """The human part of any SGLang/router error body shape (see sglang_api.md §1.4)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode(errors="replace").strip()[:500] or "(empty body)"
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, str):
            return err[:500]
        message = err.get("message") if isinstance(err, dict) else None
        if not isinstance(message, str):
            message = data.get("message")
        if isinstance(message, str):
            return message[:500]
    return body.decode(errors="replace").strip()[:500]


def check_auth(status: int, body: bytes) -> None:
    """401/403 on any endpoint: the whole run stops with advice about the key."""
    if status in (401, 403):
        raise AuthError(
            f"the server refused the API key (HTTP {status}: {error_message(body)}); "
            "set SGLANG_API_KEY (or --api-key) to the key the server was started with"
        )


def parse_generation(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> Generation:
    """Turn one /generate answer into a Generation or raise the matching RequestFailure."""
    check_status(status, body, headers)
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise Transient(BAD_RESPONSE.name, f"response is not JSON: {body[:200]!r}", status) from None
    if isinstance(data, list) and len(data) == 1:
        data = data[0]
    meta = data.get("meta_info") if isinstance(data, dict) else None
    if not isinstance(meta, dict) or not isinstance(data.get("text"), str):
        raise Transient(BAD_RESPONSE.name, f"response has no text/meta_info: {body[:200]!r}", status)
    return generation_from(data, meta, status)


def check_status(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
    """Raise the RequestFailure (or AuthError) of any answer but a 200; with the answer's ``headers``, a
    gateway's shed (gateway.shed_delay) is a Transient with ``shed`` set."""
    check_auth(status, body)
    if status >= 500 or status in RETRYABLE_4XX:
        message = f"HTTP {status}: {error_message(body)}"
        shed = None if headers is None else shed_delay(status, headers, message)
        exc = Transient(http_kind(status), message, status, outage=status in OUTAGE_STATUSES and shed is None)
        if shed is not None:
            exc.kind, exc.shed = f"shed_{status}", shed
        raise exc
    if status != 200:
        raise Rejected(http_kind(status), f"HTTP {status}: {error_message(body)}", status)


def generation_from(data: dict[str, Any], meta: dict[str, Any], status: int) -> Generation:
    """A 200 answer's text, ids and meta_info as a Generation; an abort raises Transient with
    the ids so far as ``partial``."""
    finish = meta.get("finish_reason")
    if isinstance(finish, str):  # very old servers sent a bare string
        finish = {"type": finish}
    if not isinstance(finish, dict) or not isinstance(finish.get("type"), str):
        raise Transient(BAD_RESPONSE.name, f"response has no usable finish_reason ({_shown(finish)})", status)
    output_ids = data.get("output_ids")
    if output_ids is not None and not _int_list(output_ids):
        raise Transient(BAD_RESPONSE.name, f"output_ids is not a list of token ids ({_shown(output_ids)})", status)
    if finish["type"] == "abort":
        code = finish.get("status_code")
        raise Transient(
            "abort",
            f"server aborted the request: {finish.get('message') or 'Aborted'}",
            code if isinstance(code, int) else None,
            outage=isinstance(code, int) and code in OUTAGE_STATUSES,
            partial=output_ids,
        )
    completion = _count(meta, "completion_tokens", status)
    if completion is None:
        completion = len(output_ids) if output_ids is not None else 0
    cached = _count(meta, "cached_tokens", status)
    latency = meta.get("e2e_latency")
    return Generation(
        text=data["text"],
        output_ids=output_ids,
        finish_reason=finish,
        prompt_tokens=_count(meta, "prompt_tokens", status) or 0,
        completion_tokens=completion,
        cached_tokens=cached,
        server_latency=latency if isinstance(latency, (int, float)) and not isinstance(latency, bool) else None,
        request_id=meta.get("id") if isinstance(meta.get("id"), str) else None,
    )


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _int_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def _count(meta: dict[str, Any], key: str, status: int) -> int | None:
    """A token count of meta_info: absent is None; anything but a whole number >= 0 is a bad answer
    (it would be saved as data and added into token budgets)."""
    value = meta.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise Transient(BAD_RESPONSE.name, f"meta_info.{key} is {_shown(value)}, not a token count", status)
    return value


# ---------------------------------------------------------------------------------------------
# Streaming: SSE chunks of one /generate (sglang_api.md §10)
# ---------------------------------------------------------------------------------------------

# Called with the output ids so far after each chunk that brought new ones (not after the last):
# the list is the client's, to read or copy, never to change. An exception raised by it ends the
# attempt: the stream is closed, which SGLang answers by aborting the request at once.
Progress = Callable[[list[int]], None | Awaitable[None]]
DEFAULT_STREAM_INTERVAL = 256
_EVENT_END = re.compile(rb"\r?\n\r?\n")


async def sse_data(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The ``data`` of each server-sent event in a byte stream (comments and other fields skipped)."""
    buffer = bytearray()
    async for chunk in chunks:
        scan = max(0, len(buffer) - 3)  # a separator may straddle two network chunks
        buffer += chunk
        start = 0
        while match := _EVENT_END.search(buffer, max(start, scan)):
            data = _event_data(bytes(buffer[start : match.start()]))
            start = match.end()
            if data is not None:
                yield data
        del buffer[:start]
    # A last event without its blank line (a lax server; a cut stream raises before this).
    if (data := _event_data(bytes(buffer))) is not None:
        yield data


def _event_data(event: bytes) -> bytes | None:
    lines = [line.rstrip(b"\r") for line in event.split(b"\n")]
    data = [line[5:].removeprefix(b" ") for line in lines if line.startswith(b"data:")]
    return b"\n".join(data) if data else None


class StreamState:
    """What one streamed /generate delivered so far: the output ids, the text, the final chunk, and
    whether the chunks between the first and the last kept the asked ``stream_interval`` (a
    gateway may drop the key: then the server's default, 1 unless it was started otherwise)."""

    def __init__(self, interval: int):
        self.interval = interval
        self.ids: list[int] = []
        self.deltas: list[str] = []  # text pieces under incremental streaming
        self.text: str | None = None  # the last cumulative text
        self.incremental: bool | None = None  # None until a chunk tells
        self.chunks = 0
        self.middle_chunks = 0  # chunks after the first with new ids, before the last
        self.short_chunks = 0  # ... of which brought fewer than ``interval`` new ids
        self.final: dict[str, Any] | None = None  # the last chunk's meta_info

    @property
    def interval_honoured(self) -> bool | None:
        """None when this stream cannot tell (interval 1, or no chunk between the first and last)."""
        if self.interval <= 1 or not self.middle_chunks:
            return None
        return self.short_chunks == 0

    def add(self, raw: bytes) -> int:
        """Take one event's data; returns how many new ids it brought. Raises the attempt's
        failure for an error event or a chunk that cannot be read."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise self.failure(BAD_RESPONSE.name, f"stream chunk is not JSON: {raw[:200]!r}") from None
        if isinstance(data, dict) and "error" in data and "meta_info" not in data:
            self.error_event(data)
        meta = data.get("meta_info") if isinstance(data, dict) else None
        ids = data.get("output_ids") if isinstance(data, dict) else None
        if isinstance(meta, dict) and ids is None and isinstance(data.get("text"), str) and not self.ids:
            raise NoStreamIds(BAD_RESPONSE.name, "the server's stream chunks carry no output_ids")
        if not isinstance(meta, dict) or not _int_list(ids):
            raise self.failure(BAD_RESPONSE.name, f"stream chunk has no output_ids/meta_info: {raw[:200]!r}")
        assert isinstance(ids, list) and isinstance(data, dict)
        before = len(self.ids)
        self._take_ids(ids, meta.get("completion_tokens"))
        text = data.get("text")
        if isinstance(text, str):
            self.text = text
            if self.incremental is not False:  # the first chunk is the first delta too
                self.deltas.append(text)
        new = len(self.ids) - before
        self.chunks += 1
        if meta.get("finish_reason") is not None:
            self.final = meta
        elif before and new:
            self.middle_chunks += 1
            self.short_chunks += new < self.interval
        return new

    def _take_ids(self, ids: list[int], total: object) -> None:
        known = len(self.ids)
        if isinstance(total, int) and not isinstance(total, bool):
            if len(ids) == total and (known == 0 or not self.incremental):
                if known:
                    self.incremental, self.deltas = False, []
                self.ids = ids
            elif known + len(ids) == total:
                self.ids.extend(ids)
                self.incremental = True if known else self.incremental
            elif known != total:  # known == total: 0.5.23 repeats the last id in an incremental abort
                raise self.failure(
                    BAD_RESPONSE.name, f"stream chunk of {len(ids)} ids does not add up to {total} after {known}"
                )
        elif self.incremental is False or (self.incremental is None and ids[:known] == self.ids):
            if known:
                self.incremental, self.deltas = False, []
            self.ids = ids
        else:
            self.ids.extend(ids)
            self.incremental = True if known else self.incremental

    def error_event(self, data: dict[str, Any]) -> None:
        """SGLang sends a failure after the stream began (e.g. a prompt over the context length,
        checked once the 200 went out) as ``data: {"error": {...}}``."""
        err = data["error"]
        code = err.get("code") if isinstance(err, dict) else None
        if isinstance(code, bool) or not isinstance(code, int) or not 400 <= code <= 599:
            code = 500 if isinstance(err, dict) and err.get("retryable") else 400
        body = orjson.dumps(data)
        if self.ids:  # tokens came first: keep them, whatever the error says
            raise self.failure("stream_error", f"the stream ended in an error: {error_message(body)}")
        check_status(code, body)

    def failure(self, kind: str, message: str, outage: bool = False) -> Transient:
        return Transient(kind, message, outage=outage, partial=list(self.ids))

    def result(self) -> Generation:
        """The Generation of a finished stream (an abort raises Transient with ``partial``)."""
        if self.final is None:
            raise self.failure(CONNECTION.name, "the stream ended before its last chunk", outage=True)
        text = "".join(self.deltas) if self.incremental else self.text
        if text is None:
            raise self.failure(BAD_RESPONSE.name, "the stream's chunks carry no text")
        return generation_from({"text": text, "output_ids": self.ids}, self.final, 200)


def transport_failure(exc: httpx.HTTPError, partial: list[int] | None) -> Transient:
    """httpx's failure of one attempt as a Transient, with the ids a stream delivered."""
    if isinstance(exc, httpx.TimeoutException):
        return Transient(TIMEOUT.name, f"{type(exc).__name__}: no answer in time", outage=True, partial=partial)
    if isinstance(exc, httpx.TransportError):
        message = f"{type(exc).__name__}: {exc or 'connection lost'}"
        return Transient(CONNECTION.name, message, outage=True, partial=partial)
    # DecodingError: e.g. a body marked gzip that is not gzip
    return Transient(BAD_RESPONSE.name, f"{type(exc).__name__}: {exc}", partial=partial)


def origin(url: httpx.URL) -> tuple[str, str, int | None]:
    """Scheme, host and port, the default port spelled out: what "the same server" means for a key."""
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host, url.port or default


class OriginBearer(httpx.Auth):
    """``Authorization: Bearer KEY`` on requests to the server URL's origin only.

    The load monitor also asks URLs the server names (a router's workers at ``/workers``); a
    key sent there would go to whatever host a router, or anything answering at its address,
    lists. Those requests go without it."""

    def __init__(self, api_key: str, base_url: str):
        self._header = f"Bearer {api_key}"
        self._origin = origin(httpx.URL(base_url))

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if origin(request.url) == self._origin:
            request.headers["Authorization"] = self._header
        yield request


# Connections per httpcore pool. httpcore's pool walks all its connections (a poll of each socket
# among them) and requests on every request it starts or ends (encode/httpcore#1035): one pool of
# 1,024 connections costs ~20 ms of event-loop CPU per request, pools of 8 about 2 ms at any
# count (bench/bench_client_scale.py; bench/README.md has the figures).
CONNECTIONS_PER_POOL = 8


class SpreadTransport(httpx.AsyncBaseTransport):
    """httpx's own transport (httpcore), as several pools of at most ``per_pool`` connections.

    Each request goes to the pool with the fewest requests open (sent and not yet read), so none
    holds more than ``per_pool`` while the caller keeps at most ``connections`` in flight. Errors,
    timeouts and keep-alive are httpx's own, exactly as with one pool."""

    def __init__(self, connections: int, per_pool: int = CONNECTIONS_PER_POOL, **options: Any):
        count = max(1, -(-connections // per_pool))
        limits = httpx.Limits(max_connections=per_pool, max_keepalive_connections=per_pool)
        # One TLS context for all (each costs ~30 ms to build).
        options.setdefault("verify", httpx.create_ssl_context())
        self._pools = [httpx.AsyncHTTPTransport(limits=limits, **options) for _ in range(count)]
        self._open = [0] * count  # requests open per pool

    @property
    def pools(self) -> int:
        return len(self._pools)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        index = self._open.index(min(self._open))
        self._open[index] += 1
        try:
            response = await self._pools[index].handle_async_request(request)
        except BaseException:
            self._open[index] -= 1
            raise
        if response.is_closed:  # a body read already (a transport that answered in full)
            self._closed(index)
        else:
            response.stream = _Released(response.stream, lambda: self._closed(index))
        return response

    def _closed(self, index: int) -> None:
        self._open[index] -= 1

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class _Released(httpx.AsyncByteStream):
    """A response body that calls ``on_close`` once, when httpx closes it (read or abandoned)."""

    def __init__(self, stream: httpx.SyncByteStream | httpx.AsyncByteStream, on_close: Callable[[], None]):
        assert isinstance(stream, httpx.AsyncByteStream)
        self._stream, self._on_close = stream, on_close
        self._closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._on_close()
        await self._stream.aclose()


class SGLangClient:
    """One AsyncClient for the whole run, sized for ``concurrency`` long generations."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        concurrency: int,
        request_timeout: float,
        connect_timeout: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        self.base_url = base_url.rstrip("/")
        # Whether streamed requests got chunks at the interval they asked for: None until a
        # stream could tell, False for good once one did not (sglang_api.md §11: smg drops it).
        self.stream_interval_honoured: bool | None = None
        self.gateway_seen = False  # an answer named its worker (x-smg-routed-worker-id): smg is in front
        self.shown_url = redact(self.base_url)  # for messages: a credential in the URL is never printed
        # httpx's defaults (5 s read timeout, 100 connections) would time out every long
        # generation and queue requests beyond 100; the runner's semaphore bounds in-flight
        # work, so the pool only needs a little headroom for health checks.
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            auth=OriginBearer(api_key, self.base_url) if api_key else None,
            timeout=httpx.Timeout(connect=connect_timeout, read=request_timeout, write=60.0, pool=None),
            limits=httpx.Limits(max_connections=concurrency + 4, max_keepalive_connections=concurrency + 4),
            trust_env=False,  # an http_proxy meant for the internet must not swallow a local server
            # Tests drive the runner in-process through httpx.MockTransport.
            transport=transport or SpreadTransport(concurrency + 4),
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def generate(
        self,
        payload: dict[str, Any],
        progress: Progress | None = None,
        stream_interval: int = DEFAULT_STREAM_INTERVAL,
        routing_key: str | None = None,
    ) -> Generation:
        """One /generate. With ``progress``, the answer streams at ``stream_interval`` tokens a
        chunk and ``progress(ids_so_far)`` follows each chunk; a stream cut short raises Transient
        with the ids it delivered as ``partial``. The answer's ``worker`` (and a failure's) names the
        replica that served it; a gateway's shed raises Transient with ``shed`` set."""
        worker = None
        try:
            if progress is not None:
                return await self._generate_streamed(payload, progress, stream_interval, routing_key)
            try:
                response = await self.http.post(
                    "/generate", content=orjson.dumps(payload), headers=request_headers(routing_key)
                )
            except httpx.HTTPError as exc:
                raise transport_failure(exc, None) from exc
            worker = self._worker_of(response.headers)
            return replace(parse_generation(response.status_code, response.content, response.headers), worker=worker)
        except RequestFailure as exc:
            exc.worker = exc.worker or worker
            raise

    def _worker_of(self, headers: Mapping[str, str]) -> str:
        worker = worker_of(headers, self.shown_url)
        self.gateway_seen |= worker != self.shown_url  # smg's worker header: a gateway is in front
        return worker

    async def _generate_streamed(
        self, payload: dict[str, Any], progress: Progress, interval: int, routing_key: str | None
    ) -> Generation:
        headers = request_headers(routing_key)
        params = {**(payload.get("sampling_params") or {}), "stream_interval": interval}
        body = orjson.dumps({**payload, "sampling_params": params, "stream": True})
        state = StreamState(interval)
        worker = None
        try:
            async with self.http.stream("POST", "/generate", content=body, headers=headers) as response:
                worker = self._worker_of(response.headers)
                if response.status_code != 200:
                    check_status(response.status_code, await response.aread(), response.headers)
                if not response.headers.get("content-type", "").startswith("text/event-stream"):
                    return replace(parse_generation(200, await response.aread()), worker=worker)  # not streaming
                async for data in sse_data(response.aiter_bytes()):
                    if data == b"[DONE]":
                        break
                    if state.add(data) and state.final is None:
                        called = progress(state.ids)
                        if inspect.isawaitable(called):
                            await called
        except httpx.HTTPError as exc:
            raise transport_failure(exc, state.ids) from exc
        except RequestFailure as exc:
            exc.worker = worker
            raise
        self._note_interval(state.interval_honoured)
        try:
            return replace(state.result(), worker=worker)
        except RequestFailure as exc:
            exc.worker = worker
            raise

    def _note_interval(self, honoured: bool | None) -> None:
        """Once a stream shows the server ignoring ``stream_interval`` (a gateway that drops the
        key: chunks come every token), ``stream_interval_honoured`` stays False."""
        if honoured is not None and self.stream_interval_honoured is not False:
            self.stream_interval_honoured = honoured

    async def abort(self, rid: str) -> bool:
        """End the request ``rid`` through SGLang's ``POST /abort_request``: its pending ``/generate``
        then answers 200 with ``finish_reason.type == "abort"`` and the output so far (sglang_api.md
        §10). Only a rid in flight reaches the scheduler, which then also ends every request whose
        rid starts with it (measured on 0.5.23): a rid must not be the prefix of another's. False
        when the server could not be asked or refused (smg 1.13 answers 404: behind it, closing a
        streamed request's connection is what ends it, within a second); never raises, since it
        is called while stopping."""
        try:
            response = await self.http.post(
                "/abort_request",
                content=orjson.dumps({"rid": rid}),
                headers={"Content-Type": "application/json"},
                timeout=httpx.Timeout(10.0),
            )
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def healthy(self) -> bool:
        """True when a request sent now can be served. A plain server: /health is 200. Behind
        sglang-router, whose /health stays 200 while every worker is down: also its /readiness,
        and a one-token probe through it, so a 503 "no available workers" (its circuit breakers
        open, for 60 s by default) is an outage to wait out, not a failed attempt."""
        try:
            response = await self.http.get("/health", timeout=httpx.Timeout(HEALTH_TIMEOUT))
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        router: bool | None = getattr(self, "_router", None)
        if router is None:
            router = self._router = await detect_router(self.http)
        return not router or await router_ready(self.http)

    async def _get_json(self, path: str) -> dict[str, Any] | None:
        """GET a JSON endpoint: None on 404, ServerError when the server cannot be reached."""
        try:
            response = await self.http.get(path, timeout=httpx.Timeout(30.0))
        except httpx.HTTPError as exc:
            raise ServerError(
                f"cannot reach the SGLang server at {self.shown_url} ({type(exc).__name__}); "
                "start the server or pass --server-url URL"
            ) from exc
        check_auth(response.status_code, response.content)
        if response.status_code != 200:
            return None
        try:
            data = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            return None
        return data if isinstance(data, dict) else None

    async def model_info(self) -> dict[str, Any]:
        """/model_info (SGLang >= 0.5.2x), falling back to the deprecated /get_model_info."""
        for path in ("/model_info", "/get_model_info"):
            info = await self._get_json(path)
            if info is not None:
                return info
        raise ServerError(
            f"{self.shown_url} answered neither /model_info nor /get_model_info; is it an SGLang server? "
            "Check --server-url"
        )

    async def context_length(self) -> int | None:
        models = await self._get_json("/v1/models")
        for card in (models or {}).get("data") or []:
            length = card.get("max_model_len") if isinstance(card, dict) else None
            if isinstance(length, int):
                return length
        return None

    async def loads(self, path: str = "/v1/loads") -> dict[str, Any] | None:
        """The server's load report (SGLang 0.5.2x: per-rank running/waiting requests, KV usage), or
        None where there is none (an older server, a router that does not pass it through) or the
        server does not answer: a load poll never fails the run."""
        try:
            return await self._get_json(path)
        except ServerError:
            return None

    async def server_info(self) -> dict[str, Any]:
        for path in ("/server_info", "/get_server_info"):
            info = await self._get_json(path)
            if info is not None:
                return info
        return {}


# ---------------------------------------------------------------------------------------------
# sglang-router (0.3.x, "SGLang Model Gateway"): what /health cannot tell
# ---------------------------------------------------------------------------------------------

HEALTH_TIMEOUT = 30.0
# SGLang's own /health_generate probes with this: token 0 exists in every vocabulary.
PROBE_PAYLOAD = {"input_ids": [0], "sampling_params": {"max_new_tokens": 1}}


async def router_readiness(http: httpx.AsyncClient) -> dict[str, Any] | None:
    """The router's GET /readiness ({"status": "ready", "healthy_workers": n, "total_workers": m},
    200 or 503), or None when the server does not answer it that way (an SGLang server: 404)."""
    response = await http.get("/readiness", timeout=httpx.Timeout(HEALTH_TIMEOUT))
    try:
        data = orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) and isinstance(data.get("healthy_workers"), int) else None


async def detect_router(http: httpx.AsyncClient) -> bool | None:
    """True behind sglang-router, False in front of a server, None when it cannot be told yet."""
    try:
        return await router_readiness(http) is not None
    except httpx.HTTPError:
        return None


async def router_ready(http: httpx.AsyncClient) -> bool:
    """The router has a healthy worker and a one-token request gets through it now.

    Its /readiness alone lags: it follows the router's periodic health checks (every 60 s, 3
    failures, by default), so it still says ready after a worker died, while the circuit breaker
    answers 503 "no available workers" well after a worker came back. The probe goes the way a
    request goes; any answer below 500 means a worker took it."""
    try:
        readiness = await router_readiness(http)
        if readiness is None or readiness["healthy_workers"] < 1:
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


def behind_router(client: SGLangClient) -> bool:
    """Whether healthy() found sglang-router at the URL (False until it has been asked). Through
    the router one attempt of ours is up to its --retry-max-retries attempts at workers."""
    return bool(getattr(client, "_router", None))
