"""The simulator's streamed answers and disconnect checks (``sglang_sim.py`` uses them).

This module owns what SGLang 0.5.23 does for ``"stream": true`` (``docs/sglang_api.md`` §10):
``Content-Type: text/event-stream`` sent with chunked transfer encoding, one ``data: {json}\\n\\n``
event per chunk, ``data: [DONE]\\n\\n`` last. A chunk goes out with the first token, then whenever
``stream_interval`` tokens are unsent, and at the end (the last chunk carries the finish reason;
an abort's carries the output so far). Chunks are cumulative (all ids and text so far) unless the
server runs with ``--incremental-streaming-output``: then each carries the ids and text added since
the last one, while ``meta_info.completion_tokens`` still counts them all.

A client that goes away ends its request as an abort: a streamed one at the next chunk or poll,
a plain one when the server next checks, every ``--disconnect-check`` seconds (SGLang: 4 s).
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Callable
from typing import BinaryIO

# How often a streamed request's wait looks at its socket (SGLang notices at once).
STREAM_POLL = 0.2


def client_gone(sock: socket.socket) -> bool:
    """True when the peer closed the connection (readable, and a peek reads nothing)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class Watch:
    """What a generating request's engine consults between tokens: whether its client is still
    there, and (streamed) when its next chunk is due and how to send it."""

    def __init__(self, sock: socket.socket, poll: float, stream: ChunkStream | None = None):
        self.sock, self.poll, self.stream = sock, poll, stream
        self.gone = False
        self._checked = time.monotonic()

    def due(self) -> int | None:
        """The token count at which the next chunk goes out (None: not streamed)."""
        return self.stream.due() if self.stream else None

    def step(self, produced: int) -> bool:
        """Send the chunks due by ``produced`` tokens and check the client (at most every
        ``poll`` seconds); False once it is gone, so the request is to be aborted."""
        if self.gone:
            return False
        if self.stream and not self.stream.advance(produced):
            self.gone = True
        return self.check()

    def check(self) -> bool:
        """Look at the client (at most every ``poll`` seconds); False once it is gone."""
        now = time.monotonic()
        if not self.gone and now - self._checked >= self.poll:
            self._checked = now
            self.gone = client_gone(self.sock)
        return not self.gone


class ChunkStream:
    """One streamed /generate answer on an HTTP/1.1 connection.

    ``item(count)`` builds the cumulative answer item (text, output_ids, meta_info) for the first
    ``count`` output ids; ``finish(final)`` sends the last chunk, ``[DONE]`` and the end of the body.
    Writes to a client that went away are dropped; ``advance`` then answers False."""

    def __init__(self, wfile: BinaryIO, interval: int, incremental: bool, item: Callable[[int], dict]):
        self.wfile, self.interval, self.incremental, self.item = wfile, max(1, interval), incremental, item
        self.sent = 0  # output ids sent so far
        self.sent_text = ""
        self.open = True
        self.transform: Callable[[dict], dict] = lambda chunk: chunk  # e.g. --malformed

    def due(self) -> int:
        return 1 if self.sent == 0 else self.sent + self.interval

    def advance(self, produced: int) -> bool:
        while self.open and produced >= self.due():
            self.send(self.item(self.due()))
        return self.open

    def finish(self, final: dict, total: int, waiting_abort: bool = False) -> None:
        """Send the chunks due before the end, then ``final`` (for ``total`` output ids) and [DONE].
        A waiting-queue abort is answered by the tokenizer manager, which under incremental
        streaming repeats the last id (0.5.23) instead of sending the ids not yet sent."""
        while self.open and total > self.due():
            self.send(self.item(self.due()))
        self.send(final, repeat_last=waiting_abort)
        self.event(b"[DONE]")
        self.write(b"0\r\n\r\n")

    def send(self, item: dict, repeat_last: bool = False) -> None:
        ids, text = item["output_ids"], item.get("text")
        if self.incremental:
            delta_ids = ids[self.sent :]
            if repeat_last:
                delta_ids = ids[-1:]
            item = dict(item, output_ids=delta_ids)
            if isinstance(text, str) and not repeat_last:
                item["text"] = text[len(self.sent_text) :] if text.startswith(self.sent_text) else text
        self.sent = max(self.sent, len(ids))
        if isinstance(text, str):
            self.sent_text = text
        self.event(json.dumps(self.transform(item), separators=(",", ":")).encode())

    def event(self, data: bytes) -> None:
        payload = b"data: " + data + b"\n\n"
        self.write(b"%X\r\n%s\r\n" % (len(payload), payload))

    def write(self, raw: bytes) -> None:
        if not self.open:
            return
        try:
            self.wfile.write(raw)
            self.wfile.flush()
        except OSError:  # BrokenPipeError, ConnectionResetError: the client went away
            self.open = False
