"""run_inference.py as a user runs it, against the real SGLang 0.5.23 server on this CPU.

The tiny model (context 2048, vocabulary 2048; synthgen/demo/model.py) answers every prompt
with a `<think>` block, a short answer and its EOS, in about 20-50 tokens, so its text means
nothing; what is checked is that every row carries the server's own answer and that the
runner's rules about lengths, vocabulary, resume and outages hold against the real thing.
All tests share one server (`real_server`); the restart test stops it mid-run and starts it again.
"""

from __future__ import annotations

import json
import os
import signal

import pytest
from simharness import wait_until
from workspace import Workspace

from tests.integration import realserver

pytestmark = pytest.mark.real_sglang

CONTEXT = 2048
# SGLang's scheduler refuses inputs of context - 6 tokens or more (max_req_input_len, /server_info).
MAX_REQ_INPUT_LEN = 2042
EOS_ID = 2  # <|im_end|>
EXPORT = realserver.REPO / "export_training.py"
# synthgen/demo/model.py's greedy answer to every prompt.
GREEDY_REASONING = "A user has a message for me, so I should look at it first; then write one line:"
GREEDY_CONTENT = "The result is here."


def chat_ids(tokenizer, content: str) -> list[int]:
    """The ids the runner must send for a one-message prompt: template text, then encode."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def prompt_of(row: dict) -> str:
    return row["messages"][0]["content"]


def assert_finish_is_consistent(row: dict, max_new: int) -> None:
    """A greedy run stops at max_new tokens ("length") unless the model emitted EOS first."""
    if row["finish_reason"] == "length":
        assert row["finish_detail"] == {"type": "length", "length": max_new}, row
        assert row["completion_tokens"] == max_new, row
    else:
        assert row["finish_detail"] == {"type": "stop", "matched": EOS_ID}, row
        assert row["completion_tokens"] <= max_new, row


def test_a_partition_of_several_datasets_completes_with_the_servers_own_answers(
    ws: Workspace, real_server, real_tokenizer
):
    alpha = ws.dataset("short", "alpha", 10)
    beta = ws.dataset("short", "beta", 6)
    ws.dataset("long", "gamma", 2)  # another partition: not touched
    mark = real_server.mark()
    result = ws.run(
        "--partition",
        "short",
        "--server-url",
        real_server.url,
        "--temperature",
        "0",
        "--max-tokens",
        "16",
        "--concurrency",
        "8",
    )
    assert result.returncode == 0, result.stderr
    assert not (ws.outputs / "gamma").exists()
    assert real_server.generate_requests(mark) == 16  # one request per prompt, no retries

    rows = ws.assert_exactly_once("alpha", alpha) + ws.assert_exactly_once("beta", beta)
    for row in rows:
        ids = chat_ids(real_tokenizer, prompt_of(row))
        assert row["prompt_tokens"] == len(ids)
        assert row["sampling_params"] == {"max_new_tokens": 16, "skip_special_tokens": False, "temperature": 0.0}
        assert_finish_is_consistent(row, 16)
        # Greedy decoding is deterministic here (batched or not): asking again must give the same answer.
        again = real_server.post("/generate", {"input_ids": ids, "sampling_params": row["sampling_params"]})
        assert again.status_code == 200, again.text
        answer = again.json()
        assert row["output_text"] == answer["text"]
        assert row["finish_detail"] == answer["meta_info"]["finish_reason"]
        assert row["completion_tokens"] == answer["meta_info"]["completion_tokens"] == len(answer["output_ids"])
        assert row["prompt_tokens"] == answer["meta_info"]["prompt_tokens"]


def test_tokenizer_comes_from_model_info_and_context_from_v1_models(ws: Workspace, real_server):
    model = str(realserver.model_dir())
    ws.dataset("short", "d", 2)
    mark = real_server.mark()

    dry = ws.run("--server-url", real_server.url, "--dry-run", "--max-tokens", "16")
    assert dry.returncode == 0, dry.stderr
    assert f"tokenizer: {model}; context length: {CONTEXT}; max tokens: 16" in dry.stderr
    assert "<|im_start|>user\n    question 0 of d<|im_end|>" in dry.stderr
    assert real_server.generate_requests(mark) == 0

    run = ws.run("--server-url", real_server.url, "--max-tokens", "16", "--concurrency", "2")
    assert run.returncode == 0, run.stderr
    assert f"model {model}; tokenizer {model}; context {CONTEXT}; max tokens 16; concurrency 2" in run.stderr
    assert real_server.generate_requests(mark) == 2


def long_prompt_dataset(ws: Workspace, tokenizer) -> int:
    text = "word " * 1500
    n = len(chat_ids(tokenizer, text))
    assert n > CONTEXT, f"the test's long prompt has only {n} tokens"
    ws.dataset(
        "short",
        "d",
        [{"id": "a", "prompt": "short one"}, {"id": "long", "prompt": text}, {"id": "b", "prompt": "short two"}],
    )
    return n


def test_a_prompt_longer_than_the_context_is_skipped_before_sending_and_the_run_goes_on(
    ws: Workspace, real_server, real_tokenizer
):
    n = long_prompt_dataset(ws, real_tokenizer)
    mark = real_server.mark()
    result = ws.run("--server-url", real_server.url, "--max-tokens", "16")
    assert result.returncode == 0, result.stderr  # a skip no rerun changes is reported, not exit 1
    ws.assert_exactly_once("d", ["a", "b"])
    (error,) = ws.errors("d")
    assert (error["id"], error["status"], error["error_type"], error["attempts"]) == (
        "long",
        "skipped",
        "prompt_too_long",
        0,
    )
    assert error["error"] == f"prompt has {n} tokens; the server accepts fewer than {MAX_REQ_INPUT_LEN}"
    assert real_server.generate_requests(mark) == 2


def test_with_max_seq_len_raised_the_long_prompt_is_sent_and_the_servers_400_is_recorded(
    ws: Workspace, real_server, real_tokenizer
):
    n = long_prompt_dataset(ws, real_tokenizer)
    mark = real_server.mark()
    result = ws.run("--server-url", real_server.url, "--max-tokens", "16", "--max-seq-len", "100000")
    assert result.returncode == 1, result.stderr
    assert "1 prompt failed (see outputs/d/errors.jsonl); rerun to retry them" in result.stderr
    ws.assert_exactly_once("d", ["a", "b"])
    (error,) = ws.errors("d")
    assert (error["id"], error["status"], error["error_type"], error["http_status"], error["attempts"]) == (
        "long",
        "failed",
        "http_400",
        400,
        1,
    )
    assert error["error"] == (
        f"HTTP 400: The input ({n} tokens) is longer than the model's context length ({CONTEXT} tokens)."
    )
    assert real_server.generate_requests(mark) == 3
    assert real_server.get("/health").status_code == 200


def test_prompts_at_the_schedulers_input_limit_are_sent_only_when_they_fit(ws: Workspace, real_server, real_tokenizer):
    # "~" is one token in this vocabulary, so the prompt length can be set to the token.
    base = len(chat_ids(real_tokenizer, ""))
    fits, too_long = MAX_REQ_INPUT_LEN - 1, MAX_REQ_INPUT_LEN
    rows = [{"id": str(n), "prompt": "~" * (n - base)} for n in (fits, too_long)]
    for row in rows:
        assert len(chat_ids(real_tokenizer, row["prompt"])) == int(row["id"])
    ws.dataset("short", "edge", rows)
    mark = real_server.mark()
    result = ws.run("--server-url", real_server.url, "--max-tokens", "16")
    assert result.returncode == 0, result.stderr  # a skip no rerun changes is reported, not exit 1
    (row,) = ws.assert_exactly_once("edge", [str(fits)])
    # The runner leaves one token of the context free; the server itself stops one token
    # earlier still (at context - 2 tokens in all) and says so in finish_reason.
    assert row["prompt_tokens"] == fits
    assert row["sampling_params"]["max_new_tokens"] == CONTEXT - fits - 1
    assert row["finish_detail"] == {"type": "length", "length": CONTEXT - 2 - fits}
    assert row["completion_tokens"] == CONTEXT - 2 - fits
    (error,) = ws.errors("edge")
    assert (error["id"], error["status"], error["error_type"]) == (str(too_long), "skipped", "prompt_too_long")
    assert real_server.generate_requests(mark) == 1


def test_token_ids_outside_the_models_vocabulary_are_never_sent(ws: Workspace, real_server, real_tokenizer):
    # Such ids crash this server (IndexError in the embedding); the runner must catch them
    # itself, using the served model's config.json rather than the --tokenizer folder's.
    vocab = json.loads((realserver.model_dir() / "config.json").read_text())["vocab_size"]
    folder = ws.root / "mismatched-tokenizer"
    real_tokenizer.save_pretrained(folder)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    tokenizer.add_tokens(["<extra_a>", "<extra_b>"])
    tokenizer.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"vocab_size": 4096}))  # wrong; must not be believed
    oov = "say <extra_a> and <extra_b>"
    assert max(chat_ids(tokenizer, oov)) >= vocab

    ws.dataset(
        "short",
        "d",
        [{"id": "ok1", "prompt": "fine"}, {"id": "oov", "prompt": oov}, {"id": "ok2", "prompt": "also fine"}],
    )
    mark = real_server.mark()
    result = ws.run("--server-url", real_server.url, "--tokenizer", str(folder), "--max-tokens", "16")
    assert result.returncode == 0, result.stderr  # a skip no rerun changes is reported, not exit 1
    ws.assert_exactly_once("d", ["ok1", "ok2"])
    (error,) = ws.errors("d")
    assert (error["id"], error["status"], error["error_type"]) == ("oov", "skipped", "token_out_of_vocab")
    assert f"outside the model's vocabulary ({vocab})" in error["error"]
    assert real_server.generate_requests(mark) == 2
    assert real_server.get("/health").status_code == 200


def test_a_client_killed_mid_run_then_rerun_ends_exactly_once_and_a_finished_run_sends_nothing(
    ws: Workspace, real_server
):
    ids = ws.dataset("short", "d", 24)
    concurrency = 4
    args = ("--server-url", real_server.url, "--concurrency", str(concurrency), "--max-tokens", "100")
    mark = real_server.mark()
    proc = ws.start(*args)
    wait_until(lambda: proc.poll() is not None or len(ws.raw_lines("d")) >= 3, timeout=300, what="3 results")
    assert proc.poll() is None, (ws.root / "nohup.out").read_text()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(ws.raw_lines("d")) < len(ids), "the run finished before it could be killed"

    rerun = ws.run(*args)
    assert rerun.returncode == 0, rerun.stderr
    ws.assert_exactly_once("d", ids)
    # Only the requests in flight at the kill can have been asked twice.
    assert len(ids) <= real_server.generate_requests(mark) <= len(ids) + concurrency

    mark = real_server.mark()
    finished = ws.run(*args)
    assert finished.returncode == 0, finished.stderr
    assert "nothing to do: every selected prompt is already done" in finished.stderr
    assert real_server.generate_requests(mark) == 0
    ws.assert_exactly_once("d", ids)


def test_the_server_stopped_and_restarted_mid_run_and_the_run_carries_on(ws: Workspace, real_server, real_shared):
    server = real_server
    # One request at a time, long enough that the stop (SGLang drains for ~5 s) lands mid-run.
    ids = ws.dataset("short", "d", 20)
    log = ws.root / "run.log"
    proc = ws.start(
        "--server-url",
        server.url,
        "--concurrency",
        "1",
        "--max-tokens",
        "300",
        "--server-wait",
        "600",
        "--log-file",
        str(log),
        "--status-interval",
        "1",
    )
    try:
        wait_until(lambda: proc.poll() is not None or len(ws.raw_lines("d")) >= 2, timeout=300, what="2 results")
        assert proc.poll() is None, (ws.root / "nohup.out").read_text()
        real_shared.stop(server)
        wait_until(lambda: proc.poll() is not None or b"OUTAGE" in log.read_bytes(), timeout=120, what="OUTAGE")
        assert proc.poll() is None, (ws.root / "nohup.out").read_text()
        done_before = len(ws.raw_lines("d"))
        assert done_before < len(ids), "the run finished before the server was stopped"

        mark = server.mark()  # the same log file: it is named after the port
        restarted = real_shared.restart(server)
        assert proc.wait(timeout=600) == 0, (ws.root / "nohup.out").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert "RECOVERED: server is healthy again" in text, text
    ws.assert_exactly_once("d", ids)
    assert ws.errors("d") == []
    assert restarted.generate_requests(mark) >= len(ids) - done_before


def two_turn_conversations(n: int) -> list[dict]:
    return [
        {
            "id": f"conv-{i}",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": f"Question {i}, part one."},
                {"role": "assistant", "content": "An answer from another model."},
                {"role": "user", "content": f"Question {i}, part two."},
            ],
        }
        for i in range(n)
    ]


def test_the_demo_model_ends_every_turn_with_reasoning_and_an_answer_so_every_row_exports(
    ws: Workspace, real_server, real_tokenizer
):
    # What the quickstart shows. Greedy: one fixed answer for any prompt. Without --temperature the
    # server samples at its default (temperature 1): varied answers, which end the same way (the chance
    # that one runs past 256 tokens is below 1e-18, synthgen/demo/model.py asserts it when it builds).
    ws.dataset("short", "greedy", 4)
    ids = ws.dataset("short", "conv", two_turn_conversations(12))
    common = ("--server-url", real_server.url, "--max-tokens", "256", "--concurrency", "8")
    greedy = ws.run(*common, "--dataset", "greedy", "--temperature", "0")
    assert greedy.returncode == 0, greedy.stderr
    for row in ws.results("greedy"):
        assert (row["reasoning_content"], row["content"]) == (GREEDY_REASONING, GREEDY_CONTENT), row
        assert row["output_ids"][-1] == EOS_ID and row["finish_reason"] == "stop"
        assert row["output_text"] == f"<think>{GREEDY_REASONING}</think>{GREEDY_CONTENT}"  # without the stop token

    sampled = ws.run(*common, "--dataset", "conv", "--regenerate", "all")
    assert sampled.returncode == 0, sampled.stderr
    rows = ws.assert_exactly_once("conv", ids)
    assert "temperature" not in rows[0]["sampling_params"]
    for row in rows:
        assert [t["finish_reason"] for t in row["turns"]] == ["stop", "stop"] and row["stopped_early"] is None, row
        for turn in row["turns"]:
            assert turn["reasoning_content"] and turn["content"] and turn["reasoning_complete"], turn
            assert "<think>" not in turn["content"] + turn["reasoning_content"], turn
    assert len({row["content"] for row in rows}) > 1  # sampled, not the greedy answer each time

    export = ws.run("--out", "train.jsonl", script=EXPORT)
    assert export.returncode == 0, export.stderr
    assert "greedy: 4 of 4 rows" in export.stderr and "conv: 12 of 12 rows" in export.stderr, export.stderr
    # The generated ids are what the tokenizer makes of the generated text (without the stop token).
    for turn in [t for row in rows for t in row["turns"]]:
        assert real_tokenizer(turn["output_text"], add_special_tokens=False)["input_ids"] == turn["output_ids"][:-1]
