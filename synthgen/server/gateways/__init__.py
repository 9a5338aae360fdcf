"""Gateways in front of several SGLang servers, one module each: what each adds to SGLang's protocol.

A gateway module defines ``PROFILE``, a ``Gateway``: the header naming the worker that served an
answer, the header that pins requests to one worker, the codes and messages of a shed, the sampling
keys it passes on, and where it lists its workers. ``server/gateway.py`` reads answers through every
profile found here, so a third gateway is one more module in this folder (datatrove's ``servers/``
has one module per server kind).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field


def no_workers(body: object) -> list[str]:
    return []


@dataclass(frozen=True)
class Gateway:
    name: str  # as messages name it, with the version measured
    worker_header: str | None = None  # names the replica that served an answer
    routing_key_header: str | None = None  # requests with one key go to one worker
    shed_code_header: str | None = None  # an admission error code ...
    shed_codes: frozenset[str] = frozenset()  # ... that means "not now"
    shed_messages: tuple[str, ...] = ()  # a 429's body messages that mean "not now"
    forwarded_keys: frozenset[str] | None = None  # the sampling keys it passes on (None: all)
    workers_path: str | None = None  # GET: its workers, with their URLs
    worker_urls: Callable[[object], list[str]] = field(default=no_workers)  # read from that answer


def _profiles() -> tuple[Gateway, ...]:
    found = []
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        profile = getattr(importlib.import_module(f"{__name__}.{module.name}"), "PROFILE", None)
        if isinstance(profile, Gateway):
            found.append(profile)
    return tuple(found)


GATEWAYS: tuple[Gateway, ...] = _profiles()
