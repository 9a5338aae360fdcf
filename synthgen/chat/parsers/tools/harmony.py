"""SGLang's GptOssDetector: Harmony ``commentary to=functions.NAME`` blocks."""

from __future__ import annotations

import json
import re

from synthgen.chat.parsers.calls import (
    Found,
    Item,
    Tools,
    dumps,
)
from synthgen.chat.parsers.reasoning import harmony
from synthgen.chat.parsers.registry import tool_parser

_OSS_CALL = re.compile(
    r"to=([a-zA-Z_][a-zA-Z0-9_.-]*)\s*<\|constrain\|>json<\|message\|>(.*?)(?:<\|call\|>|$)", re.DOTALL
)


@tool_parser("gpt-oss", family="Harmony", splits="`commentary to=functions.NAME` blocks", ends=("<|call|>",))
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
