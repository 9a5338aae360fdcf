"""Tool-call family deepseek.py: DeepSeek (V3, V3.1, DSML: V3.2, V4, V4.1).

One sample per registered name, parsed as SGLang parses it."""

from __future__ import annotations

import pytest
from parser_families import Sample, parse_sample, tool_names_in

from synthgen.chat.parsers.tools import deepseek as family

SAMPLES = [
    Sample(
        "deepseekv3",
        'Hi<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>search\n```json\n{"n": 2}\n```'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "deepseekv31",
        'Hi<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>search<｜tool▁sep｜>{"n": 2}'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "deepseekv32",
        'Hi\n\n<｜DSML｜function_calls><｜DSML｜invoke name="search"><｜DSML｜parameter name="n" string="false">2'
        "</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜function_calls>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "deepseekv4",
        'Hi<｜DSML｜tool_calls><｜DSML｜invoke name="search"><｜DSML｜parameter name="n" string="false">2'
        "</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "deepseekv41",
        'Hi<｜DSML｜ calls><｜DSML｜ invoke name="search"><｜DSML｜ parameter name="n" string="false">2'
        "</｜DSML｜ parameter></｜DSML｜ invoke></｜DSML｜ calls>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
]


def test_every_name_the_family_registers_has_a_sample():
    assert tool_names_in(family) == {s.name for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_the_calls_and_the_answer_are_sglangs(sample):
    assert parse_sample(sample) == (sample.content, sample.calls)
