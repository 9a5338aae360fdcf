"""The launched server's bounded log (the pump) and the checks a launch record must pass before any
signal, in process: pipes, a `sleep` and a listening socket of this test."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from synthgen.launch import record as rec
from synthgen.launch.logpump import BoundedLog, mask, pump, remember_secret
from synthgen.launch.procs import describe_process, port_listeners


def pumped(tmp_path: Path, data: bytes, cap: int) -> tuple[str, str]:
    source = tmp_path / "output"
    source.write_bytes(data)
    log = tmp_path / "server.log"
    fd = os.open(source, os.O_RDONLY)
    try:
        pump(fd, BoundedLog(log, cap))
    finally:
        os.close(fd)
    older = log.with_name("server.log.1")
    return log.read_text(), older.read_text() if older.exists() else ""


def test_the_log_moves_aside_at_its_cap_so_two_files_never_hold_more_than_twice_the_cap(tmp_path):
    lines = b"".join(b"line %05d " % i + b"." * 80 + b"\n" for i in range(2000))  # about 180 kB
    text, older = pumped(tmp_path, lines, cap=10_000)
    assert len(text.encode()) <= 10_000 and len(older.encode()) <= 10_000
    assert text.splitlines()[0].endswith("the log before is in server.log.1")
    assert text.splitlines()[-1].startswith("line 01999 ")  # the newest lines are kept


def test_keys_are_masked_in_every_line_the_server_prints_also_a_last_line_without_a_newline(tmp_path):
    remember_secret("run-key-0123456789")
    data = (
        b"ServerArgs(model_path='m', api_key='s3cret-value', port=1)\n"
        b"args: --api-key s3cret-value --port 1\n"
        b"the run's own key: run-key-0123456789\n"
        b"no newline --api-key=s3cret-value"
    )
    text, _ = pumped(tmp_path, data, cap=1_000_000)
    assert "s3cret-value" not in text and "run-key-0123456789" not in text
    assert "api_key='***'" in text and "--api-key *** --port 1" in text and text.endswith("--api-key=***\n")


def test_a_line_longer_than_the_cap_is_cut_and_a_long_line_is_masked_in_bounded_pieces(tmp_path):
    # One line of 200,000 characters, a key at its end: redact() on it whole would take minutes.
    line = b"token " + b"x1" * 100_000 + b" --api-key s3cret-value, port=1\n"
    text, older = pumped(tmp_path, line, cap=500_000)
    assert text.endswith("--api-key *** port=1\n") and len(text) > 200_000 and older == ""
    (tmp_path / "cut").mkdir()
    text, older = pumped(tmp_path / "cut", b"x" * 50_000 + b"\n", cap=8_192)
    assert len(text.encode()) <= 8_192 and older == ""


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True, env={**os.environ, rec.TOKEN_ENV: "t" * 32})
    yield proc
    proc.kill()
    proc.wait()


def test_a_record_the_launcher_wrote_is_trusted_and_one_with_any_other_token_is_not(tmp_path, sleeper):
    path = tmp_path / "launched_server.json"
    rec.write_record(path, sleeper.pid, "t" * 32, "sleep 600", "server")
    record = rec.read_record(path)
    assert record is not None and record.alive() and rec.check_record(record) is None
    data = json.loads(path.read_text())
    for key, value in (("token", "u" * 32), ("token", ""), ("cmdline_sha256", "0" * 64), ("boot_id", "another")):
        path.write_text(json.dumps({**data, key: value}))
        changed = rec.read_record(path)
        assert changed is not None
        assert not changed.alive() or rec.check_record(changed) is not None, key


def test_a_record_of_the_older_format_is_as_good_as_none(tmp_path, sleeper):
    path = tmp_path / "launched_server.json"
    stat = Path(f"/proc/{sleeper.pid}/stat").read_text()
    ticks = int(stat[stat.rfind(")") + 2 :].split()[19])
    old = {"pid": sleeper.pid, "start_ticks": ticks, "command": "x", "name": "server", "started_at": "t"}
    path.write_text(json.dumps(old))
    assert rec.read_record(path) is None


def test_the_port_s_listener_is_found_among_given_pids_and_named_with_its_key_masked():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert port_listeners(port, [os.getpid()]) == [os.getpid()]
        assert port_listeners(port, [1]) == []  # something listens, not among these
    assert port_listeners(port) is None  # nothing listens
    argv = ["sh", "-c", "echo up; sleep 600", "--api-key", "hidden-value"]
    proc = subprocess.Popen(argv, start_new_session=True, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"  # sh runs: its cmdline is its own
        assert describe_process(proc.pid, chars=200) == f"pid {proc.pid}: sh -c echo up; sleep 600 --api-key ***"
    finally:
        proc.kill()
        proc.wait()


CREDENTIAL_SHAPES = [
    "GET http://Zq9value@host/x",
    "http://user:Zq9value@host",
    "url?api_key=Zq9value&b=1",
    "url?x=1&token=Zq9value",
    "url?X-Amz-Signature=Zq9value",
    "args --api-key Zq9value --port 1",
    "args --api_key Zq9value",
    "args --apikey=Zq9value",
    "args --hf-token 'Zq9value'",
    "env API_KEY=Zq9value",
    "env SGLANG_API_KEY=Zq9value",
    "env HF_TOKEN=Zq9value",
    "Authorization: Bearer Zq9value",
    'json {"api_key": "Zq9value"}',
    "ServerArgs(api_key='Zq9value', port=1)",
    "repr password='Zq9value'",
]


@pytest.mark.parametrize("line", CREDENTIAL_SHAPES)
def test_every_credential_shape_redact_knows_is_masked_by_the_pump(line):
    assert "Zq9value" not in mask(line.encode()).decode()


def test_the_servers_ordinary_lines_are_left_as_they_are(tmp_path):
    line = b"[2026-12-02 08:50:45] Decode batch, #running-req: 1, #token: 103, token usage: 0.00, gen throughput\n"
    assert mask(line * 50) == line * 50
