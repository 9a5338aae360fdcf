"""Tool-call family json_tags.py: JSON in tags (Qwen 2.5, Hermes, InternLM, Trinity).

One sample per registered name, parsed as SGLang parses it."""

from __future__ import annotations

import pytest
from parser_families import Sample, parse_sample, tool_names_in

from synthgen.chat.parsers.tools import json_tags as family

SAMPLES = [
    Sample(
        "qwen25",
        'Hi\n<tool_call>\n{"name": "search", "arguments": {"q": "x"}}\n</tool_call>',
        "Hi",
        [("search", '{"q": "x"}')],
    ),
    Sample(
        "qwen",
        '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>',
        "",
        [("ping", "{}")],
    ),
    Sample(
        "hermes",
        'Hi <tool_call>{"name": "search", "arguments": {"q": "x"}}</tool_call>',
        "Hi",
        [("search", '{"q": "x"}')],
    ),
    Sample(
        "interns1",
        'Hi<|action_start|> <|plugin|>{"name": "search", "parameters": {"q": "x"}}<|action_end|>',
        "Hi",
        [("search", '{"q": "x"}')],
    ),
    Sample(
        "trinity",
        '<think>hm</think>Hi\n<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>',
        "Hi",
        [("ping", "{}")],
    ),
]


def test_every_name_the_family_registers_has_a_sample():
    assert tool_names_in(family) == {s.name for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_the_calls_and_the_answer_are_sglangs(sample):
    assert parse_sample(sample) == (sample.content, sample.calls)
