"""Unattended runs: signals, outages, crashes, a second launch and a full disk, injected for real
(processes killed, a server stopped and restarted, a file-size limit), through the command line.
Waits are event-based (a row count, a log line); no outcome depends on timing."""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
from collections import Counter

import pytest
from simharness import wait_until
from workspace import assert_model_answer, cli_env


def rows_written(ws, dataset: str) -> int:
    path = ws.outputs / dataset / "raw_responses.jsonl"
    return path.read_bytes().count(b"\n") if path.exists() else 0


def log_has(path, text: str) -> bool:
    return path.exists() and text in path.read_text()


def test_random_503s_drops_aborts_and_slow_responses_together_still_give_exactly_once(ws, make_sim):
    sim = make_sim(
        "chatml",
        "--rate-503",
        "0.15",
        "--rate-drop",
        "0.1",
        "--rate-abort",
        "0.15",
        "--rate-slow",
        "0.1",
        "--slow-seconds",
        "0.2",
        "--fault-seed",
        "11",
    )
    a = ws.dataset("short", "a", 40)
    b = ws.dataset("short", "b", 25)
    result = ws.run(
        "--server-url",
        sim.url,
        "--max-tokens",
        "256",
        "--concurrency",
        "8",
        "--max-attempts",
        "30",
        "--retry-backoff",
        "0.02",
        "--status-interval",
        "0.5",
    )
    assert result.returncode == 0, result.stderr
    for name, ids in (("a", a), ("b", b)):
        for row in ws.assert_exactly_once(name, ids):
            assert_model_answer(row)
    outcomes = sim.stats()["by_outcome"]
    assert all(outcomes.get(k, 0) > 0 for k in ("http_503", "dropped", "aborted")), outcomes


