"""The runner's faults an adversarial run found, each through the CLI against the
simulator (or in-process where only a scripted server can show it)."""

from __future__ import annotations

import signal
import subprocess

import orjson
import pytest
from simharness import wait_until
from workspace import cli_env

COMMON = ("--max-tokens", "32", "--status-interval", "0.5")


# --- D1: done rows belong to the prompt file being run -------------------------------------------
def test_a_dataset_name_in_two_partitions_refuses_instead_of_skipping_the_second(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "chat", [{"id": str(i), "prompt": f"short question {i}"} for i in range(5)])
    ws.dataset("long", "chat", [{"id": str(i), "prompt": f"long question {i}"} for i in range(5)])
    first = ws.run("--server-url", sim.url, "--partition", "short", "--max-samples", "3", *COMMON)
    assert first.returncode == 0, first.stderr
    second = ws.run("--server-url", sim.url, "--partition", "long", *COMMON)
    assert second.returncode == 2
    assert "holds rows of prompts from short/chat.jsonl" in second.stderr
    assert "pass another --output-dir" in second.stderr
    assert len(second.stderr.strip().splitlines()[-1]) < 400  # one line
    other = ws.run("--server-url", sim.url, "--partition", "long", "--output-dir", "out-long", *COMMON)
    assert other.returncode == 0, other.stderr
    assert len((ws.root / "out-long" / "chat" / "raw_responses.jsonl").read_bytes().splitlines()) == 5


