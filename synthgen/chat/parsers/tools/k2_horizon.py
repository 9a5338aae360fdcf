"""SGLang's K2V3Detector (K2 Horizon): ``<ifm|tool_call>`` calls with IFM argument tags or JSON bodies."""

from __future__ import annotations

import json
import re
from typing import Any

from synthgen.chat.parsers.calls import (
    Found,
    Item,
    Tools,
    dumps,
    infer_type,
    schema_properties,
)
from synthgen.chat.parsers.registry import tool_parser
from synthgen.chat.parsers.scan import BlockScan

_K2H_CALLS, _K2H_CALLS_END = "<ifm|tool_calls>", "</ifm|tool_calls>"
_K2H_CALL, _K2H_CALL_END, _K2H_KEY = "<ifm|tool_call>", "</ifm|tool_call>", "<ifm|arg_key>"
_K2H_THINK = (
    ("<ifm|think>", "</ifm|think>"),
    ("<ifm|think_fast>", "</ifm|think_fast>"),
    ("<ifm|think_faster>", "</ifm|think_faster>"),
)
_K2H_ARG = re.compile(
    r"<ifm\|arg_key>(.*?)</ifm\|arg_key>\s*(?:<ifm\|arg_type>(.*?)</ifm\|arg_type>\s*)?"
    r"<ifm\|arg_value>(.*?)</ifm\|arg_value>",
    re.DOTALL,
)


def _k2h_resolve(schema: Any, root: Any) -> dict[str, Any] | None:
    """K2V3Detector._resolve_local_ref: ``#/$defs``/``#/definitions`` references inlined."""
    if not isinstance(schema, dict):
        return None
    resolved = dict(schema)
    seen: set[str] = set()
    while isinstance(resolved.get("$ref"), str):
        ref = resolved["$ref"]
        if ref in seen:
            return None
        seen.add(ref)
        if ref.startswith("#/$defs/"):
            defs, name = (root.get("$defs", {}) if isinstance(root, dict) else {}), ref.removeprefix("#/$defs/")
        elif ref.startswith("#/definitions/"):
            defs = root.get("definitions", {}) if isinstance(root, dict) else {}
            name = ref.removeprefix("#/definitions/")
        else:
            return resolved
        target = defs.get(name) if isinstance(defs, dict) else None
        if not isinstance(target, dict):
            return resolved
        resolved = {**target, **{k: v for k, v in resolved.items() if k != "$ref"}}
    return resolved


def _k2h_type(name: str, key: str, tools: Tools) -> str | None:
    if tools.schemas is None or name not in tools.schemas:
        return None
    root = tools.schemas[name]
    schema = _k2h_resolve(schema_properties(root).get(key), root)
    if not isinstance(schema, dict):
        return None
    declared = schema.get("type")
    if "anyOf" in schema or "oneOf" in schema:
        return None
    if isinstance(declared, list) and len([t for t in declared if t != "null"]) > 1:
        return None
    return infer_type(schema)


def _k2h_coerce(value: Any, name: str, key: str, tools: Tools, inline: str | None, from_text: bool) -> Any:
    target = _k2h_type(name, key, tools) or inline
    if target == "any":
        return value
    if target == "string":
        return value if isinstance(value, str) else dumps(value)
    if not isinstance(value, str) or (target is None and not from_text):
        return value
    try:
        return json.loads(value.strip())
    except json.JSONDecodeError:
        return value


