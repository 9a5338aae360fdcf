"""SGLang's Muse tool calls: ``<atem:invoke>`` elements in tool channels (see :mod:`..reasoning.muse`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from synthgen.chat.parsers.calls import Item, Tools, dumps
from synthgen.chat.parsers.reasoning.muse import (
    _MAX_MARKER,
    _RECIPIENT,
    EOM,
    EOT,
    FUNCTION_CALLS_OPEN,
    INVOKE_CLOSE,
    INVOKE_OPEN,
    MESSAGE,
    START,
    _could_start_header,
    _partial_marker_len,
    has_atem_markers,
)
from synthgen.chat.parsers.registry import tool_parser

_INVOKE = re.compile(r'<atem:invoke\b[^>]*?\bname="(?P<name>[^"]+)"[^>]*?>')
_PARAM = re.compile(r'<atem:parameter\b[^>]*?\bname="(?P<key>[^"]+)"[^>]*?>(?P<value>.*?)</atem:parameter>', re.DOTALL)


def _normalize_name(emitted: str, registered: set[str]) -> str:
    if not registered or emitted in registered or "." not in emitted:
        return emitted
    head, _, tail = emitted.partition(".")
    if head == tail and head in registered:
        return head
    leaf = emitted.rsplit(".", 1)[-1]
    matches = [n for n in registered if n.rsplit(".", 1)[-1] == leaf]
    return matches[0] if len(matches) == 1 else emitted


def _decode(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return raw


@dataclass
class _ToolState:
    tools: Tools
    registered: set[str]
    recipient: str | None = None
    in_body: bool = False
    at_start: bool = True
    open_invoke: str | None = None

    def emit(self, name: str, args: dict[str, Any], calls: list[Item]) -> None:
        name = _normalize_name(name, self.registered)
        if name in self.registered or self.tools.schemas is None:
            calls.append(Item(name, dumps(args), len(calls)))

    def consume_body(self, chunk: str, calls: list[Item], normal: list[str], final: bool) -> int:
        if self.recipient is None or self.recipient in ("commentary", "self", "user"):
            normal.append(chunk)
            return len(chunk)
        pos = 0
        while pos < len(chunk):
            if self.open_invoke is None:
                m = _INVOKE.search(chunk, pos)
                if m is None:
                    return pos if not final else len(chunk)
                self.open_invoke, pos = m.group("name"), m.end()
                continue
            close = chunk.find(INVOKE_CLOSE, pos)
            if close == -1:
                return pos if not final else len(chunk)
            args = {p.group("key"): _decode(p.group("value")) for p in _PARAM.finditer(chunk[pos:close])}
            self.emit(self.open_invoke, args, calls)
            self.open_invoke, pos = None, close + len(INVOKE_CLOSE)
        return len(chunk)


@tool_parser("muse", family="Muse channels", splits='`to=functions.F<|message|><atem:invoke name="F">…<|eom|>`')
def tool_calls(text: str, tools: Tools) -> tuple[str, list[Item]] | None:
    """MuseGlimmerDetector.detect_and_parse: the whole text as one streamed chunk, then ``finish``."""
    if not has_atem_markers(text):
        return None
    state = _ToolState(tools, set(tools.order))
    calls: list[Item] = []
    normal: list[str] = []
    buffer = text
    while buffer:
        if not state.in_body:
            if not (state.at_start and _could_start_header(buffer)):
                ws = len(buffer) - len(buffer.lstrip())
                head = buffer[ws : ws + len(START)]
                if not START.startswith(head):
                    state.in_body, state.recipient, state.at_start = True, None, False
                    continue
                if ws:
                    normal.append(buffer[:ws])
                    buffer = buffer[ws:]
                if len(head) < len(START):
                    break
            idx = buffer.find(MESSAGE)
            if idx == -1:
                break
            m = _RECIPIENT.search(buffer[:idx])
            state.recipient = m.group(1) if m else "user"
            buffer = buffer[idx + len(MESSAGE) :]
            state.in_body, state.at_start = True, False
            continue
        ends = [(i, len(tok)) for tok in (EOM, EOT) if (i := buffer.find(tok)) != -1]
        if not ends:
            keep = _partial_marker_len(
                buffer, (MESSAGE, EOM, EOT, START, FUNCTION_CALLS_OPEN, INVOKE_OPEN), _MAX_MARKER
            )
            chunk = buffer[: len(buffer) - keep]
            if not chunk:
                break
            consumed = state.consume_body(chunk, calls, normal, final=False)
            if consumed == 0:
                break
            buffer = buffer[consumed:]
            continue
        end_at, end_len = min(ends)
        state.consume_body(buffer[:end_at], calls, normal, final=True)
        buffer = buffer[end_at + end_len :]
        state.in_body, state.recipient, state.open_invoke = False, None, None
    if buffer:  # finish(): what was held back
        if state.in_body:
            state.consume_body(buffer, calls, normal, final=True)
        else:
            normal.append(buffer)
    return "".join(normal), calls