def test_a_second_prompts_dir_with_other_prompts_under_the_same_ids_refuses(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", [{"id": str(i), "prompt": f"first text {i}"} for i in range(3)])
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    other = ws.root / "other"
    (other / "short").mkdir(parents=True)
    (other / "short" / "d.jsonl").write_bytes(
        b"".join(orjson.dumps({"id": str(i), "prompt": f"other text {i}"}) + b"\n" for i in range(3))
    )
    result = ws.run("--server-url", sim.url, "--prompts-dir", "other", *COMMON)
    assert result.returncode == 2
    assert (
        "3 done prompts of other/short/d.jsonl changed since their rows were written (first: 0, 1, 2)" in result.stderr
    )
    assert "--changed-prompts" in result.stderr


def test_changed_prompts_are_kept_or_regenerated_as_asked(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", [{"id": str(i), "prompt": f"text {i}"} for i in range(3)])
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    ws.dataset(
        "short",
        "d",
        [{"id": "0", "prompt": "text 0"}, {"id": "1", "prompt": "new text 1"}, {"id": "2", "prompt": "text 2"}],
    )
    kept = ws.run("--server-url", sim.url, "--changed-prompts", "keep", *COMMON)
    assert kept.returncode == 0 and "nothing to do" in kept.stderr
    again = ws.run("--server-url", sim.url, "--changed-prompts", "regenerate", *COMMON)
    assert again.returncode == 0, again.stderr
    rows = {r["id"]: r for r in ws.results("d")}
    assert sorted(rows) == ["0", "1", "2"]
    assert rows["1"]["content"] == "Answer: new text 1"
    (moved,) = ws.rows("d", "changed_rows.jsonl")
    assert (moved["id"], moved["content"]) == ("1", "Answer: text 1")


# --- D7: errors.jsonl survives a run that sends nothing ---------------------------------------------
@pytest.mark.parametrize("how", ["server down", "bad line elsewhere"])
def test_errors_jsonl_is_kept_by_a_run_that_sends_nothing(ws, make_sim, how):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 4)
    sim.configure(rate_503=1.0)
    first = ws.run("--server-url", sim.url, "--max-attempts", "1", *COMMON)
    assert first.returncode == 1
    before = ws.errors("d")
    assert len(before) == 4
    if how == "server down":
        sim.stop()
        result = ws.run("--server-url", sim.url, *COMMON)
        assert result.returncode == 3
    else:
        (ws.prompts / "short" / "e.jsonl").write_text('{"id": 1, "prompt": "ok"}\nnot json\n')
        result = ws.run("--server-url", sim.url, *COMMON)
        assert result.returncode == 2
    assert ws.errors("d") == before


# --- D2: the token budget's estimate never closes a dataset for good -----------------------------
def test_a_worst_case_estimate_does_not_stop_a_dataset_far_below_its_token_budget(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 60)
    # Every answer is ~12 tokens: 60 prompts make ~700 tokens, far below 5,000. The worst case of
    # 40 in flight x --max-tokens 4,000 is 160,000: the old gate closed the dataset at once.
    result = ws.run(
        "--server-url",
        sim.url,
        "--concurrency",
        "40",
        "--max-tokens",
        "4000",
        "--max-tokens-per-dataset",
        "5000",
        "--status-interval",
        "0.5",
    )
    assert result.returncode == 0, result.stderr
    assert len(ws.results("d")) == 60
    assert "reached" not in result.stderr.replace("not reached", "")


def test_a_token_budget_is_reached_only_when_output_tokens_reach_it(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 60)
    result = ws.run(
        "--server-url",
        sim.url,
        "--concurrency",
        "8",
        "--max-tokens",
        "4000",
        "--max-tokens-per-dataset",
        "100",
        "--status-interval",
        "0.5",
    )
    assert result.returncode == 0, result.stderr
    rows = ws.results("d")
    total = sum(r["completion_tokens"] for r in rows)
    assert total >= 100 and len(rows) < 60
    assert "token budget 100 reached" in result.stderr


# --- D3: a server restarted with another model ------------------------------------------------------
def test_a_server_that_comes_back_with_another_model_stops_the_run(ws, make_sim, tokenizers):
    sim = make_sim("chatml", "--token-delay", "0.05")
    ws.dataset("short", "d", 40)
    proc = ws.start("--server-url", sim.url, "--concurrency", "4", *COMMON, "--server-wait", "120")
    try:
        wait_until(lambda: len(ws.raw_lines("d")) >= 3, timeout=120)
        sim.restart("--served-model-name", "another-model")
        code = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (ws.root / "nohup.out").read_text()
    assert code == 3, log
    assert "came back serving something else (served_model_name" in log
    assert "another-model" in log
    assert all(r["model"] != "another-model" for r in ws.results("d"))


def test_a_server_that_comes_back_with_a_smaller_context_length_stops_the_run_in_one_line(ws, make_sim):
    sim = make_sim("chatml", "--exit-after", "4")
    ids = ws.dataset("short", "d", 40)
    proc = ws.start("--server-url", sim.url, "--concurrency", "1", *COMMON, "--server-wait", "120")
    try:
        assert sim.wait_exit(60) == 1
        sim.restart("--context-length", "40")  # every prompt here needs more: each would be a 400
        code = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (ws.root / "nohup.out").read_text()
    assert code == 3, log
    last = log.strip().splitlines()[-1]
    assert "came back serving something else (context length (max_model_len) 4096 -> 40;" in last, last
    assert last.endswith("restart it as it was, or rerun the same command to go on with it as it is now (a run reads "
                         "the server's limits at its start)"), last  # fmt: skip
    assert ws.errors("d") == []  # stopped: no prompt failed on the smaller server
    assert sim.stats()["generate_requests"] == 0
    assert len(ws.results("d")) == 3 and len(ids) == 40


# --- D4: malformed answers ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind",
    [
        "finish_reason_list",
        "prompt_tokens_string",
        "bad_gzip",
        "no_finish_reason",
        "negative_completion_tokens",
        "no_meta_info",
    ],
)
def test_a_malformed_answer_is_a_bad_response_of_the_prompt_never_a_hang(ws, make_sim, kind):
    sim = make_sim("chatml", "--malformed", kind)
    ws.dataset("short", "d", 2)
    result = ws.run(
        "--server-url",
        sim.url,
        "--concurrency",
        "1",
        "--max-attempts",
        "2",
        "--retry-backoff",
        "0.01",
        "--checkpoint-tokens",  # answers in one piece: the malformed shapes are those of a whole answer
        "0",
        "--loop-guard",
        "off",
        *COMMON,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert ws.results("d") == []
    errors = ws.errors("d")
    assert [e["error_type"] for e in errors] == ["bad_response", "bad_response"]
    assert all(e["attempts"] == 2 for e in errors)


# --- D6: one huge prompt line ---------------------------------------------------------------------------
def test_a_huge_line_that_cannot_fit_is_skipped_before_it_is_tokenized(ws, make_sim):
    sim = make_sim("chatml", "--context-length", "256")
    huge = "word " * 600_000  # 3 MB: at least tens of thousands of tokens
    ws.dataset("short", "d", [{"id": "huge", "prompt": huge}, {"id": "ok", "prompt": "small"}])
    result = ws.run("--server-url", sim.url, *COMMON)
    assert result.returncode == 0, result.stderr  # a skip no rerun changes: reported, not exit 1
    assert [r["id"] for r in ws.results("d")] == ["ok"]
    (error,) = ws.errors("d")
    assert error["error_type"] == "prompt_too_long"
    assert error["error"].startswith("prompt line has 3,000,0")  # decided by its size, not by tokenizing it


# --- D8: skips show in the exit code; a broken template stops early ---------------------------------------
def test_a_run_where_every_prompt_is_skipped_does_not_exit_0(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 3)
    result = ws.run("--server-url", sim.url, "--max-seq-len", "8", *COMMON)
    assert result.returncode == 1
    assert "d: 3 prompts skipped (prompt_too_long), a rerun will not change that" in result.stderr
    assert "WARNING: every selected prompt was skipped, no row was written" in result.stderr


def test_prompts_all_failing_the_template_the_same_way_stop_the_run_as_a_configuration_error(ws, make_sim, tmp_path):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 30)
    template = tmp_path / "strict.jinja"
    template.write_text("{{ raise_exception('System role not supported') }}")
    result = ws.run("--server-url", sim.url, "--chat-template", str(template), *COMMON)
    assert result.returncode == 2
    assert "the first 20 prompts all failed the chat template the same way" in result.stderr
    assert sim.stats()["generate_requests"] == 0


