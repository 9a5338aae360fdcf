"""--launch-server against what it did not start: a planted
launched_server.json never gets a process signalled; server.log stays bounded while the server writes,
with keys masked; a server another run launched on the port is named and used, and ours stopped.
Through the real CLI, the simulator as the server."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from simharness import SIM_SCRIPT, sim_argv, start_sim
from workspace import cli_env

from tests.e2e.test_launch_server import COMMON, DEADLINE, group_alive, launched_pgids, port

__all__ = ["port"]  # the fixture

NEVER_RUN = f"{sys.executable} -c \"raise SystemExit('must not be started')\""


def ticks(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2 :].split()[19])


def plant(path: Path, pid: int, token: str = "f" * 32) -> None:
    """A record as an attacker can write it: everything right about the process but the launch token."""
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "pid": pid,
        "start_ticks": ticks(pid),
        "boot_id": Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
        "uid": os.getuid(),
        "cmdline_sha256": hashlib.sha256(Path(f"/proc/{pid}/cmdline").read_bytes()).hexdigest(),
        "token": token,
        "command": "sleep 600",
        "name": "server",
        "started_at": "2026-01-01T00:00:00Z",
        "owner_pid": 0,
        "owner_ticks": 0,
    }
    path.write_text(json.dumps(record))


def sleeper(**options: object) -> subprocess.Popen:
    return subprocess.Popen(["sleep", "600"], start_new_session=True, **options)  # type: ignore[call-overload]


def said(stderr: str, line: str) -> bool:
    """`line` is one of the run's lines (after its time stamp)."""
    return any(shown.endswith(" " + line) for shown in stderr.splitlines())


def another_users_process() -> tuple[subprocess.Popen | None, int]:
    """A process of another user: a `sleep` as nobody when we are root, else pid 1 if it is not ours."""
    if os.getuid() == 0:
        other = sleeper(user=65534)
        return other, other.pid
    if os.stat("/proc/1").st_uid == os.getuid():
        pytest.skip("no process of another user to name")
    return None, 1


def test_a_planted_record_gets_nothing_signalled_with_a_healthy_server_or_nothing_to_do(ws, tokenizers):
    ids = ws.dataset("short", "d", 3)
    record = ws.outputs / "launched_server.json"
    victim = sleeper()
    other, other_pid = another_users_process()
    try:
        with start_sim(tokenizers["chatml"]) as sim:
            args = ("--server-url", sim.url, *COMMON, "--launch-server", NEVER_RUN)
            plant(record, victim.pid)
            healthy = ws.run(*args, timeout=DEADLINE)  # a healthy server answers: used, the record not trusted
            assert healthy.returncode == 0, healthy.stderr
            assert victim.poll() is None, "the planted process was signalled"
            refusal = (
                f"{Path('outputs/launched_server.json')} names pid {victim.pid}, which is not a server this tool "
                "launched (it does not carry the token this tool gives the servers it launches): not signalling it"
            )
            assert said(healthy.stderr, refusal), healthy.stderr
            assert "stopping the server an earlier run launched" not in healthy.stderr
            ws.assert_exactly_once("d", ids)

            plant(record, victim.pid)
            idle = ws.run(*args, timeout=DEADLINE)  # nothing to do: no server needed, the leftover check runs
            assert idle.returncode == 0, idle.stderr
            assert "nothing to do" in idle.stderr and said(idle.stderr, refusal), idle.stderr
            assert victim.poll() is None, "the planted process was signalled"

        plant(record, other_pid)  # another user's process: one line, no traceback, nothing signalled
        foreign = ws.run(*args, timeout=DEADLINE)
        assert foreign.returncode == 0 and "Traceback" not in foreign.stderr, foreign.stderr
        lines = [line for line in foreign.stderr.splitlines() if f"names pid {other_pid}," in line]
        assert len(lines) == 1 and "(it runs as another user (uid " in lines[0], foreign.stderr
        assert other is None or other.poll() is None
    finally:
        for proc in (victim, other):
            if proc is not None:
                proc.kill()
                proc.wait()


LOUD = """\
import sys
print("server_args: --api-key s3cret-key-123 api_key='s3cret-key-123'", flush=True)
for _ in range(30000):
    print("x" * 99)
print("again: --api-key=s3cret-key-123", flush=True)
print("cannot load the model", flush=True)
sys.exit(1)
"""


def test_server_log_stays_bounded_while_the_server_writes_and_holds_no_key(ws, port, tmp_path):
    ws.dataset("short", "d", 1)
    script = tmp_path / "loud.py"
    script.write_text(LOUD)
    cap = 100_000
    result = ws.run(
        "--server-url",
        f"http://127.0.0.1:{port}",
        "--launch-server",
        f"{sys.executable} {script}",
        env=cli_env(SYNTHGEN_SERVER_LOG_BYTES=str(cap)),
        timeout=DEADLINE,
    )
    assert result.returncode == 3, result.stderr
    assert result.stderr.strip().splitlines()[-1].endswith("again: --api-key=*** | cannot load the model")
    log, older = ws.outputs / "server.log", ws.outputs / "server.log.1"
    assert log.stat().st_size <= cap and older.stat().st_size <= cap  # 3 MB written, 2 x the cap kept
    text = log.read_text()
    assert "s3cret-key-123" not in text + older.read_text()
    assert text.startswith("===== synthgen ") and "the log before is in server.log.1" in text.splitlines()[0]
    assert "again: --api-key=***" in text


