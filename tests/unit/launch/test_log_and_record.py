"""The launched server's bounded log (the pump) and the masking of secrets, in process. The checks a launch
record must pass before any signal need a live process: tests/e2e/test_other_processes.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from synthgen.launch.logpump import Backlog, BoundedLog, drain, mask, pump, remember_secret


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


def test_output_past_the_backlog_drops_the_oldest_counted_so_the_newest_lines_are_kept():
    backlog = Backlog(cap=10)
    for chunk in (b"aaaa", b"bbbb", b"cccc", b"dddd"):
        backlog.put(chunk)  # nothing takes them: the masking is behind
    backlog.put(None)
    assert [backlog.take() for _ in range(4)] == [8, b"cccc", b"dddd", None]


def test_after_a_drop_only_whole_lines_are_written_so_no_half_key_escapes_the_mask(tmp_path):
    # The cut falls inside a line with a key: its pieces either side of the drop are left out.
    line = b"loading api_key='s3cret-value' " + b"x" * 60 + b"\n"
    backlog = Backlog(cap=3_000)
    data = line * 100
    for start in range(0, len(data), 1_000):  # chunks cut inside lines; nothing takes them until the end
        backlog.put(data[start : start + 1_000])
    backlog.put(None)
    log = tmp_path / "server.log"
    drain(backlog, BoundedLog(log, 1_000_000))
    text, older = log.read_text(), ""
    assert "bytes of the server's output dropped here" in text
    assert "s3cret" not in text + older and "cret-value" not in text + older
    kept = [row for row in (text + older).splitlines() if not row.startswith("=====")]
    assert kept and set(kept) == {"loading api_key='***' " + "x" * 60}


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
