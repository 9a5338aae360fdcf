"""SGLang's detectors whose calls are JSON after a marker: Llama 3, Mistral, Apertus, GigaChat 3, Inkling, Cohere."""

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
    literal_eval,
)
from synthgen.chat.parsers.reasoning.inkling import INKLING_CONTROL
from synthgen.chat.parsers.registry import tool_parser


@tool_parser("llama3", family="JSON", splits="`<|python_tag|>` or a leading `{`, `;`-separated objects")
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


@tool_parser("mistral", family="JSON", splits="`[TOOL_CALLS] [...]` or `[TOOL_CALLS]name[ARGS]{...}`")
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


@tool_parser(
    "apertus2509", family="JSON", splits='`<|tools_prefix|>[{"NAME": {…}}]<|tools_suffix|>`', ends=("<|tools_suffix|>",)
)
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


@tool_parser("gigachat3", family="JSON", splits="`function call<|role_sep|>\\n{json}` or `<|function_call|>{json}`")
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


def _ink_clean(text: str) -> str:
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


@tool_parser(
    "inkling",
    family="JSON",
    splits='`<|content_invoke_tool_json|>{"name", "args"}<|end_message|>`',
    ends=("<|end_message|>",),
)
def inkling(text: str, tools: Tools) -> Found:
    """InklingDetector: ``<|content_invoke_tool_json|>{"name", "args"}<|end_message|>`` blocks (and text
    invocations, a call with no name); a malformed turn falls back to its last JSON call."""
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


@tool_parser(
    "cohere_command4",
    family="JSON",
    splits="`<|START_ACTION|>[{tool_name, parameters}]<|END_ACTION|>`",
    ends=("<|END_ACTION|>",),
)
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
