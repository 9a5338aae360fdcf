"""server/discovery.py's Terms: what a server back from an outage is held to (pure)."""

from __future__ import annotations

import dataclasses

import pytest

from synthgen.server.discovery import Terms

START = Terms(("/m", "m", "/m", "v1"), 4096, ("qwen3", None), 4090)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"identity": ("/m", "other", "/m", "v1")}, "served_model_name 'm' -> 'other'"),
        ({"context_length": 2048}, "context length (max_model_len) 4096 -> 2048"),
        ({"context_length": None}, "context length (max_model_len) 4096 -> None"),
        ({"parsers": ("deepseek-r1", None)}, "reasoning_parser 'qwen3' -> 'deepseek-r1'"),
        ({"input_limit": 1000}, "input limit (max_req_input_len) 4090 -> 1000"),
    ],
)
def test_a_server_back_with_another_model_context_parsers_or_a_smaller_input_limit_breaks_them(change, said):
    assert START.broken_by(dataclasses.replace(START, **change)) == said


@pytest.mark.parametrize(
    "change",
    [
        {},
        {"input_limit": 8000},  # more room takes nothing away
        {"input_limit": None},  # not reported now: not compared
    ],
)
def test_the_same_server_or_more_room_breaks_nothing(change):
    assert START.broken_by(dataclasses.replace(START, **change)) is None


def test_what_the_start_did_not_ask_is_not_compared():
    unasked = Terms(("/m", "m", "/m", "v1"), None, ("qwen3", None), None)  # --max-seq-len: no context asked
    assert unasked.broken_by(dataclasses.replace(START, context_length=10, input_limit=5)) is None
