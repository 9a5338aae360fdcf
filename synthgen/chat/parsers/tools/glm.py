"""SGLang's GLM family: ``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>`` (GLM-4.5, GLM-4.7,
Ling-3, IQuest-Q1, Spark-2.5, Poolside, Hunyuan), values typed by the tool schemas.
"""

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
    infer_type,
    literal_eval,
    schema_properties,
)
from synthgen.chat.parsers.registry import tool_parser
from synthgen.chat.parsers.scan import BlockScan, through_last


def _glm_type(name: str, key: str, tools: Tools) -> str | None:
    """glm4_moe_detector.get_argument_type."""
    if tools.schemas is None or name not in tools.schemas:
        return None
    properties = schema_properties(tools.schemas[name])
    return infer_type(properties[key]) if key in properties else None


def _number(value: str) -> Any:
    try:
        return float(value) if "." in value or "e" in value.lower() else int(value)
    except ValueError:
        return value


def _glm_value(raw: str, kind: str | None, coerce: Any) -> tuple[Any, bool]:
    """glm4_moe / glm47 ``parse_arguments``: JSON, then JSON-escaped JSON, then by type, then Python."""
    try:
        return coerce(json.loads(raw), kind), True
    except ValueError:
        pass
    try:
        return coerce(json.loads(json.loads('{"tmp": "' + raw + '"}')["tmp"]), kind), True
    except (ValueError, KeyError):
        pass
    if kind == "string":
        if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "\"'":
            return raw[1:-1], True
        return raw, True
    try:
        return literal_eval(raw), True
    except (ValueError, SyntaxError):
        pass
    return raw, True


def _coerce45(value: Any, kind: str | None) -> Any:
    return _number(value) if kind == "number" and isinstance(value, str) else value


_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>", re.DOTALL)  # SGLang's


def _glm_skip(text: str, i: int) -> int:
    """Past ``(?:\\\\n|\\s)*``: whitespace and escaped newlines."""
    while i < len(text):
        if text.startswith("\\n", i):
            i += 2
        elif text[i].isspace():
            i += 1
        else:
            break
    return i


def glm_arg_pairs(text: str, tight: bool = False) -> tuple[list[tuple[str, str]], str]:
    """``_GLM_ARG.findall(text)`` and ``_GLM_ARG.sub("", text)`` (``tight``: nothing between ``</arg_key>``
    and ``<arg_value>``, Spark-2.5's pattern) in linear time: the regex rescans to the end from every
    ``<arg_key>`` no pair follows. A start's key runs to the first ``</arg_key>`` that a value follows; when
    none does for one start, none does for a later one."""
    pairs: list[tuple[str, str]] = []
    rest: list[str] = []
    last_close = text.rfind("</arg_value>")
    pos = 0
    while (start := text.find("<arg_key>", pos)) != -1:
        close = text.find("</arg_key>", start + len("<arg_key>"))
        while close != -1:
            value = close + len("</arg_key>") if tight else _glm_skip(text, close + len("</arg_key>"))
            if text.startswith("<arg_value>", value) and last_close >= value + len("<arg_value>"):
                break
            close = text.find("</arg_key>", close + 1)
        if close == -1:
            break
        value += len("<arg_value>")
        end = text.find("</arg_value>", value)
        pairs.append((text[start + len("<arg_key>") : close], text[value:end]))
        rest.append(text[pos:start])
        pos = end + len("</arg_value>")
    rest.append(text[pos:])
    return pairs, "".join(rest)


_GLM45_DETAIL = r"<tool_call>(.*?)(?:\\n|\n)(.*)</tool_call>"


@tool_parser(
    "glm",
    "glm45",
    family="XML arguments (schema-converted)",
    splits="`<tool_call>NAME\\n<arg_key>…<arg_value>…`",
    ends=("</tool_call>",),
)
def glm45(text: str, tools: Tools, detail_re: str = _GLM45_DETAIL) -> Found:
    """Glm4MoeDetector: ``<tool_call>NAME\\n<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>``."""
    if "<tool_call>" not in text:
        return None
    normal = text[: text.find("<tool_call>")].strip()
    calls: list[Item] = []
    try:
        for block in re.findall(r"<tool_call>.*?</tool_call>", through_last(text, "</tool_call>"), re.DOTALL):
            detail = re.match(detail_re, block, re.DOTALL)  # search's first try, at 0, succeeds if any does
            if detail is None:
                continue
            name = detail.group(1) or ""
            arguments: dict[str, Any] = {}
            for key, raw in glm_arg_pairs(detail.group(2) or "")[0]:
                key = key.strip()
                kind = _glm_type(name, key, tools)
                value, good = _glm_value(raw, kind, _coerce45)
                if kind == "string":
                    if isinstance(value, str):
                        arguments[key] = value
                    elif isinstance(value, (dict, list)):
                        arguments[key] = dumps(value)
                    else:
                        arguments[key] = str(value)
                else:
                    arguments[key] = value if good else raw
            calls.extend(base_json({"name": name, "parameters": arguments}, tools))
    except Exception:
        return text, []
    return normal, calls


