"""SGLang's XML-arguments detectors: Qwen3-Coder (and Nanbeige, Step-3.5), MiMo, dots, Step-3, GigaChat 3.5,
MiniCPM-5: ``<function=NAME><parameter=KEY>`` or ``<invoke name="F">`` elements, typed by the tool schemas.
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
    convert_qwen3_coder,
    dumps,
    literal_eval,
    schema_properties,
)
from synthgen.chat.parsers.registry import tool_parser
from synthgen.chat.parsers.scan import through_last

_QC_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_QC_FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
_QC_PARAMETER = re.compile(r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL)


@tool_parser(
    "qwen3_coder",
    "nanbeige",
    "step3p5",
    family="XML arguments (schema-converted)",
    splits="`<tool_call><function=NAME><parameter=KEY>…`",
    ends=("</tool_call>",),
)
def qwen3_coder(text: str, tools: Tools) -> Found:
    """Qwen3CoderDetector: ``<tool_call><function=NAME><parameter=KEY>value</parameter>...``; values take
    the type their schema names. Undeclared functions are kept (this detector does not check)."""
    if "<tool_call>" not in text:
        return None
    calls: list[Item] = []
    try:
        blocks = _QC_CALL.findall(through_last(text, "</tool_call>"))
        if not blocks and "<function=" in text:
            blocks = [text]
        for block in blocks:
            for closed, open_ in _QC_FUNCTION.findall(block):
                body = closed or open_
                if ">" not in body:
                    continue
                name, params_text = body[: body.index(">")], body[body.index(">") + 1 :]
                config = tools.properties(name)
                params: dict[str, Any] = {}
                for p in _QC_PARAMETER.findall(params_text):
                    if ">" not in p:
                        continue
                    key, value = p[: p.index(">")], p[p.index(">") + 1 :]
                    value = value[1:] if value.startswith("\n") else value
                    value = value[:-1] if value.endswith("\n") else value
                    params[key] = convert_qwen3_coder(value, key, config)
                calls.append(Item(name, dumps(params), len(calls)))
    except Exception:
        return text, []
    start = text.find("<tool_call>")
    return (text[:start] if start > 0 else ""), calls


def _mimo_value(value: str, param: str, name: str, tools: Tools) -> Any:
    """mimo_detector._convert_param_value: html-unescaped, typed by the property's plain ``type``."""
    import html

    value = html.unescape(value)
    if value.lower() == "null":
        return None
    kind: Any = "string"
    if tools.schemas is not None and name in tools.schemas:
        props = schema_properties(tools.schemas[name])
        if param in props:
            kind = props[param].get("type", "string")
    if kind in ("string", "str", "text", "varchar", "char", "enum"):
        return value
    if kind.startswith(("int", "integer", "uint", "long", "short", "unsigned")):
        try:
            return int(value)
        except (ValueError, TypeError):
            return value
    if kind.startswith(("num", "float")):
        try:
            number = float(value)
            return number if number - int(number) != 0 else int(number)
        except (ValueError, TypeError):
            return value
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except (ValueError, TypeError):
            pass
    try:
        return literal_eval(value)
    except (ValueError, SyntaxError, TypeError):
        return value


@tool_parser(
    "mimo",
    family="XML arguments (schema-converted)",
    splits="`<tool_call><function=NAME><parameter=K>…`",
    ends=("</tool_call>",),
)
def mimo(text: str, tools: Tools) -> Found:
    """MiMoDetector: ``<tool_call><function=NAME><parameter=K>v</parameter></function></tool_call>``;
    a call to an undeclared function stays in the answer."""
    idx = text.find("<tool_call>")
    if idx == -1:
        return None
    normal = text[:idx]
    calls: list[Item] = []
    last = idx
    for m in re.finditer(r"<tool_call>(.*?)</tool_call>", through_last(text, "</tool_call>"), re.DOTALL):
        func = re.search(r"<function=([^>]+)>(.*?)</function>", m.group(1), re.DOTALL)
        if func:
            name = func.group(1).strip()
            params = {
                p.group(1).strip(): _mimo_value(p.group(2), p.group(1).strip(), name, tools)
                for p in re.finditer(
                    r"<parameter=([^>]+)>(.*?)</parameter>", through_last(func.group(2), "</parameter>"), re.DOTALL
                )
            }
            if not tools.declared(name):
                normal += text[last : m.end()]
                last = m.end()
                continue
            calls.extend(base_json({"name": name, "parameters": params}, tools))
        last = m.end()
    return normal, calls


