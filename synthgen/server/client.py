"""The SGLang HTTP client of one server (or one gateway's URL): payloads, requests (plain and
streamed), abort, health, loads, what the server serves. It is a ``backend.Backend``, as the set of
several servers is (run/serverset.py); what a gateway in front changes is its profile's
(server/gateways/).

httpx exceptions are translated here (transport_failure), HTTP statuses and bodies in answers.py, and
nowhere else, into Transient, Rejected and AuthError (answers.py says which is which). A streamed
``generate(payload, progress=...)`` reads its chunks with streaming.py (docs/sglang_api.md §10).
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Callable, Generator, Mapping
from dataclasses import replace
from typing import Any

import httpx
import orjson

from synthgen.data.failures import BAD_RESPONSE, CONNECTION, TIMEOUT
from synthgen.errors import ServerError
from synthgen.redact import redact
from synthgen.server.answers import (
    Generation,
    NoStreamIds,
    Rejected,
    RequestFailure,
    Transient,
    check_auth,
    check_status,
    error_message,
    parse_generation,
)
from synthgen.server.gateway import request_headers, worker_of
from synthgen.server.gateways import sglang_router
from synthgen.server.streaming import DEFAULT_STREAM_INTERVAL, Closer, Progress, StreamEnded, StreamState, sse_data

# Also imported from here by the run, the launch and the tests (they lived here before answers.py and
# streaming.py), beside what this module defines.
__all__ = [
    "DEFAULT_STREAM_INTERVAL",
    "Closer",
    "Generation",
    "NoStreamIds",
    "Progress",
    "Rejected",
    "RequestFailure",
    "Transient",
    "error_message",
    "sse_data",
]


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
        # stream could tell, False for good once one did not (docs/sglang_api.md §11: smg drops it).
        self.stream_interval_honoured: bool | None = None
        self.gateway_seen = False  # an answer named its worker (x-smg-routed-worker-id): smg is in front
        self._router: bool | None = None  # sglang-router at the URL (healthy() tells; None: not known yet)
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
        closer: Closer | None = None,
    ) -> Generation:
        """One /generate. With ``progress``, the answer streams at ``stream_interval`` tokens a
        chunk and ``progress(ids_so_far)`` follows each chunk; a stream cut short raises Transient
        with the ids it delivered as ``partial`` (``closer.close()`` ends it: kind ``abort``). The
        answer's ``worker`` (and a failure's) names the replica that served it; a gateway's shed
        raises Transient with ``shed`` set."""
        worker = None
        try:
            if progress is not None:
                return await self._generate_streamed(payload, progress, stream_interval, routing_key, closer)
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
        self, payload: dict[str, Any], progress: Progress, interval: int, routing_key: str | None, closer: Closer | None
    ) -> Generation:
        params = {**(payload.get("sampling_params") or {}), "stream_interval": interval}
        body = orjson.dumps({**payload, "sampling_params": params, "stream": True})
        state = StreamState(interval)
        reading = self._read_stream(body, request_headers(routing_key), state, progress, closer)
        try:
            plain = await (reading if closer is None else closer.read(reading, state))
        except httpx.HTTPError as exc:
            raise transport_failure(exc, state.ids) from exc
        except (RequestFailure, StreamEnded) as exc:
            exc.worker = state.worker
            raise
        if plain is not None:
            return plain
        self._note_interval(state.interval_honoured)
        try:
            return replace(state.result(), worker=state.worker)
        except RequestFailure as exc:
            exc.worker = state.worker
            raise

    async def _read_stream(
        self, body: bytes, headers: dict[str, str], state: StreamState, progress: Progress, closer: Closer | None
    ) -> Generation | None:
        """One streamed answer read into ``state``; None, or the answer of a server that did not stream."""
        async with self.http.stream("POST", "/generate", content=body, headers=headers) as response:
            state.worker = self._worker_of(response.headers)
            if response.status_code != 200:
                check_status(response.status_code, await response.aread(), response.headers)
            if not response.headers.get("content-type", "").startswith("text/event-stream"):
                return replace(parse_generation(200, await response.aread()), worker=state.worker)
            # Read to the body's end, not only to [DONE] (which the end follows at once): a response
            # left unread closes its connection, and every request would open a new one.
            done = False
            async for data in sse_data(response.aiter_bytes()):
                done = done or data == b"[DONE]"
                if done:
                    continue
                if state.add(data) and state.final is None:
                    called = progress(state.ids)
                    if inspect.isawaitable(called):
                        await called
                    if closer is not None:
                        closer.after_chunk(state)
        return None

    def _note_interval(self, honoured: bool | None) -> None:
        """Once a stream shows the server ignoring ``stream_interval`` (a gateway that drops the
        key: chunks come every token), ``stream_interval_honoured`` stays False."""
        if honoured is not None and self.stream_interval_honoured is not False:
            self.stream_interval_honoured = honoured

    async def abort(self, rid: str) -> bool:
        """End the request ``rid`` through SGLang's ``POST /abort_request``: its pending ``/generate``
        then answers 200 with ``finish_reason.type == "abort"`` and the output so far (docs/sglang_api.md
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
            response = await self.http.get("/health", timeout=httpx.Timeout(sglang_router.HEALTH_TIMEOUT))
        except httpx.HTTPError:
            return False
        if response.status_code != 200:
            return False
        if self._router is None:
            self._router = await sglang_router.detect(self.http)
        return not self._router or await sglang_router.ready(self.http)

    @property
    def router_found(self) -> bool:
        """healthy() found sglang-router at the URL (False until it has been asked)."""
        return bool(self._router)

    def status_text(self) -> str:
        """The backend's part of the status line: one server has none (ServerSet's names its servers)."""
        return ""

    def summary_lines(self) -> list[str]:
        return []

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


def behind_router(client: SGLangClient) -> bool:
    """Whether healthy() found sglang-router at the URL (False until it has been asked). Through
    the router one attempt of ours is up to its --retry-max-retries attempts at workers."""
    return client.router_found
