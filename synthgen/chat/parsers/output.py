"""A row's parse: the named reasoning parser, then the named tool-call detector, as SGLang's chat serving
chains them (``serving_chat``), with ids SGLang's shape but reproducible."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from synthgen.chat.parsers import calls as _calls
from synthgen.chat.parsers.calls import Tools
from synthgen.chat.parsers.reasoning.base import Split, split_reasoning
from synthgen.chat.parsers.registry import REASONING, TOOL_CALL, known


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    reasoning: str
    content: str
    reasoning_complete: bool  # False when reasoning was opened and never closed (truncated)
    had_reasoning: bool
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI shape, arguments as SGLang's


def _known(kind: str, name: str) -> str:
    names = known(kind)
    if name not in names:
        raise ValueError(f"unknown {kind} parser {name!r}; known: {', '.join(names)}")
    return name


def prompt_opens_reasoning(prompt: str, reasoning: str | None = None, think_start: str = "<think>") -> bool:
    """Whether a rendered generation prompt already opened the reasoning (it ends with the opening tag)."""
    if reasoning is None:
        return prompt.rstrip().endswith(think_start)
    tag = REASONING[_known("reasoning", reasoning)].opening
    return tag is not None and prompt.rstrip().endswith(tag)


def _call_id(parser: str, item: _calls.Item, ordinal: int, call_id_prefix: str, history: int) -> str:
    """serving_chat._process_tool_call_id."""
    if parser == "kimi_k2":
        return f"functions.{item.name}:{history + item.tool_index}"
    if parser == "kimi_k3":
        return f"{item.name}:{history + item.tool_index}"
    return _calls.random_style_id(call_id_prefix, ordinal)


class OutputParser:
    """Reasoning split then tool calls, as SGLang's chat serving chains them.

    ``reasoning=None`` is the plain think-tag rule with ``think_start``/``think_end``;
    ``tool_call=None`` leaves the answer as it is. Unknown names raise ValueError listing the known ones.

        parser = OutputParser("kimi_k2", "kimi_k2")
        out = parser.parse(text, parser.opens_reasoning(prompt), call_id_prefix=prompt_id, tools=tools)
    """

    def __init__(
        self,
        reasoning: str | None,
        tool_call: str | None,
        think_start: str = "<think>",
        think_end: str = "</think>",
        decode: Callable[[list[int]], str] | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        """``decode``: token ids to text with special tokens kept (the served tokenizer's), to read the stop
        token a generation ended on (:func:`synthgen.run.model.stop_token`); ``chat_template_kwargs``: the
        request's, which decide for some parsers whether the output starts in reasoning (iquest_q1)."""
        self.reasoning = reasoning if reasoning is None else _known("reasoning", reasoning)
        self.tool_call = tool_call if tool_call is None else _known("tool-call", tool_call)
        self.think_start = think_start
        self.think_end = think_end
        self.decode = decode
        self.chat_template_kwargs = dict(chat_template_kwargs or {})

    def opens_reasoning(self, prompt: str) -> bool:
        return prompt_opens_reasoning(prompt, self.reasoning, self.think_start)

    def grammar_ends(self, tool_parsing: bool) -> tuple[str, ...]:
        """The tokens that close a block in the grammar of the parsers applied (reasoning, then tool calls)."""
        ends = REASONING[self.reasoning].ends if self.reasoning is not None else ()
        if tool_parsing and self.tool_call is not None:
            ends += TOOL_CALL[self.tool_call].ends
        return ends

    def _written(self, text: str, stop: str, tool_parsing: bool) -> str:
        """What the model wrote: ``text`` and the stop token it stopped on, when that token is part of the
        parsers' grammar (gpt-oss's ``<|call|>``): SGLang's ``text`` leaves a matched stop token out."""
        return text + stop if stop and stop in self.grammar_ends(tool_parsing) else text

    def split(self, text: str, prompt_opens_reasoning: bool, tool_parsing: bool = False, stop: str = "") -> Split:
        """``tool_parsing``: a tool-call parser reads the answer next (Muse then keeps channel framing);
        ``stop``: the stop token the generation ended on, as text ("" if none or unknown)."""
        text = self._written(text, stop, tool_parsing)
        if self.reasoning is None:
            return split_reasoning(text, prompt_opens_reasoning, self.think_start, self.think_end)
        entry = REASONING[self.reasoning]
        if entry.forced_by_kwargs is not None:
            prompt_opens_reasoning = entry.forced_by_kwargs(self.chat_template_kwargs)
        return entry.split(text, prompt_opens_reasoning, tool_parsing)

    def parse(
        self,
        text: str,
        prompt_opens_reasoning: bool,
        call_id_prefix: str = "",
        history_tool_calls: int = 0,
        tools: list[Any] | None = None,
        stop: str = "",
    ) -> ParsedOutput:
        """``history_tool_calls``: tool calls in the conversation before this turn (Kimi ids count on);
        ``tools``: the request's OpenAI tool list (None: every function counts as declared); ``stop``: the
        stop token the generation ended on, as text (see :meth:`split`)."""
        split = self.split(text, prompt_opens_reasoning, self.tool_call is not None, stop)
        content, calls = split.content, list[dict[str, Any]]()
        if self.tool_call is not None:
            try:
                found = TOOL_CALL[self.tool_call].parse(content, Tools.from_openai(tools))
            except Exception:  # serving_chat._process_tool_calls: a failing parser leaves the answer whole
                found = None
            if found is not None:
                content = found[0]
                calls = [
                    {
                        "id": _call_id(self.tool_call, item, i, call_id_prefix, history_tool_calls),
                        "type": "function",
                        "function": {"name": item.name, "arguments": item.arguments},
                    }
                    for i, item in enumerate(found[1])
                ]
        return ParsedOutput(
            reasoning=split.reasoning,
            content=content,
            reasoning_complete=split.reasoning_closed,
            had_reasoning=split.had_reasoning,
            tool_calls=calls,
        )
