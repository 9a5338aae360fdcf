"""SGLang's MiniMax detectors: M2's ``<minimax:tool_call><invoke name="F">`` and M3's nested elements."""

from __future__ import annotations

import json
import re
from typing import Any

from synthgen.chat.parsers.calls import (
    Found,
    Item,
    Tools,
    base_json,
    dumps,
    schema_properties,
)
from synthgen.chat.parsers.registry import tool_parser
from synthgen.chat.parsers.scan import BlockScan
from synthgen.chat.parsers.tools.glm import _glm47_json_type

_MM_FUNCTION = re.compile(r"<invoke name=\"(.*?)</invoke>|<invoke name=\"(.*)$", re.DOTALL)
_MM_PARAMETER = re.compile(r"<parameter name=\"(.*?)</parameter>|<parameter name=\"(.*?)$", re.DOTALL)


def _mm_types(schema: object) -> list[str]:
    if not isinstance(schema, dict):
        return ["string"]
    types: set[str] = set()
    kind = schema.get("type")
    if isinstance(kind, str):
        types.add(kind)
    elif isinstance(kind, list):
        types.update(t for t in kind if isinstance(t, str))
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        for value in schema["enum"]:
            types.add(_glm47_json_type(value) if not isinstance(value, float) else "number")
    for choice in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(choice), list):
            for sub in schema[choice]:
                types.update(_mm_types(sub))
    return list(types) if types else ["string"]


def _mm_convert(value: str, types: list[str]) -> Any:
    """MinimaxM2Detector._convert_param_value_with_types."""
    if value.lower() == "null":
        return None
    lowered = [t.lower() for t in types]
    if "null" in lowered or value.lower() in ("null", "none", "nil"):
        return None
    for kind in ("integer", "int", "number", "float", "boolean", "bool", "object", "array", "string", "str", "text"):
        if kind not in lowered:
            continue
        if kind in ("string", "str", "text"):
            return value
        if kind in ("integer", "int"):
            try:
                return int(value)
            except ValueError:
                continue
        elif kind in ("number", "float"):
            try:
                number = float(value)
                return number if number != int(number) else int(number)
            except ValueError:
                continue
        elif kind in ("boolean", "bool"):
            word = value.lower().strip()
            if word in ("true", "1", "yes", "on"):
                return True
            if word in ("false", "0", "no", "off"):
                return False
        else:
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                continue
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


@tool_parser(
    "minimax-m2",
    family="XML arguments (schema-converted)",
    splits='`<minimax:tool_call><invoke name="F"><parameter name="K">…`',
    ends=("</minimax:tool_call>",),
)
def minimax_m2(text: str, tools: Tools) -> Found:
    """MinimaxM2Detector: ``<minimax:tool_call><invoke name="F"><parameter name="K">v</parameter>...``;
    the answer is all text outside complete blocks."""
    start, end = "<minimax:tool_call>", "</minimax:tool_call>"
    if start not in text:
        return None
    normal: list[str] = []
    calls: list[Item] = []
    scan = BlockScan(text, start, end)
    for found in scan:
        normal.append(found.before)
        if not found.closed:
            normal.append(found.outer)
            break
        block = found.outer
        for closed, open_ in _MM_FUNCTION.findall(block):
            body = closed or open_
            if '">' not in body:
                continue
            name, rest = body[: body.index('">')].strip(), body[body.index('">') + 2 :]
            config: dict[str, Any] = {}
            if tools.schemas is not None and isinstance(tools.schemas.get(name), dict):
                config = schema_properties(tools.schemas[name])
            params: dict[str, Any] = {}
            for pclosed, popen in _MM_PARAMETER.findall(rest):
                ptext = pclosed or popen
                if '">' not in ptext:
                    continue
                key = ptext[: ptext.index('">')].strip()
                value = ptext[ptext.index('">') + 2 :].lstrip("\n").rstrip("\n")
                params[key] = _mm_convert(value, _mm_types(config[key]) if key in config else ["string"])
            calls.extend(base_json({"name": name, "arguments": params}, tools))
    normal.append(scan.rest)
    return "".join(normal), calls


_MM3 = "]<]minimax[>["
_MM3_SCALARS = {"string", "str", "integer", "int", "number", "float", "boolean", "bool", "null"}


def _mm3_types(schema: Any) -> list[str]:
    if not isinstance(schema, dict):
        return []
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared.lower()]
    if isinstance(declared, list):
        return [t.lower() for t in declared if isinstance(t, str)]
    return []


def _mm3_untyped(schema: Any) -> bool:
    if not isinstance(schema, dict):
        return True
    return not _mm3_types(schema) and not any(k in schema for k in ("properties", "items", "prefixItems"))


