"""Tool-call family kimi.py: Kimi (K2, K3).

One sample per registered name, parsed as SGLang parses it."""

from __future__ import annotations

import pytest
from parser_families import Sample, parse_sample, tool_names_in

from synthgen.chat.parsers.tools import kimi as family

SAMPLES = [
    Sample(
        "kimi_k2",
        'Hi<|tool_calls_section_begin|><|tool_call_begin|>functions.search:0<|tool_call_argument_begin|>{"n": 2}'
        "<|tool_call_end|><|tool_calls_section_end|>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "kimi_k3",
        'Hi<|open|>tools<|sep|><|open|>call tool="search"<|sep|><|open|>argument key="n" type="integer"<|sep|>2'
        "<|close|>argument<|sep|><|close|>call<|sep|><|close|>tools<|sep|>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
]


def test_every_name_the_family_registers_has_a_sample():
    assert tool_names_in(family) == {s.name for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_the_calls_and_the_answer_are_sglangs(sample):
    assert parse_sample(sample) == (sample.content, sample.calls)
