"""The server's room: what the run knows about the SGLang server and whether it is up.

    discover()        /model_info, /v1/models, /server_info (+ the model's config.json): the served
                      model, its tokenizer, the context and input limits, the vocabulary size
    fit_max_new_tokens()  the length rule: does a prompt fit, and how much room is left to generate
    ServerHealth      one shared view of whether the server is up; waits out outages

The runner asks this module; it never reads an endpoint itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from synthgen.chat import templating
from synthgen.config import RunConfig
from synthgen.errors import ServerError, SynthgenError
from synthgen.fmt import fmt_duration
from synthgen.server.backend import Backend

# SGLang's scheduler refuses inputs of max_req_input_len = context_len - 1 - 5 tokens or more,
# even when the tokenizer-side check passed (docs/sglang_api.md §1.3).
SCHEDULER_RESERVED = 6


PARSER_KEYS = ("reasoning_parser", "tool_call_parser")
IDENTITY_KEYS = ("model_path", "served_model_name", "tokenizer_path", "weight_version")


@dataclass(frozen=True)
class Terms:
    """What a server is held to while a run goes on, as read at the start: what it serves, its context
    length, its parsers and its input limit. A server back from an outage that breaks one of them
    would fail or change every row sent to it (a smaller context answers 400 at once), so it is not
    taken back. ``context_length`` and ``input_limit`` None: not asked or not reported (not compared)."""

    identity: tuple[object, ...] = ()
    context_length: int | None = None
    parsers: tuple[object, ...] = (None, None)
    input_limit: int | None = None

    def broken_by(self, now: Terms) -> str | None:
        """What ``now`` (a server's terms after an outage) breaks of these, or None."""
        broken = [
            f"{key} {old!r} -> {new!r}"
            for key, old, new in zip(IDENTITY_KEYS, self.identity or now.identity, now.identity, strict=True)
            if old != new
        ]
        if self.context_length is not None and now.context_length != self.context_length:
            broken.append(f"context length (max_model_len) {self.context_length} -> {now.context_length}")
        broken += [
            f"{key} {old!r} -> {new!r}"
            for key, old, new in zip(PARSER_KEYS, self.parsers, now.parsers, strict=True)
            if old != new
        ]
        if self.input_limit is not None and now.input_limit is not None and now.input_limit < self.input_limit:
            broken.append(f"input limit (max_req_input_len) {self.input_limit} -> {now.input_limit}")
        return "; ".join(broken) or None


def parsers(server_info: dict[str, Any]) -> tuple[object, ...]:
    return tuple(server_info.get(key) for key in PARSER_KEYS)


def input_limit(server_info: dict[str, Any]) -> int | None:
    value = server_info.get("max_req_input_len")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def terms_of(client: Backend, context: bool) -> Terms:
    """A server's terms as it answers now (``context``: ask its context length too). Raises ServerError
    when it cannot say what it serves."""
    info = await client.model_info()
    length = await client.context_length() if context else None
    server_info = await client.server_info()
    return Terms(identity(info), length, parsers(server_info), input_limit(server_info))


@dataclass
class ServerContext:
    model: str | None = None
    model_path: str | None = None
    weight_version: str | None = None
    tokenizer_path: str | None = None
    reasoning_parser: str | None = None  # what the server was started with (/server_info)
    tool_call_parser: str | None = None
    identity: tuple[object, ...] = ()  # see identity(): what must not change while the run goes on
    terms: Terms = field(default_factory=lambda: Terms())  # what the server is held to after an outage
    context_len: int | None = None
    max_input_len: int | None = None
    vocab_size: int | None = None
    notes: list[str] = field(default_factory=list)


def fit_max_new_tokens(
    prompt_len: int, max_tokens: int, context_len: int | None, max_input_len: int | None
) -> tuple[int | None, str | None]:
    """(max_new_tokens, None) for a prompt that fits, or (None, reason) for one to skip."""
    if max_input_len is None and context_len is not None:
        max_input_len = context_len - SCHEDULER_RESERVED
    if max_input_len is not None and prompt_len >= max_input_len:
        return None, f"prompt has {prompt_len} tokens; the server accepts fewer than {max_input_len}"
    if context_len is None:
        return max_tokens, None
    # SGLang 0.5.5 rejects input + max_new >= context, 0.5.23 only >: leave one token.
    room = context_len - prompt_len - 1
    if room < 1:
        return None, f"prompt has {prompt_len} tokens, leaving no room to generate under {context_len}"
    return min(max_tokens, room), None


async def discover(client: Backend, cfg: RunConfig) -> ServerContext:
    """Ask the server what it serves and what it accepts (no tokenizer is loaded here)."""
    ctx = ServerContext()
    try:
        info = await client.model_info()
    except ServersDisagree:
        raise
    except ServerError as exc:
        if cfg.dry_run and not cfg.tokenizer:
            hint = "a dry run without a server needs --tokenizer PATH (and --max-seq-len N)"
            raise ServerError(f"{exc}; {hint}") from exc
        if not cfg.dry_run:
            raise
        info = {}
        ctx.notes.append(f"server {cfg.display_url} not reachable; dry run continues without it")
    ctx.model = info.get("served_model_name") or info.get("model_path")
    ctx.model_path = info.get("model_path")
    ctx.identity = identity(info)
    version = info.get("weight_version")
    ctx.weight_version = version if isinstance(version, str) else None
    ctx.tokenizer_path = cfg.tokenizer or info.get("tokenizer_path") or info.get("model_path")
    if not ctx.tokenizer_path:
        raise SynthgenError(f"{cfg.display_url}/model_info reports no tokenizer_path; pass --tokenizer PATH")
    # The served model's own config.json is the truth; a --tokenizer folder's is the fallback.
    model_config = templating.model_config(info.get("model_path"), ctx.tokenizer_path)
    reported: int | None = None  # the server's own context length, if asked (not under --max-seq-len)
    if cfg.max_seq_len is not None:
        ctx.context_len = cfg.max_seq_len
    elif not info:  # a dry run without a server: the tokenizer folder's config.json, if it says
        ctx.context_len = templating.model_context_length(model_config)
        ctx.notes.append(
            f"context length {ctx.context_len or 'unknown'} from the tokenizer folder's config.json; "
            "pass --max-seq-len N for the server's"
        )
    elif info:
        ctx.context_len = reported = await client.context_length()
        if ctx.context_len is None:
            ctx.context_len = templating.model_context_length(model_config)
            found = (
                f"using max_position_embeddings {ctx.context_len} from the model's config.json"
                if ctx.context_len
                else "prompt lengths are not checked before sending"
            )
            ctx.notes.append(
                f"the server reports no max_model_len at /v1/models; {found}; pass --max-seq-len to set it"
            )
    server_info = await client.server_info() if info else {}
    if info:
        ctx.terms = Terms(ctx.identity, reported, parsers(server_info), input_limit(server_info))
    for key in PARSER_KEYS:
        if isinstance(server_info.get(key), str) and server_info[key]:
            setattr(ctx, key, server_info[key])
    value = server_info.get("max_req_input_len")
    # An explicit --max-seq-len is the user's word on lengths.
    if cfg.max_seq_len is None and isinstance(value, int) and value > 0:
        ctx.max_input_len = value if ctx.context_len is None else min(value, ctx.context_len - SCHEDULER_RESERVED)
    ctx.vocab_size = templating.model_vocab_size(model_config)
    return ctx


def identity(info: dict[str, Any]) -> tuple[object, ...]:
    """What must not change under a running job: the served model, its weights and its tokenizer."""
    return tuple(info.get(k) for k in IDENTITY_KEYS)


class ServerGone(ServerError):
    pass


class ServersDisagree(ServerError):
    """Servers given together (``--server-url`` more than once) serve different models, or differ in what
    decides a row (context, parsers): one run writes rows of one model."""


class ServerChanged(ServerError):
    """The server came back from an outage serving another model, weights or tokenizer, or with another
    context length, parsers or a smaller input limit (Terms)."""


SERVES_OTHERWISE = "rerun with another --output-dir (or --allow-mixed-settings) to go on with this one"
LIMITS_OTHERWISE = "rerun the same command to go on with it as it is now (a run reads the server's limits at its start)"


async def changed_terms(client: Backend, ctx: ServerContext) -> tuple[str, str] | None:
    """After an outage: (why the server is not the one the run started with, how else to go on), or None
    if it is. Another context length or input limit alone changes no setting a rerun checks."""
    try:
        now = await terms_of(client, ctx.terms.context_length is not None)
    except ServerError as exc:
        return f"cannot ask it what it serves ({exc})", SERVES_OTHERWISE
    broken = ctx.terms.broken_by(now)
    if broken is None:
        return None
    same = (now.identity, now.parsers) == (ctx.terms.identity, ctx.terms.parsers)
    return broken, LIMITS_OTHERWISE if same else SERVES_OTHERWISE


class ServerHealth:
    """Whether the server is up, shared by all workers.

    A worker whose request failed in a way that smells of an outage calls ``suspect()``;
    the first such call checks /health and, if the server is down, every worker waits in
    ``wait_up()`` while one poller checks /health with backoff. After ``server_wait``
    seconds of continuous outage the run gives up (it is resumable). ``on_down(reason)``,
    ``on_up(seconds)`` and ``on_gone(error)`` tell whoever reports it; they are called
    after the state has changed.
    """

    def __init__(
        self,
        client: Backend,
        server_wait: float,
        on_down: Callable[[str], None],
        on_up: Callable[[float], None],
        on_gone: Callable[[ServerError], None],
        verify: Callable[[], Awaitable[tuple[str, str] | None]] | None = None,
    ):
        self.client, self.server_wait = client, server_wait
        self.on_down, self.on_up, self.on_gone, self.verify = on_down, on_up, on_gone, verify
        self.up = asyncio.Event()
        self.up.set()
        self.gone: ServerError | None = None
        self._lock = asyncio.Lock()
        self._poller: asyncio.Task[None] | None = None

    @property
    def is_down(self) -> bool:
        return not self.up.is_set()

    async def suspect(self, reason: str) -> bool:
        """True if the server is down (the failed attempt should not count against the prompt)."""
        async with self._lock:
            if not self.up.is_set():
                return True
            if await self.client.healthy():
                return False
            self.up.clear()
            self._poller = asyncio.create_task(self._poll())
            self.on_down(reason)
            return True

    async def _poll(self) -> None:
        started = time.monotonic()
        delay = 1.0
        while True:
            await asyncio.sleep(delay)
            if await self.client.healthy():
                changed = await self.verify() if self.verify is not None else None
                if changed is not None:
                    what, otherwise = changed
                    self.gone = ServerChanged(
                        f"the server {self.client.shown_url} came back serving something else ({what}); stopped so "
                        "no row is made with another model or settings than the run's and no prompt fails on them; "
                        f"restart it as it was, or {otherwise}"
                    )
                    self.up.set()
                    self.on_gone(self.gone)
                    return
                self.up.set()
                self.on_up(time.monotonic() - started)
                return
            if time.monotonic() - started >= self.server_wait:
                self.gone = ServerGone(
                    f"gave up: server {self.client.shown_url} was unreachable for "
                    f"{fmt_duration(time.monotonic() - started)} (--server-wait); nothing was lost: "
                    "rerun the same command to resume"
                )
                self.up.set()  # release the waiters so they see ``gone``
                self.on_gone(self.gone)
                return
            delay = min(delay * 2, 5.0)

    async def wait_up(self) -> None:
        await self.up.wait()
        if self.gone is not None:
            raise self.gone

    def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
