"""Model outputs that broke a parser or the row writer, through the CLI.

The simulator writes ``Answer: U`` for a user turn U (``--no-reasoning``), so a prompt whose last user
turn is a damaged tool call makes the model "write" it; the prompt declares the tool, so the run parses
calls. Each run must finish with the row written; before the fixes these froze (gemma4's endless loop,
pythonic's exponential regex), crashed on every rerun (a lone surrogate), or lost the call (gpt-oss)."""

from __future__ import annotations

import json

import orjson
import pytest
from model_tokenizers import build_model_tokenizer
from simharness import start_sim

from synthgen.data.records import parse_line

COMMON = ("--max-tokens", "512", "--concurrency", "2", "--status-interval", "0.2")
LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a query up",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}, "tags": {"type": "array"}, "n": {"type": "integer"}},
        },
    },
}
# Bounded: a parser that hangs fails here instead of holding the suite (the fixed runs take seconds).
RUN_TIMEOUT = 120


@pytest.fixture(scope="module")
def sim(tokenizers):
    with start_sim(tokenizers["chatml"], "--no-reasoning") as running:
        yield running


def asks(rid: str, text: str) -> dict:
    return {"id": rid, "tools": [LOOKUP], "messages": [{"role": "user", "content": text}]}


def rows(ws, dataset: str) -> dict[str, dict]:
    """The dataset's rows by id, read as the tool reads them (a lone surrogate included)."""
    path = ws.outputs / dataset / "raw_responses.jsonl"
    found = [parse_line(line) for line in path.read_bytes().splitlines()]
    assert all(row is not None for row in found), found
    return {row["id"]: row for row in found if row is not None}


def test_a_gemma4_call_missing_a_string_delimiter_in_an_array_finishes(ws, sim):
    damaged = 'call:lookup{query:[<|"|>a<|"|>,<|"|>b],x:{y:[<|"|>c<|"|>]}}'
    ws.dataset("short", "gemma", [asks("g1", f"<|tool_call>{damaged}<tool_call|>")])
    result = ws.run("--server-url", sim.url, "--tool-call-parser", "gemma4", *COMMON, timeout=RUN_TIMEOUT)
    assert result.returncode == 0, result.stderr
    [call] = rows(ws, "gemma")["g1"]["tool_calls"]
    assert call["function"]["name"] == "lookup"
    assert json.loads(call["function"]["arguments"])["query"][:2] == ["a", "b],x:{y:["]


def test_a_cut_pythonic_call_list_finishes_and_a_lone_surrogate_is_written_then_read_back(ws, sim):
    # No "]": cut by max tokens. SGLang's regex takes ~0.1 s on 3 such calls, ~10x more per call.
    cut = "[" + ", ".join(f"lookup(query='city {i}', n={i}, tags='t')" for i in range(10))
    whole = "[lookup(query='x', n=1), lookup(query='y', n=2)]"
    lone = "[lookup(query='\\ud83d!')]"  # a Python escape of half a surrogate pair
    ws.dataset("short", "pythonic", [asks("cut", cut), asks("whole", whole), asks("lone", lone)])
    result = ws.run("--server-url", sim.url, "--tool-call-parser", "pythonic", *COMMON, timeout=RUN_TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    found = rows(ws, "pythonic")
    assert found["cut"]["tool_calls"] is None and found["cut"]["content"] == f"Answer: {cut}"
    assert [c["function"]["arguments"] for c in found["whole"]["tool_calls"]] == [
        '{"query": "x", "n": 1}',
        '{"query": "y", "n": 2}',
    ]
    [call] = found["lone"]["tool_calls"]
    assert json.loads(call["function"]["arguments"]) == {"query": "\ud83d!"}
    # The rerun reads the rows back (the resume scan) and has nothing left to do.
    again = ws.run("--server-url", sim.url, "--tool-call-parser", "pythonic", *COMMON, timeout=RUN_TIMEOUT)
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stderr + again.stdout
    assert len(rows(ws, "pythonic")) == 3


def test_iquest_q1_with_thinking_turned_off_keeps_the_answer_whole_as_sglang_does(ws, sim):
    answer = "The user asks for 17 × 23.</think>\n\n391."
    ws.dataset("short", "iquest", [{"id": "i1", "messages": [{"role": "user", "content": answer}]}])
    result = ws.run(
        "--server-url",
        sim.url,
        "--reasoning-parser",
        "iquest_q1",
        "--chat-template-kwargs",
        orjson.dumps({"enable_thinking": False}).decode(),
        *COMMON,
        timeout=RUN_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    row = rows(ws, "iquest")["i1"]
    assert (row["reasoning_content"], row["content"]) == ("", f"Answer: {answer}")


def test_a_gpt_oss_call_that_ends_on_the_call_stop_token_is_parsed(ws, tmp_path_factory):
    folder = build_model_tokenizer(tmp_path_factory.mktemp("gpt-oss-call-stop"), "gpt-oss")
    vocab = json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
    ids = {t["content"]: t["id"] for t in vocab}
    # gpt-oss's generation_config: <|return|> and <|call|> end a generation.
    stops = {"eos_token_id": [ids["<|return|>"], ids["<|call|>"]]}
    (folder / "generation_config.json").write_text(json.dumps(stops))
    args = ("--output-style", "harmony_tool", "--reasoning-parser", "gpt-oss", "--tool-call-parser", "gpt-oss")
    with start_sim(folder, *args) as oss:
        ws.dataset("short", "oss", [asks("o1", "Weather in Paris?")])
        result = ws.run("--server-url", oss.url, *COMMON, timeout=RUN_TIMEOUT)
    assert result.returncode == 0, result.stderr
    row = rows(ws, "oss")["o1"]
    assert row["output_ids"][-1] == ids["<|call|>"] and not row["output_text"].endswith("<|call|>")
    assert row["reasoning_content"] == "Reasoning about: Weather in Paris?"
    [call] = row["tool_calls"]
    assert call["function"] == {"name": "lookup", "arguments": '{"query": "Weather in Paris?"}'}
    assert row["content"] == ""
