"""SGLang's CohereCommand4Detector reasoning: ``<|START_THINKING|>`` then a text or action block."""

from __future__ import annotations

from synthgen.chat.parsers.reasoning.base import Split
from synthgen.chat.parsers.registry import reasoning_parser

_COHERE_TEXT_START, _COHERE_TEXT_END = "<|START_TEXT|>", "<|END_TEXT|>"
_COHERE_ACTION = "<|START_ACTION|>"


@reasoning_parser("cohere_command4", splits="`<|START_THINKING|>`…`<|END_THINKING|>`, answer from `<|START_TEXT|>`")
def cohere(text: str, opened: bool, tool_parsing: bool = False) -> Split:
    """CohereCommand4Detector: reasoning up to <|END_THINKING|> (or the text/action block); the answer is
    the <|START_TEXT|> block without its markers, or an action block verbatim for the tool-call parser."""
    end = "<|END_THINKING|>"
    cut = [(text.find(m), m) for m in (end, _COHERE_TEXT_START, _COHERE_ACTION)]
    at, marker = next(((i, m) for i, m in cut if i != -1), (-1, ""))
    if at == -1:
        reasoning, rest = text, ""
    elif marker == end:
        reasoning, rest = text[:at], text[at + len(end) :]
    else:
        reasoning, rest = text[:at], text[at:]
    if reasoning.startswith("<|START_THINKING|>"):
        reasoning = reasoning[len("<|START_THINKING|>") :]
    s = rest.find(_COHERE_TEXT_START)
    if s == -1:
        answer = rest if _COHERE_ACTION in rest else ""
    else:
        answer = rest[s + len(_COHERE_TEXT_START) :].split(_COHERE_TEXT_END, 1)[0]
    return Split(reasoning, answer, at != -1, bool(reasoning) or marker == end)
