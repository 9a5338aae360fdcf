"""SGLang's MiniMaxAppendThinkDetector: all answer, with the consumed ``<think>`` put back."""

from __future__ import annotations

from synthgen.chat.parsers.reasoning.base import Split
from synthgen.chat.parsers.registry import reasoning_parser


@reasoning_parser("minimax-append-think", splits="nothing: all answer, with the consumed `<think>` put back")
def append_think(text: str, opened: bool, tool_parsing: bool = False) -> Split:
    """MiniMaxAppendThinkDetector: all answer, with the <think> the prompt consumed put back."""
    return Split(reasoning="", content="<think>" + text, reasoning_closed=True, had_reasoning=False)
