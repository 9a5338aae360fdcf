"""What a gateway in front of several SGLang servers tells the client, read from its answers through
every gateway's profile (``server/gateways/``, one module per gateway: smg, sglang-router).

A gateway answers like one SGLang server, plus a few signals of its own (``docs/server.md``):

- **Sheds.** Admission control answers 429 or 503 with ``Retry-After`` (or its own error code):
  backpressure, not a failure of the prompt.
- **The worker.** An answer may name the replica that served it in a header.
- **Sticky routing.** A header pins requests with one key to one worker.
- **Keys it forwards.** A gateway may pass on only the sampling keys it models.
"""

from __future__ import annotations

import email.utils
import hashlib
import time
from collections.abc import Iterable, Mapping

from synthgen.server.gateways import GATEWAYS, Gateway

SHED_STATUSES = frozenset({429, 503})
DEFAULT_SHED_SECONDS = 2.0  # smg's own Retry-After
MAX_SHED_SECONDS = 60.0  # a Retry-After longer than this is waited out in steps of this size


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
    coded = any(g.shed_code_header and lowered.get(g.shed_code_header, "") in g.shed_codes for g in GATEWAYS)
    # A gateway's message alone only on a 429 (smg's no-queue limit); SGLang's own 503 "The request queue is
    # full." without Retry-After stays the outage path it always was.
    said = status == 429 and any(m in message.lower() for g in GATEWAYS for m in g.shed_messages)
    if wait is None and not coded and not said:
        return None
    return min(MAX_SHED_SECONDS, DEFAULT_SHED_SECONDS if wait is None else wait)


def worker_of(headers: Mapping[str, str], server_url: str) -> str:
    """The replica that served an answer: a gateway's worker header, else the server the client talks to."""
    named = {g.worker_header.lower() for g in GATEWAYS if g.worker_header}
    for key, value in headers.items():
        if key.lower() in named and value.strip():
            return value.strip()
    return server_url


def request_headers(routing_key: str | None = None) -> dict[str, str]:
    """A /generate's headers; with a routing key, a gateway sends every request of that key to one worker."""
    headers = {"Content-Type": "application/json"}
    if routing_key is not None:
        for gateway in GATEWAYS:
            if gateway.routing_key_header:
                headers[gateway.routing_key_header] = routing_key
    return headers


def routing_key(dataset: str, conversation_id: str) -> str:
    """One stable key per conversation: its turns go to one worker, whose prefix cache holds the history."""
    return hashlib.blake2b(f"{dataset}\0{conversation_id}".encode(), digest_size=12).hexdigest()


def dropped_keys(sampling_keys: Iterable[str]) -> list[tuple[Gateway, list[str]]]:
    """The sampling keys a run sends that a gateway would not pass on, sorted, per gateway that drops some."""
    keys = set(sampling_keys)
    dropped = [(g, sorted(keys - g.forwarded_keys)) for g in GATEWAYS if g.forwarded_keys is not None]
    return [(gateway, names) for gateway, names in dropped if names]


def worker_listings() -> list[Gateway]:
    """The gateways that list their workers (a GET of ``workers_path``, read by ``worker_urls``)."""
    return [g for g in GATEWAYS if g.workers_path is not None]