def test_the_final_hint_names_the_real_output_dir(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 2)
    result = ws.run("--server-url", sim.url, "--output-dir", "elsewhere", "--max-seq-len", "8", *COMMON)
    assert "all in elsewhere/d/errors.jsonl" in result.stderr


# --- signals ---------------------------------------------------------------------------------------------
def test_sigterm_during_an_outage_stops_at_once_instead_of_waiting_the_drain(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.05")
    ws.dataset("short", "d", 40)
    proc = ws.start("--server-url", sim.url, "--concurrency", "4", "--drain-timeout", "3600", *COMMON)
    try:
        wait_until(lambda: len(ws.raw_lines("d")) >= 2, timeout=120)
        sim.kill()
        wait_until(lambda: "OUTAGE" in (ws.root / "nohup.out").read_text(), timeout=120)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)  # not the 3,600 s drain
    finally:
        if proc.poll() is None:
            proc.kill()
    log = (ws.root / "nohup.out").read_text()
    assert code == 143, log
    assert "SIGTERM during an outage" in log


def test_sighup_stops_the_run_like_sigterm(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.05")
    ids = ws.dataset("short", "d", 30)
    proc = ws.start("--server-url", sim.url, "--concurrency", "2", *COMMON)
    try:
        wait_until(lambda: len(ws.raw_lines("d")) >= 1, timeout=120)
        proc.send_signal(signal.SIGHUP)
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 129
    assert "stopped by SIGHUP; rerun the same command to resume" in (ws.root / "nohup.out").read_text()
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    ws.assert_exactly_once("d", ids)


def test_sigterm_before_the_first_request_says_so_and_exits_143(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 3)
    sim.pause()  # nothing is answered: the run cannot get past its first requests by itself
    proc = subprocess.Popen(
        ws.command("--server-url", sim.url, "--drain-timeout", "1", *COMMON),
        cwd=ws.root,
        env=cli_env(),
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if " synthgen: " in line:  # the plan is printed: the run's handlers are in place
                break
        proc.send_signal(signal.SIGTERM)
        rest = proc.stderr.read()
        code = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        sim.resume()
    assert code == 143
    assert "stopped by SIGTERM" in rest


def test_under_nohup_sighup_stays_ignored_and_the_run_goes_on(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.02")
    ids = ws.dataset("short", "d", 20)
    log = ws.root / "nohup.out"
    proc = subprocess.Popen(
        ws.command("--server-url", sim.url, "--concurrency", "2", *COMMON),
        cwd=ws.root,
        env=cli_env(),
        stdout=open(log, "ab"),
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    try:
        wait_until(lambda: len(ws.raw_lines("d")) >= 1, timeout=120)
        proc.send_signal(signal.SIGHUP)  # the terminal went away; nohup said to carry on
        code = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 0, log.read_text()
    ws.assert_exactly_once("d", ids)
