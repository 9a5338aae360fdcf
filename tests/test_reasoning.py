"""The reasoning split follows SGLang's detector, table-driven."""

import pytest

from synthgen.chat.parsers import split_reasoning

CASES = [
    # (output text, prompt opened reasoning, reasoning, content, closed)
    ("<think>plan</think>answer", False, "plan", "answer", True),
    ("<think>\nplan\n</think>\n\nanswer", False, "\nplan\n", "\n\nanswer", True),  # nothing stripped
    ("plan</think>answer", True, "plan", "answer", True),  # Kimi-K2.5: prompt ends with <think>
    ("plan</think>answer", False, "", "plan</think>answer", True),  # no opening tag anywhere: all content
    ("just an answer", False, "", "just an answer", True),
    ("<think>cut off mid thought", False, "cut off mid thought", "", False),  # truncated
    ("cut off mid thought", True, "cut off mid thought", "", False),
    ("<think><think>double</think>x", False, "double", "x", True),  # leading repeats dropped
    ("a</think>b</think>c", True, "a", "b</think>c", True),  # first closing tag splits
    ("", True, "", "", False),
    ("", False, "", "", True),
]


@pytest.mark.parametrize("text,opened,reasoning,content,closed", CASES)
def test_split_matches_sglang_semantics(text, opened, reasoning, content, closed):
    split = split_reasoning(text, opened)
    assert (split.reasoning, split.content, split.reasoning_closed) == (reasoning, content, closed)


def test_custom_tags_are_honoured():
    split = split_reasoning("◁think▷r◁/think▷c", False, "◁think▷", "◁/think▷")
    assert (split.reasoning, split.content) == ("r", "c")