CHATTY = """\
import os, sys
# 256 MB of output before the server listens, each line with a key to mask: masked and written at about
# 1 MB/s, that takes minutes; read into the pump's backlog (dropped past the log's cap), about a second.
block = (b"loading api_key='s3cret-key-123' " + b"x" * 66 + b"\\n") * 10_000
for _ in range(256):
    sys.stdout.buffer.write(block)
sys.stdout.buffer.flush()
os.execv(sys.argv[1], sys.argv[1:])  # the simulator, as given after this script
"""


def test_a_server_writing_faster_than_its_log_is_written_still_becomes_ready_in_time(ws, port, tmp_path, tokenizers):
    ws.dataset("short", "d", 2)
    script = tmp_path / "chatty.py"
    script.write_text(CHATTY)
    cap = 100_000
    launch = " ".join([sys.executable, str(script), *sim_argv(tokenizers["chatml"], port)])
    result = ws.run(
        "--server-url",
        f"http://127.0.0.1:{port}",
        "--launch-server",
        launch,
        "--server-start-timeout",
        "30",
        *COMMON,
        env=cli_env(SYNTHGEN_SERVER_LOG_BYTES=str(cap)),
        timeout=DEADLINE,
    )
    assert result.returncode == 0, result.stderr
    assert len(ws.results("d")) == 2
    log, older = ws.outputs / "server.log", ws.outputs / "server.log.1"
    assert log.stat().st_size <= cap and (not older.exists() or older.stat().st_size <= cap)
    text = log.read_text() + (older.read_text() if older.exists() else "")
    assert "bytes of the server's output dropped here" in text and "s3cret-key-123" not in text


FOREIGN = """\
import os, subprocess, sys, time
# Another run's server comes up on the port while this one loads (it carries that run's launch token).
env = dict(os.environ, SYNTHGEN_LAUNCH_TOKEN="another-run")
sim = subprocess.Popen(sys.argv[2:], env=env, start_new_session=True)
open(sys.argv[1], "w").write(str(sim.pid))
print("loading weights", flush=True)
time.sleep(600)
"""


def test_a_server_another_run_starts_on_the_port_is_named_and_used_and_ours_stopped(ws, tokenizers, port, tmp_path):
    ids = ws.dataset("short", "d", 3)
    script, pidfile = tmp_path / "foreign.py", tmp_path / "sim.pid"
    script.write_text(FOREIGN)
    sim = [sys.executable, str(SIM_SCRIPT), "--tokenizer-dir", str(tokenizers["chatml"]), "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    try:
        result = ws.run(
            "--server-url", url, *COMMON, "--launch-server", " ".join([sys.executable, str(script), str(pidfile), *sim])
        )
        assert result.returncode == 0, result.stderr
        foreign = int(pidfile.read_text())
        ours = launched_pgids(result.stderr)
        assert f"another server answers at {url} (pid {foreign}: " in result.stderr
        assert (
            f"not the server this run started (pid {ours[0]}), which cannot bind the port: using that one, "
            "and stopping ours"
        ) in result.stderr
        assert "ready in" not in result.stderr  # ours never was
        ws.assert_exactly_once("d", ids)
        assert not group_alive(ours[0])  # ours is stopped; the other one, not this run's, still serves
        assert group_alive(foreign)
    finally:
        if pidfile.exists():
            with_pid = int(pidfile.read_text())
            try:
                os.killpg(with_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_second_demo_server_is_not_started_while_another_is_loading_for_the_port(ws, port, tmp_path):
    ws.dataset("short", "d", 1)
    # Another run's demo server, still loading (SGLang binds its port only once the model is in).
    loading = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)", "-m", "sglang.launch_server", "--port", str(port)],
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        # An empty cache: the demo is not installed there, and nothing may start installing it.
        env = cli_env(SYNTHGEN_CACHE=str(tmp_path / "cache"))
        result = ws.run("--server-url", url, "--launch-server", "demo", env=env, timeout=DEADLINE)
        assert result.returncode == 3, result.stderr
        assert (
            result.stderr.strip()
            .splitlines()[-1]
            .startswith(
                f"run_inference.py: error: another SGLang server is starting on port {port} (pid {loading.pid}: "
            )
        )
        assert "rerun once it answers (this run then uses it), or pass another --server-url port" in result.stderr
        assert not (tmp_path / "cache").exists() and not launched_pgids(result.stderr)
    finally:
        loading.kill()
        loading.wait()
