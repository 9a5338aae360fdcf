"""Multi-turn and agentic conversations through run_inference.py, as a user runs it, against the simulator.

What the simulator logged it received (``--request-log``: input_ids, output_ids, rid of every answer) is
the ground truth: rows are checked against it, and its decoded prompts show which history the model saw.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
from collections import Counter
from pathlib import Path

import orjson
import pytest
from model_tokenizers import build_model_tokenizer
from simharness import wait_until
from tokenizers import Tokenizer
from workspace import chat

COMMON = ("--max-tokens", "256", "--concurrency", "4", "--status-interval", "0.2")
LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a query up",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    },
}


def agent(rid: str, question: str = "What is the weather in Paris?", follow_up: str = "And in Rome?") -> dict:
    """OpenAI-style agent turns: a tool call with empty content, its result, an answer, a last user turn."""
    return {
        "id": rid,
        "tools": [LOOKUP_TOOL],
        "messages": [
            {"role": "system", "content": "Use the tools."},
            {"role": "user", "content": question},
            {
                "role": "assistant",
                "content": "",
                "reasoning_content": "I should look it up.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"query": "Paris weather"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "name": "lookup", "content": "sunny, 21 C"},
            {"role": "assistant", "content": "It is sunny and 21 C.", "reasoning_content": "The tool said so."},
            {"role": "user", "content": follow_up},
        ],
    }


def request_log(path: Path) -> list[dict]:
    """Every answer the simulator sent, in order: {rid, input_ids, output_ids, text, finish_reason}."""
    if not path.exists():
        return []
    answers = []
    data = path.read_bytes()
    # The simulator may be writing a line right now: read only the finished ones.
    for line in data[: data.rfind(b"\n") + 1].splitlines():
        answers += orjson.loads(line).get("answers") or []
    return answers


def by_rid(path: Path) -> dict[str, dict]:
    return {a["rid"]: a for a in request_log(path)}


def decoder(tokenizer_dir: Path) -> Tokenizer:
    return Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))


def decoded(tokenizer: Tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids, skip_special_tokens=False)


def last_user(prompt: str) -> str:
    """The last ChatML user turn of a decoded prompt."""
    return re.findall(r"<\|im_start\|>user\n(.*?)<\|im_end\|>", prompt, re.S)[-1]


# --- each ---------------------------------------------------------------------------------------------
def test_each_makes_one_prompt_per_assistant_turn_on_the_original_history(ws, make_sim, tokenizers, tmp_path):
    log = tmp_path / "requests.jsonl"
    sim = make_sim("chatml", "--request-log", str(log))
    ws.dataset(
        "short",
        "mt",
        [chat("c1", "first q", "orig a1", "second q", "orig a2"), chat("c2", "only q", system="Be brief.")],
    )
    result = ws.run("--server-url", sim.url, "--regenerate", "each", *COMMON)
    assert result.returncode == 0, result.stderr
    rows = {r["id"]: r for r in ws.assert_exactly_once("mt", ["c1#0", "c1#1", "c2#0"])}
    assert sim.stats()["generate_requests"] == 3

    # Turn 1 of c1 is generated on the dataset's own first reply, as trainers expanding per turn do.
    assert [m["content"] for m in rows["c1#1"]["messages"]] == ["first q", "orig a1", "second q", "Answer: second q"]
    assert [m["content"] for m in rows["c1#0"]["messages"]] == ["first q", "Answer: first q"]
    assert rows["c2#0"]["messages"][0] == {"role": "system", "content": "Be brief."}
    tok, sent = decoder(tokenizers["chatml"]), by_rid(log)
    second = decoded(tok, sent[rows["c1#1"]["request_id"]]["input_ids"])
    assert "orig a1" in second and "Answer: first q" not in second
    for row in rows.values():
        assert row["regenerate"] == "each" and row["turns"] is None
        assert row["input_ids"] == sent[row["request_id"]]["input_ids"]


# --- all ----------------------------------------------------------------------------------------------
def test_all_generates_every_turn_on_the_models_own_replies_and_skips_tool_conversations(
    ws, make_sim, tokenizers, tmp_path
):
    log = tmp_path / "requests.jsonl"
    sim = make_sim("chatml", "--request-log", str(log))
    ws.dataset(
        "short",
        "mt",
        [
            chat("c1", "first q", "orig a1", "second q", "orig a2", "third q"),
            chat("c2", "only q", system="Be brief."),
            agent("t1"),
        ],
    )
    result = ws.run("--server-url", sim.url, "--regenerate", "all", *COMMON)
    assert result.returncode == 0, result.stderr  # a skip no rerun changes is reported, not exit 1
    assert "mt: 1 prompt skipped (cannot_regenerate), a rerun will not change that" in result.stderr
    assert "all in outputs/mt/errors.jsonl" in result.stderr and "rerun to retry" not in result.stderr
    rows = {r["id"]: r for r in ws.assert_exactly_once("mt", ["c1", "c2"])}
    assert sim.stats()["generate_requests"] == 3 + 1

    c1 = rows["c1"]
    assert [m["content"] for m in c1["messages"]] == [
        "first q",
        "Answer: first q",
        "second q",
        "Answer: second q",
        "third q",
        "Answer: third q",
    ]
    assert [m.get("reasoning_content") for m in c1["messages"] if m["role"] == "assistant"] == [
        "Reasoning about: first q",
        "Reasoning about: second q",
        "Reasoning about: third q",
    ]
    assert len(c1["turns"]) == 3 and c1["stopped_early"] is None and c1["regenerate"] == "all"
    sent = by_rid(log)
    for turn in c1["turns"]:
        answer = sent[turn["request_id"]]
        assert turn["finish_reason"] == "stop" and turn["reasoning_complete"] is True
        assert turn["input_ids"] == answer["input_ids"] and turn["output_ids"] == answer["output_ids"]
        assert turn["completion_tokens"] == len(answer["output_ids"])
        assert turn["prompt_tokens"] == len(answer["input_ids"])
    assert c1["completion_tokens"] == sum(t["completion_tokens"] for t in c1["turns"])
    assert c1["content"] == "Answer: third q" and c1["output_ids"] == c1["turns"][-1]["output_ids"]

    # The second request carries the model's first reply, not the dataset's.
    tok = decoder(tokenizers["chatml"])
    second = decoded(tok, sent[c1["turns"][1]["request_id"]]["input_ids"])
    assert "Answer: first q" in second and "orig a1" not in second and last_user(second) == "second q"
    third = decoded(tok, sent[c1["turns"][2]["request_id"]]["input_ids"])
    assert "Answer: second q" in third and "orig a2" not in third

    errors = ws.errors("mt")
    assert [(e["id"], e["status"], e["error_type"]) for e in errors] == [("t1", "skipped", "cannot_regenerate")]
    assert "tool calls and results" in errors[0]["error"] and "--regenerate each or last" in errors[0]["error"]
    summary = next(line for line in result.stderr.splitlines() if line.startswith("mt "))
    # done, total, this run; stop, length, repetition; failed, skipped
    assert summary.split()[1:9] == ["2", "3", "2", "2", "0", "0", "0", "1"]
    # The turns of finished conversations go once their rows are written: nothing is left to take up.
    assert not (ws.outputs / "mt" / "partial_turns.jsonl").exists()


def test_a_turn_cut_at_max_tokens_ends_the_conversation_and_the_row_says_so(ws, make_sim, tmp_path):
    log = tmp_path / "requests.jsonl"
    sim = make_sim("chatml", "--request-log", str(log))
    ws.dataset("short", "mt", [chat("c1", "first q", "orig a1", "second q", "orig a2", "third q")])
    result = ws.run("--server-url", sim.url, "--regenerate", "all", "--max-tokens", "5", "--concurrency", "1")
    assert result.returncode == 0, result.stderr
    [row] = ws.assert_exactly_once("mt", ["c1"])
    assert len(request_log(log)) == 1
    assert len(row["turns"]) == 1 and row["finish_reason"] == "length" and row["completion_tokens"] == 5
    assert row["stopped_early"] == "turn 1 of 3 was cut at --max-tokens"
    assert row["reasoning_complete"] is False
    assert [m["role"] for m in row["messages"]] == ["user", "assistant"]


def test_max_tokens_per_dataset_counts_every_turn_of_a_conversation(ws, make_sim):
    # Every answer is 10 tokens, so a conversation of 3 turns costs 30: the cap of 65 is reached by the
    # third conversation (counting only the last turn of each row would let 7 through).
    sim = make_sim("chatml", "--output-len-dist", "fixed:10")
    ws.dataset("short", "mt", [chat(f"c{i}", f"q{i} a", "x", f"q{i} b", "y", f"q{i} c") for i in range(10)])
    result = ws.run(
        "--server-url",
        sim.url,
        "--regenerate",
        "all",
        "--max-tokens-per-dataset",
        "65",
        "--max-tokens",
        "64",
        "--concurrency",
        "1",
        "--status-interval",
        "0.2",
    )
    assert result.returncode == 0, result.stderr
    rows = ws.results("mt")
    assert len(rows) == 3 and all(r["completion_tokens"] == 30 and len(r["turns"]) == 3 for r in rows)
    assert sim.stats()["generate_requests"] == 9


# --- SIGKILL during all ---------------------------------------------------------------------------------
CONVERSATIONS, TURNS, CONCURRENCY, KILLS = 24, 4, 4, 3


def turn_of(tok: Tokenizer, input_ids: list[int]) -> tuple[str, int]:
    """(conversation, turn) of a request: its last user message is 'conv N turn K'."""
    conv, _, k = last_user(decoded(tok, input_ids)).rpartition(" turn ")
    return conv, int(k)


def test_sigkill_at_random_points_of_an_all_run_then_a_rerun_gives_every_conversation_once_and_whole(
    ws, make_sim, tokenizers, tmp_path
):
    log = tmp_path / "requests.jsonl"
    # Slow tokens keep several requests in flight at each kill; answers are deterministic, so a turn
    # generated again is the same request and shows in the log as a repeat.
    sim = make_sim("chatml", "--request-log", str(log), "--token-delay", "0.004")
    dataset = []
    for i in range(CONVERSATIONS):
        turns = []
        for k in range(TURNS):
            turns += [f"conv {i} turn {k}", f"old answer {k}"]
        dataset.append(chat(f"conv-{i:02d}", *turns[:-1]))
    ids = ws.dataset("short", "mt", dataset)
    args = (
        "--server-url",
        sim.url,
        "--regenerate",
        "all",
        "--max-tokens",
        "256",
        "--concurrency",
        str(CONCURRENCY),
        "--status-interval",
        "0.2",
    )
    rng = random.Random(20261130)
    total = CONVERSATIONS * TURNS
    kills = 0
    for _ in range(KILLS):
        seen = len(request_log(log))
        target = seen + rng.randint(3, total // (KILLS + 1))
        proc = ws.start(*args)
        wait_until(
            lambda t=target, p=proc: len(request_log(log)) >= t or p.poll() is not None,
            timeout=120,
            what=f"{target} answers in the request log",
        )
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
    assert kills >= 2, "the run finished before the kills: slow the simulator down"
    partial = ws.raw_lines("mt", "partial_turns.jsonl")
    assert partial, "no finished turn of an unfinished conversation was kept"

    result = ws.run(*args)
    assert result.returncode == 0, result.stderr
    rows = ws.assert_exactly_once("mt", ids)
    tok = decoder(tokenizers["chatml"])
    for row in rows:
        assert row["stopped_early"] is None and len(row["turns"]) == TURNS, row["id"]
        users = [m["content"] for m in row["messages"] if m["role"] == "user"]
        conv = users[0].rpartition(" turn ")[0]
        assert [m["content"] for m in row["messages"] if m["role"] == "assistant"] == [
            f"Answer: {conv} turn {k}" for k in range(TURNS)
        ]
        for k, turn in enumerate(row["turns"]):
            assert turn_of(tok, turn["input_ids"]) == (conv, k)
    requests = Counter(turn_of(tok, a["input_ids"]) for a in request_log(log))
    assert set(requests) == {(f"conv {i}", k) for i in range(CONVERSATIONS) for k in range(TURNS)}
    repeats = sum(n - 1 for n in requests.values())
    assert repeats <= kills * CONCURRENCY, f"{repeats} turns generated again after {kills} kills: {requests}"


# --- tool calls and harmony with real templates ----------------------------------------------------------
@pytest.fixture
def model_make_sim(tmp_path_factory):
    """Like make_sim, but serving a tokenizer from tests/support/model_tokenizers.py."""
    from simharness import start_sim

    sims = []

    def make(model: str, *args: str):
        folder = build_model_tokenizer(tmp_path_factory.getbasetemp() / "model-tokenizers" / model, model)
        log = tmp_path_factory.mktemp(f"log-{model}") / "requests.jsonl"
        sim = start_sim(folder, "--request-log", str(log), *args)
        sims.append(sim)
        return folder, log, sim

    yield make
    for sim in sims:
        sim.close()


def template_ids(folder: Path, messages: list[dict], tools: list[dict] | None, **kwargs) -> list[int]:
    """The model's own template rendering of a conversation, given as its model card passes it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    shaped = []
    for message in json.loads(json.dumps(messages)):
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        shaped.append(message)
    text = tokenizer.apply_chat_template(shaped, tools=tools, tokenize=False, add_generation_prompt=True, **kwargs)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


