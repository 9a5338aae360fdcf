"""What a gateway in front of several SGLang servers tells the client, read from its answers.

``smg`` (PyPI ``smg``, the maintained successor of sglang-router) and sglang-router answer like one
SGLang server, plus a few signals of their own (``docs/server.md``; measured on smg 1.13, see
``docs/sglang_api.md`` §11):

- **Sheds.** Admission control answers 429 (queue full, or concurrency limit with queueing off) or 503
  (queue timeout) with ``Retry-After: 2``; that is backpressure, not a failure of the prompt.
- **The worker.** Every answer names the replica that served it in ``x-smg-routed-worker-id``.
- **Sticky routing.** ``X-SMG-Routing-Key: K`` pins requests with one key to one worker (under
  ``consistent_hashing``, ``manual`` or ``round_robin --sticky-sessions``).
- **Keys it forwards.** smg models a fixed set of sampling keys and drops the rest silently.
"""

from __future__ import annotations

import email.utils
import hashlib
import time
from collections.abc import Iterable, Mapping

from synthgen.data.sampling_keys import SMG_FORWARDED

WORKER_HEADER = "x-smg-routed-worker-id"
ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
SHED_STATUSES = frozenset({429, 503})
DEFAULT_SHED_SECONDS = 2.0  # smg's own Retry-After
MAX_SHED_SECONDS = 60.0  # a Retry-After longer than this is waited out in steps of this size

# smg 1.13's admission error codes (``x-smg-error-code``) and body messages that mean "not now".
SHED_CODES = frozenset({"admission_queue_full", "admission_queue_timeout", "concurrency_limit", "rate_limited"})
SHED_MESSAGES = ("concurrency limit reached", "queue is full", "queue timeout", "rate limit")

# The sampling keys smg 1.13 forwards to a worker's /generate (the ``smg`` column of the sampling-key table,
# measured); it drops the others (stream_interval, stop_regex, logit_bias, ...) without a word.
SMG_FORWARDED_KEYS = SMG_FORWARDED


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), None if absent or
    unreadable; never negative."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def shed_delay(status: int, headers: Mapping[str, str], message: str, now: float | None = None) -> float | None:
    """How long to hold off when an answer is a gateway shedding load, else None.

    A shed is a 429 or 503 that carries ``Retry-After``, or smg's admission error code or message. A
    bare 503 (a server going down) is not a shed: the runner's outage handling takes it."""
    if status not in SHED_STATUSES:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    wait = retry_after(lowered.get("retry-after"), now)
    code = lowered.get("x-smg-error-code", "")
    # smg's message alone only on a 429 (its no-queue limit); SGLang's own 503 "The request queue is full."
    # without Retry-After stays the outage path it always was.
    said = status == 429 and any(m in message.lower() for m in SHED_MESSAGES)
    if wait is None and code not in SHED_CODES and not said:
        return None
    return min(MAX_SHED_SECONDS, DEFAULT_SHED_SECONDS if wait is None else wait)


def worker_of(headers: Mapping[str, str], server_url: str) -> str:
    """The replica that served an answer: smg's header behind smg, else the server the client talks to."""
    for key, value in headers.items():
        if key.lower() == WORKER_HEADER and value.strip():
            return value.strip()
    return server_url


def request_headers(routing_key: str | None = None) -> dict[str, str]:
    """A /generate's headers; with a routing key, smg sends every request of that key to one worker."""
    headers = {"Content-Type": "application/json"}
    if routing_key is not None:
        headers[ROUTING_KEY_HEADER] = routing_key
    return headers


def routing_key(dataset: str, conversation_id: str) -> str:
    """One stable key per conversation: its turns go to one worker, whose prefix cache holds the history."""
    return hashlib.blake2b(f"{dataset}\0{conversation_id}".encode(), digest_size=12).hexdigest()


def dropped_keys(sampling_keys: Iterable[str], forwarded: frozenset[str] = SMG_FORWARDED_KEYS) -> list[str]:
    """The sampling keys a run sends that the gateway would not pass on, sorted."""
    return sorted(set(sampling_keys) - forwarded)
