"""SGLang's Kimi detectors: K2's ``<|tool_calls_section_begin|>`` sections and K3's XTML tool channel."""

from __future__ import annotations

import json
import re
from typing import Any

from synthgen.chat.parsers.calls import (
    Found,
    Item,
    Tools,
    dumps,
    schema_properties,
)
from synthgen.chat.parsers.reasoning.kimi import k3_unwrap
from synthgen.chat.parsers.registry import tool_parser
from synthgen.chat.parsers.scan import through_last

_KIMI_CALL = re.compile(
    r"<\|tool_call_begin\|>\s*(?P<tool_call_id>[^\s<|]+)\s*<\|tool_call_argument_begin\|>\s*"
    r"(?P<function_arguments>\{.*?\})\s*<\|tool_call_end\|>",
    re.DOTALL,
)
_KIMI_ID = re.compile(r"^(?:functions\.)?(?P<name>[\w.\-]+):(?P<index>\d+)$")


def _kimi_infer(tools: Tools, arguments: str) -> str | None:
    """KimiK2Detector._infer_tool_name: a bare counter id names the only tool, or the best-fitting one."""
    if not tools.schemas:
        return None
    if len(tools.order) == 1:
        return tools.order[0]
    try:
        keys = set(json.loads(arguments).keys())
    except (json.JSONDecodeError, TypeError, AttributeError):
        return None
    best, score = None, -1
    for name in tools.order:
        props = set(schema_properties(tools.schemas[name] or {}).keys())
        if props and len(keys & props) - len(keys - props) > score:
            best, score = name, len(keys & props) - len(keys - props)
    return best


@tool_parser("kimi_k2", family="Kimi", splits="`<|tool_calls_section_begin|>`, ids `functions.NAME:N`")
def kimi_k2(text: str, tools: Tools) -> Found:
    """KimiK2Detector: ``<|tool_calls_section_begin|>`` sections; ids ``functions.NAME:N``; the
    arguments are the model's text as SGLang keeps them."""
    at = text.find("<|tool_calls_section_begin|>")
    if at == -1:
        return None
    calls: list[Item] = []
    for model_id, arguments in _KIMI_CALL.findall(through_last(text, "<|tool_call_end|>")):
        m = _KIMI_ID.match(model_id)
        name = m["name"] if m else (_kimi_infer(tools, arguments) if re.fullmatch(r"\d+", model_id) else None)
        if name is not None:
            calls.append(Item(name, arguments, len(calls)))
    return text[:at], calls


_K3_CALL = re.compile(
    r"<\|open\|>call\s+(?P<attrs>(?:(?!<\|sep\|>).)*?)<\|sep\|>(?P<body>.*?)<\|close\|>call<\|sep\|>", re.DOTALL
)
_K3_ARG = re.compile(
    r"<\|open\|>argument\s+(?P<attrs>(?:(?!<\|sep\|>).)*?)<\|sep\|>(?P<val>.*?)<\|close\|>argument<\|sep\|>", re.DOTALL
)


def _k3_attrs(attrs: str) -> dict[str, str]:
    return {
        m["k"]: m["v"].replace("&quot;", '"').replace("&amp;", "&")
        for m in re.finditer(r'(?P<k>\w+)="(?P<v>[^"]*)"', attrs)
    }


@tool_parser("kimi_k3", family="Kimi", splits="XTML `<|open|>tools<|sep|>` `<|open|>call tool=…`, ids `NAME:N`")
def kimi_k3(text: str, tools: Tools) -> Found:
    """KimiK3Detector: ``<|open|>tools<|sep|>`` holding ``<|open|>call tool="NAME"<|sep|>`` with typed
    ``<|open|>argument key="K" type="T"<|sep|>`` values; ids ``NAME:N``; calls are not checked against the tools."""
    at = text.find("<|open|>tools<|sep|>")
    if at == -1:
        return None
    before = k3_unwrap(text[:at])
    start = at + len("<|open|>tools<|sep|>")
    close = text.find("<|close|>tools<|sep|>", start)
    section = text[start:] if close == -1 else text[start:close]
    calls: list[Item] = []
    for m in _K3_CALL.finditer(through_last(section, "<|close|>call<|sep|>")):
        name = _k3_attrs(m["attrs"]).get("tool", "")
        if not name:
            continue
        arguments: dict[str, Any] = {}
        for arg in _K3_ARG.finditer(through_last(m["body"], "<|close|>argument<|sep|>")):
            attrs = _k3_attrs(arg["attrs"])
            key, kind, raw = attrs.get("key", ""), attrs.get("type", "string"), arg["val"]
            if kind == "string":
                arguments[key] = raw
            else:
                try:
                    arguments[key] = json.loads(raw)
                except json.JSONDecodeError:
                    arguments[key] = raw
        calls.append(Item(name, dumps(arguments), len(calls)))
    return before, calls