def _k2h_block(block: str, tools: Tools) -> list[tuple[str, dict[str, Any]]] | None:
    stripped = block.strip()
    try:
        if stripped.startswith(("{", "[")):
            payload = json.loads(stripped)
            found: list[tuple[str, dict[str, Any]]] = []
            for raw in payload if isinstance(payload, list) else [payload]:
                if not isinstance(raw, dict):
                    raise ValueError("not an object")
                function = raw.get("function", raw)
                if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
                    raise ValueError("no function name")
                arguments = function.get("arguments", function.get("parameters", {}))
                if isinstance(arguments, str):
                    arguments = json.loads(arguments) if arguments.strip() else {}
                if arguments is None:
                    arguments = {}
                if not isinstance(arguments, dict):
                    raise ValueError("arguments not an object")
                fname = function["name"]
                found.append((fname, {k: _k2h_coerce(v, fname, k, tools, None, False) for k, v in arguments.items()}))
            return found
        first = block.find(_K2H_KEY)
        name = (block if first == -1 else block[:first]).strip()
        if not name:
            raise ValueError("no function name")
        if first == -1:
            return [(name, {})]
        text = block[first:]
        args: dict[str, Any] = {}
        cursor = 0
        while True:  # SGLang's finditer, with anything but whitespace between pairs malformed: anchored
            while cursor < len(text) and text[cursor].isspace():  # matches find the same, in linear time
                cursor += 1
            if cursor == len(text):
                return [(name, args)]
            m = _K2H_ARG.match(text, cursor)
            if m is None:
                raise ValueError("malformed framing")
            key = m.group(1).strip()
            if not key:
                raise ValueError("no key")
            inline = m.group(2).strip() if m.group(2) else None
            args[key] = _k2h_coerce(m.group(3), name, key, tools, inline, True)
            cursor = m.end()
    except (TypeError, ValueError):
        return None


def _k2h_items(parsed: list[tuple[str, dict[str, Any]]], tools: Tools, start: int) -> list[Item]:
    items: list[Item] = []
    for name, arguments in parsed:
        if tools.declared(name):
            items.append(Item(name, dumps(arguments), start + len(items)))
    return items


def _k2h_leading_reasoning(text: str) -> tuple[str, str]:
    cursor = 0
    while cursor < len(text):
        rest = text[cursor:]
        stripped = rest.lstrip()
        pair = next(((s, e) for s, e in _K2H_THINK if stripped.startswith(s)), None)
        if pair is None:
            if stripped and any(s.startswith(stripped) for s, _ in _K2H_THINK):
                return text, ""
            return text[:cursor], text[cursor:]
        end = stripped.find(pair[1], len(pair[0]))
        if end == -1:
            return text, ""
        cursor += len(rest) - len(stripped) + end + len(pair[1])
    return text, ""


@tool_parser(
    "k2_horizon",
    family="XML arguments (schema-converted)",
    splits="`<ifm|tool_call>NAME<ifm|arg_key>…<ifm|arg_value>…`",
    ends=("</ifm|tool_call>",),
)
def k2_horizon(text: str, tools: Tools) -> Found:
    """K2V3Detector (K2 Horizon IFM tokens): ``<ifm|tool_call>NAME<ifm|arg_key>k</ifm|arg_key>
    <ifm|arg_value>v</ifm|arg_value></ifm|tool_call>`` or JSON bodies, optionally grouped."""
    if _K2H_CALL not in text:
        return None
    prefix, working = _k2h_leading_reasoning(text)
    group = working.find(_K2H_CALLS)
    group_end = working.find(_K2H_CALLS_END, group + len(_K2H_CALLS)) if group != -1 else -1
    if group_end != -1:
        parsed = _k2h_group(working[group + len(_K2H_CALLS) : group_end], tools)
        if not parsed:
            return prefix + working, []
        normal = working[:group] + working[group_end + len(_K2H_CALLS_END) :]
        return prefix + normal, _k2h_items(parsed, tools, 0)
    calls: list[Item] = []
    parts: list[str] = []
    scan = BlockScan(working, _K2H_CALL, _K2H_CALL_END)
    for block in scan:
        parts.append(block.before)
        found = _k2h_block(block.inner, tools) if block.closed else None
        if found is None:
            parts.append(block.outer)
        else:
            calls.extend(_k2h_items(found, tools, len(calls)))
    parts.append(scan.rest)
    normal = "".join(parts).replace(_K2H_CALLS, "").replace(_K2H_CALLS_END, "")
    return prefix + normal, calls


def _k2h_group(region: str, tools: Tools) -> list[tuple[str, dict[str, Any]]] | None:
    """The calls of a ``<ifm|tool_calls>`` group; None unless it holds only well-formed calls."""
    parsed: list[tuple[str, dict[str, Any]]] = []
    scan = BlockScan(region, _K2H_CALL, _K2H_CALL_END)
    for block in scan:
        found = _k2h_block(block.inner, tools) if block.closed and not block.before.strip() else None
        if found is None:
            return None
        parsed.extend(found)
    return None if scan.rest.strip() else parsed
