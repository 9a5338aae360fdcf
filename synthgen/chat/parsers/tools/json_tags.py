"""SGLang's JSON-in-tags detectors: Qwen 2.5 (and Trinity), Hermes, InternLM: a JSON object between tags."""

from __future__ import annotations

import json
import re

from synthgen.chat.parsers.calls import (
    Found,
    Item,
    Tools,
    base_json,
    dumps,
)
from synthgen.chat.parsers.registry import tool_parser
from synthgen.chat.parsers.scan import through_last


@tool_parser(
    "qwen", "qwen25", family="JSON in tags", splits="`<tool_call>\\n{json}\\n</tool_call>`", ends=("</tool_call>",)
)
def qwen25(text: str, tools: Tools) -> Found:
    """Qwen25Detector: ``<tool_call>\\n{json}\\n</tool_call>``; the answer is the text before, stripped."""
    bot, eot = "<tool_call>\n", "\n</tool_call>"
    if bot not in text:
        return None
    calls: list[Item] = []
    for body in re.findall(rf"{re.escape(bot)}(.*?){re.escape(eot)}", through_last(text, eot), re.DOTALL):
        try:
            action = json.loads(body.strip())
        except json.JSONDecodeError:
            continue
        calls.extend(base_json(action, tools))
    return text[: text.find(bot)].strip(), calls


@tool_parser("hermes", family="JSON in tags", splits="`<tool_call>{json}</tool_call>`", ends=("</tool_call>",))
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


@tool_parser(
    "interns1",
    family="JSON in tags",
    splits="`<|action_start|> <|plugin|>{json}<|action_end|>`",
    ends=("<|action_end|>",),
)
def internlm(text: str, tools: Tools) -> Found:
    """InternlmDetector: ``<|action_start|> <|plugin|>{json}<|action_end|>``."""
    bot, eot = "<|action_start|> <|plugin|>", "<|action_end|>"
    if bot not in text:
        return None
    normal = text[: text.find(bot)].strip()
    matches = re.findall(rf"{re.escape(bot)}\s*(.*?){re.escape(eot)}", through_last(text, eot), re.DOTALL)
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


@tool_parser(
    "trinity", family="JSON in tags", splits="Qwen 2.5's, `<think>` tags removed first", ends=("</tool_call>",)
)
def trinity(text: str, tools: Tools) -> Found:
    """TrinityDetector: Qwen 2.5's format with any <think>/</think> removed first."""
    return qwen25(text.replace("<think>", "").replace("</think>", ""), tools)
