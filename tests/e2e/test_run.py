"""run_inference.py end to end, as a user runs it, against the SGLang simulator over HTTP."""

from __future__ import annotations

import os
import signal
from collections import Counter

import orjson
import pytest
from simharness import wait_until
from workspace import assert_model_answer, cli_env

COMMON = ("--max-tokens", "256", "--concurrency", "8", "--status-interval", "0.2")


def test_a_partition_completes_with_reasoning_and_answer_split(ws, make_sim):
    sim = make_sim("chatml")
    a = ws.dataset("short", "alpha", 12)
    b = ws.dataset("short", "beta", 7)
    ws.dataset("long", "gamma", 3)  # another partition: not touched
    result = ws.run("--partition", "short", "--server-url", sim.url, *COMMON)
    assert result.returncode == 0, result.stderr
    for name, ids in (("alpha", a), ("beta", b)):
        for row in ws.assert_exactly_once(name, ids):
            assert_model_answer(row)
            assert row["output_text"] == f"<think>{row['reasoning_content']}</think>{row['content']}"
            assert row["sampling_params"]["skip_special_tokens"] is False
    assert not (ws.outputs / "gamma").exists()
    assert sim.stats()["generate_requests"] == 19
    assert "alpha" in result.stderr and "TOTAL" in result.stderr


def test_kimi_style_template_output_starts_inside_the_reasoning(ws, make_sim):
    sim = make_sim("kimi")
    ids = ws.dataset("short", "kimi", 6)
    result = ws.run("--server-url", sim.url, "--chat-template-kwargs", '{"thinking": true}', *COMMON)
    assert result.returncode == 0, result.stderr
    for row in ws.assert_exactly_once("kimi", ids):
        assert "<think>" not in row["output_text"]
        assert_model_answer(row)


def test_kimi_style_with_thinking_off_saves_only_an_answer(ws, make_sim):
    sim = make_sim("kimi")
    ids = ws.dataset("short", "kimi", 3)
    result = ws.run("--server-url", sim.url, "--chat-template-kwargs", '{"thinking": false}', *COMMON)
    assert result.returncode == 0, result.stderr
    for row in ws.assert_exactly_once("kimi", ids):
        assert row["reasoning_content"] == "" and row["content"].startswith("Answer: ")
        assert "reasoning_content" not in row["messages"][-1]


def test_special_think_tags_survive_because_the_client_turns_off_skip_special_tokens(ws, make_sim, tokenizers):
    # The chatml tokenizer's think tags are special tokens: SGLang's default would strip them.
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 3)
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    for row in ws.assert_exactly_once("d", ids):
        assert row["output_text"].startswith("<think>")


def test_every_input_format_is_accepted_and_trailing_answers_regenerated(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset(
        "short",
        "mixed",
        [
            {"id": "m", "messages": [{"role": "user", "content": "from messages"}]},
            {
                "id": "s",
                "conversations": [{"from": "human", "value": "from sharegpt"}, {"from": "gpt", "value": "old"}],
            },
            {"id": "c", "conversations": [{"role": "user", "content": "from conversations"}]},
            {"id": "p", "prompt": "from prompt"},
            {"prompt": "no id here"},
            {"id": "m", "prompt": "duplicate id: ignored"},
        ],
    )
    result = ws.run("--server-url", sim.url, *COMMON)
    assert result.returncode == 0, result.stderr
    rows = {r["id"]: r for r in ws.results("mixed")}
    assert len(rows) == 5 and "1 duplicate id ignored (first wins)" in result.stderr
    assert rows["s"]["content"] == "Answer: from sharegpt"
    auto = [k for k in rows if k.startswith("auto-")]
    assert len(auto) == 1 and rows[auto[0]]["content"] == "Answer: no id here"


def test_with_keep_partials_off_abort_responses_are_retried_from_scratch_and_never_saved(ws, make_sim):
    sim = make_sim("chatml", "--rate-abort", "0.4", "--fault-seed", "3")
    ids = ws.dataset("short", "d", 25)
    result = ws.run("--server-url", sim.url, "--max-attempts", "50", "--keep-partials", "off", *COMMON)
    assert result.returncode == 0, result.stderr
    rows = ws.assert_exactly_once("d", ids)
    for row in rows:
        assert_model_answer(row)
    assert sim.stats()["by_outcome"].get("aborted", 0) > 0
    assert any(r["attempts"] > 1 for r in rows)


def test_failures_and_skips_are_rows_in_errors_jsonl_and_retried_next_run(ws, make_sim):
    # The simulator's context is 256 tokens. With --max-seq-len 100000 the client cannot know,
    # so the long prompt is sent and rejected (400); a second run without the override reads
    # the context from /v1/models and skips it before sending.
    sim = make_sim("chatml", "--context-length", "256")
    ws.dataset("short", "d", [{"id": "ok", "prompt": "short"}, {"id": "long", "prompt": "word " * 400}])
    first = ws.run("--server-url", sim.url, "--max-seq-len", "100000", "--max-tokens", "16")
    assert first.returncode == 1, first.stderr
    assert "WARNING: 1 prompt failed (see outputs/d/errors.jsonl); rerun to retry them: python run_inference.py " in (
        first.stderr
    )
    assert [r["id"] for r in ws.results("d")] == ["ok"]
    (error,) = ws.errors("d")
    assert (error["id"], error["status"], error["http_status"], error["attempts"]) == ("long", "failed", 400, 1)
    assert "longer than the model's context length (256 tokens)" in error["error"]

    sent_before = sim.stats()["generate_requests"]
    second = ws.run("--server-url", sim.url, "--max-tokens", "16")
    # A skip no rerun can change is reported by its reason and fix, and does not fail every future run.
    assert second.returncode == 0, second.stderr
    assert "d: 1 prompt skipped (prompt_too_long), a rerun will not change that: " in second.stderr
    assert "all in outputs/d/errors.jsonl" in second.stderr and "rerun to retry" not in second.stderr
    assert sim.stats()["generate_requests"] == sent_before  # skipped before sending
    (error,) = ws.errors("d")
    assert (error["id"], error["status"], error["error_type"]) == ("long", "skipped", "prompt_too_long")


def test_max_new_tokens_is_reduced_to_fit_the_context(ws, make_sim):
    sim = make_sim("chatml", "--context-length", "256")
    ws.dataset("short", "d", [{"id": "a", "prompt": "hello"}])
    assert ws.run("--server-url", sim.url, "--max-tokens", "100000").returncode == 0
    (row,) = ws.results("d")
    assert row["sampling_params"]["max_new_tokens"] == 256 - row["prompt_tokens"] - 1


def test_a_malformed_line_stops_the_run_before_any_request(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "good", 3)
    (ws.prompts / "short" / "bad.jsonl").write_bytes(b'{"id": "1", "prompt": "ok"}\n{"id": "2", "messages": 5}\n')
    result = ws.run("--server-url", sim.url)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "run_inference.py: error: prompts/short/bad.jsonl:2: 'messages' must be a non-empty list of messages; "
        "fix or remove the line, or pass --skip-bad-lines"
    )
    assert "Traceback" not in result.stderr
    assert sim.stats()["generate_requests"] == 0


