"""The reasoning families (synthgen/chat/parsers/reasoning/): one sample per module's names, split as SGLang
splits it, and the think-tag rules registered with what they split."""

from __future__ import annotations

import pytest
from parser_families import reasoning_names_in

from synthgen.chat.parsers import OutputParser
from synthgen.chat.parsers.reasoning import apertus, cohere, harmony, inkling, kimi, minimax, muse, think_tags
from synthgen.chat.parsers.registry import REASONING

# name: (output, reasoning, answer)
SAMPLES = {
    "apertus2509": (
        "<|inner_prefix|>hm<|tools_prefix|>[x]<|tools_suffix|>ok<|inner_suffix|>Answer",
        "hmok",
        "<|tools_prefix|>[x]<|tools_suffix|>Answer",  # a tool call inside the reasoning goes to the answer
    ),
    "cohere_command4": ("<|START_THINKING|>hm<|END_THINKING|><|START_TEXT|>Answer<|END_TEXT|>", "hm", "Answer"),
    "gpt-oss": (
        "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Answer<|return|>",
        "hm",
        "Answer",
    ),
    "inkling": ("<|content_thinking|>hm<|end_message|><|content_text|>Answer<|end_message|>", "hm", "Answer"),
    "kimi_k3": (
        "<|open|>think<|sep|>hm<|close|>think<|sep|><|open|>response<|sep|>Answer<|close|>response<|sep|>",
        "hm",
        "Answer",
    ),
    "minimax-append-think": ("hm</think>Answer", "", "<think>hm</think>Answer"),
    "muse": ("to=self<|message|>hm<|eom|><|start|>assistant to=user<|message|>Answer<|eot|>", "hm", "Answer"),
}
MODULES = [apertus, cohere, harmony, inkling, kimi, minimax, muse]


def test_every_own_rule_module_registers_names_with_a_sample():
    assert set().union(*(reasoning_names_in(m) for m in MODULES)) == set(SAMPLES)
    assert all(REASONING[name].family == "own rule" for name in SAMPLES)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_own_rule_splits_are_sglangs(name):
    text, reasoning, answer = SAMPLES[name]
    out = OutputParser(name, None).parse(text, False)
    assert (out.reasoning, out.content, out.reasoning_complete) == (reasoning, answer, True)


def test_the_think_tag_rules_are_registered_with_their_tags_and_opening():
    names = reasoning_names_in(think_tags)
    assert {"qwen3", "deepseek-r1", "kimi_k2", "gemma4", "mistral"} <= names
    assert all(REASONING[n].family == "think tags" for n in names)
    assert REASONING["mistral"].opening == "[THINK]" and REASONING["gemma4"].opening == "<|channel>"
    assert REASONING["gpt-oss"].opening is None and REASONING["kimi_k3"].opening == "<|open|>think<|sep|>"


@pytest.mark.parametrize(
    "name,text,opened,reasoning,answer,complete",
    [
        ("qwen3", "<think>hm</think>Answer", False, "hm", "Answer", True),
        ("qwen3", "hm<tool_call>x", True, "hm", "<tool_call>x", True),  # the tool call ends the reasoning
        ("deepseek-r1", "hm</think>Answer", False, "hm", "Answer", True),  # forced: always in reasoning first
        ("kimi", "hm", True, "", "hm", True),  # forced off: the prompt cannot open it
        ("qwen3", "<think>cut off", False, "cut off", "", False),
    ],
)
def test_think_tag_rules(name, text, opened, reasoning, answer, complete):
    out = OutputParser(name, None).parse(text, opened)
    assert (out.reasoning, out.content, out.reasoning_complete) == (reasoning, answer, complete)


@pytest.mark.parametrize(
    "kwargs,in_reasoning",
    [
        (None, True),
        ({"enable_thinking": False}, False),
        ({"thinking": False}, False),
        ({"thinking": False, "enable_thinking": True}, True),
        ({"other": 1}, True),
    ],
)
def test_iquest_q1_starts_in_reasoning_unless_the_requests_thinking_flags_turn_it_off(kwargs, in_reasoning):
    # IQuestQ1ReasoningDetector.thinking_enabled decides, whatever the prompt (SGLang's serving layer).
    text = "The user asks for 17 × 23.</think>\n\n391."
    out = OutputParser("iquest_q1", None, chat_template_kwargs=kwargs).parse(text, not in_reasoning)
    expected = ("The user asks for 17 × 23.", "\n\n391.") if in_reasoning else ("", text)
    assert (out.reasoning, out.content) == expected
