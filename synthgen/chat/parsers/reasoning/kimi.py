"""SGLang's KimiK3Detector reasoning: the XTML ``<|open|>think<|sep|>`` channel."""

from __future__ import annotations

from synthgen.chat.parsers.reasoning.base import Split
from synthgen.chat.parsers.registry import reasoning_parser

_K3_THINK_OPEN = "<|open|>think<|sep|>"
_K3_THINK_CLOSE = "<|close|>think<|sep|>"
_K3_RESPONSE_OPEN = "<|open|>response<|sep|>"
_K3_RESPONSE_CLOSE = "<|close|>response<|sep|>"
_K3_TOOLS_OPEN = "<|open|>tools<|sep|>"
_K3_TOOLS_CLOSE = "<|close|>tools<|sep|>"
_K3_MESSAGE_CLOSE = "<|close|>message<|sep|>"
_K3_PARTIAL = tuple(
    ["<|open|>", "<|close|>"]
    + [
        m.removesuffix("<|sep|>")
        for m in (_K3_THINK_CLOSE, _K3_RESPONSE_OPEN, _K3_RESPONSE_CLOSE, _K3_TOOLS_OPEN, _K3_TOOLS_CLOSE)
    ]
    + [_K3_MESSAGE_CLOSE.removesuffix("<|sep|>")]
)


def _k3_strip_partial(text: str) -> str:
    for suffix in _K3_PARTIAL:
        if text.endswith(suffix):
            return text[: -len(suffix)]
    return text


def k3_unwrap(text: str) -> str:
    """kimik3_format.strip_response_wrappers."""
    at = text.find(_K3_RESPONSE_OPEN)
    if at != -1:
        close = text.find(_K3_RESPONSE_CLOSE, at + len(_K3_RESPONSE_OPEN))
        text = text[at + len(_K3_RESPONSE_OPEN) : close] if close != -1 else text[at + len(_K3_RESPONSE_OPEN) :]
    else:
        text = text.replace(_K3_RESPONSE_CLOSE, "")
    return _k3_strip_partial(text.replace(_K3_MESSAGE_CLOSE, ""))


def _k3_clean(text: str) -> str:
    at = text.find(_K3_TOOLS_OPEN)
    return k3_unwrap(text[:at]) + text[at:] if at != -1 else k3_unwrap(text)


@reasoning_parser(
    "kimi_k3", splits="XTML `<|open|>think<|sep|>` channel; `response` unwrapped, `tools` kept", opening=_K3_THINK_OPEN
)
def kimi_k3(text: str, opened: bool, tool_parsing: bool = False) -> Split:
    """KimiK3Detector.detect_and_parse (XTML think/response/tools channels)."""
    if not (opened or _K3_THINK_OPEN in text) and _K3_THINK_CLOSE not in text:
        return Split("", _k3_clean(text), True, False)
    at = text.find(_K3_THINK_OPEN)
    start = at + len(_K3_THINK_OPEN) if at != -1 else 0
    close = text.find(_K3_THINK_CLOSE, start)
    tools = text.find(_K3_TOOLS_OPEN, start)
    channels = [i for i in (text.find(_K3_RESPONSE_OPEN, start), tools) if i != -1]
    channel = min(channels) if channels else -1
    response_close = text.find(_K3_RESPONSE_CLOSE, start)
    if response_close != -1 and all(b == -1 or response_close < b for b in (close, channel)):
        return Split("", _k3_clean(text[start:].replace(_K3_THINK_CLOSE, "")), True, False)
    if close != -1 and tools != -1 and tools < close:
        return Split(_k3_strip_partial(text[start:tools]), _k3_clean(text[tools:]), True, True)
    if close == -1:
        if channel != -1:
            return Split(_k3_strip_partial(text[start:channel]), _k3_clean(text[channel:]), True, True)
        return Split(_k3_strip_partial(text[start:]), "", False, True)
    return Split(text[start:close], _k3_clean(text[close + len(_K3_THINK_CLOSE) :]), True, True)
