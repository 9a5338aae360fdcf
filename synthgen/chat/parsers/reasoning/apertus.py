"""SGLang's Apertus2509Detector reasoning: ``<|inner_prefix|>`` blocks."""

from __future__ import annotations

from synthgen.chat.parsers.reasoning.base import Split
from synthgen.chat.parsers.registry import reasoning_parser


@reasoning_parser("apertus2509", splits="`<|inner_prefix|>`…`<|inner_suffix|>`; tool calls inside go to the answer")
def apertus(text: str, opened: bool, tool_parsing: bool = False) -> Split:
    """Apertus2509Detector: every <|inner_prefix|>...<|inner_suffix|> block is reasoning, except tool
    calls (<|tools_prefix|>[...<|tools_suffix|>) inside it, which go to the answer; the prompt is ignored."""
    start, end, tool_start, tool_end = "<|inner_prefix|>", "<|inner_suffix|>", "<|tools_prefix|>[", "<|tools_suffix|>"
    reasoning: list[str] = []
    content: list[str] = []
    closed = True

    def inner(block: str) -> None:
        cursor = 0
        while True:
            s = block.find(tool_start, cursor)
            if s == -1:
                reasoning.append(block[cursor:])
                return
            reasoning.append(block[cursor:s])
            e = block.find(tool_end, s)
            if e == -1:
                content.append(block[s:])
                return
            content.append(block[s : e + len(tool_end)])
            cursor = e + len(tool_end)

    cursor = 0
    while True:
        s = text.find(start, cursor)
        if s == -1:
            content.append(text[cursor:])
            break
        content.append(text[cursor:s])
        cursor = s + len(start)
        e = text.find(end, cursor)
        if e == -1:
            inner(text[cursor:])
            closed = False
            break
        inner(text[cursor:e])
        cursor = e + len(end)
    thought = "".join(reasoning)
    return Split(thought, "".join(content), closed, start in text)
