"""A launched server's life beyond one run: it dies with a run
that is SIGKILLed, a rerun recognises a server its folder launched and stops it, server.log is rotated,
and a normal stop does not read like a crash. Through the real CLI, the simulator as the server."""

from __future__ import annotations

import json
import os
import signal

from simharness import sim_command, wait_until
from workspace import cli_env

from synthgen.launch.serverlog import LOG_ROTATE_BYTES, progress_line
from tests.e2e.test_launch_server import (
    COMMON,
    DEADLINE,
    assert_nothing_left,
    group_alive,
    launched_pgids,
    port,
)

__all__ = ["port"]  # the fixture, shared with test_launch_e2e


def test_a_sigkilled_run_takes_its_launched_server_with_it(ws, tokenizers, port):
    ws.dataset("short", "d", 40)
    url = f"http://127.0.0.1:{port}"
    log = ws.root / "run.out"
    proc = ws.start(
        "--server-url",
        url,
        *COMMON,
        "--launch-server",
        sim_command(tokenizers["chatml"], port, "--token-delay", "0.2"),
        env=cli_env(),
        log=log,
    )
    pgids = wait_until(lambda: launched_pgids(log.read_text()), timeout=DEADLINE, interval=0.05)
    wait_until(lambda: "ready in" in log.read_text(), timeout=DEADLINE, interval=0.05)
    record = json.loads((ws.outputs / "launched_server.json").read_text())
    assert record["pid"] == pgids[0] and record["owner_pid"] == proc.pid
    proc.send_signal(signal.SIGKILL)
    proc.wait(DEADLINE)
    wait_until(lambda: not group_alive(pgids[0]), timeout=DEADLINE, interval=0.05, what="the server to die")
    assert_nothing_left(port, pgids)


def test_a_rerun_with_nothing_to_do_stops_the_server_an_earlier_run_left(ws, tokenizers, port):
    ids = ws.dataset("short", "d", 3)
    url = f"http://127.0.0.1:{port}"
    args = ("--server-url", url, *COMMON, "--launch-server", sim_command(tokenizers["chatml"], port))
    first = ws.run(*args, "--keep-server", timeout=DEADLINE)
    assert first.returncode == 0, first.stderr
    pgids = launched_pgids(first.stderr)
    try:
        rerun = ws.run(*args, timeout=DEADLINE)
        assert rerun.returncode == 0, rerun.stderr
        assert "nothing to do" in rerun.stderr
        assert f"stopping the server an earlier run launched (pid {pgids[0]})" in rerun.stderr
        assert_nothing_left(port, pgids)
    finally:
        for pgid in pgids:
            if group_alive(pgid):
                os.killpg(pgid, signal.SIGKILL)
    ws.assert_exactly_once("d", ids)


def test_a_normal_stop_ends_server_log_with_a_line_that_says_it_was_ours(ws, tokenizers, port):
    ws.dataset("short", "d", 2)
    url = f"http://127.0.0.1:{port}"
    args = ("--server-url", url, *COMMON, "--log-file", "outputs/run.log")
    result = ws.run(*args, "--launch-server", sim_command(tokenizers["chatml"], port))
    assert result.returncode == 0, result.stderr
    # What to do next is the run's last line, after the server's stop, on stderr and in the log file.
    lines = result.stderr.strip().splitlines()
    assert "stopping server (pid" in lines[-3]
    assert lines[-2].startswith("for SFT trainers, the text re-rendered by the chat template")
    assert lines[-1].startswith("rows: outputs/d/raw_responses.jsonl; report: outputs/report.html; export them with: ")
    assert (ws.outputs / "run.log").read_text().strip().splitlines()[-1] == lines[-1]
    last = (ws.outputs / "server.log").read_text().strip().splitlines()[-1]
    assert last.startswith("===== synthgen ") and "stopped server (SIGTERM to its process group" in last
    assert "normal shutdown" in last


def test_a_server_log_past_the_cap_is_rotated_at_the_next_start(ws, tokenizers, port):
    ws.dataset("short", "d", 2)
    ws.outputs.mkdir()
    old = ws.outputs / "server.log"
    with open(old, "wb") as fh:  # sparse: the size without the disk
        fh.write(b"an old start\n")
        fh.truncate(LOG_ROTATE_BYTES + 1)
    url = f"http://127.0.0.1:{port}"
    result = ws.run("--server-url", url, *COMMON, "--launch-server", sim_command(tokenizers["chatml"], port))
    assert result.returncode == 0, result.stderr
    assert (ws.outputs / "server.log.1").stat().st_size == LOG_ROTATE_BYTES + 1
    text = old.read_text()
    assert len(text) < 1_000_000 and "an old start" not in text
    assert "the log before is in server.log.1" in text.splitlines()[0]


def test_start_up_status_shows_the_servers_progress_not_its_warnings():
    log = "\n".join(
        [
            "===== synthgen 2026-01-01T00:00:00Z: starting demo server: python -m sglang.launch_server",
            "[2026-01-01 00:00:05] Load weight begin. avail mem=12.00 GB",
            "Cannot detect CUDA architecture.",
            "/venv/lib/python3.11/site-packages/torch/cuda/__init__.py:61: UserWarning: CUDA is not available",
            "  warnings.warn(",
            "warnings.warn(",
            '[2026-01-01 00:00:09] INFO:     127.0.0.1:43220 - "GET /health HTTP/1.1" 503 Service Unavailable',
            "",
        ]
    )
    assert progress_line(log) == "[2026-01-01 00:00:05] Load weight begin. avail mem=12.00 GB"
    assert progress_line("===== synthgen ...: starting server: x\nCannot detect CUDA architecture.\n") == ""


def test_the_launch_record_never_holds_a_key_from_the_command(tmp_path):
    import sys

    from synthgen.launch.launcher import ServerProcess
    from synthgen.launch.record import read_record

    record = tmp_path / "launched_server.json"
    command = [sys.executable, "-c", "import time; time.sleep(600)", "--api-key", "s3cret-value"]
    server = ServerProcess(command, tmp_path / "server.log", record_path=record)
    server.start()
    try:
        shown = read_record(record)
        assert shown is not None and shown.pid == server.pid and shown.alive()
        assert "s3cret-value" not in record.read_text()
    finally:
        server.stop(grace=5)
    assert not record.exists()  # stopped: forgotten