TOOL_MODELS = {
    # model: (simulator output style, SGLang tool-call parser, reasoning parser, id of the generated call)
    "kimi-k2-thinking": ("kimi_tool", "kimi_k2", "kimi_k2", "functions.lookup:1"),
    "qwen3": ("qwen_tool", "qwen25", "qwen3", None),
}


@pytest.mark.parametrize("model", sorted(TOOL_MODELS))
def test_a_generated_tool_call_is_parsed_as_sglang_does_and_the_prompt_keeps_every_field(ws, model_make_sim, model):
    style, tool_parser, reasoning_parser, call_id = TOOL_MODELS[model]
    folder, log, sim = model_make_sim(
        model, "--output-style", style, "--tool-call-parser", tool_parser, "--reasoning-parser", reasoning_parser
    )
    record = agent("a1")
    ws.dataset("short", "agents", [record])
    result = ws.run("--server-url", sim.url, *COMMON)  # parsers: the server's, from /server_info
    assert result.returncode == 0, result.stderr
    [row] = ws.assert_exactly_once("agents", ["a1"])
    sent = by_rid(log)
    answer = sent[row["request_id"]]

    # The prompt as the model's own template renders it, tools and every field of every turn included.
    assert answer["input_ids"] == template_ids(folder, record["messages"], record["tools"])
    assert row["input_ids"] == answer["input_ids"] and row["output_ids"] == answer["output_ids"]
    assert row["tools"] == record["tools"]
    assert row["messages"][:-1] == record["messages"]

    # The generated turn: reasoning, then a call whose arguments are the model's own text.
    arguments = json.dumps({"query": "And in Rome?"}, ensure_ascii=False)
    [call] = row["tool_calls"]
    assert call["type"] == "function" and call["function"] == {"name": "lookup", "arguments": arguments}
    if call_id is not None:
        assert call["id"] == call_id  # Kimi-K2 counts the calls of earlier turns
    else:
        assert re.fullmatch(r"call_[0-9a-f]{24}", call["id"]), call["id"]
    assert row["reasoning_content"] == "Reasoning about: And in Rome?" and row["content"] == ""
    assert row["messages"][-1] == {
        "role": "assistant",
        "content": "",
        "reasoning_content": row["reasoning_content"],
        "tool_calls": row["tool_calls"],
    }
    assert row["output_text"] == answer["text"] and "lookup" in row["output_text"]


