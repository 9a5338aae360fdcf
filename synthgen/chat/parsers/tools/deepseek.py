"""SGLang's DeepSeek detectors: V3 and V3.1's ``<｜tool▁call▁begin｜>`` calls and the DSML family (V3.2, V4, V4.1)."""

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
)
from synthgen.chat.parsers.registry import tool_parser

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


@tool_parser("deepseekv3", family="DeepSeek", splits="`<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` + fenced JSON")
def deepseekv3(text: str, tools: Tools) -> Found:
    """DeepSeekV3Detector: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```...``."""
    return _deepseek(
        text, tools, r"<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)\n```json\n(.*)\n```<｜tool▁call▁end｜>", 2
    )


@tool_parser("deepseekv31", family="DeepSeek", splits="`<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}`")
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


deepseekv32 = tool_parser(
    "deepseekv32", family="DeepSeek", splits='`<｜DSML｜function_calls>` `<｜DSML｜invoke name="F">`'
)(_dsml("function_calls"))
# DeepSeekV4Detector: DeepSeekV32Detector with a <｜DSML｜tool_calls> block
deepseekv4 = tool_parser("deepseekv4", family="DeepSeek", splits='`<｜DSML｜tool_calls>` `<｜DSML｜invoke name="F">`')(
    _dsml("tool_calls")
)
# DeepSeekV41Detector: V3.2 with renamed tags
deepseekv41 = tool_parser("deepseekv41", family="DeepSeek", splits='`<｜DSML｜ calls>` `<｜DSML｜ invoke name="F">`')(
    _dsml(" calls", " invoke", " parameter")
)
