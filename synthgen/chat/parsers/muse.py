"""Muse Glimmer's recipient channels (SGLang's ``muse`` reasoning and tool-call parsers), one shot.

A turn is a run of channels ``[<|start|>assistant] to=RECIPIENT<|message|>body<|eom|>`` (or ``<|eot|>``):
``to=self`` is reasoning, ``to=user``/``to=commentary`` the answer, any other recipient a tool channel
whose body holds ``<atem:invoke name="F"><atem:parameter name="K">v</atem:parameter></atem:invoke>``.
SGLang's one-shot parse is its streaming state machine fed the whole text and then flushed; these
functions follow that machine.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from synthgen.chat.parsers.calls import Item, Tools, dumps
from synthgen.chat.parsers.reasoning import Split

MESSAGE, EOM, EOT, START = "<|message|>", "<|eom|>", "<|eot|>", "<|start|>"
FUNCTION_CALLS_OPEN, INVOKE_OPEN, INVOKE_CLOSE = "<atem:function_calls>", "<atem:invoke", "</atem:invoke>"
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_MAX_CHANNEL_MARKER = max(len(m) for m in (MESSAGE, EOM, EOT, START))
_MAX_MARKER = max(_MAX_CHANNEL_MARKER, len(FUNCTION_CALLS_OPEN))
_INVOKE = re.compile(r'<atem:invoke\b[^>]*?\bname="(?P<name>[^"]+)"[^>]*?>')
_PARAM = re.compile(r'<atem:parameter\b[^>]*?\bname="(?P<key>[^"]+)"[^>]*?>(?P<value>.*?)</atem:parameter>', re.DOTALL)


def _could_start_header(text: str) -> bool:
    stripped = text.lstrip()
    if not stripped:
        return True
    if not (stripped.startswith("to=") or "to=".startswith(stripped[:3])):
        return False
    if MESSAGE in stripped:
        return True
    recipient, angle, marker = stripped[3:].partition("<")
    if any(c.isspace() for c in recipient):
        return False
    return not angle or MESSAGE.startswith("<" + marker)


def has_atem_markers(text: str) -> bool:
    return INVOKE_OPEN in text or FUNCTION_CALLS_OPEN in text


def _partial_marker_len(text: str, markers: tuple[str, ...], max_len: int) -> int:
    for k in range(min(len(text), max_len - 1), 0, -1):
        if any(m.startswith(text[-k:]) for m in markers):
            return k
    return 0


def _consume(text: str, preserve_channels: bool) -> tuple[str, str, bool]:
    """MuseGlimmerDetector._consume(flush=True) from a fresh state: (reasoning, answer, whether the
    output ended inside the reasoning channel)."""
    buffer = text
    recipient: str | None = None
    in_body, at_start, saw_reasoning = False, True, False
    reasoning: list[str] = []
    normal: list[str] = []
    while buffer:
        if not in_body:
            if not (at_start and _could_start_header(buffer)):
                ws = len(buffer) - len(buffer.lstrip())
                head = buffer[ws : ws + len(START)]
                if not START.startswith(head):
                    in_body, recipient, at_start = True, None, False
                    continue
                if ws:
                    normal.append(buffer[:ws])
                    buffer = buffer[ws:]
                if len(head) < len(START):
                    break
            idx = buffer.find(MESSAGE)
            if idx == -1:
                normal.append(buffer)
                buffer = ""
                break
            at_start = False
            header = buffer[:idx]
            m = _RECIPIENT.search(header)
            recipient = m.group(1) if m else "user"
            buffer = buffer[idx + len(MESSAGE) :]
            in_body = True
            if recipient == "self":
                if saw_reasoning:
                    reasoning.append("\n")
                saw_reasoning = True
            elif recipient not in ("user", "commentary") or preserve_channels:
                normal.append(header + MESSAGE)
            continue
        ends = [(i, tok) for tok in (EOM, EOT) if (i := buffer.find(tok)) != -1]
        if ends:
            end_idx, end_tok = min(ends)
            body, buffer = buffer[:end_idx], buffer[end_idx + len(end_tok) :]
            in_body = False
            if recipient == "self":
                reasoning.append(body)
            else:
                normal.append(body)
                if recipient not in ("user", "commentary") or preserve_channels:
                    normal.append(end_tok)
            recipient = None
            continue
        body, buffer = buffer, ""
        if not body:
            break
        (reasoning if recipient == "self" else normal).append(body)
    return "".join(reasoning), "".join(normal), in_body and recipient == "self"


def split(text: str, opened: bool, tool_parser_active: bool) -> Split:
    """MuseGlimmerDetector.detect_and_parse: with a tool-call parser behind it and an ATEM block in the
    answer, the answer keeps every channel's framing for the tool-call parser."""
    thought, answer, cut = _consume(text, False)
    if tool_parser_active and has_atem_markers(answer):
        thought, answer, cut = _consume(text, True)
    return Split(thought, answer, not cut, "to=self" in text)


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
