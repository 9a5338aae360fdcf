"""Tool-call family json_calls.py: JSON after a marker (Llama 3, Mistral, Apertus, GigaChat 3, Inkling, Cohere).

One sample per registered name, parsed as SGLang parses it."""

from __future__ import annotations

import pytest
from parser_families import Sample, parse_sample, tool_names_in

from synthgen.chat.parsers.tools import json_calls as family

SAMPLES = [
    Sample(
        "llama3",
        'Hi<|python_tag|>{"name": "search", "parameters": {"q": "x"}};{"name": "ping", "parameters": {}}',
        "Hi",
        [("search", '{"q": "x"}'), ("ping", "{}")],
    ),
    Sample(
        "mistral",
        'Hi [TOOL_CALLS] [{"name": "search", "arguments": {"q": "x"}}]',
        "Hi",
        [("search", '{"q": "x"}')],
    ),
    Sample(
        "apertus2509",
        'Hi<|tools_prefix|>[{"search": {"q": "x"}}]<|tools_suffix|> bye',
        "Hi bye",
        [("search", '{"q": "x"}')],
    ),
    Sample(
        "gigachat3",
        'Hi<|function_call|>{"name": "search", "arguments": {"q": "x"}}',
        "Hi",
        [("search", '{"q": "x"}')],
    ),
    Sample(
        "inkling",
        'Hi<|content_invoke_tool_json|>{"name": "search", "args": {"q": "x"}}<|end_message|>',
        "Hi",
        [("search", '{"q": "x"}')],
    ),
    Sample(
        "cohere_command4",
        'Hi<|START_ACTION|>[{"tool_name": "search", "parameters": {"q": "x"}}]<|END_ACTION|>',
        "Hi",
        [("search", '{"q": "x"}')],
    ),
]


def test_every_name_the_family_registers_has_a_sample():
    assert tool_names_in(family) == {s.name for s in SAMPLES}


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_the_calls_and_the_answer_are_sglangs(sample):
    assert parse_sample(sample) == (sample.content, sample.calls)
