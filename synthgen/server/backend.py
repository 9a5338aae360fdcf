"""What the run asks of whatever serves its requests: one SGLang server (or one gateway's URL,
``client.SGLangClient``), or several servers as one (``run/serverset.ServerSet``). Both implement
this protocol, as httpx's transports implement theirs; the run holds a ``Backend`` and never asks
which one it has.

    generate(payload, ...)     one /generate (streamed with ``progress``): a Generation, or a
                               RequestFailure (Transient, Rejected)
    abort(rid)                 end a request in flight; False where it could not be asked or was refused
    loads(path)                a load report (or a gateway's worker listing), None where there is none
    model_info / context_length / server_info   what is served
    healthy()                  a request sent now can be served
    status_text / summary_lines   the backend's part of the status line and of the summary
"""

from __future__ import annotations

from typing import Any, Protocol

from synthgen.server.answers import Generation
from synthgen.server.streaming import DEFAULT_STREAM_INTERVAL, Closer, Progress


class Backend(Protocol):
    base_url: str
    shown_url: str  # for messages: no credential
    # Whether streams got chunks at the interval they asked for (None: not known yet; False for good).
    stream_interval_honoured: bool | None
    gateway_seen: bool  # an answer named its worker: a gateway is in front

    @property
    def router_found(self) -> bool: ...

    async def generate(
        self,
        payload: dict[str, Any],
        progress: Progress | None = None,
        stream_interval: int = DEFAULT_STREAM_INTERVAL,
        routing_key: str | None = None,
        closer: Closer | None = None,
    ) -> Generation: ...

    async def abort(self, rid: str) -> bool: ...

    async def loads(self, path: str = "/v1/loads") -> dict[str, Any] | None: ...

    async def model_info(self) -> dict[str, Any]: ...

    async def context_length(self) -> int | None: ...

    async def server_info(self) -> dict[str, Any]: ...

    async def healthy(self) -> bool: ...

    def status_text(self) -> str: ...

    def summary_lines(self) -> list[str]: ...

    async def aclose(self) -> None: ...