@pytest.mark.parametrize("model", sorted(TOOL_MODELS))
def test_without_tools_a_tool_call_looking_answer_stays_in_the_content_as_sglang_leaves_it(ws, model_make_sim, model):
    style, tool_parser, reasoning_parser, _ = TOOL_MODELS[model]
    _, log, sim = model_make_sim(
        model, "--output-style", style, "--tool-call-parser", tool_parser, "--reasoning-parser", reasoning_parser
    )
    ws.dataset("short", "plain", [chat("p1", "Say hi.")])
    result = ws.run("--server-url", sim.url, *COMMON)
    assert result.returncode == 0, result.stderr
    [row] = ws.assert_exactly_once("plain", ["p1"])
    assert row["tool_calls"] is None and row["reasoning_content"] == "Reasoning about: Say hi."
    assert row["content"] and row["output_text"].endswith(row["content"]), row["output_text"]
    assert "lookup" in row["content"]


def test_harmony_output_splits_into_analysis_reasoning_and_final_content(ws, model_make_sim):
    folder, log, sim = model_make_sim("gpt-oss", "--output-style", "harmony", "--reasoning-parser", "gpt-oss")
    record = chat("h1", "Name a prime.", "Seven.", "And another?", system="Be brief.")
    ws.dataset("short", "oss", [record, chat("h2", "Hello there.")])
    result = ws.run("--server-url", sim.url, *COMMON)
    assert result.returncode == 0, result.stderr
    sent = by_rid(log)
    for row in ws.assert_exactly_once("oss", ["h1", "h2"]):
        question = [m["content"] for m in row["messages"] if m["role"] == "user"][-1]
        assert row["reasoning_content"] == f"Reasoning about: {question}"
        assert row["content"] == f"Answer: {question}"
        assert row["reasoning_complete"] is True and row["finish_reason"] == "stop"
        for field in (row["reasoning_content"], row["content"]):
            assert "<|" not in field, field
        answer = sent[row["request_id"]]
        assert row["output_ids"] == answer["output_ids"] and row["output_text"] == answer["text"]
        prompt = [m for m in row["messages"][:-1]]
        assert answer["input_ids"] == template_ids(folder, prompt, None)
