"""One /generate answer read: the failures an attempt ends in, the Generation it makes, and the
checks of statuses and bodies (docs/sglang_api.md §1.4) behind both.

    Transient(outage=True)    connection refused/reset, timeouts, 502/503/504: the server may
                              be down; the runner checks /health and waits for it
    Transient(outage=False)   other 5xx, 408/429 (router queue), and 200 responses whose
                              finish_reason is "abort"
    Rejected                  any other 4xx: this prompt's permanent failure
    AuthError                 401/403: the whole run stops

A Transient carries ``partial``: the output ids the server generated before the attempt ended (an
abort answer's ``output_ids``, or what a stream delivered before it broke), else None.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from synthgen.data.failures import BAD_RESPONSE, http_kind
from synthgen.errors import AuthError
from synthgen.server.gateway import shed_delay

OUTAGE_STATUSES = frozenset({502, 503, 504})
RETRYABLE_4XX = frozenset({408, 429})  # sglang-router's queue timeout and rate limiter


class RequestFailure(Exception):
    """One attempt at one prompt failed; ``kind`` is a short machine-readable label."""

    def __init__(self, kind: str, message: str, status: int | None = None, worker: str | None = None):
        super().__init__(message)
        self.kind, self.message, self.status = kind, message, status
        self.worker = worker  # the replica that answered, when known (gateway.worker_of)


class Transient(RequestFailure):
    def __init__(
        self,
        kind: str,
        message: str,
        status: int | None = None,
        outage: bool = False,
        partial: list[int] | None = None,
        worker: str | None = None,
    ):
        super().__init__(kind, message, status, worker)
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


def error_message(body: bytes) -> str:
    """The human part of any SGLang/router error body shape (see docs/sglang_api.md §1.4)."""
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
    if output_ids is not None and not int_list(output_ids):
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


def int_list(value: object) -> bool:
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