def _coerce47(value: Any, kind: str | None) -> Any:
    if isinstance(value, str):
        if kind == "integer":
            try:
                return int(value)
            except ValueError:
                return value
        if kind == "number":
            return _number(value)
    return value


@tool_parser(
    "glm47",
    family="XML arguments (schema-converted)",
    splits="`<tool_call>NAME<arg_key>…<arg_value>…`",
    ends=("</tool_call>",),
)
def glm47(text: str, tools: Tools) -> Found:
    """Glm47MoeDetector: GLM-4.7's ``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>...``
    (no newline after the name); every text outside the calls is the answer; values typed by the schema,
    unions resolved against the other arguments."""
    if "<tool_call>" not in text:
        return None
    parts: list[str] = []
    last = 0
    for m in re.finditer(r"<tool_call>.*?</tool_call>", through_last(text, "</tool_call>"), re.DOTALL):
        if m.start() > last:
            parts.append(text[last : m.start()])
        last = m.end()
    if last < len(text):
        parts.append(text[last:])
    normal = "".join(parts).strip()
    calls: list[Item] = []
    try:
        for block in re.findall(r"<tool_call>.*?</tool_call>", through_last(text, "</tool_call>"), re.DOTALL):
            detail = re.match(r"<tool_call>(.*?)(<arg_key>.*?)?</tool_call>", block, re.DOTALL)
            if detail is None:
                continue
            name = detail.group(1) or ""
            pairs = glm_arg_pairs(detail.group(2))[0] if detail.group(2) else []
            arguments = glm47_arguments(pairs, name, tools)
            calls.extend(base_json({"name": name, "parameters": arguments}, tools))
    except Exception:
        return text, []
    return normal, calls


_UNSET = object()


def _glm47_json_type(value: object) -> str:
    if isinstance(value, float) and value.is_integer():
        return "integer"
    kinds: dict[type, str] = {
        type(None): "null",
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }
    return kinds[type(value)]  # another type raises KeyError, as in SGLang


def _glm47_equal(left: Any, right: Any) -> bool:
    if _glm47_json_type(left) != _glm47_json_type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_glm47_equal(v, right[k]) for k, v in left.items())
    if isinstance(left, list):
        return len(left) == len(right) and all(_glm47_equal(a, b) for a, b in zip(left, right, strict=False))
    return bool(left == right)


def _glm47_ref(root: Any, ref: str) -> Any:
    target = root
    for part in ref[2:].split("/") if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        target = target[int(part)] if isinstance(target, list) else target[part]
    return target


def _glm47_discriminates(schema: Any, root: Any, arguments: dict[str, Any]) -> bool:
    for name, value in arguments.items():
        types = _glm47_types(schema, root, name, value=value)
        if types is not None and _glm47_json_type(value) not in types:
            return False
    return True


