"""Tool-call family minimax.py: MiniMax (M2, M3).

One sample per registered name, parsed as SGLang parses it."""

from __future__ import annotations

import pytest
from parser_families import Sample, parse_sample, tool_names_in

from synthgen.chat.parsers.tools import minimax as family

SAMPLES = [
    Sample(
        "minimax-m2",
        'Hi<minimax:tool_call><invoke name="search"><parameter name="n">2</parameter></invoke></minimax:tool_call> bye',
        "Hi bye",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "minimax-m3",
        'Hi]<]minimax[>[<tool_call>]<]minimax[>[<invoke name="search">]<]minimax[>[<n>2]<]minimax[>[</n>'
        "]<]minimax[>[</invoke>]<]minimax[>[</tool_call> bye",
        "Hi bye",
        [("search", '{"n": 2}')],
    ),
]


def test_every_name_the_family_registers_has_a_sample():
    assert tool_names_in(family) == {s.name for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_the_calls_and_the_answer_are_sglangs(sample):
    assert parse_sample(sample) == (sample.content, sample.calls)
