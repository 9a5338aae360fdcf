"""score_teacher.py --launch-server, with the simulator as the launched command: started only when a row needs
scoring, stopped at the end unless --keep-server (the next pass uses it and stops it), one-line errors."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as pads
from simharness import SIM_SCRIPT

ROOT = Path(__file__).resolve().parents[2]
SCORE = ROOT / "score_teacher.py"
DEADLINE = 120.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sim_command(tokenizer_dir: Path, port: int, *extra: str) -> str:
    return " ".join(
        [sys.executable, str(SIM_SCRIPT), "--tokenizer-dir", str(tokenizer_dir), "--port", str(port), *extra]
    )


def launched_pgids(text: str) -> list[int]:
    return [int(pid) for pid in re.findall(r"started (?:demo )?server \(pid (\d+)\)", text)]


def group_alive(pgid: int) -> bool:
    out = subprocess.run(["ps", "-eo", "pgid=,stat="], capture_output=True, text=True, check=True).stdout
    return any(int(line.split()[0]) == pgid and not line.split()[1].startswith("Z") for line in out.splitlines())


def assert_nothing_left(port: int, pgids: list[int]) -> None:
    assert pgids, "no server was started"
    assert not any(group_alive(pgid) for pgid in pgids)
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0


def test_the_server_is_launched_only_for_rows_to_score_and_stopped_at_the_end(ws, make_sim, tokenizers):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 6)
    assert ws.run("--server-url", sim.url, "--max-tokens", "16").returncode == 0
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = sim_command(tokenizers["chatml"], port)
    args = ("--dataset", "d", "--top-k", "4", "--server-url", url, "--launch-server", command)

    first = ws.run(*args, script=SCORE, timeout=DEADLINE)
    assert first.returncode == 0, first.stderr
    assert "d: 6/6 rows scored (6 now" in first.stdout
    assert len(pads.dataset(ws.outputs / "d" / "teacher", format="parquet").to_table()) == 6
    assert_nothing_left(port, launched_pgids(first.stderr))  # stopped at the end, whole process group

    again = ws.run(*args, script=SCORE, timeout=DEADLINE)
    assert again.returncode == 0, again.stderr
    assert not launched_pgids(again.stderr) and "the server was not started" in again.stderr
    assert "d: 6/6 rows scored (0 now" in again.stdout

    ws.dataset("short", "e", 3)
    assert ws.run("--server-url", sim.url, "--max-tokens", "16").returncode == 0
    kept = ws.run(*args[2:], "--dataset", "e", "--keep-server", script=SCORE, timeout=DEADLINE)
    pgids = launched_pgids(kept.stderr)
    try:
        assert kept.returncode == 0, kept.stderr
        assert "left running (pid" in kept.stderr and group_alive(pgids[0])
        ws.dataset("short", "f", 2)
        assert ws.run("--server-url", sim.url, "--max-tokens", "16").returncode == 0
        last = ws.run(*args[2:], "--dataset", "f", script=SCORE, timeout=DEADLINE)
        assert last.returncode == 0, last.stderr
        assert f"stopping the server an earlier run launched (pid {pgids[0]})" in last.stderr
        assert "f: 2/2 rows scored (2 now" in last.stdout
        assert_nothing_left(port, pgids)
    finally:
        for pgid in pgids:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_launch_that_fails_is_one_line_and_exit_3(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 2)
    assert ws.run("--server-url", sim.url, "--max-tokens", "16").returncode == 0
    port = free_port()
    command = f"{sys.executable} -c \"import sys; print('cannot load the model: out of memory'); sys.exit(7)\""
    result = ws.run(
        "--dataset", "d", "--server-url", f"http://127.0.0.1:{port}", "--launch-server", command, script=SCORE
    )
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "score_teacher.py: error: server exited with code 7 before it was ready (log outputs/server.log): "
        "cannot load the model: out of memory"
    )
    assert "Traceback" not in result.stderr
    two = ws.run(
        "--dataset", "d", "--server-url", sim.url, "--server-url", f"http://127.0.0.1:{port}",
        "--launch-server", command, script=SCORE,
    )  # fmt: skip
    assert two.returncode == 2 and "--launch-server starts one server" in two.stderr, two.stderr
    assert len(two.stderr.strip().splitlines()) == 1


def test_a_launched_server_gone_for_good_ends_the_pass_with_exit_3_and_a_rerun_scores_the_rest_once(
    ws, make_sim, tokenizers
):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 30)
    assert ws.run("--server-url", sim.url, "--max-tokens", "16").returncode == 0
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    dying = sim_command(tokenizers["chatml"], port, "--exit-after", "8")
    args = ("--dataset", "d", "--top-k", "4", "--server-url", url, "--part-rows", "1", "--concurrency", "2")
    result = ws.run(*args, "--launch-server", dying, "--server-restarts", "1", script=SCORE, timeout=DEADLINE)
    assert result.returncode == 3, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("score_teacher.py: error: server exited with code 1") and "giving up" in last, last
    assert_nothing_left(port, launched_pgids(result.stderr))
    ids = pads.dataset(ws.outputs / "d" / "teacher", format="parquet").to_table().column("id").to_pylist()
    assert 0 < len(ids) == len(set(ids)) < 30
    rerun = ws.run(*args, "--launch-server", sim_command(tokenizers["chatml"], port), script=SCORE, timeout=DEADLINE)
    assert rerun.returncode == 0, rerun.stderr
    assert f"d: 30/30 rows scored ({30 - len(ids)} now" in rerun.stdout
    ids = pads.dataset(ws.outputs / "d" / "teacher", format="parquet").to_table().column("id").to_pylist()
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 30
