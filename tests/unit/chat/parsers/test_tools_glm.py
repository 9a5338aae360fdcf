"""Tool-call family glm.py: GLM (GLM-4.5, GLM-4.7, Ling-3, Poolside, Spark-2.5, IQuest-Q1, Hunyuan).

One sample per registered name, parsed as SGLang parses it."""

from __future__ import annotations

import pytest
from parser_families import Sample, parse_sample, tool_names_in

from synthgen.chat.parsers.tools import glm as family

SAMPLES = [
    Sample(
        "glm45",
        "Hi<tool_call>search\n<arg_key>n</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "glm",
        "<tool_call>search\n<arg_key>q</arg_key>\n<arg_value>x</arg_value>\n</tool_call>",
        "",
        [("search", '{"q": "x"}')],
    ),
    Sample(
        "glm47",
        "Hi<tool_call>search<arg_key>n</arg_key><arg_value>2</arg_value></tool_call> bye",
        "Hi bye",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "ling3",
        "Hi<tool_call>search<arg_key>n</arg_key><arg_value>2</arg_value></tool_call>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "poolside_v1",
        "Hi<tool_call>search\n<arg_key>n</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "spark25",
        "Hi<tool_call>search<arg_key>n</arg_key><arg_value>2</arg_value></tool_call> bye",
        "Hi bye",
        [("search", '{"n":2}')],
    ),
    Sample(
        "iquest_q1",
        "Hi<iquest_tool_call>search<arg_key>n</arg_key><arg_value>2</arg_value></iquest_tool_call> bye",
        "Hi bye",
        [("search", '{"n": 2}')],
    ),
    Sample(
        "hunyuan",
        "Hi<tool_calls><tool_call>search<tool_sep><arg_key>n</arg_key><arg_value>2</arg_value></tool_call></tool_calls>",
        "Hi",
        [("search", '{"n": 2}')],
    ),
]


def test_every_name_the_family_registers_has_a_sample():
    assert tool_names_in(family) == {s.name for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_the_calls_and_the_answer_are_sglangs(sample):
    assert parse_sample(sample) == (sample.content, sample.calls)