def test_the_server_killed_and_restarted_mid_run_the_run_finishes_by_itself(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.005")
    ids = ws.dataset("short", "d", 60)
    log = ws.root / "run.log"
    proc = ws.start(
        "--server-url",
        sim.url,
        "--max-tokens",
        "256",
        "--concurrency",
        "4",
        "--log-file",
        str(log),
        "--status-interval",
        "0.5",
    )
    wait_until(lambda: rows_written(ws, "d") >= 10, timeout=120, what="10 rows")
    sim.kill()
    wait_until(lambda: log_has(log, "OUTAGE"), timeout=120, what="the outage to be noticed")
    sim.restart()
    assert proc.wait(timeout=300) == 0, (ws.root / "nohup.out").read_text()
    for row in ws.assert_exactly_once("d", ids):
        assert_model_answer(row)
    text = log.read_text()
    assert "RECOVERED: server is healthy again" in text


def test_a_long_outage_gives_up_after_server_wait_with_a_resume_hint(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.005")
    ids = ws.dataset("short", "d", 40)
    log = ws.root / "run.log"
    proc = ws.start(
        "--server-url",
        sim.url,
        "--max-tokens",
        "256",
        "--concurrency",
        "2",
        "--log-file",
        str(log),
        "--server-wait",
        "1",
    )
    wait_until(lambda: rows_written(ws, "d") >= 5, timeout=120, what="5 rows")
    sim.kill()
    assert proc.wait(timeout=120) == 3
    last = (ws.root / "nohup.out").read_text().strip().splitlines()[-1]
    assert last.startswith("run_inference.py: error: gave up: server ") and "rerun the same command to resume" in last
    assert "GIVE UP" in log.read_text()
    done = {r["id"] for r in ws.results("d")}  # every line whole
    sim.restart()
    assert ws.run("--server-url", sim.url, "--max-tokens", "256").returncode == 0
    ws.assert_exactly_once("d", ids)
    assert done < set(ids)


def test_sigkill_at_several_random_points_then_a_rerun_is_exactly_once(ws, make_sim):
    concurrency = 4
    sim = make_sim("chatml", "--token-delay", "0.004")
    ids = ws.dataset("short", "d", 60)
    ids2 = ws.dataset("short", "e", 20)
    args = ("--server-url", sim.url, "--max-tokens", "256", "--concurrency", str(concurrency))
    rng = random.Random(5)
    kills = 0
    for _ in range(3):
        target = rows_written(ws, "d") + rng.randint(1, 12)
        proc = ws.start(*args)
        wait_until(lambda t=target, p=proc: rows_written(ws, "d") >= t or p.poll() is not None, timeout=120)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
    assert ws.run(*args).returncode == 0
    for name, expected in (("d", ids), ("e", ids2)):
        for row in ws.assert_exactly_once(name, expected):  # parses every line: none torn or merged
            assert_model_answer(row)
    repeats = Counter(sim.stats()["prompt_counts"].values())
    duplicates = sum((n - 1) * k for n, k in repeats.items())
    assert duplicates <= kills * concurrency, repeats


def test_with_keep_partials_off_sigterm_drains_in_flight_requests_prints_the_summary_and_is_resumable(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.01")
    ids = ws.dataset("short", "d", 40)
    args = ("--max-tokens", "256", "--concurrency", "4", "--drain-timeout", "60", "--keep-partials", "off")
    proc = ws.start("--server-url", sim.url, *args)
    wait_until(lambda: rows_written(ws, "d") >= 4, timeout=120, what="4 rows")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 143
    out = (ws.root / "nohup.out").read_text()
    assert "SIGTERM: no new requests" in out and "TOTAL" in out
    assert "stopped by SIGTERM; rerun the same command to resume" in out
    assert sim.stats()["in_flight"] == 0
    partial = ws.results("d")
    assert 4 <= len(partial) < len(ids)
    assert sim.stats()["by_outcome"].get("aborted", 0) == 0  # the grace period let in-flight requests finish
    assert ws.run("--server-url", sim.url, "--max-tokens", "256").returncode == 0
    ws.assert_exactly_once("d", ids)


def test_a_second_signal_stops_at_once_without_a_torn_line(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.05")
    ids = ws.dataset("short", "d", 20)
    log = ws.root / "run.log"
    proc = ws.start(
        "--server-url",
        sim.url,
        "--max-tokens",
        "256",
        "--concurrency",
        "2",
        "--drain-timeout",
        "600",
        "--keep-partials",
        "off",  # the first signal waits for the requests in flight (on: it ends them at once)
        "--log-file",
        str(log),
    )
    wait_until(lambda: rows_written(ws, "d") >= 1 and sim.stats()["in_flight"] >= 1, timeout=120)
    proc.send_signal(signal.SIGINT)
    wait_until(lambda: log_has(log, "SIGINT: no new requests"), timeout=60)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    assert "stopping now (second SIGINT)" in log.read_text()
    ws.results("d")  # every line parses
    assert ws.run("--server-url", sim.url, "--max-tokens", "256").returncode == 0
    ws.assert_exactly_once("d", ids)


def test_a_second_launch_on_the_same_dataset_refuses_naming_the_pid(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.02")
    ws.dataset("short", "d", 20)
    first = ws.start("--server-url", sim.url, "--max-tokens", "256", "--concurrency", "2")
    wait_until(lambda: sim.stats()["in_flight"] >= 1, timeout=120, what="the first run to be sending")
    second = ws.run("--server-url", sim.url, "--max-tokens", "256")
    assert second.returncode == 4
    assert second.stderr.strip().splitlines()[-1] == (
        f"run_inference.py: error: outputs/d: another run (pid {first.pid}) is writing dataset 'd'; "
        f"wait for it to finish or stop it (kill {first.pid}) before starting this one"
    )
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=120) == 143


def _limit_file_size(limit: int):
    def apply():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_write_error_stops_the_run_cleanly_and_damages_nothing(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 30)
    # A file-size limit makes the kernel refuse writes past 6 KB, as a full disk would.
    result = subprocess.run(
        ws.command("--server-url", sim.url, "--max-tokens", "256", "--concurrency", "4"),
        cwd=ws.root,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_file_size(6000),
    )
    assert result.returncode == 5, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("run_inference.py: error: outputs/d/raw_responses.jsonl: write failed")
    assert "everything before this record is intact" in last and "Traceback" not in result.stderr
    saved = ws.results("d")  # whole lines only
    assert 0 < len(saved) < len(ids)
    assert ws.run("--server-url", sim.url, "--max-tokens", "256").returncode == 0
    ws.assert_exactly_once("d", ids)


def test_a_checkpoint_write_refused_is_the_error_named_not_the_tidying_after_it(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.002", "--output-len-dist", "fixed:2000")
    ids = ws.dataset("short", "d", 8)
    # The kernel refuses a checkpoint's write past 2 KB (long answers, no row before it), as a full disk
    # would; and a full disk refuses the end-of-run tidying's temporary file too (a folder in its place).
    (ws.root / "outputs" / "d" / "partial_outputs.jsonl.tmp").mkdir(parents=True)
    args = ("--server-url", sim.url, "--max-tokens", "3000", "--concurrency", "4", "--checkpoint-tokens", "16")
    result = subprocess.run(
        ws.command(*args),
        cwd=ws.root,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_limit_file_size(2000),
    )
    assert result.returncode == 5, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("run_inference.py: error: outputs/d/partial_outputs.jsonl: write failed"), last
    assert "Traceback" not in result.stderr
    (ws.root / "outputs" / "d" / "partial_outputs.jsonl.tmp").rmdir()
    assert ws.run(*args[:-2]).returncode == 0
    ws.assert_exactly_once("d", ids)


def test_the_log_file_has_status_lines_with_rates_in_flight_failures_and_eta(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.003")
    ws.dataset("short", "d", 30)
    log = ws.root / "run.log"
    result = ws.run(
        "--server-url",
        sim.url,
        "--max-tokens",
        "256",
        "--concurrency",
        "2",
        "--log-file",
        str(log),
        "--status-interval",
        "0.05",
    )
    assert result.returncode == 0, result.stderr
    status = [line for line in log.read_text().splitlines() if " done " in line and "out tok/s 1m" in line]
    assert status, log.read_text()
    for line in status:
        for part in ("/30 (", "out tok/s 1m ", " avg ", "| in-flight ", "| failed ", "| ETA "):
            assert part in line, line


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_exit_codes_are_documented_values(ws, make_sim, sig, code):
    sim = make_sim("chatml", "--token-delay", "0.01")
    ws.dataset("short", "d", 20)
    proc = ws.start("--server-url", sim.url, "--max-tokens", "256", "--concurrency", "2")
    wait_until(lambda: rows_written(ws, "d") >= 1, timeout=120)
    proc.send_signal(sig)
    assert proc.wait(timeout=120) == code


def test_a_prompt_that_keeps_killing_the_server_is_failed_after_three_deaths(ws, make_sim, tokenizers):
    from synthgen.chat.templating import ChatRenderer, load_tokenizer

    renderer = ChatRenderer(load_tokenizer(str(tokenizers["chatml"])))
    normal = [f"question {i}" for i in range(5)]
    limit = max(max(renderer.render([{"role": "user", "content": t}]).input_ids) for t in normal) + 1
    tokenizer = renderer.tokenizer
    killer = next(
        text
        for text in (tokenizer.decode([i]) for i in range(len(tokenizer) - 1, limit, -1))
        if text.strip() and max(renderer.render([{"role": "user", "content": text}]).input_ids) >= limit
    )
    # The simulator dies, as the real server does, on an id it cannot embed; a supervisor restarts it.
    sim = make_sim("chatml", "--max-vocab", str(limit))
    ws.dataset(
        "short",
        "d",
        [*({"id": f"ok{i}", "prompt": t} for i, t in enumerate(normal)), {"id": "killer", "prompt": killer}],
    )
    proc = ws.start("--server-url", sim.url, "--max-tokens", "64", "--concurrency", "1", "--retry-backoff", "0.01")
    deaths = 0
    while proc.poll() is None and deaths < 5:
        try:
            sim.wait_exit(timeout=2)
        except subprocess.TimeoutExpired:
            continue
        deaths += 1
        sim.restart()
    assert proc.wait(timeout=120) == 1
    assert deaths == 3
    (error,) = ws.errors("d")
    assert (error["id"], error["error_type"]) == ("killer", "server_died")
    assert error["error"].startswith("the server went down 3 times while this prompt was in flight")
    ws.assert_exactly_once("d", [f"ok{i}" for i in range(5)])