def _glm47_types(
    schema: Any,
    root: Any,
    key: str | None = None,
    seen: frozenset[int] = frozenset(),
    arguments: dict[str, Any] | None = None,
    value: Any = _UNSET,
) -> set[str] | None:
    """glm47_moe_detector._argument_types: the JSON types a property (or schema) allows, None if open."""
    if not isinstance(schema, dict) or id(schema) in seen:
        return None
    seen = seen | {id(schema)}
    constraints: list[set[str]] = []
    ref = schema.get("$ref")
    if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
        try:
            types = _glm47_types(_glm47_ref(root, ref), root, key, seen, arguments, value)
            if types is not None:
                constraints.append(types)
        except (KeyError, IndexError, TypeError, ValueError):
            pass
    if key is not None:
        types = _glm47_types(schema.get("properties", {}).get(key), root, seen=seen, value=value)
        if types is not None:
            constraints.append(types)
    else:
        declared = schema.get("type")
        if isinstance(declared, str):
            constraints.append({declared, "integer"} if declared == "number" else {declared})
        elif isinstance(declared, list):
            constraints.append(set(declared) | ({"integer"} if "number" in declared else set()))
        values = [schema["const"]] if "const" in schema else schema.get("enum")
        if isinstance(values, list):
            constraints.append({_glm47_json_type(a) for a in values if value is _UNSET or _glm47_equal(value, a)})
    for keyword in ("anyOf", "oneOf"):
        if isinstance(schema.get(keyword), list):
            alternatives = [
                _glm47_types(branch, root, key, seen, arguments, value)
                for branch in schema[keyword]
                if key is None or _glm47_discriminates(branch, root, arguments or {})
            ]
            if alternatives and all(t is not None for t in alternatives):
                constraints.append(set().union(*[t for t in alternatives if t is not None]))
    if isinstance(schema.get("allOf"), list):
        for branch in schema["allOf"]:
            types = _glm47_types(branch, root, key, seen, arguments, value)
            if types is not None:
                constraints.append(types)
    return set.intersection(*constraints) if constraints else None


def _glm47_schema(name: str, tools: Tools) -> tuple[bool, Any]:
    if tools.schemas is None or name not in tools.schemas:
        return False, None
    return True, tools.schemas[name]


def _glm47_arg_types(name: str, key: str, tools: Tools, arguments: Any = None, value: Any = _UNSET) -> set[str] | None:
    found, schema = _glm47_schema(name, tools)
    return _glm47_types(schema, schema, key, arguments=arguments, value=value) if found else None


def _glm47_arg_type(name: str, key: str, tools: Tools, arguments: Any = None) -> str | None:
    types = _glm47_arg_types(name, key, tools, arguments)
    if types == {"number", "integer"}:
        return "number"
    return next(iter(types)) if types and len(types) == 1 else None


def _glm47_needs_context(schema: Any) -> bool:
    keys: set[str] = set()
    seen: set[int] = set()
    has_union = False

    def visit(node: Any) -> None:
        nonlocal has_union
        if not isinstance(node, dict) or id(node) in seen:
            return
        seen.add(id(node))
        keys.update(node.get("properties", {}))
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            try:
                visit(_glm47_ref(schema, ref))
            except (KeyError, IndexError, TypeError, ValueError):
                pass
        for keyword in ("anyOf", "oneOf", "allOf"):
            branches = node.get(keyword)
            if isinstance(branches, list):
                has_union |= keyword != "allOf"
                for branch in branches:
                    visit(branch)

    visit(schema)
    for key in keys if has_union else ():
        types = _glm47_types(schema, schema, key)
        if types is None or (len(types) > 1 and types != {"number", "integer"}):
            return True
    return False


def glm47_arguments(pairs: list[tuple[str, str]], name: str, tools: Tools) -> dict[str, Any]:
    """Glm47MoeDetector._parse_argument_pairs."""
    arguments: dict[str, Any] = {}
    known: dict[str, Any] = {}
    found, schema = _glm47_schema(name, tools)
    if len(pairs) > 1 and found and _glm47_needs_context(schema):
        for key, raw in pairs:
            key = key.strip()
            parsed = glm47_arguments([(key, raw)], name, tools)[key]
            native = _glm47_arg_types(name, key, tools, value=raw)
            if isinstance(parsed, str) or native is None or "string" not in native:
                known[key] = parsed
    for key, raw in pairs:
        key = key.strip()
        kind = _glm47_arg_type(name, key, tools, known)
        value, good = _glm_value(raw, kind or "string", _coerce47)
        if kind == "string":
            arguments[key] = value if isinstance(value, str) else raw
        elif kind is None:
            allowed = _glm47_arg_types(name, key, tools, known, value)
            native = _glm47_arg_types(name, key, tools, known, raw)
            if (
                allowed is not None
                and _glm47_json_type(value) not in allowed
                and native is not None
                and "string" in native
            ):
                value = raw
            arguments[key] = value if good else raw
        else:
            arguments[key] = value if good else raw
        known[key] = arguments[key]
    return arguments


@tool_parser(
    "ling3",
    family="XML arguments (schema-converted)",
    splits="GLM-4.5's, the newline after the name optional",
    ends=("</tool_call>",),
)
def ling3(text: str, tools: Tools) -> Found:
    """Ling3Detector: GLM-4.5's format, the name's newline optional before ``<arg_key>``/``</tool_call>``."""
    return glm45(
        text, tools, r"<tool_call>\s*(.*?)(?:(?:\\n|\n)\s*|(?=<arg_key>)|(?=</tool_call>))(<arg_key>.*?)?</tool_call>"
    )


