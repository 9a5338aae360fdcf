"""The think-tag rule most SGLang reasoning detectors share, and the split every reasoning parser returns.

Most are SGLang's ``BaseReasoningFormatDetector._detect_and_parse_impl`` with their own tags
(:class:`ThinkRule`):

1. The output is in reasoning if the detector forces it (DeepSeek-R1, ``minimax``, ...), or the rendered
   prompt opened it (SGLang's ``force_reasoning``; a Kimi-K2.5-style template ends the generation prompt
   with ``<think>``), or the output contains the opening tag. Otherwise it is all answer.
2. Leading repeats of the opening tag (with the detector's self-label, Gemma-4's ``thought\\n``) go.
3. Reasoning is the text before the first closing tag; the answer is everything after it.
4. With no closing tag, the detector's tool-call start tag (``<tool_call>`` for Qwen3/GLM,
   ``<|tool_calls_section_begin|>`` for Kimi-K2, ...) ends the reasoning and starts the answer; without one
   the whole output is reasoning, and the reasoning is incomplete (the generation was cut off).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Split:
    reasoning: str
    content: str
    reasoning_closed: bool  # False when reasoning was opened and never closed (truncated)
    had_reasoning: bool


def split_reasoning(
    text: str,
    prompt_opens_reasoning: bool,
    start: str = "<think>",
    end: str = "</think>",
    tool_start: str | None = None,
    self_label: str = "",
) -> Split:
    """The think-tag rule of the module docstring; ``prompt_opens_reasoning`` is SGLang's force_reasoning."""
    if not (prompt_opens_reasoning or start in text):
        return Split(reasoning="", content=text, reasoning_closed=True, had_reasoning=False)
    opening = start + self_label
    while text.startswith(opening):
        text = text[len(opening) :]
    head, found, tail = text.partition(end)
    if found:
        return Split(reasoning=head, content=tail, reasoning_closed=True, had_reasoning=True)
    tool_at = text.find(tool_start) if tool_start else -1
    if tool_at != -1:  # the model went straight from thinking to a tool call: SGLang keeps the tag in the answer
        return Split(reasoning=text[:tool_at], content=text[tool_at:], reasoning_closed=True, had_reasoning=True)
    return Split(reasoning=text, content="", reasoning_closed=False, had_reasoning=True)


@dataclass(frozen=True, slots=True)
class ThinkRule:
    start: str = "<think>"
    end: str = "</think>"
    forced: bool | None = None  # True/False: SGLang ignores the prompt; None: the prompt decides
    tool_start: str | None = None
    self_label: str = ""  # text the model writes after the opening tag (Gemma-4: "thought\n")
    nonempty: bool = False  # Ling3: reasoning with no answer and no tool call becomes the answer
    strip_answer_newlines: bool = False  # Granite: the answer after </think> loses its leading newlines
    drop_leading_close: bool = False  # MiniMax-M3: a reply may open with a stray closing tag

    def split(self, text: str, opened: bool) -> Split:
        forced = self.forced if self.forced is not None else opened
        if self.drop_leading_close and not forced and text.lstrip().startswith(self.end):
            text = text.lstrip()[len(self.end) :]
        out = split_reasoning(text, forced, self.start, self.end, self.tool_start, self.self_label)
        if self.strip_answer_newlines and self.end in text and out.content:
            out = Split(out.reasoning, out.content.lstrip("\n"), out.reasoning_closed, out.had_reasoning)
        if self.nonempty and out.reasoning and not out.content and (self.tool_start or "") not in text:
            return Split("", out.reasoning, True, False)
        return out


def describe(rule: ThinkRule) -> str:
    """What a think rule splits, for the docs table."""
    text = f"`{rule.start}{rule.self_label.strip()}`…`{rule.end}`"
    if rule.forced is True:
        text += ", always in reasoning first"
    elif rule.forced is False:
        text += ", the prompt cannot open it"
    if rule.tool_start:
        text += f"; `{rule.tool_start}` ends it"
    if rule.nonempty:
        text += "; reasoning alone becomes the answer"
    if rule.strip_answer_newlines:
        text += "; answer's leading newlines dropped"
    if rule.drop_leading_close:
        text += "; a leading stray closing tag dropped"
    return text
