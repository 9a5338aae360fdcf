"""Tool-call family pythonic.py: Python calls.

One sample per registered name, parsed as SGLang parses it."""

from __future__ import annotations

import pytest
from parser_families import Sample, parse_sample, tool_names_in

from synthgen.chat.parsers.tools import pythonic as family

SAMPLES = [
    Sample(
        "pythonic",
        'Hi [search(q="x", n=2), ping()]',
        "Hi ",
        [("search", '{"q": "x", "n": 2}'), ("ping", "{}")],
    ),
]


def test_every_name_the_family_registers_has_a_sample():
    assert tool_names_in(family) == {s.name for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_the_calls_and_the_answer_are_sglangs(sample):
    assert parse_sample(sample) == (sample.content, sample.calls)
