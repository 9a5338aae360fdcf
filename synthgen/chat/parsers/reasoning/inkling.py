"""SGLang's InklingDetector reasoning: typed content blocks."""

from __future__ import annotations

import re

from synthgen.chat.parsers.reasoning.base import Split
from synthgen.chat.parsers.registry import reasoning_parser

_INK_THINKING, _INK_TEXT = "<|content_thinking|>", "<|content_text|>"
_INK_MODEL, _INK_END, _INK_END_SAMPLING = "<|message_model|>", "<|end_message|>", "<|content_model_end_sampling|>"
_INK_TOOLS = ("<|content_invoke_tool_json|>", "<|content_invoke_tool_text|>")
INKLING_CONTROL = sorted(
    {
        "<|endoftext|>",
        "<|message_user|>",
        _INK_MODEL,
        "<|message_system|>",
        "<|message_tool|>",
        _INK_TEXT,
        "<|content_image|>",
        _INK_END_SAMPLING,
        _INK_THINKING,
        _INK_END,
        "<|content_audio_input|>",
        "<|content_tool_error|>",
        "<|content_xml|>",
        "<|audio_end|>",
        *_INK_TOOLS,
        "<|content_invoke_tool|>",
        "<|model_trigger_generation|>",
    }
)


@reasoning_parser(
    "inkling", splits="typed blocks `<|content_thinking|>` / `<|content_text|>`", ends=("<|end_message|>",)
)
def inkling(text: str, opened: bool, tool_parsing: bool = False) -> Split:
    """InklingDetector._parse_blocks, one shot: typed content blocks (thinking, text, tool invocations)."""

    reasoning: list[str] = []
    content: list[str] = []
    kind: str | None = None
    header = pending = ""
    saw = False
    pos = 0

    def emit(piece: str) -> None:
        nonlocal header, pending
        if kind == "reasoning":
            pending += piece
        elif kind == "header":
            header += piece
        elif kind in ("content", "tool") or piece:
            content.append(piece)

    def flush() -> None:
        nonlocal pending
        if kind == "reasoning":
            reasoning.append(pending)
            pending = ""

    for match in re.finditer("|".join(re.escape(t) for t in INKLING_CONTROL), text):
        saw = True
        emit(text[pos : match.start()])
        token, pos = match.group(0), match.end()
        if token == _INK_MODEL:
            if kind in (None, "header"):
                flush()
                header, kind = "", "header"
            else:
                emit(token)
        elif token in _INK_TOOLS:
            flush()
            if kind == "header":
                content.extend((_INK_MODEL, header, token))
                header = ""
            else:
                content.append(token)
            kind = "tool"
        elif kind == "tool":
            content.append(token)
            if token in (_INK_END_SAMPLING, _INK_END):
                kind = None
        elif token in (_INK_THINKING, _INK_TEXT):
            flush()
            header, kind = "", ("reasoning" if token == _INK_THINKING else "content")
        elif token in (_INK_END_SAMPLING, _INK_END):
            flush()
            header, kind = "", None
    if saw or kind is not None:
        emit(text[pos:])
    else:
        content.append(text)
    closed = kind != "reasoning"
    if kind == "reasoning":
        reasoning.append(pending)
    return Split("".join(reasoning), "".join(content), closed, _INK_THINKING in text)
