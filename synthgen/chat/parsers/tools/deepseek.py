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
from synthgen.chat.parsers.scan import through_last

_DS_BOT = "<｜tool▁calls▁begin｜>"
_DS_CALL = r"<｜tool▁call▁begin｜>.*?<｜tool▁call▁end｜>"


def _deepseek(text: str, tools: Tools, detail: str, name_group: int) -> Found:
    if _DS_BOT not in text:
        return None
    normal = text[: text.find(_DS_BOT)].strip()
    calls: list[Item] = []
    try:
        for block in re.findall(_DS_CALL, through_last(text, "<｜tool▁call▁end｜>"), re.DOTALL):
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


_DSML = "｜DSML｜"


def _dsml_before(text: str) -> str:
    """The answer when no block opens: the text before the first DSML tag (its ``<``/``</`` too)."""
    idx = text.find(_DSML)
    if idx == -1:
        return text
    if idx >= 2 and text[idx - 2 : idx] == "</":
        idx -= 2
    elif idx >= 1 and text[idx - 1] == "<":
        idx -= 1
    return text[:idx].removesuffix("\n\n")


class _Dsml:
    """DeepSeekV32Detector and its subclasses, which rename the DSML tags."""

    def __init__(self, block_name: str, invoke_name: str = "invoke", parameter_name: str = "parameter") -> None:
        block, invoke, parameter = f"{_DSML}{block_name}", f"{_DSML}{invoke_name}", f"{_DSML}{parameter_name}"
        self.bot, self.invoke_start = f"<{block}>", f"<{invoke}"
        self.section_close = f"</{block}>"
        self.section_re = re.compile(rf"<{block}>(.*?)</{block}>", re.DOTALL)
        self.parameter_re = re.compile(
            rf'<{parameter}\s+name="([^"]+)"\s+string="([^"]+)"\s*>(.*?)</{parameter}>', re.DOTALL
        )
        self.invoke_re = re.compile(
            rf'<{invoke}\s+name="(?P<name>[^"]+)"\s*(?:(?P<self_close>/>)|>(?P<body>.*?)(?P<end>(?:</{invoke}>|$)))',
            re.DOTALL,
        )

    def parameters(self, body: str) -> str:
        stripped = body.strip()
        if stripped.startswith("{"):
            parsed = json.loads(stripped, parse_constant=_reject_constant)
            if not isinstance(parsed, dict):
                raise ValueError("DeepSeek tool arguments must be a JSON object")
            return stripped
        params: dict[str, Any] = {}
        matches = list(self.parameter_re.finditer(body))
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
        if _DSML in rest or (not matches and rest.strip()):
            raise ValueError("Malformed DeepSeek tool parameter")
        return dumps(params)

    def __call__(self, text: str, tools: Tools) -> Found:
        if self.bot not in text and self.invoke_start not in text:
            return None
        idx = text.find(self.bot)
        if idx != -1:
            normal = text[:idx].removesuffix("\n\n")
            sections = self.section_re.findall(through_last(text, self.section_close))
        else:
            normal, sections = _dsml_before(text), [text[text.find(self.invoke_start) :]]
        calls: list[Item] = []
        try:
            for section in sections:
                for m in self.invoke_re.finditer(section):
                    if not (m.group("self_close") or m.group("end")):
                        continue
                    try:
                        arguments = self.parameters("" if m.group("self_close") else m.group("body"))
                    except ValueError:
                        continue
                    calls.extend(
                        base_json({"name": m.group("name").strip(), "parameters": json.loads(arguments)}, tools)
                    )
        except Exception:
            pass  # SGLang keeps the calls found so far
        return normal, calls


deepseekv32 = tool_parser(
    "deepseekv32",
    family="DeepSeek",
    splits='`<｜DSML｜function_calls>` `<｜DSML｜invoke name="F">`',
    ends=("</｜DSML｜function_calls>",),
)(_Dsml("function_calls"))
# DeepSeekV4Detector: DeepSeekV32Detector with a <｜DSML｜tool_calls> block
deepseekv4 = tool_parser(
    "deepseekv4",
    family="DeepSeek",
    splits='`<｜DSML｜tool_calls>` `<｜DSML｜invoke name="F">`',
    ends=("</｜DSML｜tool_calls>",),
)(_Dsml("tool_calls"))
# DeepSeekV41Detector: V3.2 with renamed tags
deepseekv41 = tool_parser(
    "deepseekv41",
    family="DeepSeek",
    splits='`<｜DSML｜ calls>` `<｜DSML｜ invoke name="F">`',
    ends=("</｜DSML｜ calls>",),
)(_Dsml(" calls", " invoke", " parameter"))
