"""SGLang 0.5.23's tool-call detectors (``--tool-call-parser``), one-shot (``detect_and_parse``).

Each function is the detector it is named after: it returns None when the detector's ``has_tool_call``
is false (the answer is left as it is), else the answer SGLang keeps and the calls it found. An exception
here means SGLang's serving layer would have caught one: the caller keeps the whole answer, no calls.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, cast

from synthgen.chat.parsers import harmony
from synthgen.chat.parsers.calls import (
    Item,
    Tools,
    base_json,
    convert_qwen3_coder,
    dumps,
    literal_eval,
    parse_python,
    schema_properties,
)

Found = tuple[str, list[Item]] | None

# --- JSON in tags ------------------------------------------------------------------------------------


def qwen25(text: str, tools: Tools) -> Found:
    """Qwen25Detector: ``<tool_call>\\n{json}\\n</tool_call>``; the answer is the text before, stripped."""
    bot, eot = "<tool_call>\n", "\n</tool_call>"
    if bot not in text:
        return None
    calls: list[Item] = []
    for body in re.findall(rf"{re.escape(bot)}(.*?){re.escape(eot)}", text, re.DOTALL):
        try:
            action = json.loads(body.strip())
        except json.JSONDecodeError:
            continue
        calls.extend(base_json(action, tools))
    return text[: text.find(bot)].strip(), calls


def hermes(text: str, tools: Tools) -> Found:
    """HermesDetector: ``<tool_call>{json}</tool_call>`` (or unclosed at the end)."""
    if "<tool_call>" not in text:
        return None
    normal = text[: text.find("<tool_call>")].strip()
    calls: list[Item] = []
    try:
        for closed, open_ in re.findall(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", text, re.DOTALL):
            raw = closed or open_
            if raw:
                calls.extend(base_json(json.loads(raw.strip()), tools))
    except Exception:  # the detector's own catch-all: the whole text stays
        return text, []
    return normal, calls


def internlm(text: str, tools: Tools) -> Found:
    """InternlmDetector: ``<|action_start|> <|plugin|>{json}<|action_end|>``."""
    bot, eot = "<|action_start|> <|plugin|>", "<|action_end|>"
    if bot not in text:
        return None
    normal = text[: text.find(bot)].strip()
    matches = re.findall(rf"{re.escape(bot)}\s*(.*?){re.escape(eot)}", text, re.DOTALL)
    if not matches:
        return text, []
    calls: list[Item] = []
    try:
        for body in matches:
            try:
                action = json.loads(body.strip())
            except json.JSONDecodeError:
                continue
            name = action.get("name")
            parameters = action.get("parameters") if "parameters" in action else action.get("arguments")
            if not (name and tools.declared(name)):
                continue
            calls.append(Item(name, dumps(parameters or {}), tools.index(name)))
    except Exception:
        return text, []
    return normal, calls


def llama3(text: str, tools: Tools) -> Found:
    """Llama32Detector: ``<|python_tag|>`` or a leading ``{``, then ``;``-separated JSON (or Python) dicts."""
    if "<|python_tag|>" not in text and not text.startswith("{"):
        return None
    if "<|python_tag|>" in text:
        normal, action_text = text.split("<|python_tag|>", maxsplit=1)
    else:
        normal, action_text = "", text
    decoder = json.JSONDecoder()
    idx = safe = 0
    actions: list[Any] = []
    while idx < len(action_text):
        try:
            obj, end = decoder.raw_decode(action_text[idx:])
            actions.append(obj)
            idx += end + 1
            safe = idx
        except json.JSONDecodeError:
            converted = _llama_python_dict(action_text, idx)
            if converted is not None:
                actions.append(converted[0])
                idx = safe = converted[1] + 1
                continue
            following = action_text.find('{"name":', idx + 1)
            if following == -1:
                break
            idx = following
    calls = base_json(actions, tools) if actions else []
    trailing = action_text[safe:].strip() if safe < len(action_text) else ""
    return normal + trailing, calls


def _llama_python_dict(text: str, idx: int) -> tuple[Any, int] | None:
    depth, end = 0, idx
    for i in range(idx, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                end = i + 1
                break
    if end <= idx:
        return None
    piece = text[idx:end]
    try:
        parsed = literal_eval(piece.strip())
    except Exception:
        return None
    if not isinstance(parsed, dict):
        return None
    try:
        as_json = json.dumps(parsed, ensure_ascii=False)
    except (TypeError, ValueError):
        return None
    if as_json == piece:
        return None
    try:
        return json.JSONDecoder().raw_decode(as_json)[0], end
    except json.JSONDecodeError:
        return None


def _balanced(text: str, start: int, opening: str, closing: str) -> int:
    """Index after the bracket matching ``text[start]``, skipping JSON strings; -1 if it never closes."""
    depth, in_string, escape = 0, False, False
    for k in range(start, len(text)):
        ch = text[k]
        if escape:
            escape = False
            continue
        if ch == "\\":
            escape = True
            continue
        if ch == '"':
            in_string = not in_string
            continue
        if in_string:
            continue
        if ch == opening:
            depth += 1
        elif ch == closing:
            depth -= 1
            if depth == 0:
                return k + 1
    return -1


def mistral(text: str, tools: Tools) -> Found:
    """MistralDetector: ``[TOOL_CALLS] [json array]`` or the compact ``[TOOL_CALLS]name[ARGS]{json}``."""
    marker, bot = "[TOOL_CALLS", "[TOOL_CALLS] ["
    at = text.find(marker)
    if at == -1:
        return None
    normal = text[:at].strip()
    part = text[at:]
    if bot in part:
        start = part.find(bot) + len(bot) - 1
        end = _balanced(part, start, "[", "]")
        if end == -1:
            return normal, []
        array = part[start:end]
        calls: list[Item] = []
        try:
            value = json.loads(array)
            calls = base_json(value if isinstance(value, list) else [value], tools)
        except json.JSONDecodeError:
            pass
        trailing = part[part.find(array) + len(array) :].strip()
        return ((normal + " " + trailing).strip() if trailing else normal), calls
    found: list[Item] = []
    remaining = part
    while remaining:
        compact = _mistral_compact(remaining)
        if compact is None:
            break
        name, arguments, consumed = compact
        found.extend(base_json({"name": name, "arguments": arguments}, tools))
        remaining = remaining[consumed:].strip()
    if not found:
        return normal, []
    return ((normal + " " + remaining).strip() if remaining else normal), found


def _mistral_compact(text: str) -> tuple[str, Any, int] | None:
    start = text.find("[TOOL_CALLS")
    if start == -1:
        return None
    i = start + len("[TOOL_CALLS")
    if i < len(text) and text[i] == "]":
        i += 1
    while i < len(text) and text[i].isspace():
        i += 1
    args_at = text.find("[ARGS", i)
    if args_at == -1:
        return None
    name = text[i:args_at].strip()
    if not name:
        return None
    j = args_at + len("[ARGS")
    if j < len(text) and text[j] == "]":
        j += 1
    while j < len(text) and text[j].isspace():
        j += 1
    if j >= len(text) or text[j] not in "{[":
        return None
    end = _balanced(text, j, text[j], "}" if text[j] == "{" else "]")
    if end == -1:
        return None
    try:
        return name, json.loads(text[j:end]), end
    except json.JSONDecodeError:
        return None


_PYTHONIC = re.compile(
    r"\[([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s)?\),\s*)*"
    r"([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s*)?\)\s*)+\]",
    re.DOTALL,
)


def _python_value(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, (str, int, float)):
            return node.value
        raise ValueError("no JSON representation")
    if isinstance(node, ast.Dict):
        return {
            cast(Any, k).value: _python_value(v) for k, v in zip(node.keys, node.values, strict=True)
        }  # ** raises, as SGLang
    if isinstance(node, ast.List):
        return [_python_value(v) for v in node.elts]
    raise ValueError("tool call arguments must be literals")


def pythonic(text: str, tools: Tools) -> Found:
    """PythonicDetector: ``[func(a=1, b="x"), other()]``, optionally in <|python_start|>...<|python_end|>."""
    text = text.strip().replace("<|python_start|>", "").replace("<|python_end|>", "")
    match = _PYTHONIC.search(text)
    if match is None:
        return None
    normal = text[: match.start()] + text[match.end() :]
    try:
        module = parse_python(text[match.start() : match.end()])
        parsed = getattr(module.body[0], "value", None)
        if not (isinstance(parsed, ast.List) and all(isinstance(e, ast.Call) for e in parsed.elts)):
            return normal, []
        calls: list[Item] = []
        for index, call in enumerate(parsed.elts):
            assert isinstance(call, ast.Call)
            if not isinstance(call.func, ast.Name) or not tools.declared(call.func.id):
                continue
            try:
                arguments = {k.arg: _python_value(k.value) for k in call.keywords}
                parameters = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
            except (ValueError, TypeError):
                continue
            calls.append(Item(call.func.id, parameters, index))
        return normal, calls
    except Exception:
        return normal, []


# --- XML-style arguments, converted through the tool schemas ----------------------------------------

_QC_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_QC_FUNCTION = re.compile(r"<function=(.*?)</function>|<function=(.*)$", re.DOTALL)
_QC_PARAMETER = re.compile(r"<parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL)


def qwen3_coder(text: str, tools: Tools) -> Found:
    """Qwen3CoderDetector: ``<tool_call><function=NAME><parameter=KEY>value</parameter>...``; values take
    the type their schema names. Undeclared functions are kept (this detector does not check)."""
    if "<tool_call>" not in text:
        return None
    calls: list[Item] = []
    try:
        blocks = _QC_CALL.findall(text)
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


def _glm_type(name: str, key: str, tools: Tools) -> str | None:
    """glm4_moe_detector.get_argument_type."""
    from synthgen.chat.parsers.calls import infer_type

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


_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>(?:\\n|\s)*<arg_value>(.*?)</arg_value>", re.DOTALL)


_GLM45_DETAIL = r"<tool_call>(.*?)(?:\\n|\n)(.*)</tool_call>"


def glm45(text: str, tools: Tools, detail_re: str = _GLM45_DETAIL) -> Found:
    """Glm4MoeDetector: ``<tool_call>NAME\\n<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>``."""
    if "<tool_call>" not in text:
        return None
    normal = text[: text.find("<tool_call>")].strip()
    calls: list[Item] = []
    try:
        for block in re.findall(r"<tool_call>.*?</tool_call>", text, re.DOTALL):
            detail = re.search(detail_re, block, re.DOTALL)
            if detail is None:
                continue
            name = detail.group(1) or ""
            arguments: dict[str, Any] = {}
            for key, raw in _GLM_ARG.findall(detail.group(2) or ""):
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


def glm47(text: str, tools: Tools) -> Found:
    """Glm47MoeDetector: GLM-4.7's ``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>...``
    (no newline after the name); every text outside the calls is the answer; values typed by the schema,
    unions resolved against the other arguments."""
    if "<tool_call>" not in text:
        return None
    parts: list[str] = []
    last = 0
    for m in re.finditer(r"<tool_call>.*?</tool_call>", text, re.DOTALL):
        if m.start() > last:
            parts.append(text[last : m.start()])
        last = m.end()
    if last < len(text):
        parts.append(text[last:])
    normal = "".join(parts).strip()
    calls: list[Item] = []
    try:
        for block in re.findall(r"<tool_call>.*?</tool_call>", text, re.DOTALL):
            detail = re.search(r"<tool_call>(.*?)(<arg_key>.*?)?</tool_call>", block, re.DOTALL)
            if detail is None:
                continue
            name = detail.group(1) or ""
            pairs = _GLM_ARG.findall(detail.group(2) or "") if detail.group(2) else []
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


def minimax_m2(text: str, tools: Tools) -> Found:
    """MinimaxM2Detector: ``<minimax:tool_call><invoke name="F"><parameter name="K">v</parameter>...``;
    the answer is all text outside complete blocks."""
    start, end = "<minimax:tool_call>", "</minimax:tool_call>"
    if start not in text:
        return None
    normal: list[str] = []
    calls: list[Item] = []
    cursor = 0
    while True:
        s = text.find(start, cursor)
        if s == -1:
            normal.append(text[cursor:])
            break
        normal.append(text[cursor:s])
        e = text.find(end, s)
        if e == -1:
            normal.append(text[s:])
            break
        block = text[s : e + len(end)]
        cursor = e + len(end)
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
    return "".join(normal), calls


# --- DeepSeek ----------------------------------------------------------------------------------------

_DS_BOT = "<｜tool▁calls▁begin｜>"
_DS_CALL = r"<｜tool▁call▁begin｜>.*?<｜tool▁call▁end｜>"


def _deepseek(text: str, tools: Tools, detail: str, name_group: int) -> Found:
    if _DS_BOT not in text:
        return None
    normal = text[: text.find(_DS_BOT)].strip()
    calls: list[Item] = []
    try:
        for block in re.findall(_DS_CALL, text, re.DOTALL):
            m = re.search(detail, block, re.DOTALL)
            assert m is not None  # SGLang's .group on None raises: caught below
            calls.extend(
                base_json({"name": m.group(name_group), "parameters": json.loads(m.group(name_group + 1))}, tools)
            )
    except Exception:
        return text, []
    return normal, calls


def deepseekv3(text: str, tools: Tools) -> Found:
    """DeepSeekV3Detector: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```...``."""
    return _deepseek(
        text, tools, r"<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)\n```json\n(.*)\n```<｜tool▁call▁end｜>", 2
    )


def deepseekv31(text: str, tools: Tools) -> Found:
    """DeepSeekV31Detector: ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>``."""
    return _deepseek(text, tools, r"<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)<｜tool▁call▁end｜>", 1)


def _reject_constant(value: str) -> None:
    raise ValueError(f"Invalid JSON constant: {value}")


def _dsml(block_name: str, invoke_name: str = "invoke", parameter_name: str = "parameter") -> Any:
    """DeepSeekV32Detector and its subclasses, which rename the DSML tags."""
    dsml = "｜DSML｜"
    block, invoke, parameter = f"{dsml}{block_name}", f"{dsml}{invoke_name}", f"{dsml}{parameter_name}"
    bot, invoke_start = f"<{block}>", f"<{invoke}"
    parameter_re = rf'<{parameter}\s+name="([^"]+)"\s+string="([^"]+)"\s*>(.*?)</{parameter}>'
    invoke_re = (
        rf'<{invoke}\s+name="(?P<name>[^"]+)"\s*'
        r"(?:(?P<self_close>/>)"
        rf"|>(?P<body>.*?)(?P<end>(?:</{invoke}>|$)))"
    )

    def parameters(body: str) -> str:
        stripped = body.strip()
        if stripped.startswith("{"):
            parsed = json.loads(stripped, parse_constant=_reject_constant)
            if not isinstance(parsed, dict):
                raise ValueError("DeepSeek tool arguments must be a JSON object")
            return stripped
        params: dict[str, Any] = {}
        matches = list(re.finditer(parameter_re, body, re.DOTALL))
        leftover: list[str] = []
        last = 0
        for m in matches:
            leftover.append(body[last : m.start()])
            key, is_string, value = m.group(1), m.group(2), m.group(3)
            last = m.end()
            if is_string == "true":
                params[key] = value.strip()
            else:
                try:
                    params[key] = json.loads(value.strip(), parse_constant=_reject_constant)
                except ValueError:
                    params[key] = value.strip()
        leftover.append(body[last:])
        rest = "".join(leftover)
        if dsml in rest or (not matches and rest.strip()):
            raise ValueError("Malformed DeepSeek tool parameter")
        return dumps(params)

    def before_dsml(text: str) -> str:
        idx = text.find(dsml)
        if idx == -1:
            return text
        if idx >= 2 and text[idx - 2 : idx] == "</":
            idx -= 2
        elif idx >= 1 and text[idx - 1] == "<":
            idx -= 1
        return text[:idx].removesuffix("\n\n")

    def parse(text: str, tools: Tools) -> Found:
        if bot not in text and invoke_start not in text:
            return None
        idx = text.find(bot)
        if idx != -1:
            normal = text[:idx].removesuffix("\n\n")
            sections = re.findall(rf"<{block}>(.*?)</{block}>", text, re.DOTALL)
        else:
            normal, sections = before_dsml(text), [text[text.find(invoke_start) :]]
        calls: list[Item] = []
        try:
            for section in sections:
                for m in re.finditer(invoke_re, section, re.DOTALL):
                    name = m.group("name").strip()
                    if m.group("self_close"):
                        body, complete = "", True
                    else:
                        body, complete = m.group("body"), bool(m.group("end"))
                    if not complete:
                        continue
                    try:
                        arguments = parameters(body)
                    except ValueError:
                        continue
                    calls.extend(base_json({"name": name, "parameters": json.loads(arguments)}, tools))
        except Exception:
            pass  # SGLang keeps the calls found so far
        return normal, calls

    return parse


deepseekv32 = _dsml("function_calls")


# --- Kimi and Harmony --------------------------------------------------------------------------------

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


def kimi_k2(text: str, tools: Tools) -> Found:
    """KimiK2Detector: ``<|tool_calls_section_begin|>`` sections; ids ``functions.NAME:N``; the
    arguments are the model's text as SGLang keeps them."""
    at = text.find("<|tool_calls_section_begin|>")
    if at == -1:
        return None
    calls: list[Item] = []
    for model_id, arguments in _KIMI_CALL.findall(text):
        m = _KIMI_ID.match(model_id)
        name = m["name"] if m else (_kimi_infer(tools, arguments) if re.fullmatch(r"\d+", model_id) else None)
        if name is not None:
            calls.append(Item(name, arguments, len(calls)))
    return text[:at], calls


_OSS_CALL = re.compile(
    r"to=([a-zA-Z_][a-zA-Z0-9_.-]*)\s*<\|constrain\|>json<\|message\|>(.*?)(?:<\|call\|>|$)", re.DOTALL
)


def gpt_oss(text: str, tools: Tools) -> Found:
    """GptOssDetector: Harmony ``commentary to=functions.NAME`` blocks; the answer is the other events."""
    if "<|start|>assistant<|channel|>commentary" not in text:
        return None
    calls: list[Item] = []
    answer: list[str] = []
    for event in harmony.harmony_events(text):
        if event.kind == "normal":
            answer.append(event.content)
        elif event.kind == "tool_call":
            m = _OSS_CALL.search(event.raw or event.content)
            if not m:
                continue
            name = m.group(1).split(".")[-1]
            if not tools.declared(name):
                continue
            try:
                arguments = json.loads(m.group(2)) if m.group(2).strip() else {}
            except json.JSONDecodeError:
                continue
            calls.append(Item(name, dumps(arguments), len(calls)))
    return " ".join(answer).strip(), calls


# --- More of SGLang's detectors ----------------------------------------------------------------------

deepseekv4 = _dsml("tool_calls")  # DeepSeekV4Detector: DeepSeekV32Detector with a <｜DSML｜tool_calls> block


deepseekv41 = _dsml(" calls", " invoke", " parameter")  # DeepSeekV41Detector: V3.2 with renamed tags


def ling3(text: str, tools: Tools) -> Found:
    """Ling3Detector: GLM-4.5's format, the name's newline optional before ``<arg_key>``/``</tool_call>``."""
    return glm45(
        text, tools, r"<tool_call>\s*(.*?)(?:(?:\\n|\n)\s*|(?=<arg_key>)|(?=</tool_call>))(<arg_key>.*?)?</tool_call>"
    )


def trinity(text: str, tools: Tools) -> Found:
    """TrinityDetector: Qwen 2.5's format with any <think>/</think> removed first."""
    return qwen25(text.replace("<think>", "").replace("</think>", ""), tools)


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


def mimo(text: str, tools: Tools) -> Found:
    """MiMoDetector: ``<tool_call><function=NAME><parameter=K>v</parameter></function></tool_call>``;
    a call to an undeclared function stays in the answer."""
    idx = text.find("<tool_call>")
    if idx == -1:
        return None
    normal = text[:idx]
    calls: list[Item] = []
    last = idx
    for m in re.finditer(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL):
        func = re.search(r"<function=([^>]+)>(.*?)</function>", m.group(1), re.DOTALL)
        if func:
            name = func.group(1).strip()
            params = {
                p.group(1).strip(): _mimo_value(p.group(2), p.group(1).strip(), name, tools)
                for p in re.finditer(r"<parameter=([^>]+)>(.*?)</parameter>", func.group(2), re.DOTALL)
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


def dots(text: str, tools: Tools) -> Found:
    """DotsToolDetector: ``<dots_function_call>`` blocks holding a JSON object or XML ``<invoke>``s."""
    at = text.find("<dots_function_call>")
    if at == -1:
        return None
    calls: list[Item] = []
    for block in re.finditer(r"<dots_function_call>\s*(.*?)\s*</dots_function_call>", text, re.DOTALL):
        content = block.group(1).strip()
        try:
            if content.startswith("<invoke"):
                actions: list[Any] = []
                for inv in re.finditer(
                    r"<invoke\s+name\s*=\s*(?P<name>[^>]+)>(?P<body>.*?)</invoke>", content, re.DOTALL
                ):
                    name = _dots_name(inv.group("name"))
                    schema = tools.schemas.get(name) if tools.schemas is not None else None
                    props = schema_properties(schema) if isinstance(schema, dict) else {}
                    defs = schema.get("$defs", {}) if isinstance(schema, dict) else {}
                    defs = defs if isinstance(defs, dict) else {}
                    arguments: dict[str, Any] = {}
                    for p in re.finditer(
                        r"<parameter\s+name\s*=\s*(?P<name>[^>]+)>(?P<value>.*?)</parameter>",
                        inv.group("body"),
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
        for m in re.finditer(r"<｜tool_call_begin｜>(.*?)<｜tool_call_end｜>", section, re.DOTALL):
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


def gigachat3(text: str, tools: Tools) -> Found:
    """GigaChat3Detector: ``function call<|role_sep|>\\n{json}`` or ``<|function_call|>{json}``."""
    if "function call<|role_sep|>\n" not in text and "<|function_call|>" not in text:
        return None
    output = text[: text.rfind("</s>")] if text.rstrip().endswith("</s>") else text
    call: Any = None
    m = re.search(r"(?:function call<\|role_sep\|>\n|<\|function_call\|>)(.*)", output, re.DOTALL)
    if m:
        try:
            call = json.loads(m.group(1), strict=False)
        except json.JSONDecodeError:
            return output, []
        if not (isinstance(call, dict) and "name" in call and "arguments" in call):
            call = None
        elif not isinstance(call["arguments"], dict):
            call = None
    c = re.search(r"^(.*?)(?:<\|message_sep\|>|<\|function_call\|>)", output, re.DOTALL)
    content = c.group(1) if c else output
    if not call:
        return content, []
    return content, base_json({"name": call["name"], "arguments": call["arguments"]}, tools)


_GCML_INVOKE = re.compile(r"<｜GCML｜invoke\s+name=\"(?P<name>[^\"]*)\"\s*>(?P<body>.*?)</｜GCML｜invoke>", re.DOTALL)
_GCML_PARAM = re.compile(
    r"<｜GCML｜parameter\s+name=\"(?P<name>[^\"]*)\"\s+string=\"(?P<is_string>true|false)\"\s*>"
    r"(?P<value>.*?)</｜GCML｜parameter>",
    re.DOTALL,
)


def _gcml_strip(text: str) -> str:
    return re.sub(r"(?:<\|message_sep\|>|</s>)+\s*$", "", text)


def gigachat35(text: str, tools: Tools) -> Found:
    """GigaChat35Detector: ``<｜GCML｜tool_calls><｜GCML｜invoke name="F"><｜GCML｜parameter ...>``."""
    if "<｜GCML｜tool_calls>" not in text:
        return None
    leading, _, after = text.partition("<｜GCML｜tool_calls>")
    body = after.partition("</｜GCML｜tool_calls>")[0]
    actions = []
    for m in _GCML_INVOKE.finditer(body):
        args: dict[str, Any] = {}
        for p in _GCML_PARAM.finditer(m.group("body")):
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


def hunyuan(text: str, tools: Tools) -> Found:
    """HunyuanDetector (no tokenizer: the bare tags): ``<tool_calls><tool_call>NAME<tool_sep>`` then
    ``<arg_key>``/``<arg_value>`` pairs; values typed by the schema."""
    if "<tool_calls>" not in text:
        return None
    idx = text.find("<tool_calls>")
    normal = text[:idx].strip() if idx > 0 else ""
    calls: list[Item] = []
    try:
        for name, args in _HY_CALL.findall(text):
            name = name.strip()
            if not tools.declared(name):
                continue
            arguments = {k.strip(): _hy_value(v, name, k.strip(), tools) for k, v in _HY_ARG.findall(args)}
            calls.append(Item(name, dumps(arguments), tools.index(name)))
    except Exception:
        return text, []
    return normal, calls


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


def kimi_k3(text: str, tools: Tools) -> Found:
    """KimiK3Detector: ``<|open|>tools<|sep|>`` holding ``<|open|>call tool="NAME"<|sep|>`` with typed
    ``<|open|>argument key="K" type="T"<|sep|>`` values; ids ``NAME:N``; calls are not checked against the tools."""
    from synthgen.chat.parsers.reasoning import k3_unwrap

    at = text.find("<|open|>tools<|sep|>")
    if at == -1:
        return None
    before = k3_unwrap(text[:at])
    start = at + len("<|open|>tools<|sep|>")
    close = text.find("<|close|>tools<|sep|>", start)
    section = text[start:] if close == -1 else text[start:close]
    calls: list[Item] = []
    for m in _K3_CALL.finditer(section):
        name = _k3_attrs(m["attrs"]).get("tool", "")
        if not name:
            continue
        arguments: dict[str, Any] = {}
        for arg in _K3_ARG.finditer(m["body"]):
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


def apertus2509(text: str, tools: Tools) -> Found:
    """Apertus2509Detector: ``<|tools_prefix|>[{"NAME": {args}}, ...]<|tools_suffix|>`` blocks."""
    bot, suffix = "<|tools_prefix|>[", "<|tools_suffix|>"
    if bot not in text:
        return None
    calls: list[Item] = []
    normal: list[str] = []
    cursor = 0
    while True:
        start = text.find(bot, cursor)
        if start == -1:
            normal.append(text[cursor:])
            break
        normal.append(text[cursor:start])
        part = text[start:]
        try:
            parsed, json_end = json.JSONDecoder().raw_decode(part, len(bot) - 1)
        except json.JSONDecodeError:
            normal.append(part)
            break
        items = parsed if isinstance(parsed, list) else [parsed]
        suffix_at = part.find(suffix, json_end)
        if suffix_at == -1:
            normal.append(part)
            break
        offset = len(calls)
        for item in items:
            if not isinstance(item, dict) or not item:
                continue
            name = next(iter(item.keys()))
            args = item.get(name)
            if not tools.declared(name):
                continue
            calls.append(Item(name, dumps({} if args is None else args), offset + len(calls)))
        cursor = start + suffix_at + len(suffix)
    return "".join(normal).strip(), calls


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


def poolside_v1(text: str, tools: Tools) -> Found:
    """PoolsideV1Detector: ``<tool_call>NAME`` then ``<arg_key>``/``<arg_value>`` pairs."""
    if "<tool_call>" not in text:
        return None
    first = text.find("<tool_call>")
    calls: list[Item] = []
    for body in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.DOTALL):
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


_G4_DELIM = '<|"|>'


def _g4_scalar(text: str) -> Any:
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if not text:
        return text
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        return text


def _g4_skip_string(text: str, i: int, unterminated: int) -> int:
    """Index after the <|"|>...<|"|> string starting at ``i`` (``unterminated`` if it never closes)."""
    close = text.find(_G4_DELIM, i + len(_G4_DELIM))
    return close + len(_G4_DELIM) if close != -1 else unterminated


def _g4_block(text: str, i: int, opening: str, closing: str, strings: bool) -> tuple[str, int]:
    """The inside of the bracketed block opening at ``i``, and the index after it."""
    depth, start, i = 1, i + 1, i + 1
    while i < len(text) and depth > 0:
        if strings and text.startswith(_G4_DELIM, i):
            i = _g4_skip_string(text, i, len(text))
            continue
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
        i += 1
    return text[start : i - 1], i


def _g4_array(text: str) -> list[Any]:
    """gemma4_detector._parse_gemma4_array: <|"|>strings, {objects}, [arrays] and bare scalars."""
    items: list[Any] = []
    i = 0
    while i < len(text):
        while i < len(text) and text[i] in " ,\n\t":
            i += 1
        if i >= len(text):
            break
        if text.startswith(_G4_DELIM, i):
            end = text.find(_G4_DELIM, i + len(_G4_DELIM))
            if end == -1:
                items.append(text[i + len(_G4_DELIM) :])
                break
            items.append(text[i + len(_G4_DELIM) : end])
            i = end + len(_G4_DELIM)
        elif text[i] == "{":
            inner, i = _g4_block(text, i, "{", "}", True)
            items.append(_g4_args(inner))
        elif text[i] == "[":
            inner, i = _g4_block(text, i, "[", "]", False)  # SGLang skips no strings inside nested arrays
            items.append(_g4_array(inner))
        else:
            start = i
            while i < len(text) and text[i] not in ",]":
                i += 1
            items.append(_g4_scalar(text[start:i]))
    return items


def _g4_args(text: str) -> dict[str, Any]:
    """gemma4_detector._parse_gemma4_args: ``key:value`` pairs."""
    result: dict[str, Any] = {}
    if not text or not text.strip():
        return result
    i = 0
    while i < len(text):
        while i < len(text) and text[i] in " ,\n\t":
            i += 1
        if i >= len(text):
            break
        colon = text.find(":", i)
        if colon == -1:
            break
        key, i = text[i:colon].strip(), colon + 1
        while i < len(text) and text[i] in " \n\t":
            i += 1
        if i >= len(text):
            result[key] = ""
            break
        if text.startswith(_G4_DELIM, i):
            end = text.find(_G4_DELIM, i + len(_G4_DELIM))
            if end == -1:
                result[key] = text[i + len(_G4_DELIM) :]
                break
            result[key] = text[i + len(_G4_DELIM) : end]
            i = end + len(_G4_DELIM)
        elif text[i] == "{":
            inner, i = _g4_block(text, i, "{", "}", True)
            result[key] = _g4_args(inner)
        elif text[i] == "[":
            inner, i = _g4_block(text, i, "[", "]", True)
            result[key] = _g4_array(inner)
        else:
            start = i
            while i < len(text) and text[i] not in ",}]":
                i += 1
            result[key] = _g4_scalar(text[start:i])
    return result


def _g4_matching_brace(text: str) -> int:
    depth, i = 1, 0
    while i < len(text) and depth > 0:
        if text.startswith(_G4_DELIM, i):
            i = _g4_skip_string(text, i, -1)
            if i == -1:
                return -1
            continue
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
        i += 1
    return i - 1 if depth == 0 else -1


def gemma4(text: str, tools: Tools) -> Found:
    """Gemma4Detector: ``<|tool_call>call:NAME{key:value,...}<tool_call|>``, strings in ``<|"|>``;
    calls are not checked against the tools."""
    start_tag, end_tag = "<|tool_call>", "<tool_call|>"
    if start_tag not in text:
        return None
    found: list[tuple[str, str]] = []
    search = 0
    while True:
        start = text.find(start_tag, search)
        end = text.find(end_tag, start) if start != -1 else -1
        if start == -1 or end == -1:
            break
        inner = text[start + len(start_tag) : end]
        if inner.startswith("call:") and inner.find("{") != -1:
            brace = inner.find("{")
            content = inner[brace + 1 :]
            at = _g4_matching_brace(content)
            found.append((inner[5:brace], content[:at] if at != -1 else content))
        search = end + len(end_tag)
    if not found:
        return text, []
    try:
        calls = [Item(name, dumps(_g4_args(args)), tools.index(name)) for name, args in found]
    except (ValueError, IndexError, TypeError, KeyError):
        return text, []
    first = text.find(start_tag)
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


def spark25(text: str, tools: Tools) -> Found:
    """Spark25Detector: ``<tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>``;
    arguments compact (``separators=(",", ":")``), a malformed block stays in the answer."""
    begin, end_tag = "<tool_call>", "</tool_call>"
    if begin not in text:
        return None
    calls: list[Item] = []
    normal: list[str] = []
    cursor = 0
    while cursor < len(text):
        start = text.find(begin, cursor)
        if start < 0:
            normal.append(text[cursor:])
            break
        normal.append(text[cursor:start])
        end = text.find(end_tag, start + len(begin))
        if end < 0:
            normal.append(text[start:])
            break
        end += len(end_tag)
        body = text[start + len(begin) : end - len(end_tag)]
        first = body.find("<arg_key>")
        name = (body if first < 0 else body[:first]).strip()
        if not name:
            normal.append(text[start:end])
        else:
            arguments: dict[str, Any] = {}
            for m in re.finditer(r"<arg_key>(.*?)</arg_key><arg_value>(.*?)</arg_value>", body, re.DOTALL):
                if not m.group(1):
                    continue
                kind = "string"
                if tools.schemas is not None and isinstance(tools.schemas.get(name), dict):
                    definition = schema_properties(tools.schemas[name]).get(m.group(1))
                    if isinstance(definition, dict) and isinstance(definition.get("type"), str):
                        kind = definition["type"]
                arguments[m.group(1)] = _spark_value(m.group(2), kind)
            if base_json({"name": name, "arguments": arguments}, tools):
                calls.append(Item(name, json.dumps(arguments, ensure_ascii=False, separators=(",", ":")), len(calls)))
        cursor = end
    return "".join(normal), calls


def iquest_q1(text: str, tools: Tools) -> Found:
    """IQuestQ1Detector: GLM-4.7's arguments inside ``<iquest_tool_call>...</iquest_tool_call>``; a
    malformed block stays in the answer, string-typed values keep their raw text."""
    bot, eot = "<iquest_tool_call>", "</iquest_tool_call>"
    if bot not in text:
        return None
    calls: list[Item] = []
    normal: list[str] = []
    content_start = search = 0
    while (start := text.find(bot, search)) >= 0:
        begin = start + len(bot)
        end = text.find(eot, begin)
        if end < 0:
            break
        body = text[begin:end]
        search = end + len(eot)
        cursor = body.find("<arg_key>")
        name = body[:cursor].strip() if cursor >= 0 else body.strip()
        raw = body[cursor:] if cursor >= 0 else ""
        pairs = _GLM_ARG.findall(raw)
        if not name or _GLM_ARG.sub("", raw).strip() or any(not k.strip() for k, _ in pairs):
            continue
        arguments = glm47_arguments(pairs, name, tools)
        for key, value in pairs:
            if _glm47_arg_type(name, key.strip(), tools, arguments) == "string":
                arguments[key.strip()] = value
        for item in base_json({"name": name, "arguments": arguments}, tools):
            calls.append(Item(item.name, item.arguments, len(calls)))
        normal.append(text[content_start:start])
        content_start = search
    normal.append(text[content_start:])
    return "".join(normal), calls


def _ink_clean(text: str) -> str:
    from synthgen.chat.parsers.reasoning import INKLING_CONTROL

    for token in INKLING_CONTROL:
        text = text.replace(token, "")
    return text


def _ink_item(payload: Any, index: int) -> Item | None:
    name, args = payload.get("name"), payload.get("args")
    if not isinstance(name, str) or not isinstance(args, dict):
        return None
    return Item(name, dumps(args), index)  # undeclared tools are surfaced too


def _reject_nonfinite(value: str) -> float:
    raise ValueError(f"{value} is not a valid JSON number")


def inkling(text: str, tools: Tools) -> Found:
    """InklingDetector: ``<|content_invoke_tool_json|>{"name", "args"}<|end_message|>`` blocks (and text
    invocations, a call with no name); a malformed turn falls back to its last JSON call."""
    from synthgen.chat.parsers.reasoning import INKLING_CONTROL

    bot, text_bot, eot, model = (
        "<|content_invoke_tool_json|>",
        "<|content_invoke_tool_text|>",
        "<|end_message|>",
        "<|message_model|>",
    )
    if bot not in text and text_bot not in text:
        return None
    calls: list[Item] = []
    parts: list[str] = []
    pos = 0
    canonical = True
    while pos < len(text):
        json_at, text_at = text.find(bot, pos), text.find(text_bot, pos)
        if json_at == -1 and text_at == -1:
            parts.append(text[pos:])
            break
        is_json = text_at == -1 or (json_at != -1 and json_at <= text_at)
        at, marker = (json_at, bot) if is_json else (text_at, text_bot)
        prefix = text[pos:at]
        header_at = prefix.rfind(model)
        if header_at >= 0 and not any(t in prefix[header_at + len(model) :] for t in INKLING_CONTROL):
            prefix = prefix[:header_at]
        parts.append(prefix)
        end = text.find(eot, at + len(marker))
        if end == -1:
            canonical = False
            break
        body = text[at + len(marker) : end]
        if is_json:
            try:
                payload = json.loads(body.strip(), parse_constant=_reject_nonfinite)
            except ValueError:
                canonical = False
                break
            item = _ink_item(payload, len(calls)) if isinstance(payload, dict) else None
            if item is None:
                canonical = False
                break
            calls.append(item)
        else:
            calls.append(Item("", json.dumps({"text": _ink_clean(body)}), len(calls)))
        pos = end + len(eot)
    if canonical:
        return _ink_clean("".join(parts)), calls
    last = text.rfind(bot)
    if last != -1:
        end = text.find(eot, last + len(bot))
        candidate = _ink_clean(text[last + len(bot) : end] if end != -1 else text[last + len(bot) :]).strip()
        try:
            payload = json.loads(candidate)
        except ValueError:
            payload = None
        if isinstance(payload, dict) and payload.get("name"):
            item = _ink_item(payload, 0)
            if item is not None:
                return "", [item]
    return _ink_clean(text), []


def _partial_json(text: str) -> Any:
    """sglang.srt.function_call.utils._partial_json_loads(text, Allow.ALL)[0]."""
    import partial_json_parser
    from partial_json_parser.core.options import Allow

    try:
        return partial_json_parser.loads(text, Allow.ALL)
    except (json.JSONDecodeError, IndexError) as e:
        if "Extra data" in getattr(e, "msg", str(e)) or "pop from empty list" in getattr(e, "msg", str(e)):
            start = len(text) - len(text.lstrip(" \t\n\r"))
            return json.JSONDecoder().raw_decode(text, start)[0]
        raise
    except AssertionError as e:
        raise json.JSONDecodeError("partial_json_parser assertion (treat as incomplete)", text, 0) from e


def cohere_command4(text: str, tools: Tools) -> Found:
    """CohereCommand4Detector: ``<|START_ACTION|>[{"tool_name", "parameters"}, ...]<|END_ACTION|>``; a
    cut-off action block is read as partial JSON."""
    import orjson
    from partial_json_parser.core.exceptions import MalformedJSON

    idx = text.find("<|START_ACTION|>")
    if idx == -1:
        return None
    normal = text[:idx]
    start = idx + len("<|START_ACTION|>")
    end = text.find("<|END_ACTION|>", start)
    body = text[start:end] if end != -1 else text[start:]
    try:
        actions = orjson.loads(body)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        try:
            actions = _partial_json(body)
        except (MalformedJSON, json.JSONDecodeError, ValueError):
            return normal, []
    if isinstance(actions, dict):
        actions = [actions]
    if not isinstance(actions, list):
        actions = []
    normalized: list[Any] = []
    for act in actions:
        if not isinstance(act, dict):
            continue
        act = dict(act)
        if "name" not in act and "tool_name" in act:
            act["name"] = act.pop("tool_name")
        act.pop("tool_call_id", None)
        normalized.append(act)
    return normal, base_json(normalized, tools)


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
    from synthgen.chat.parsers.calls import infer_type

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
        for m in _K2H_ARG.finditer(text):
            if text[cursor : m.start()].strip():
                raise ValueError("malformed framing")
            key = m.group(1).strip()
            if not key:
                raise ValueError("no key")
            inline = m.group(2).strip() if m.group(2) else None
            args[key] = _k2h_coerce(m.group(3), name, key, tools, inline, True)
            cursor = m.end()
        if text[cursor:].strip():
            raise ValueError("malformed framing")
        return [(name, args)]
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


def k2_horizon(text: str, tools: Tools) -> Found:
    """K2V3Detector (K2 Horizon IFM tokens): ``<ifm|tool_call>NAME<ifm|arg_key>k</ifm|arg_key>
    <ifm|arg_value>v</ifm|arg_value></ifm|tool_call>`` or JSON bodies, optionally grouped."""
    if _K2H_CALL not in text:
        return None
    prefix, working = _k2h_leading_reasoning(text)
    group = working.find(_K2H_CALLS)
    if group != -1:
        body_start = group + len(_K2H_CALLS)
        group_end = working.find(_K2H_CALLS_END, body_start)
        if group_end != -1:
            region = working[body_start:group_end]
            parsed: list[tuple[str, dict[str, Any]]] | None = []
            cursor = 0
            while parsed is not None and cursor < len(region):
                start = region.find(_K2H_CALL, cursor)
                if start == -1:
                    parsed = parsed if parsed and not region[cursor:].strip() else None
                    break
                if region[cursor:start].strip():
                    parsed = None
                    break
                end = region.find(_K2H_CALL_END, start + len(_K2H_CALL))
                if end == -1:
                    parsed = None
                    break
                block = _k2h_block(region[start + len(_K2H_CALL) : end], tools)
                if block is None:
                    parsed = None
                    break
                parsed.extend(block)
                cursor = end + len(_K2H_CALL_END)
            if not parsed:
                return prefix + working, []
            normal = working[:group] + working[group_end + len(_K2H_CALLS_END) :]
            return prefix + normal, _k2h_items(parsed, tools, 0)
    calls: list[Item] = []
    parts: list[str] = []
    cursor = 0
    while True:
        start = working.find(_K2H_CALL, cursor)
        if start == -1:
            parts.append(working[cursor:])
            break
        parts.append(working[cursor:start])
        end = working.find(_K2H_CALL_END, start + len(_K2H_CALL))
        if end == -1:
            parts.append(working[start:])
            break
        block = _k2h_block(working[start + len(_K2H_CALL) : end], tools)
        if block is None:
            parts.append(working[start : end + len(_K2H_CALL_END)])
        else:
            calls.extend(_k2h_items(block, tools, len(calls)))
        cursor = end + len(_K2H_CALL_END)
    normal = "".join(parts).replace(_K2H_CALLS, "").replace(_K2H_CALLS_END, "")
    return prefix + normal, calls


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


def minimax_m3(text: str, tools: Tools) -> Found:
    """MinimaxM3Detector: ``]<]minimax[>[<tool_call>`` blocks of ``<invoke name="F">`` with nested,
    schema-typed parameter elements; a malformed call leaves the whole answer as it is."""
    start_tag, end_tag = _MM3 + "<tool_call>", _MM3 + "</tool_call>"
    invoke, invoke_end = _MM3 + '<invoke name="', _MM3 + "</invoke>"
    normalized = re.sub(re.escape(_MM3) + r"[ \t\r\n]+(?=<)", _MM3, text)
    if start_tag not in normalized:
        return None
    try:
        parts: list[str] = []
        calls: list[Item] = []
        cursor = 0
        while True:
            start = normalized.find(start_tag, cursor)
            if start == -1:
                parts.append(normalized[cursor:])
                break
            parts.append(normalized[cursor:start])
            end = normalized.find(end_tag, start)
            if end == -1:
                parts.append(normalized[start:])
                break
            block = normalized[start + len(start_tag) : end]
            cursor = end + len(end_tag)
            at = 0
            while True:
                s = block.find(invoke, at)
                e = block.find(invoke_end, s)
                if s == -1 or e == -1:
                    break
                call = block[s:e]
                at = e + len(invoke_end)
                name_end = call.find('">', len(invoke))
                if name_end == -1:
                    continue
                name = call[len(invoke) : name_end]
                schema = tools.schemas.get(name) if tools.schemas is not None else None
                params = _mm3_parameters(call[name_end + 2 :], schema if isinstance(schema, dict) else None)
                try:
                    found = (
                        base_json({"name": name, "arguments": params}, tools)
                        if tools.schemas
                        else [Item(name, dumps(params))]
                    )
                except Exception:
                    continue
                for item in found:
                    calls.append(Item(item.name, item.arguments, len(calls)))
        return "".join(parts), calls
    except Exception:
        return text, []


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
        for m in re.finditer(r"<function.*?</function>", text, re.DOTALL):
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
                try:
                    head = re.search(r"<function\s+name=['\"]([^'\"]+)['\"][^>]*>", block)
                    if head:
                        name = (head.group(1) or "").strip()
                    invalid = re.search(r"<param(?![^>]*\bname=)[^>]*>", block, re.DOTALL) is not None
                    seen: set[str] = set()
                    allowed = allowed_by.get(name or "", set())
                    for pm in re.finditer(r"<param\s+name=['\"]([^'\"]+)['\"]>([\s\S]*?)</param>", block, re.DOTALL):
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
                    ok = bool(name)
                except Exception:
                    ok = False
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
