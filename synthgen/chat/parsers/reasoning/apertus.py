"""SGLang's Apertus2509Detector reasoning: ``<|inner_prefix|>`` blocks."""

from __future__ import annotations

from synthgen.chat.parsers.reasoning.base import Split
from synthgen.chat.parsers.registry import reasoning_parser
from synthgen.chat.parsers.scan import BlockScan

_START = "<|inner_prefix|>"


@reasoning_parser("apertus2509", splits="`<|inner_prefix|>`…`<|inner_suffix|>`; tool calls inside go to the answer")
def apertus(text: str, opened: bool, tool_parsing: bool = False) -> Split:
    """Apertus2509Detector: every <|inner_prefix|>...<|inner_suffix|> block is reasoning, except tool
    calls (<|tools_prefix|>[...<|tools_suffix|>) inside it, which go to the answer; the prompt is ignored."""
    reasoning: list[str] = []
    content: list[str] = []
    closed = True
    outer = BlockScan(text, _START, "<|inner_suffix|>")
    for block in outer:
        content.append(block.before)
        inner = BlockScan(block.inner, "<|tools_prefix|>[", "<|tools_suffix|>")
        for call in inner:
            reasoning.append(call.before)
            content.append(call.outer)
        reasoning.append(inner.rest)
        closed = block.closed
    content.append(outer.rest)
    return Split("".join(reasoning), "".join(content), closed, _START in text)
