"""Tool-call family k2_horizon.py: K2 Horizon.

One sample per registered name, parsed as SGLang parses it."""

from __future__ import annotations

import pytest
from parser_families import Sample, parse_sample, tool_names_in

from synthgen.chat.parsers.tools import k2_horizon as family

SAMPLES = [
    Sample(
        "k2_horizon",
        "Hi<ifm|tool_call>search<ifm|arg_key>n</ifm|arg_key><ifm|arg_value>2</ifm|arg_value></ifm|tool_call> bye",
        "Hi bye",
        [("search", '{"n": 2}')],
    ),
]


def test_every_name_the_family_registers_has_a_sample():
    assert tool_names_in(family) == {s.name for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_the_calls_and_the_answer_are_sglangs(sample):
    assert parse_sample(sample) == (sample.content, sample.calls)
