"""Tool-call family gemma.py: Gemma 4.

One sample per registered name, parsed as SGLang parses it."""

from __future__ import annotations

import pytest
from parser_families import Sample, parse_sample, tool_names_in

from synthgen.chat.parsers.tools import gemma as family

SAMPLES = [
    Sample(
        "gemma4",
        'Hi<|tool_call>call:search{n:2,q:<|"|>x<|"|>}<tool_call|>',
        "Hi",
        [("search", '{"n": 2, "q": "x"}')],
    ),
]


def test_every_name_the_family_registers_has_a_sample():
    assert tool_names_in(family) == {s.name for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_the_calls_and_the_answer_are_sglangs(sample):
    assert parse_sample(sample) == (sample.content, sample.calls)