def _poolside_value(raw: str, schema: dict[str, Any], key: str) -> Any:
    spec = schema.get(key)
    kind = str(spec.get("type", "")).lower() if isinstance(spec, dict) else ""
    if kind in ("string", "str", "text", "enum"):
        return raw
    for decoder in (json.loads,) if not kind else (json.loads, literal_eval):
        try:
            result = decoder(raw)
            json.dumps(result)
            return result
        except (ValueError, SyntaxError, TypeError):
            continue
    return raw


@tool_parser(
    "poolside_v1",
    family="XML arguments (schema-converted)",
    splits="`<tool_call>NAME<arg_key>…<arg_value>…`",
    ends=("</tool_call>",),
)
def poolside_v1(text: str, tools: Tools) -> Found:
    """PoolsideV1Detector: ``<tool_call>NAME`` then ``<arg_key>``/``<arg_value>`` pairs."""
    if "<tool_call>" not in text:
        return None
    first = text.find("<tool_call>")
    calls: list[Item] = []
    for body in re.findall(r"<tool_call>(.*?)</tool_call>", through_last(text, "</tool_call>"), re.DOTALL):
        hits = [h for h in (body.find("\n"), body.find("<arg_key>"), body.find("</tool_call>")) if h != -1]
        name = (body[: min(hits)] if hits else body).strip()
        if not name or not tools.declared(name):
            continue
        schema: dict[str, Any] = {}
        if tools.schemas is not None and isinstance(tools.schemas.get(name), dict):
            schema = schema_properties(tools.schemas[name])
        args = {
            k.strip(): _poolside_value(v.removeprefix("\n").removesuffix("\n"), schema, k.strip())
            for k, v in re.findall(r"<arg_key>([^<]*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", body, re.DOTALL)
        }
        calls.append(Item(name, dumps(args), tools.index(name)))
    return (text[:first] if first > 0 else ""), calls


def _spark_value(value: str, kind: str) -> Any:
    if value.lower() == "null":
        return None
    kind = kind.lower()
    try:
        if kind in ("string", "str", "text"):
            return value
        if kind in ("integer", "int"):
            return int(value)
        if kind in ("number", "float"):
            number = float(value)
            return int(number) if number.is_integer() else number
        if kind in ("boolean", "bool"):
            word = value.strip().lower()
            if word not in ("true", "1", "false", "0"):
                raise ValueError(word)
            return word in ("true", "1")
        return json.loads(value)
    except (TypeError, ValueError):
        try:
            return json.loads(value)
        except (TypeError, ValueError):
            return value


@tool_parser(
    "spark25",
    family="XML arguments (schema-converted)",
    splits="`<tool_call>NAME<arg_key>…<arg_value>…`, compact JSON",
    ends=("</tool_call>",),
)
def spark25(text: str, tools: Tools) -> Found:
    """Spark25Detector: ``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>``;
    arguments compact (``separators=(",", ":")``), a malformed block stays in the answer."""
    begin, end_tag = "<tool_call>", "</tool_call>"
    if begin not in text:
        return None
    calls: list[Item] = []
    normal: list[str] = []
    scan = BlockScan(text, begin, end_tag)
    for block in scan:
        normal.append(block.before)
        first = block.inner.find("<arg_key>")
        name = (block.inner if first < 0 else block.inner[:first]).strip()
        if not block.closed or not name:
            normal.append(block.outer)
            continue
        arguments: dict[str, Any] = {}
        for key, value in glm_arg_pairs(block.inner, tight=True)[0]:
            if not key:
                continue
            kind = "string"
            if tools.schemas is not None and isinstance(tools.schemas.get(name), dict):
                definition = schema_properties(tools.schemas[name]).get(key)
                if isinstance(definition, dict) and isinstance(definition.get("type"), str):
                    kind = definition["type"]
            arguments[key] = _spark_value(value, kind)
        if base_json({"name": name, "arguments": arguments}, tools):
            calls.append(Item(name, json.dumps(arguments, ensure_ascii=False, separators=(",", ":")), len(calls)))
    normal.append(scan.rest)
    return "".join(normal), calls


