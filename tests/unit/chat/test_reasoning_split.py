"""The reasoning split follows SGLang's detector, table-driven."""

import pytest

from synthgen.chat.parsers import OutputParser, split_reasoning

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


# SGLang detectors with a rule of their own (the real-server tier compares all of them with SGLang).
NAMED = [
    # (parser, output, prompt opened reasoning, reasoning, content)
    ("gemma4", "<|channel>thought\nG4 thinks<channel|>reply", False, "G4 thinks", "reply"),  # self-label dropped
    ("ling3", "<think>only reasoning</think>", False, "", "only reasoning"),  # reasoning alone is the answer
    ("ling3", "<think>cut off", False, "", "cut off"),
    ("ling3", "<think>r<tool_call>x", False, "r", "<tool_call>x"),
    ("minimax-m3", "</mm:think>reply", False, "", "reply"),  # a stray closer from an earlier turn
    ("granite_thinking_parser", "<think>r</think>\n\nanswer", False, "r", "answer"),
    ("mistral", "[THINK]hmm[/THINK]answer", False, "hmm", "answer"),
    ("k2_horizon", "plan</ifm|think>out", False, "plan", "out"),  # always forced
    (
        "kimi_k3",
        "<|open|>think<|sep|>t<|close|>think<|sep|><|open|>response<|sep|>a<|close|>response<|sep|>",
        False,
        "t",
        "a",
    ),
    ("cohere_command4", "t<|END_THINKING|><|START_TEXT|>a<|END_TEXT|>", False, "t", "a"),
    (
        "apertus2509",
        "<|inner_prefix|>t<|tools_prefix|>[{}]<|tools_suffix|><|inner_suffix|>a",
        False,
        "t",
        "<|tools_prefix|>[{}]<|tools_suffix|>a",
    ),
    ("inkling", "<|content_thinking|>t<|end_message|><|content_text|>a<|end_message|>", False, "t", "a"),
    ("nemotron_3", "<think>r\n<tool_call>x", False, "r\n", "<tool_call>x"),
]


@pytest.mark.parametrize("parser,text,opened,reasoning,content", NAMED)
def test_named_detectors_split_as_sglangs_do(parser, text, opened, reasoning, content):
    split = OutputParser(parser, None).split(text, opened)
    assert (split.reasoning, split.content) == (reasoning, content)


def test_muse_keeps_channel_framing_only_when_a_tool_parser_reads_the_answer():
    text = ' to=self<|message|>t<|eom|><|start|>assistant to=functions.f<|message|><atem:invoke name="f">'
    text += "</atem:invoke><|eom|><|start|>assistant to=user<|message|>a<|eot|>"
    plain = OutputParser("muse", None).split(text, False)
    framed = OutputParser("muse", None).split(text, False, tool_parsing=True)
    assert plain.reasoning == framed.reasoning == "t"
    assert framed.content.endswith("<|start|>assistant to=user<|message|>a<|eot|>")
    assert plain.content.endswith("</atem:invoke><|eom|>a")  # the answer channel unwrapped