def _dots_name(value: str) -> str:
    value = value.strip()
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value


def _dots_type(schema: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    if not isinstance(schema, dict) or depth > 10:
        return None
    if "type" in schema:
        return schema["type"]
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return _dots_type(defs.get(ref.rsplit("/", 1)[-1]), defs, depth + 1)
    for keyword in ("anyOf", "oneOf", "allOf"):
        alternatives = schema.get(keyword)
        if isinstance(alternatives, list):
            for alternative in alternatives:
                if isinstance(alternative, dict) and alternative.get("type") == "null":
                    continue
                resolved = _dots_type(alternative, defs, depth + 1)
                if resolved is not None:
                    return resolved
    return None


def _dots_value(value: str, kind: Any) -> Any:
    if value.lower() == "null":
        return None
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    kind = str(kind).lower()
    if kind in ("string", "str", "text"):
        return value
    if kind in ("integer", "int"):
        try:
            return int(value)
        except ValueError:
            return value
    if kind in ("number", "float"):
        try:
            number = float(value)
            return int(number) if number.is_integer() else number
        except ValueError:
            return value
    if kind in ("boolean", "bool"):
        return value.lower() in ("true", "1")
    try:
        return json.loads(value)
    except ValueError:
        return value


@tool_parser(
    "dots",
    family="XML arguments (schema-converted)",
    splits="`<dots_function_call>` JSON or `<invoke>`",
    ends=("</dots_function_call>",),
)
def dots(text: str, tools: Tools) -> Found:
    """DotsToolDetector: ``<dots_function_call>`` blocks holding a JSON object or XML ``<invoke>``s."""
    at = text.find("<dots_function_call>")
    if at == -1:
        return None
    calls: list[Item] = []
    for block in re.finditer(
        r"<dots_function_call>\s*(.*?)\s*</dots_function_call>", through_last(text, "</dots_function_call>"), re.DOTALL
    ):
        content = block.group(1).strip()
        try:
            if content.startswith("<invoke"):
                actions: list[Any] = []
                for inv in re.finditer(
                    r"<invoke\s+name\s*=\s*(?P<name>[^>]+)>(?P<body>.*?)</invoke>",
                    through_last(content, "</invoke>"),
                    re.DOTALL,
                ):
                    name = _dots_name(inv.group("name"))
                    schema = tools.schemas.get(name) if tools.schemas is not None else None
                    props = schema_properties(schema) if isinstance(schema, dict) else {}
                    defs = schema.get("$defs", {}) if isinstance(schema, dict) else {}
                    defs = defs if isinstance(defs, dict) else {}
                    arguments: dict[str, Any] = {}
                    for p in re.finditer(
                        r"<parameter\s+name\s*=\s*(?P<name>[^>]+)>(?P<value>.*?)</parameter>",
                        through_last(inv.group("body"), "</parameter>"),
                        re.DOTALL,
                    ):
                        key = _dots_name(p.group("name"))
                        kind = (_dots_type(props[key], defs) or "string") if key in props else "string"
                        arguments[key] = _dots_value(p.group("value").strip(), kind)
                    actions.append({"name": name, "arguments": arguments})
            else:
                parsed = json.loads(content)
                if not isinstance(parsed, dict):
                    raise TypeError("dots JSON tool call must be an object")
                actions = [parsed]
            for action in actions:
                calls.extend(base_json(action, tools))
        except (ValueError, TypeError):
            continue
    return text[:at].strip(), calls


def _step3_value(value: str) -> Any:
    try:
        try:
            return json.loads(value)
        except Exception:
            return literal_eval(value)
    except Exception:
        return value


@tool_parser(
    "step3",
    family="XML arguments (schema-converted)",
    splits='`<｜tool_calls_begin｜>` `<steptml:invoke name="F">`',
    ends=("<｜tool_calls_end｜>",),
)
def step3(text: str, tools: Tools) -> Found:
    """Step3Detector: ``<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke ...>``."""
    bot, eot = "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>"
    if bot not in text:
        return None
    try:
        pre, rest = text.split(bot, 1)
        if eot not in rest:
            return text, []
        section, post = rest.split(eot, 1)
        calls: list[Item] = []
        for m in re.finditer(
            r"<｜tool_call_begin｜>(.*?)<｜tool_call_end｜>", through_last(section, "<｜tool_call_end｜>"), re.DOTALL
        ):
            content = m.group(1)
            if "<｜tool_sep｜>" not in content:
                continue
            kind, invoke = content.split("<｜tool_sep｜>", 1)
            if kind.strip() != "function":
                continue
            inv = re.search(r'<steptml:invoke name="([^"]+)">(.+?)</steptml:invoke>', invoke, re.DOTALL)
            if not inv:
                continue
            name, params = inv.group(1), {}
            for p in re.finditer(
                r'<steptml:parameter name="([^"]+)">([^<]*)</steptml:parameter>', inv.group(2), re.DOTALL
            ):
                value = p.group(2).strip()
                if tools.schemas is not None:
                    props = schema_properties(tools.schemas[name] or {}) if name in tools.schemas else {}
                    declared_type = props[p.group(1)].get("type", None) if p.group(1) in props else None
                    params[p.group(1)] = _step3_value(value) if declared_type and declared_type != "string" else value
                else:
                    params[p.group(1)] = _step3_value(value)
            calls.extend(base_json({"name": name, "arguments": params}, tools))
        return pre + post, calls
    except Exception:
        return text, []


_GCML_INVOKE = re.compile(r"<｜GCML｜invoke\s+name=\"(?P<name>[^\"]*)\"\s*>(?P<body>.*?)</｜GCML｜invoke>", re.DOTALL)
_GCML_PARAM = re.compile(
    r"<｜GCML｜parameter\s+name=\"(?P<name>[^\"]*)\"\s+string=\"(?P<is_string>true|false)\"\s*>"
    r"(?P<value>.*?)</｜GCML｜parameter>",
    re.DOTALL,
)


def _gcml_strip(text: str) -> str:
    return re.sub(r"(?:<\|message_sep\|>|</s>)+\s*$", "", text)


@tool_parser(
    "gigachat35",
    family="XML arguments",
    splits='`<｜GCML｜tool_calls>` `<｜GCML｜invoke name="F">`',
    ends=("</｜GCML｜tool_calls>",),
)
def gigachat35(text: str, tools: Tools) -> Found:
    """GigaChat35Detector: ``<｜GCML｜tool_calls><｜GCML｜invoke name="F"><｜GCML｜parameter ...>``."""
    if "<｜GCML｜tool_calls>" not in text:
        return None
    leading, _, after = text.partition("<｜GCML｜tool_calls>")
    body = after.partition("</｜GCML｜tool_calls>")[0]
    actions = []
    for m in _GCML_INVOKE.finditer(through_last(body, "</｜GCML｜invoke>")):
        args: dict[str, Any] = {}
        for p in _GCML_PARAM.finditer(through_last(m.group("body"), "</｜GCML｜parameter>")):
            if p.group("is_string") == "true":
                args[p.group("name")] = p.group("value")
                continue
            try:
                args[p.group("name")] = json.loads(p.group("value"))
            except ValueError:
                args[p.group("name")] = p.group("value")
        actions.append({"name": m.group("name"), "arguments": args})
    if not actions:
        return _gcml_strip(text), []
    return _gcml_strip(leading).rstrip("\n"), base_json(actions, tools)


def _cpm_value(text: str) -> Any:
    try:
        try:
            return json.loads(text)
        except (json.JSONDecodeError, TypeError):
            return literal_eval(text)
    except (ValueError, SyntaxError, TypeError):
        return text


def _cpm_type(name: str, key: str, tools: Tools) -> Any:
    if tools.schemas is None or not isinstance(tools.schemas.get(name), dict):
        return None
    prop = schema_properties(tools.schemas[name]).get(key, {})
    return prop.get("type") if isinstance(prop, dict) else None


def _cpm_xml(
    block: str, tools: Tools, allowed_by: dict[str, set[str]], args: dict[str, Any]
) -> tuple[str | None, bool, bool]:
    """The block read as XML: (function name, parsed, a parameter was invalid)."""
    import xml.etree.ElementTree as ElementTree

    if "<!DOCTYPE" in block or "<!ENTITY" in block:  # no entity expansion for model output
        raise ValueError("DTDs are not read")
    root = ElementTree.fromstring(block)
    node = root if root.tag == "function" else root.find("function")
    name = (node.attrib.get("name") or "").strip() if node is not None else None
    allowed = allowed_by.get(name or "", set())
    invalid = False
    if node is not None:
        params = list(node.findall("param"))
        holder = node.find("arguments")
        if holder is not None and not params:
            params = list(holder.findall("param"))
        seen: set[str] = set()
        for param in params:
            key = param.attrib.get("name")
            if not key or (allowed and key not in allowed) or key in seen:
                invalid = True
                break
            seen.add(key)
            value = (param.text or "").strip()
            args[key] = value if _cpm_type(name or "", key, tools) == "string" else _cpm_value(value)
        if invalid:
            args.clear()
    return name, bool(name), invalid


def _cpm_regex(
    block: str, tools: Tools, allowed_by: dict[str, set[str]], args: dict[str, Any], name: str | None, invalid: bool
) -> tuple[str | None, bool, bool]:
    """The block read by regex, MiniCPM5Detector's fallback: (function name, parsed, a parameter was invalid)."""
    try:
        head = re.search(r"<function\s+name=['\"]([^'\"]+)['\"][^>]*>", block)
        if head:
            name = (head.group(1) or "").strip()
        invalid = re.search(r"<param(?![^>]*\bname=)[^>]*>", block, re.DOTALL) is not None
        seen: set[str] = set()
        allowed = allowed_by.get(name or "", set())
        pattern = r"<param\s+name=['\"]([^'\"]+)['\"]>([\s\S]*?)</param>"
        for pm in re.finditer(pattern, through_last(block, "</param>"), re.DOTALL):
            key = pm.group(1).strip()
            if (allowed and key not in allowed) or key in seen:
                invalid = True
                break
            seen.add(key)
            value = pm.group(2) or ""
            if value.startswith("<![CDATA[") and value.endswith("]]>"):
                value = value[len("<![CDATA[") : -len("]]>")]
            value = value.strip()
            args[key] = value if _cpm_type(name or "", key, tools) == "string" else _cpm_value(value)
        if invalid:
            args.clear()
        return name, bool(name), invalid
    except Exception:
        return name, False, invalid


@tool_parser(
    "minicpm5",
    family="XML arguments (schema-converted)",
    splits='`<function name="F"><param name="K">…</param></function>`',
    ends=("</function>",),
)
def minicpm5(text: str, tools: Tools) -> Found:
    """MiniCPM5Detector: ``<function name="F"><param name="K">v</param></function>`` read as XML (then by
    regex when that fails); only declared functions with valid, complete parameters become calls."""
    if "<function" not in text:
        return None
    declared = set(tools.order) if tools.schemas is not None else set()
    allowed_by = {n: set(schema_properties(tools.schemas[n] or {}).keys()) for n in declared} if tools.schemas else {}
    required_by: dict[str, set[str]] = {}
    for n in declared:
        schema = tools.schemas[n] if tools.schemas is not None else None
        required = schema.get("required", []) if isinstance(schema, dict) else []
        try:
            required_by[n] = set(required)
        except TypeError:
            required_by[n] = set()
    parts: list[str] = []
    calls: list[Item] = []
    try:
        last = 0
        for m in re.finditer(r"<function.*?</function>", through_last(text, "</function>"), re.DOTALL):
            if m.start() > last:
                parts.append(text[last : m.start()])
            block = m.group(0)
            name: str | None = None
            args: dict[str, Any] = {}
            ok = invalid = False
            try:
                name, ok, invalid = _cpm_xml(block, tools, allowed_by, args)
            except Exception:
                ok = False
            if not ok:
                name, ok, invalid = _cpm_regex(block, tools, allowed_by, args, name, invalid)
            if not name or name not in declared or invalid:
                ok = False
            elif required_by.get(name) and not required_by[name].issubset(args.keys()):
                ok = False
            if ok and name is not None:
                calls.extend(base_json({"name": name, "parameters": args}, tools))
            else:
                parts.append(block)
            last = m.end()
        if last < len(text):
            parts.append(text[last:])
        return "".join(parts), calls
    except Exception:
        return text, []
