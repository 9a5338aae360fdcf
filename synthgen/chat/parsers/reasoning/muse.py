"""Muse Glimmer's recipient channels (SGLang's ``muse`` reasoning and tool-call parsers), one shot.

A turn is a run of channels ``[<|start|>assistant] to=RECIPIENT<|message|>body<|eom|>`` (or ``<|eot|>``):
``to=self`` is reasoning, ``to=user``/``to=commentary`` the answer, any other recipient a tool channel
whose body holds ``<atem:invoke name="F"><atem:parameter name="K">v</atem:parameter></atem:invoke>``.
SGLang's one-shot parse is its streaming state machine fed the whole text and then flushed; these
functions follow that machine.
"""

from __future__ import annotations

import re

from synthgen.chat.parsers.reasoning.base import Split
from synthgen.chat.parsers.registry import reasoning_parser

MESSAGE, EOM, EOT, START = "<|message|>", "<|eom|>", "<|eot|>", "<|start|>"
FUNCTION_CALLS_OPEN, INVOKE_OPEN, INVOKE_CLOSE = "<atem:function_calls>", "<atem:invoke", "</atem:invoke>"
_RECIPIENT = re.compile(r"to=([^\s<]+)")
_MAX_CHANNEL_MARKER = max(len(m) for m in (MESSAGE, EOM, EOT, START))
_MAX_MARKER = max(_MAX_CHANNEL_MARKER, len(FUNCTION_CALLS_OPEN))


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


@reasoning_parser("muse", splits="recipient channels: `to=self` is reasoning")
def split(text: str, opened: bool, tool_parser_active: bool) -> Split:
    """MuseGlimmerDetector.detect_and_parse: with a tool-call parser behind it and an ATEM block in the
    answer, the answer keeps every channel's framing for the tool-call parser."""
    thought, answer, cut = _consume(text, False)
    if tool_parser_active and has_atem_markers(answer):
        thought, answer, cut = _consume(text, True)
    return Split(thought, answer, not cut, "to=self" in text)
