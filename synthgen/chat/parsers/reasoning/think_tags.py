"""The SGLang reasoning detectors that are the base think-tag detector with their own tags (:class:`ThinkRule`).

``ReasoningParser.DetectorMap`` entries, with the ``force_reasoning`` overrides of
``ReasoningParser.__init__`` (qwen3-thinking, minimax) and of the detectors themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from synthgen.chat.parsers.reasoning.base import Split, ThinkRule, describe
from synthgen.chat.parsers.registry import add_reasoning


def think_rule(name: str, rule: ThinkRule, forced_by_kwargs: Callable[[Mapping[str, Any]], bool] | None = None) -> None:
    """Registers ``rule`` under SGLang's ``name``; the docs table describes it from its fields."""

    def split(text: str, opened: bool, tool_parsing: bool) -> Split:
        return rule.split(text, opened)

    splits = describe(rule)
    if forced_by_kwargs is not None:
        splits += ", in reasoning first unless `chat_template_kwargs` turn thinking off"
    add_reasoning(name, split, "think tags", splits, opening=rule.start, forced_by_kwargs=forced_by_kwargs)


def _iquest_thinking(kwargs: Mapping[str, Any]) -> bool:
    """IQuestQ1ReasoningDetector.thinking_enabled: serving_chat (and ReasoningParser, given the request)
    start the output in reasoning unless the request's ``thinking``/``enable_thinking`` turn it off."""
    thinking, enable_thinking = kwargs.get("thinking"), kwargs.get("enable_thinking")
    return True if thinking is None and enable_thinking is None else bool(thinking or enable_thinking)


_QWEN3 = ThinkRule(tool_start="<tool_call>")
_R1 = ThinkRule(forced=True)  # DeepSeekR1Detector: force_reasoning hard-coded True
_PLAIN = ThinkRule()

think_rule("deepseek-r1", _R1)
think_rule("deepseek-v3", _QWEN3)
think_rule("deepseek-v4", _PLAIN)
think_rule("deepseek-v41", _PLAIN)
think_rule("dots", _QWEN3)
think_rule("gemma4", ThinkRule(start="<|channel>", end="<channel|>", self_label="thought\n"))
think_rule("gigachat35", _R1)
think_rule("glm45", _QWEN3)
think_rule("granite_thinking_parser", ThinkRule(tool_start="<tool_call>", strip_answer_newlines=True))
think_rule("hunyuan", ThinkRule(tool_start="<tool_calls>"))  # resolve_hunyuan_tokens without a tokenizer: bare tags
think_rule("interns1", _QWEN3)
think_rule("iquest_q1", ThinkRule(), forced_by_kwargs=_iquest_thinking)
think_rule("k2_horizon", ThinkRule("<ifm|think>", "</ifm|think>", forced=True, tool_start="<ifm|tool_call"))
think_rule("kimi", ThinkRule(start="◁think▷", end="◁/think▷", forced=False))
think_rule("kimi_k2", ThinkRule(tool_start="<|tool_calls_section_begin|>"))
think_rule("ling3", ThinkRule(tool_start="<tool_call>", nonempty=True))
think_rule("mimo", _QWEN3)
think_rule("minimax", ThinkRule(forced=True, tool_start="<tool_call>"))
think_rule("minimax-m3", ThinkRule(start="<mm:think>", end="</mm:think>", drop_leading_close=True))
think_rule("mistral", ThinkRule(start="[THINK]", end="[/THINK]"))
think_rule("nanbeige", _QWEN3)
think_rule("nemotron_3", _QWEN3)
think_rule("poolside_v1", _QWEN3)
think_rule("qwen3", _QWEN3)
think_rule("qwen3-thinking", ThinkRule(forced=True, tool_start="<tool_call>"))
think_rule("step3", _R1)
think_rule("step3p5", _R1)