def _mm3_child_schema(parent: Any, tag: str, parent_value: Any) -> Any:
    if not isinstance(parent, dict):
        return None
    if "array" in _mm3_types(parent) and tag == "item":
        index = len(parent_value) if isinstance(parent_value, list) else 0
        prefix = parent.get("prefixItems")
        if isinstance(prefix, list) and index < len(prefix):
            return prefix[index] if isinstance(prefix[index], dict) else None
        for key in ("additionalItems", "items"):
            if isinstance(parent.get(key), dict):
                return parent[key]
        if isinstance(prefix, list) and prefix:
            return prefix[-1] if isinstance(prefix[-1], dict) else None
        return None
    properties = schema_properties(parent)
    if tag in properties:
        return properties[tag] if isinstance(properties[tag], dict) else None
    extra = parent.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def _mm3_leaf(value: str, schema: Any) -> Any:
    """MinimaxM3Detector._convert_leaf_value."""
    if _mm3_untyped(schema):
        return {"true": True, "false": False, "null": None}.get(value.strip(), value)
    types = set(_mm3_types(schema))
    nullable = "null" in types
    if types & {"string", "str"} and not nullable:
        return value
    if nullable and (value in ("null", "Null", "NULL") or value == ""):
        return None
    if types & {"integer", "int"}:
        try:
            return int(value)
        except (TypeError, ValueError):
            pass
    if types & {"number", "float"}:
        try:
            number = float(value)
            return number if number != int(number) else int(number)
        except (TypeError, ValueError):
            pass
    if types & {"boolean", "bool"}:
        word = value.lower().strip()
        if word in ("true", "1", "yes", "on"):
            return True
        if word in ("false", "0", "no", "off"):
            return False
    return value


def _mm3_assign(parent: Any, tag: str, value: Any) -> None:
    if isinstance(parent, list):
        parent.append(value)
    elif tag in parent:
        if isinstance(parent[tag], list):
            parent[tag].append(value)
        else:
            parent[tag] = [parent[tag], value]
    else:
        parent[tag] = value


def _mm3_parameters(body: str, schema: Any) -> Any:
    """MinimaxM3Detector._parse_parameter: nested ``]<]minimax[>[<tag>`` elements, typed by the schema."""
    chunks = [c.strip() for c in body.split(_MM3)]
    first = next((c for c in chunks if c), "")
    root: Any = [] if "array" in _mm3_types(schema) and first.startswith("<item>") else {}
    stack: list[dict[str, Any]] = [{"tag": "", "schema": schema, "value": root, "inferred_list": False}]
    for chunk in chunks:
        if not chunk:
            continue
        if chunk.startswith("</"):
            gt = chunk.find(">", 2)
            tag = chunk[2:gt].strip() if gt != -1 else chunk[2:].strip()
            if len(stack) == 1:
                raise ValueError(f"unexpected closing tag: {tag}")
            if stack[-1]["tag"] != tag:
                raise ValueError(f"mismatched closing tag: {tag}")
            frame = stack.pop()
            _mm3_assign(stack[-1]["value"], frame["tag"], frame["value"])
            continue
        if chunk.startswith("<"):
            gt = chunk.index(">")  # no '>' raises ValueError, as in SGLang
            tag, text = chunk[1:gt].strip(), chunk[gt + 1 :]
            parent = stack[-1]
            if _mm3_untyped(parent["schema"]):
                if tag == "item":
                    if isinstance(parent["value"], dict) and not parent["value"]:
                        parent["value"], parent["inferred_list"] = [], True
                elif parent["inferred_list"]:
                    held = parent["value"]
                    parent["value"] = {"item": held[0] if len(held) == 1 else held}
                    parent["inferred_list"] = False
            child = _mm3_child_schema(parent["schema"], tag, parent["value"])
            child_types = set(_mm3_types(child))
            scalar = bool(child_types & _MM3_SCALARS) and not child_types & {"object", "array"}
            if text or scalar:
                value: Any = _mm3_leaf(text, child)
            else:
                value = [] if "array" in _mm3_types(child) else {}
            stack.append({"tag": tag, "schema": child, "value": value, "inferred_list": False})
    return stack[0]["value"]


@tool_parser(
    "minimax-m3",
    family="XML arguments (schema-converted)",
    splits='`]<]minimax[>[<tool_call>` `<invoke name="F">`, nested elements',
    ends=("</tool_call>",),
)
def minimax_m3(text: str, tools: Tools) -> Found:
    """MinimaxM3Detector: ``]<]minimax[>[<tool_call>`` blocks of ``<invoke name="F">`` with nested,
    schema-typed parameter elements; a malformed call leaves the whole answer as it is."""
    start_tag, end_tag = _MM3 + "<tool_call>", _MM3 + "</tool_call>"
    normalized = re.sub(re.escape(_MM3) + r"[ \t\r\n]+(?=<)", _MM3, text)
    if start_tag not in normalized:
        return None
    try:
        parts: list[str] = []
        calls: list[Item] = []
        scan = BlockScan(normalized, start_tag, end_tag)
        for block in scan:
            parts.append(block.before)
            if not block.closed:
                parts.append(block.outer)
                break
            _mm3_calls(block.inner, tools, calls)
        parts.append(scan.rest)
        return "".join(parts), calls
    except Exception:
        return text, []


def _mm3_calls(block: str, tools: Tools, calls: list[Item]) -> None:
    """The ``<invoke name="F">`` calls of one block, appended to ``calls``; a malformed one raises."""
    for invoke in BlockScan(block, _MM3 + '<invoke name="', _MM3 + "</invoke>"):
        if not invoke.closed:
            break
        name_end = invoke.inner.find('">')
        if name_end == -1:
            continue
        name = invoke.inner[:name_end]
        schema = tools.schemas.get(name) if tools.schemas is not None else None
        params = _mm3_parameters(invoke.inner[name_end + 2 :], schema if isinstance(schema, dict) else None)
        try:
            found = (
                base_json({"name": name, "arguments": params}, tools) if tools.schemas else [Item(name, dumps(params))]
            )
        except Exception:
            continue
        for item in found:
            calls.append(Item(item.name, item.arguments, len(calls)))
