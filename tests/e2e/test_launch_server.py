"""run_inference.py --launch-server end to end, as a user runs it: the simulator is the launched
server command, and it crashes mid-run (--exit-after N). The run restarts it, finishes
exactly-once and leaves no process of the server's group behind, also when stopped by signals."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from simharness import free_port, port_is_free, sim_command, start_sim, wait_until
from workspace import Workspace, assert_model_answer, cli_env

COMMON = ("--max-tokens", "64", "--concurrency", "4", "--status-interval", "0.5")
DEADLINE = 120.0


def launched_pgids(text: str) -> list[int]:
    """Every server the run started announces its pid, which is also its process group id."""
    return [int(pid) for pid in re.findall(r"started (?:demo )?server \(pid (\d+)\)", text)]


def group_alive(pgid: int) -> bool:
    out = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True, check=True).stdout
    return any(int(line.split()[0]) == pgid and not line.split()[1].startswith("Z") for line in out.splitlines())


def assert_nothing_left(port: int, pgids: list[int]) -> None:
    assert pgids, "the run announced no server it started"
    for pgid in pgids:
        assert not group_alive(pgid), f"process group {pgid} of the launched server is still alive"
    assert port_is_free(port)


@pytest.fixture
def port():
    return free_port()


def run_args(tokenizer_dir: Path, port: int, *extra: str) -> tuple[str, ...]:
    return (
        "--server-url",
        f"http://127.0.0.1:{port}",
        "--partition",
        "short",
        *COMMON,
        *extra,
        "--launch-server",
        sim_command(tokenizer_dir, port, "--exit-after", "8"),
    )


def test_a_server_that_crashes_mid_run_is_restarted_and_the_run_finishes_exactly_once(ws, tokenizers, port):
    ids = ws.dataset("short", "d", 20)
    result = ws.run(*run_args(tokenizers["chatml"], port, "--server-restarts", "5"), timeout=DEADLINE)
    assert result.returncode == 0, result.stderr
    for row in ws.assert_exactly_once("d", ids):
        assert_model_answer(row)
    restarts = re.findall(
        r"server exited with code 1 \(died during the run\); restart (\d)/5 in \d+ s: .*"
        r"exiting on /generate request 8 \(--exit-after 8\)",
        result.stderr,
    )
    assert restarts and restarts == [str(n) for n in range(1, len(restarts) + 1)], result.stderr
    assert "stopping server (pid" in result.stderr
    assert "server.log" in result.stderr and (ws.outputs / "server.log").exists()
    assert_nothing_left(port, launched_pgids(result.stderr))


def test_when_restarts_are_used_up_the_run_stops_with_the_reason_and_exit_3(ws, tokenizers, port):
    ids = ws.dataset("short", "d", 30)
    result = ws.run(*run_args(tokenizers["chatml"], port, "--server-restarts", "1"), timeout=DEADLINE)
    assert result.returncode == 3, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"run_inference\.py: error: server exited with code 1 \(died during the run\) and was "
        r"already restarted 1 times; giving up \(log outputs/server\.log\): .*--exit-after 8\)",
        last,
    )
    done = ws.results("d")
    assert len({r["id"] for r in done}) == len(done) and 0 < len(done) < len(ids)  # resumable, no duplicates
    assert_nothing_left(port, launched_pgids(result.stderr))


def test_a_command_that_exits_at_once_is_a_one_line_error_with_the_log_tail(ws, port):
    ws.dataset("short", "d", 2)
    command = f"{sys.executable} -c \"import sys; print('cannot load the model: out of memory'); sys.exit(7)\""
    result = ws.run("--server-url", f"http://127.0.0.1:{port}", "--launch-server", command, timeout=DEADLINE)
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "run_inference.py: error: server exited with code 7 before it was ready (log outputs/server.log): "
        "cannot load the model: out of memory"
    )
    assert "Traceback" not in result.stderr


def test_a_command_that_never_becomes_healthy_times_out_with_the_log_tail_and_is_stopped(ws, port):
    ws.dataset("short", "d", 2)
    script = "import time; print('loading weights', flush=True); time.sleep(3600)"
    command = f'{sys.executable} -c "{script}"'
    result = ws.run(
        "--server-url",
        f"http://127.0.0.1:{port}",
        "--launch-server",
        command,
        "--server-start-timeout",
        "2",
        timeout=DEADLINE,
    )
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "run_inference.py: error: server never became ready within 2 s (log outputs/server.log): loading weights"
    )
    assert_nothing_left(port, launched_pgids(result.stderr))


def test_a_healthy_server_already_at_the_url_is_used_and_left_running(ws, tokenizers):
    ids = ws.dataset("short", "d", 5)
    with start_sim(tokenizers["chatml"]) as sim:
        never_run = f"{sys.executable} -c \"raise SystemExit('must not be started')\""
        result = ws.run("--server-url", sim.url, *COMMON, "--launch-server", never_run, timeout=DEADLINE)
        assert result.returncode == 0, result.stderr
        # It says which server it uses: the process that listens on the port.
        used = re.search(
            rf"a server already answers at {sim.url} \(pid (\d+): .*\); using it instead of launching one",
            result.stderr,
        )
        assert used and int(used[1]) == sim.proc.pid, result.stderr
        assert sim.proc.poll() is None and sim.stats()["generate_requests"] == 5
    ws.assert_exactly_once("d", ids)
    assert not (ws.outputs / "server.log").exists()


def test_keep_server_leaves_it_running_and_the_next_run_uses_it_and_stops_it_unless_kept_again(ws, tokenizers, port):
    first_ids = ws.dataset("short", "a", 4)
    command = sim_command(tokenizers["chatml"], port)
    url = f"http://127.0.0.1:{port}"
    first = ws.run("--server-url", url, *COMMON, "--launch-server", command, "--keep-server", timeout=DEADLINE)
    pgids = launched_pgids(first.stderr)
    try:
        assert first.returncode == 0, first.stderr
        assert "left running (pid" in first.stderr and group_alive(pgids[0])
        # The hint says how to reuse it with the same settings (here the --max-tokens the run used).
        assert f"use it with the same settings: --server-url {url} --max-tokens 64;" in first.stderr
        second_ids = ws.dataset("short", "b", 3)
        args = ("--server-url", url, *COMMON, "--launch-server", command)
        second = ws.run(*args, "--keep-server", timeout=DEADLINE)
        assert second.returncode == 0, second.stderr
        assert f"the server an earlier run launched (pid {pgids[0]}," in second.stderr
        assert not launched_pgids(second.stderr) and group_alive(pgids[0])  # kept again
        third_ids = ws.dataset("short", "c", 2)
        third = ws.run(*args, timeout=DEADLINE)
        assert third.returncode == 0, third.stderr
        assert f"stopping the server an earlier run launched (pid {pgids[0]})" in third.stderr
        ws.assert_exactly_once("a", first_ids)
        ws.assert_exactly_once("b", second_ids)
        ws.assert_exactly_once("c", third_ids)
        assert_nothing_left(port, pgids)  # its own server, recognised: stopped at the end
        assert not (ws.outputs / "launched_server.json").exists()
    finally:
        for pgid in pgids:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    wait_until(lambda: not group_alive(pgids[0]), timeout=DEADLINE)


def start_run(ws: Workspace, *args: str) -> tuple[subprocess.Popen, Path]:
    log = ws.root / "run.out"
    return ws.start(*args, env=cli_env(), log=log), log


def test_sigterm_during_the_run_drains_stops_the_server_and_a_rerun_finishes(ws, tokenizers, port):
    ids = ws.dataset("short", "d", 12)
    url = f"http://127.0.0.1:{port}"
    args = (
        "--server-url",
        url,
        *COMMON,
        "--drain-timeout",
        "1",
        "--launch-server",
        sim_command(tokenizers["chatml"], port, "--token-delay", "0.2"),
    )
    proc, out = start_run(ws, *args)
    with httpx.Client(base_url=url, timeout=30.0, trust_env=False) as sim:

        def requests_arrived() -> bool:
            try:
                return sim.get("/sim/stats").json()["generate_requests"] > 0
            except httpx.HTTPError:
                return False

        wait_until(requests_arrived, timeout=DEADLINE, interval=0.05)
        # Paused, the server holds every request: the run is certainly mid-way when the signal comes.
        sim.post("/pause_generation", json={"mode": "in_place"}).raise_for_status()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(DEADLINE) == 143, out.read_text()
    text = out.read_text()
    assert "stopped by SIGTERM" in text and "stopping server (pid" in text
    assert_nothing_left(port, launched_pgids(text))

    rerun = ws.run(*args, timeout=DEADLINE)
    assert rerun.returncode == 0, rerun.stderr
    ws.assert_exactly_once("d", ids)
    assert_nothing_left(port, launched_pgids(rerun.stderr))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_server_loads_stops_it_with_one_line_and_128_plus_the_signal(ws, port, sig):
    ws.dataset("short", "d", 2)
    script = "import time; print('loading weights', flush=True); time.sleep(3600)"
    proc, out = start_run(
        ws, "--server-url", f"http://127.0.0.1:{port}", "--launch-server", f'{sys.executable} -c "{script}"'
    )
    # The line the server prints, not the log's header line, which quotes the command and so the text too.
    wait_until(
        lambda: (
            "loading weights" in (ws.outputs / "server.log").read_text(errors="replace").splitlines()
            if (ws.outputs / "server.log").exists()
            else False
        ),
        timeout=DEADLINE,
        interval=0.05,
    )
    proc.send_signal(sig)
    assert proc.wait(DEADLINE) == 128 + sig, out.read_text()
    text = out.read_text()
    assert text.strip().splitlines()[-1] == (
        f"run_inference.py: error: stopped by {sig.name}; the launched server was stopped too. "
        "Rerun the same command to resume"
    )
    assert_nothing_left(port, launched_pgids(text))


def test_a_second_sigterm_kills_a_server_that_ignores_the_first(ws, port):
    ws.dataset("short", "d", 2)
    # A server that ignores SIGTERM (as one stuck in a CUDA call would): only SIGKILL ends it.
    script = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('loading weights', flush=True); time.sleep(3600)"
    )
    proc, out = start_run(
        ws, "--server-url", f"http://127.0.0.1:{port}", "--launch-server", f'{sys.executable} -c "{script}"'
    )
    log = ws.outputs / "server.log"
    # The line the server prints once it ignores SIGTERM, not the header line that quotes the command.
    wait_until(
        lambda: log.exists() and "loading weights" in log.read_text(errors="replace").splitlines(),
        timeout=DEADLINE,
        interval=0.05,
    )
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "SIGTERM: stopping the server" in out.read_text(), timeout=DEADLINE, interval=0.05)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(DEADLINE) == 143, out.read_text()  # well before the 30 s grace would end
    text = out.read_text()
    assert "second SIGTERM: killing the server's process group now" in text
    assert_nothing_left(port, launched_pgids(text))
