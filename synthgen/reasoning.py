"""Splitting a raw completion into reasoning and answer, with SGLang's own semantics.

Mirrors ``BaseReasoningFormatDetector._detect_and_parse_impl`` (SGLang 0.5.23):

1. The output is in reasoning if the rendered prompt already opened it (a Kimi-K2.5-style
   template ends the generation prompt with ``<think>``), or if the output contains the
   opening tag. Otherwise the whole output is the answer.
2. Leading repeats of the opening tag are dropped.
3. Reasoning is the text before the first closing tag; the answer is everything after it.
4. With no closing tag the whole output is reasoning (the generation was cut off) and the
   answer is empty.

Nothing is stripped: the training data keeps the model's exact characters.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Split:
    reasoning: str
    content: str
    reasoning_closed: bool  # False when reasoning was opened and never closed (truncated)
    had_reasoning: bool


def split_reasoning(text: str, prompt_opens_reasoning: bool, start: str = "<think>", end: str = "</think>") -> Split:
    if not (prompt_opens_reasoning or start in text):
        return Split(reasoning="", content=text, reasoning_closed=True, had_reasoning=False)
    while text.startswith(start):
        text = text[len(start):]
    head, found, tail = text.partition(end)
    if not found:
        return Split(reasoning=text, content="", reasoning_closed=False, had_reasoning=True)
    return Split(reasoning=head, content=tail, reasoning_closed=True, had_reasoning=True)