def test_skip_bad_lines_turns_the_error_into_a_counted_warning(ws, make_sim):
    sim = make_sim("chatml")
    (ws.prompts / "short").mkdir(parents=True)
    lines = b'{"id": "1", "prompt": "ok"}\nnot json\n{"id": "2", "prompt": "x"}\n'
    (ws.prompts / "short" / "d.jsonl").write_bytes(lines)
    result = ws.run("--server-url", sim.url, "--skip-bad-lines", *COMMON)
    assert result.returncode == 0, result.stderr
    assert "1 bad line skipped" in result.stderr and "d.jsonl:2: not valid JSON" in result.stderr
    ws.assert_exactly_once("d", ["1", "2"])


def test_max_samples_caps_and_resume_continues_where_it_stopped(ws, make_sim):
    sim = make_sim("chatml")
    a = ws.dataset("short", "a", 10)
    b = ws.dataset("short", "b", 4)
    assert ws.run("--server-url", sim.url, "--max-samples", "3", *COMMON).returncode == 0
    ws.assert_exactly_once("a", a[:3])
    ws.assert_exactly_once("b", b[:3])

    sent = sim.stats()["generate_requests"]
    again = ws.run("--server-url", sim.url, "--max-samples", "3", *COMMON)
    assert again.returncode == 0 and "nothing to do" in again.stderr
    assert sim.stats()["generate_requests"] == sent

    assert ws.run("--server-url", sim.url, "--max-samples", "6", *COMMON).returncode == 0
    ws.assert_exactly_once("a", a[:6])
    ws.assert_exactly_once("b", b)  # only 4 exist
    assert sim.stats()["generate_requests"] == sent + 3 + 1