@tool_parser(
    "iquest_q1",
    family="XML arguments (schema-converted)",
    splits="GLM-4.7's inside `<iquest_tool_call>`",
    ends=("</iquest_tool_call>",),
)
def iquest_q1(text: str, tools: Tools) -> Found:
    """IQuestQ1Detector: GLM-4.7's arguments inside ``<iquest_tool_call>...</iquest_tool_call>``; a
    malformed block stays in the answer, string-typed values keep their raw text."""
    bot, eot = "<iquest_tool_call>", "</iquest_tool_call>"
    if bot not in text:
        return None
    calls: list[Item] = []
    normal: list[str] = []
    content_start = 0
    for block in BlockScan(text, bot, eot):
        if not block.closed:
            break
        cursor = block.inner.find("<arg_key>")
        name = block.inner[:cursor].strip() if cursor >= 0 else block.inner.strip()
        raw = block.inner[cursor:] if cursor >= 0 else ""
        pairs, outside = glm_arg_pairs(raw)
        if not name or outside.strip() or any(not k.strip() for k, _ in pairs):
            continue
        arguments = glm47_arguments(pairs, name, tools)
        for key, value in pairs:
            if _glm47_arg_type(name, key.strip(), tools, arguments) == "string":
                arguments[key.strip()] = value
        for item in base_json({"name": name, "arguments": arguments}, tools):
            calls.append(Item(item.name, item.arguments, len(calls)))
        normal.append(text[content_start : block.start])
        content_start = block.end
    normal.append(text[content_start:])
    return "".join(normal), calls


_HY_ALIASES = {
    "str": "string",
    "text": "string",
    "varchar": "string",
    "char": "string",
    "enum": "string",
    "bool": "boolean",
    "binary": "boolean",
    "int": "integer",
    "float": "number",
    "double": "number",
    "list": "array",
    "dict": "object",
}


def _hy_type(raw: Any) -> Any:
    if raw in _HY_ALIASES:
        return _HY_ALIASES[raw]
    lower = raw.lower()
    if lower.startswith(("int", "uint", "long", "short", "unsigned")):
        return "integer"
    if lower.startswith(("num", "float")):
        return "number"
    return raw


def _hy_value(value: str, name: str, key: str, tools: Tools) -> Any:
    """HunyuanDetector._parse_value: bool, int, number, JSON, string, by the declared types."""
    schema: Any = {}
    if tools.schemas is not None and name in tools.schemas and tools.schemas[name] is not None:
        schema = schema_properties(tools.schemas[name]).get(key, {})
    options = (
        [schema]
        if "type" in schema
        else schema["anyOf"]
        if "anyOf" in schema
        else schema["oneOf"]
        if "oneOf" in schema
        else [{"type": "string"}]
    )
    types = {_hy_type(s.get("type", "string")) for s in options} - {"null"}
    if "boolean" in types and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if "integer" in types:
        try:
            return int(value)
        except (ValueError, TypeError):
            pass
    if "number" in types:
        try:
            return float(value) if "." in value or "e" in value or "E" in value else int(value)
        except (ValueError, TypeError):
            pass
    if types - {"string", "boolean", "integer", "number"}:
        try:
            return json.loads(value)
        except ValueError:
            pass
    if "string" in types:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


_HY_CALL = re.compile(r"<tool_call>(.*?)(?:<tool_sep>|(?=<arg_key>|</tool_call>))(.*?)</tool_call>", re.DOTALL)
_HY_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


@tool_parser(
    "hunyuan",
    family="XML arguments (schema-converted)",
    splits="`<tool_calls><tool_call>NAME<tool_sep><arg_key>…`",
    ends=("</tool_calls>",),
)
def hunyuan(text: str, tools: Tools) -> Found:
    """HunyuanDetector (no tokenizer: the bare tags): ``<tool_calls><tool_call>NAME<tool_sep>`` then
    ``<arg_key>``/``<arg_value>`` pairs; values typed by the schema."""
    if "<tool_calls>" not in text:
        return None
    idx = text.find("<tool_calls>")
    normal = text[:idx].strip() if idx > 0 else ""
    calls: list[Item] = []
    try:
        for name, args in _HY_CALL.findall(through_last(text, "</tool_call>")):
            name = name.strip()
            if not tools.declared(name):
                continue
            arguments = {k.strip(): _hy_value(v, name, k.strip(), tools) for k, v in _HY_ARG.findall(args)}
            calls.append(Item(name, dumps(arguments), tools.index(name)))
    except Exception:
        return text, []
    return normal, calls
