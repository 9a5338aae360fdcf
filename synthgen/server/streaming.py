"""Streaming one /generate: the ``data:`` of SSE chunks, what the chunks delivered so far
(docs/sglang_api.md §10), and ending a stream from the client's side. Chunks are cumulative by default,
deltas under the server's ``--incremental-streaming-output``; both are told apart by
``meta_info.completion_tokens``, which counts every id so far in either mode.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import orjson

from synthgen.data.failures import BAD_RESPONSE, CONNECTION
from synthgen.server.answers import (
    Generation,
    NoStreamIds,
    Transient,
    check_status,
    error_message,
    generation_from,
    int_list,
)

# Called with the output ids so far after each chunk that brought new ones (not after the last):
# the list is the client's, to read or copy, never to change. An exception raised by it ends the
# attempt: the stream is closed, which SGLang answers by aborting the request at once.
Progress = Callable[[list[int]], None | Awaitable[None]]
DEFAULT_STREAM_INTERVAL = 256


class StreamEnded(Exception):
    """Raised by a progress hook to end its stream early (the loop guard's ``LoopFound``); the client names
    the worker that was streaming it (``worker``: smg's worker header, else the server URL)."""

    worker: str | None = None


_EVENT_END = re.compile(rb"\r?\n\r?\n")
T = TypeVar("T")


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
        self.worker: str | None = None  # the replica that answered (a gateway names it)

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
        if not isinstance(meta, dict) or not int_list(ids):
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


class Closer:
    """Ends one streamed /generate from the client's side, keeping the ids it delivered: a stop's
    way where the server cannot be asked to abort by rid (smg 1.13 answers /abort_request 404,
    docs/sglang_api.md §11). Closing the stream is a client disconnect, which SGLang answers by aborting
    the request at once (§10): the server stops generating for nobody and frees the slot.

    The first ``close`` ends the stream right after its next chunk, whose ids are kept (the tokens
    since the last chunk are not lost); a second ends it at once, losing those."""

    def __init__(self) -> None:
        self.closing = False  # end after the next chunk
        self.closed = False  # ended now
        self._reading: asyncio.Future[Any] | None = None

    def close(self) -> None:
        if not self.closing:
            self.closing = True
            return
        self.closed = True
        if self._reading is not None:
            self._reading.cancel()

    def after_chunk(self, state: StreamState) -> None:
        """Called after each chunk that brought ids (not the last): raises once ``close`` was called."""
        if self.closing:
            raise state.failure("abort", "the run closed the stream after a chunk (the server took no /abort_request)")

    async def read(self, reading: Awaitable[T], state: StreamState) -> T:
        """What ``reading`` (one stream read into ``state``) returns; once ``close`` is called twice,
        the read is cancelled (its connection closed) and Transient ``abort`` raised with the ids so far."""
        task = asyncio.ensure_future(reading)
        self._reading = task
        if self.closed:
            task.cancel()
        try:
            await asyncio.wait({task})
        finally:
            self._reading = None
            task.cancel()  # done: nothing; our caller cancelled: the read goes too
        if task.cancelled():
            raise state.failure("abort", "the run closed the stream (the server took no /abort_request)")
        return task.result()
