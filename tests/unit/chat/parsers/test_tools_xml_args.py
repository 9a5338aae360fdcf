"""Tool-call family xml_args.py: XML arguments (Qwen3-Coder, Nanbeige, Step-3.5, MiMo, dots, Step-3,
GigaChat 3.5, MiniCPM-5).

One sample per registered name, parsed as SGLang parses it."""

from __future__ import annotations

import pytest
from parser_families import Sample, parse_sample, tool_names_in

from synthgen.chat.parsers.tools import xml_args as family

SAMPLES = [
    Sample(
        "qwen3_coder",
        "Hi<tool_call>\n<function=search>\n<parameter=n>\n2\n</parameter>\n</function>\n</tool_call>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "nanbeige",
        "<tool_call><function=search><parameter=q>\nx\n</parameter></function></tool_call>",
        "",
        [("search", '{"q": "x"}')],
    ),
    Sample(
        "step3p5",
        "<tool_call><function=ping></function></tool_call>",
        "",
        [("ping", "{}")],
    ),
    Sample(
        "mimo",
        "Hi<tool_call><function=search><parameter=n>2</parameter></function></tool_call>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "dots",
        'Hi<dots_function_call><invoke name="search"><parameter name="n">2</parameter></invoke></dots_function_call>',
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "step3",
        'Hi<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="search">'
        '<steptml:parameter name="n">2</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>',
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "gigachat35",
        'Hi<｜GCML｜tool_calls><｜GCML｜invoke name="search"><｜GCML｜parameter name="n" string="false">2'
        "</｜GCML｜parameter></｜GCML｜invoke></｜GCML｜tool_calls>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "minicpm5",
        'Hi<function name="search"><param name="n">2</param></function>',
        "Hi",
        [("search", '{"n": 2}')],
    ),
]


def test_every_name_the_family_registers_has_a_sample():
    assert tool_names_in(family) == {s.name for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_the_calls_and_the_answer_are_sglangs(sample):
    assert parse_sample(sample) == (sample.content, sample.calls)