def test_nohup_style_output_has_status_lines_and_no_carriage_returns(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.002")
    ws.dataset("short", "d", 20)
    log = ws.root / "nohup.out"
    proc = ws.start("--server-url", sim.url, "--log-file", str(ws.root / "run.log"), *COMMON)
    assert proc.wait(timeout=300) == 0
    text = log.read_bytes()
    assert b"\r" not in text
    logged = (ws.root / "run.log").read_bytes()
    for out in (text, logged):  # stderr under nohup, and the --log-file
        status = [line for line in out.splitlines() if b" done " in line and b" | out tok/s " in line]
        assert status, out.decode(errors="replace")
        assert b"done 20/20 (100.0%)" in status[-1]  # the last status line has the final counts
        assert b"TOTAL" in out


def test_sigkill_mid_run_then_rerun_leaves_every_id_exactly_once(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.01")
    ids = ws.dataset("short", "d", 40)
    proc = ws.start("--server-url", sim.url, "--concurrency", "4", "--max-tokens", "256")
    wait_until(lambda: sim.stats()["completed"] >= 10, timeout=120, what="10 completions")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    in_flight_at_kill = 4
    rerun = ws.run("--server-url", sim.url, "--concurrency", "4", "--max-tokens", "256")
    assert rerun.returncode == 0, rerun.stderr
    for row in ws.assert_exactly_once("d", ids):
        assert_model_answer(row)
    counts = Counter(sim.stats()["prompt_counts"].values())
    assert set(counts) <= {1, 2} and counts.get(2, 0) <= in_flight_at_kill


def test_wrong_api_key_stops_the_run_with_one_line_and_never_prints_the_key(ws, make_sim):
    sim = make_sim("chatml", "--api-key", "s3cret-key")
    ws.dataset("short", "d", 2)
    bad = ws.run("--server-url", sim.url, "--api-key", "wrong-key")
    assert bad.returncode == 3
    assert bad.stderr.strip().splitlines()[-1].startswith("run_inference.py: error: the server refused the API key")
    assert "wrong-key" not in bad.stderr
    good = ws.run("--server-url", sim.url, *COMMON, env=cli_env(SGLANG_API_KEY="s3cret-key"))
    assert good.returncode == 0, good.stderr
    assert "s3cret-key" not in good.stderr
    assert len(ws.results("d")) == 2


def test_unreachable_server_is_one_line_naming_the_url(ws):
    ws.dataset("short", "d", 2)
    result = ws.run("--server-url", "http://127.0.0.1:9", "--max-tokens", "10")
    assert result.returncode == 3
    assert result.stderr.strip().splitlines()[-1] == (
        "run_inference.py: error: cannot reach the SGLang server at http://127.0.0.1:9 (ConnectError); "
        "start the server or pass --server-url URL"
    )


def test_missing_tokenizer_is_one_line_naming_the_path(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 2)
    missing = ws.root / "no-such-tokenizer"
    result = ws.run("--server-url", sim.url, "--tokenizer", str(missing))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"run_inference.py: error: tokenizer folder {missing} not found; pass --tokenizer PATH to a folder with "
        "tokenizer files (default: the tokenizer_path the server reports)"
    )


def test_tokenizer_comes_from_get_model_info_on_older_servers(ws, make_sim):
    sim = make_sim("chatml", "--version", "0.5.14")
    ids = ws.dataset("short", "d", 3)
    result = ws.run("--server-url", sim.url, *COMMON)
    assert result.returncode == 0, result.stderr
    ws.assert_exactly_once("d", ids)


def test_dry_run_prints_the_plan_and_first_request_and_sends_nothing(ws, make_sim):
    sim = make_sim("kimi")
    ws.dataset("short", "d", 5)
    result = ws.run("--server-url", sim.url, "--dry-run", "--max-samples", "2", "--temperature", "0.6")
    assert result.returncode == 0, result.stderr
    assert "d (short): 5 prompts, cap 2, 0 already done, 2 to run" in result.stderr
    assert "POST " + sim.url + "/generate" in result.stderr
    assert '"skip_special_tokens":false' in result.stderr and '"temperature":0.6' in result.stderr
    assert "prompt opens reasoning: True" in result.stderr
    assert sim.stats()["generate_requests"] == 0
    assert not (ws.outputs / "d").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--max-samples", "-1"], "--max-samples must be 0 or more, got -1"),
        (["--top-p", "1.5"], "--top-p must be in (0, 1], got 1.5"),
        (["--chat-template-kwargs", "{oops"], "--chat-template-kwargs is not valid JSON"),
        (["--partition", "nope"], "no such partition"),
        (["--dataset", "zzz"], "unknown dataset zzz"),
    ],
)
def test_bad_arguments_get_one_line_errors(ws, args, message):
    ws.dataset("short", "d", 1)
    result = ws.run("--partition", "short", *args) if "--partition" not in args else ws.run(*args)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("run_inference.py: error: ") and message in last and "Traceback" not in result.stderr


def test_results_are_written_as_one_json_object_per_line(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 5)
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    for line in ws.raw_lines("d"):
        assert line.endswith(b"\n") and line.count(b"\n") == 1
        assert isinstance(orjson.loads(line), dict)


def test_help_lists_exit_codes_and_ends_with_examples_of_the_main_jobs(ws):
    result = ws.run("--help", env=cli_env(COLUMNS="100"))
    assert result.returncode == 0
    assert "exit codes:" in result.stdout
    examples = result.stdout.split("exit codes:")[1].split("examples:")[1]
    for job in ("--launch-server demo", "--budget budget.json", "--regenerate all", "python export_training.py"):
        assert job in examples
    last = result.stdout.rstrip().split("\n\n")[-1].strip()
    assert last.startswith("# then: the rows as training data, the exact ids for drafters")
    assert last.endswith("python export_training.py --partition short --format tokens --out tokens.jsonl")
    assert "--max-tokens 32768" not in result.stdout  # no example passes a default
    assert len(result.stdout.splitlines()) <= 120  # what a user scans (it was 196 lines)
