"""What another process sees or is: a second process refused a dataset's lock, the export's pieces imported
alone in a fresh interpreter, a launch record checked against a live process, a port's listener named."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from synthgen.data.store import DatasetStore
from synthgen.launch import record as rec
from synthgen.launch.procs import describe_process, port_listeners


def test_a_second_process_is_refused_with_the_holder_pid(tmp_path):
    store = DatasetStore(tmp_path, "ds")
    store.lock()
    code = (
        "import sys; from synthgen.data.store import DatasetStore; from synthgen.errors import RunLockedError\n"
        f"try: DatasetStore({str(tmp_path)!r}, 'ds').lock()\n"
        "except RunLockedError as e: print(e); sys.exit(4)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 4
    assert f"another run (pid {os.getpid()}) is writing dataset 'ds'" in result.stdout
    store.close()
    again = DatasetStore(tmp_path, "ds")
    again.lock()  # released on close
    again.close()


@pytest.mark.parametrize("module", ["fields", "filters"])
def test_the_rows_pieces_and_the_table_import_on_their_own_without_a_cycle(module):
    done = subprocess.run([sys.executable, "-c", f"import synthgen.export.{module}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


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
