"""Tool-call family harmony.py: Harmony (gpt-oss).

One sample per registered name, parsed as SGLang parses it."""

from __future__ import annotations

import pytest
from parser_families import Sample, parse_sample, tool_names_in
from parser_samples import TOOLS

from synthgen.chat.parsers import OutputParser
from synthgen.chat.parsers.tools import harmony as family
from synthgen.run.model import stop_token
from synthgen.server.client import Generation

SAMPLES = [
    Sample(
        "gpt-oss",
        '<|start|>assistant<|channel|>commentary to=functions.search <|constrain|>json<|message|>{"n": 2}<|call|>',
        "",
        [("search", '{"n": 2}')],
    ),
]


def test_every_name_the_family_registers_has_a_sample():
    assert tool_names_in(family) == {s.name for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_the_calls_and_the_answer_are_sglangs(sample):
    assert parse_sample(sample) == (sample.content, sample.calls)


OSS_CALL_CUT = (
    "<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant<|channel|>commentary to=functions.search "
    '<|constrain|>json<|message|>{"q": "x"}'
)


def test_a_call_cut_at_its_call_stop_token_is_parsed_when_the_stop_token_is_given():
    parser = OutputParser("gpt-oss", "gpt-oss")
    lost = parser.parse(OSS_CALL_CUT, False, tools=TOOLS)  # /generate's text: <|call|> matched, left out
    assert lost.tool_calls == []
    out = parser.parse(OSS_CALL_CUT, False, tools=TOOLS, stop="<|call|>")
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in out.tool_calls] == [("search", '{"q": "x"}')]
    assert (out.reasoning, out.content) == ("Look it up.", "")


def test_a_stop_token_outside_the_grammar_is_not_added():
    parser = OutputParser("qwen3", "qwen25")
    out = parser.parse("<think>r</think>Hello", False, tools=TOOLS, stop="<|im_end|>")
    assert out.content == "Hello"
    assert parser.grammar_ends(True) == ("</tool_call>",) and parser.grammar_ends(False) == ()


def test_the_run_reads_the_stop_token_from_the_matched_id_that_output_ids_end_with():
    parser = OutputParser("gpt-oss", "gpt-oss", decode=lambda ids: {7: "<|call|>"}.get(ids[0], "?"))

    def gen(finish: dict, ids: list[int] | None) -> Generation:
        return Generation("t", ids, finish, 1, 1, None, None, None)

    assert stop_token(gen({"type": "stop", "matched": 7}, [1, 7]), parser) == "<|call|>"
    assert stop_token(gen({"type": "stop", "matched": 7}, [1, 2]), parser) == ""  # not the last id
    assert stop_token(gen({"type": "stop", "matched": "</s>"}, [1, 7]), parser) == ""  # a stop string
    assert stop_token(gen({"type": "length"}, [1, 7]), parser) == ""
    assert stop_token(gen({"type": "stop", "matched": 7}, None), parser) == ""
    assert stop_token(gen({"type": "stop", "matched": 7}, [7]), OutputParser("gpt-oss", None)) == ""  # no decoder
