"""Several SGLang servers without a gateway, as one client: ``--server-url`` given more than once.

``ServerSet`` is a ``server.backend.Backend``, as one server's ``SGLangClient`` is (it holds one per
server), so the runner, the requests, the health check and the load monitor work unchanged over it:

    generate()      to the server ``servers.choose`` picks (a conversation's routing key pins it; else the
                    least loaded); a server that fails a request and then its /health is taken out, and
                    the request raises ``ServerOut``: sent again to another server, not counted as an
                    attempt (as one server's outage is not); with every server out it raises the plain
                    outage, and the run waits as it does for one server (ServerHealth, --server-wait)
    healthy()       a request can be served now: some server is in (those that are out are asked again)
    loads()         every server's /v1/loads, kept per server for the choice, and summed for --concurrency auto
    model_info(), context_length(), server_info()   asked of every server; where they differ on the model,
                    its tokenizer, weights, context or parsers, ``ServersDisagree`` names the two URLs
    abort(rid)      to the server the request is on

A server taken out is probed (/health, then what it serves) until it answers, then put back in; one that
comes back breaking what the servers agreed on at the start (discovery.Terms: its model, context length,
parsers, a smaller input limit) stays out, and the run says so once: it would fail or change every row sent
to it. Every answer's ``worker`` is its server's
URL, so rows, the summary and the sick-worker check name the server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from synthgen.config import RunConfig
from synthgen.data.failures import CONNECTION
from synthgen.errors import AuthError, ServerError
from synthgen.run.concurrency import LOADS_PATH, parse_loads
from synthgen.run.servers import Slot, choose, disagreement, probe_delay, status_text, summary_lines
from synthgen.server.backend import Backend
from synthgen.server.client import DEFAULT_STREAM_INTERVAL, Closer, Generation, Progress, SGLangClient, Transient
from synthgen.server.discovery import ServersDisagree, Terms, identity, input_limit, parsers, terms_of

# A load poll of a server that hangs must not hold up the others' (nor the monitor).
LOAD_TIMEOUT = 5.0


class ServerOut(Transient):
    """The server this request was on failed and was taken out: the request goes to another server, and
    it is no attempt of the prompt (a prompt in flight at several outages still ends as server_died)."""


def make_client(cfg: RunConfig, say: Callable[[str], None]) -> Backend:
    """The run's client: one server's, or a ServerSet over several."""
    concurrency = cfg.concurrency or cfg.max_concurrency
    if len(cfg.server_urls) <= 1:
        return SGLangClient(cfg.server_url, cfg.api_key, concurrency, cfg.request_timeout, cfg.connect_timeout)
    clients = [
        SGLangClient(url, cfg.api_key, concurrency, cfg.request_timeout, cfg.connect_timeout) for url in cfg.server_urls
    ]
    return ServerSet(clients, say)


class ServerSet:
    """Several servers, one client (see the module's docstring). ``clients`` one per server; ``say``
    prints a line (a server out, back, disagreeing); ``clock`` for the times out."""

    def __init__(
        self,
        clients: list[SGLangClient],
        say: Callable[[str], None] = lambda text: None,
        clock: Callable[[], float] = time.monotonic,
    ):
        # No connection of its own: its servers' clients hold theirs.
        self.clients, self.say, self.clock = clients, say, clock
        self.slots = [Slot(client.shown_url) for client in clients]
        self.base_url = clients[0].base_url
        self.shown_url = ", ".join(slot.url for slot in self.slots)
        self.stream_interval_honoured: bool | None = None
        self.gateway_seen = False
        self.router_found = False  # no gateway's worker listing here: the servers are asked themselves
        self.terms = Terms()  # what every server agreed on at the start, held to when it comes back
        self._settled: set[str] = set()  # which of the terms the start has read
        self._rids: dict[str, int] = {}  # request id -> the server it is on
        self._locks = [asyncio.Lock() for _ in clients]
        self._probes: dict[int, asyncio.Task[None]] = {}
        self._told_changed: set[int] = set()

    async def aclose(self) -> None:
        for probe in self._probes.values():
            probe.cancel()
        await asyncio.gather(*self._probes.values(), return_exceptions=True)
        for client in self.clients:
            await client.aclose()

    # ------------------------------------------------------------------ requests
    async def generate(
        self,
        payload: dict[str, Any],
        progress: Progress | None = None,
        stream_interval: int = DEFAULT_STREAM_INTERVAL,
        routing_key: str | None = None,
        closer: Closer | None = None,
    ) -> Generation:
        index = choose(self.slots, routing_key)
        if index is None:
            raise Transient(CONNECTION.name, f"every server is out ({self.shown_url})", outage=True)
        slot, client = self.slots[index], self.clients[index]
        rid = payload.get("rid")
        slot.sending()
        if isinstance(rid, str):
            self._rids[rid] = index
        generation = None
        try:
            generation = await client.generate(payload, progress, stream_interval, routing_key, closer)
        except Transient as exc:
            if exc.outage and exc.shed is None and await self._failed(index, exc.message):
                moved = self._moved(index, exc)
                if moved is not exc:
                    raise moved from exc
            raise
        finally:
            slot.ended(answered=generation is not None)
            if isinstance(rid, str):
                self._rids.pop(rid, None)
            self._note(client)
        return generation

    def _note(self, client: SGLangClient) -> None:
        self.gateway_seen |= client.gateway_seen
        if client.stream_interval_honoured is not None and self.stream_interval_honoured is not False:
            self.stream_interval_honoured = client.stream_interval_honoured

    def _moved(self, index: int, exc: Transient) -> Transient:
        """The failure as the run sees it: ServerOut while another server is in; the plain outage (the
        run waits for a server) when none is."""
        if not any(slot.up for slot in self.slots):
            return exc
        self.slots[index].moved_away()
        message = f"{exc.message} (server {self.slots[index].url} is out)"
        return ServerOut(exc.kind, message, exc.status, True, exc.partial, worker=exc.worker)

    async def abort(self, rid: str) -> bool:
        index = self._rids.get(rid)
        return False if index is None else await self.clients[index].abort(rid)

    # ------------------------------------------------------------------ in and out
    async def _failed(self, index: int, reason: str) -> bool:
        """A request on server ``index`` failed like an outage: True when the server is (now) out."""
        async with self._locks[index]:
            slot = self.slots[index]
            if not slot.up:
                return True
            if await self.clients[index].healthy():
                return False
            self._take_out(index, reason)
            return True

    def _take_out(self, index: int, reason: str) -> None:
        slot = self.slots[index]
        slot.take_out(self.clock())
        others = sum(s.up for s in self.slots)
        where = f"its requests go to the other {others} server(s)" if others else "no server is left in"
        self.say(f"server {slot.url} is out ({reason}); {where}; asking it again every few seconds")
        if index not in self._probes or self._probes[index].done():
            self._probes[index] = asyncio.create_task(self._probe(index))

    async def _probe(self, index: int) -> None:
        tries = 0
        while not self.slots[index].up:
            await asyncio.sleep(probe_delay(tries))
            tries += 1
            await self._readmit(index)

    async def _readmit(self, index: int) -> bool:
        """Ask a server that is out whether it answers and serves the run's model; if so, it is back in."""
        async with self._locks[index]:
            slot, client = self.slots[index], self.clients[index]
            if slot.up:
                return True
            if not await client.healthy():
                return False
            try:
                broken = self.terms.broken_by(await terms_of(client, self.terms.context_length is not None))
            except ServerError:  # also a key it refuses now: it stays out
                return False
            if broken is not None:
                if index not in self._told_changed:
                    self._told_changed.add(index)
                    self.say(
                        f"server {slot.url} answers again but has changed since the start ({broken}): it stays out, "
                        "as every request sent to it would fail or differ; restart it as the others run"
                    )
                return False
            out = slot.bring_back(self.clock())
            self.say(f"server {slot.url} is back after {out:.0f} s out; requests go to it again")
            return True

    async def healthy(self) -> bool:
        """Some server can take a request now; servers that are out are asked again first."""
        out = [i for i, slot in enumerate(self.slots) if not slot.up]
        await asyncio.gather(*(self._readmit(i) for i in out))
        return any(slot.up for slot in self.slots)

    # ------------------------------------------------------------------ what the servers serve
    async def _ask_all(self, ask: Callable[[SGLangClient], Awaitable[Any]]) -> list[tuple[int, Any]]:
        """``ask`` of every server that is in: (index, answer) of those that answered. A server that cannot
        be reached is taken out (and probed); none reachable raises the first server's error."""
        up = [i for i, slot in enumerate(self.slots) if slot.up]
        answers = await asyncio.gather(*(ask(self.clients[i]) for i in up), return_exceptions=True)
        got: list[tuple[int, Any]] = []
        errors: list[BaseException] = []
        for index, answer in zip(up, answers, strict=True):
            if isinstance(answer, ServerError) and not isinstance(answer, AuthError):
                errors.append(answer)
                self._take_out(index, str(answer))
            elif isinstance(answer, BaseException):
                raise answer
            else:
                got.append((index, answer))
        if not got:
            raise errors[0] if errors else ServerError(f"every server is out ({self.shown_url})")
        return got

    def _agree(self, what: str, answers: list[tuple[int, Any]]) -> None:
        differ = disagreement([(self.slots[i].url, answer) for i, answer in answers])
        if differ is not None:
            url1, one, url2, two = differ
            raise ServersDisagree(
                f"the servers differ in {what}: {url1} has {one!r}, {url2} has {two!r}; a run writes rows of one "
                "model: pass only --server-url of servers started alike"
            )

    def _settle(self, term: str, value: Any) -> None:
        """The start's answer to one of the terms (later answers do not change it)."""
        if term not in self._settled:
            self._settled.add(term)
            self.terms = replace(self.terms, **{term: value})

    async def model_info(self) -> dict[str, Any]:
        answers = await self._ask_all(lambda client: client.model_info())
        if "identity" not in self._settled:
            self._agree("the model they serve", [(i, identity(info)) for i, info in answers])
            self._settle("identity", identity(answers[0][1]))
            return dict(answers[0][1])
        # After an outage: a server serving something else is taken out; the run's model where one serves it.
        run = self.terms.identity
        same = [info for index, info in answers if identity(info) == run]
        if same:
            for index, info in answers:
                if identity(info) != run:
                    self._take_out(index, f"it serves {identity(info)!r}, not the run's {run!r}")
            return dict(same[0])
        return dict(answers[0][1])

    async def context_length(self) -> int | None:
        answers = await self._ask_all(lambda client: client.context_length())
        self._agree("context length (max_model_len)", answers)
        value = answers[0][1]
        length = value if isinstance(value, int) else None
        self._settle("context_length", length)
        return length

    async def server_info(self) -> dict[str, Any]:
        answers = await self._ask_all(lambda client: client.server_info())
        self._agree("their parsers", [(i, parsers(info)) for i, info in answers])
        self._settle("parsers", parsers(answers[0][1]))
        merged = dict(answers[0][1])
        # The input limit follows each server's KV pool: the smallest one holds for all.
        ints = [n for n in (input_limit(info) for _, info in answers) if n is not None]
        if ints:
            merged["max_req_input_len"] = min(ints)
        self._settle("input_limit", min(ints) if ints else None)
        return merged

    # ------------------------------------------------------------------ load
    async def loads(self, path: str = LOADS_PATH) -> dict[str, Any] | None:
        """Every server's /v1/loads, kept per server for the choice of server; their ranks as one report
        (the sum steers --concurrency auto) when every server that is in reported, else None."""
        if path != LOADS_PATH:
            return None  # no router's /workers here
        up = [i for i, slot in enumerate(self.slots) if slot.up]
        bodies = await asyncio.gather(*(self._load_of(i) for i in up))
        ranks: list[Any] = []
        complete = True
        for index, body in zip(up, bodies, strict=True):
            load = parse_loads(body)
            self.slots[index].report(None if load is None else load.running + load.waiting)
            if load is None or body is None:
                complete = False
            else:
                ranks.extend(body["loads"])
        return {"loads": ranks} if complete and ranks else None

    async def _load_of(self, index: int) -> dict[str, Any] | None:
        try:
            return await asyncio.wait_for(self.clients[index].loads(LOADS_PATH), LOAD_TIMEOUT)
        except asyncio.TimeoutError:
            return None

    # ------------------------------------------------------------------ what is said
    def status_text(self) -> str:
        return status_text(self.slots, self.clock())

    def summary_lines(self) -> list[str]:
        return summary_lines(self.slots, self.clock())
