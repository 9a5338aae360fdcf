"""Faults outside the runner: file names and folders, descriptors, output files,
progress on a closed stream, arguments, the budget file. Each test failed before its fix."""

from __future__ import annotations

import ctypes
import io
import os
import resource
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import orjson
import pytest
from simharness import wait_until
from tallies import answered, watched
from workspace import REPO, RUN, Workspace, cli_env, last_line

from synthgen.budget.plan import fmt_hours, fmt_number
from synthgen.config import RunConfig
from synthgen.data.openfiles import FilePool
from synthgen.data.prompts import DatasetSource, PromptReader, scan_dataset
from synthgen.data.readers import base as readers_base
from synthgen.data.readers.base import READ_POOL
from synthgen.data.records import ResultRecord
from synthgen.data.store import WRITE_POOL, DatasetStore
from synthgen.errors import RunLockedError, StoreWriteError, UsageError
from synthgen.run.progress import Progress

FAST = ("--max-tokens", "4", "--status-interval", "5")


def without_root_powers() -> None:
    """In the child: drop the capabilities that let root ignore file permissions (no-op for a user)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        libc.prctl(24, capability, 0, 0, 0)  # PR_CAPBSET_DROP: takes effect at exec


def run_cli(
    ws: Workspace, *args: str, preexec=without_root_powers, script: Path = RUN, timeout: float = 300
) -> subprocess.CompletedProcess:
    return ws.run(*args, script=script, timeout=timeout, preexec=preexec)


# --- D10: descriptors -------------------------------------------------------------------------------
def test_a_partition_of_2000_datasets_runs_under_ulimit_n_1024(ws, make_sim):
    sim = make_sim("chatml")
    folder = ws.prompts / "many"
    folder.mkdir(parents=True)
    for i in range(2000):
        (folder / f"ds{i:04d}.jsonl").write_bytes(orjson.dumps({"id": "a", "prompt": f"q {i}"}) + b"\n")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    result = run_cli(
        ws, "--partition", "many", "--server-url", sim.url, "--concurrency", "64", *FAST, preexec=limit, timeout=600
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert sim.stats()["generate_requests"] == 2000
    for i in (0, 999, 1999):
        assert [r["id"] for r in ws.rows(f"ds{i:04d}")] == ["a"]


def test_readers_share_a_few_open_files_and_reopen_after_close(tmp_path, monkeypatch):
    sources = []
    for i in range(6):
        path = tmp_path / f"d{i}.jsonl"
        path.write_bytes(b'{"id": "x", "prompt": "p"}\n{"id": "y", "prompt": "q"}\n')
        sources.append(DatasetSource(f"d{i}", "p", path))
    # A pool of its own: readers other tests left open must not count here.
    pool: FilePool = FilePool(READ_POOL.capacity, lambda fh: fh.close())
    monkeypatch.setattr(readers_base, "READ_POOL", pool)
    readers = [PromptReader(scan_dataset(s)) for s in sources]
    for reader in readers:
        assert reader.read("y").id == "y"
    assert len(pool) <= pool.capacity
    for reader in readers:
        reader.close()
    assert len(pool) == 0
    assert readers[0].read("x").messages[-1]["content"] == "p"
    readers[0].close()


def test_a_full_pool_closes_the_least_recently_used_file():
    closed: list[str] = []
    pool: FilePool[str] = FilePool(2, closed.append)
    for key in ("a", "b", "a", "c"):
        with pool.use(key, lambda key=key: key):
            pass
    assert closed == ["b"] and len(pool) == 2


def test_too_many_open_files_names_ulimit_not_the_input_file(tmp_path, monkeypatch):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"id": "x", "prompt": "p"}\n')
    index = scan_dataset(DatasetSource("d", "p", path))

    def no_descriptors(*args, **kwargs):
        raise OSError(24, "Too many open files")

    monkeypatch.setattr(os, "open", no_descriptors)  # input files are opened with os.open (O_NONBLOCK)
    with pytest.raises(UsageError, match=r"too many open files \(this process; ulimit -n is \d+\); raise the limit"):
        PromptReader(index).read("x")
    with pytest.raises(UsageError, match="ulimit -n"):
        scan_dataset(index.source)


# --- D12 / D11: names and folders ------------------------------------------------------------------
@pytest.mark.parametrize("file_name, name", [("..jsonl", "."), ("...jsonl", ".."), (".jsonl", "")])
def test_a_file_whose_name_is_dots_or_nothing_is_refused_in_one_line(ws, make_sim, file_name, name):
    sim = make_sim("chatml")
    ws.dataset("short", "ok", 1)
    (ws.prompts / "short" / file_name).write_bytes(b'{"id": "x", "prompt": "p"}\n')
    result = run_cli(ws, "--partition", "short", "--server-url", sim.url, *FAST)
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        f"run_inference.py: error: prompts/short/{file_name}: the dataset name {name!r} "
        f"{'is empty' if not name else 'is made of dots only'}, so it cannot name an output folder; "
        "rename the file (e.g. to prompts/short/data.jsonl)"
    )
    assert sim.stats()["generate_requests"] == 0
    assert sorted(p.name for p in ws.root.iterdir()) == ["prompts"]  # nothing written beside outputs/


def test_hidden_and_macos_resource_files_are_not_datasets(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "real", 2)
    (ws.prompts / "short" / ".hidden.jsonl").write_bytes(b'{"id": "x", "prompt": "p"}\n')
    (ws.prompts / "short" / "._real.jsonl").write_bytes(b"\x00\x05\x16\x07 not json")
    result = run_cli(ws, "--partition", "short", "--server-url", sim.url, *FAST)
    assert result.returncode == 0, result.stderr
    ws.assert_exactly_once("real", ids)
    assert sorted(p.name for p in ws.outputs.iterdir() if p.is_dir()) == ["real"]


@pytest.mark.parametrize("partition", ["..", "/etc", "short/../..", "", "."])
def test_a_partition_that_is_a_path_is_refused_in_one_line(ws, partition):
    ws.dataset("short", "d", 1)
    result = run_cli(ws, "--partition", partition, "--server-url", "http://127.0.0.1:9")
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        f"run_inference.py: error: --partition {partition!r}: give the name of one folder "
        "under prompts (e.g. short) or 'all', not a path"
    )


def test_an_unreadable_partition_folder_is_reported_as_unreadable(ws):
    ws.dataset("short", "d", 1)
    (ws.prompts / "short").chmod(0o300)
    try:
        result = run_cli(ws, "--partition", "short", "--server-url", "http://127.0.0.1:9")
    finally:
        (ws.prompts / "short").chmod(0o755)
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        "run_inference.py: error: prompts/short: cannot list the partition folder "
        "(Permission denied); make it readable (chmod u+rx prompts/short)"
    )


def test_an_unreadable_prompts_folder_is_one_line_not_a_traceback(ws):
    ws.dataset("short", "d", 1)
    ws.prompts.chmod(0o300)
    try:
        result = run_cli(ws, "--partition", "all", "--server-url", "http://127.0.0.1:9")
    finally:
        ws.prompts.chmod(0o755)
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        "run_inference.py: error: prompts: cannot list the prompts directory "
        "(Permission denied); make it readable (chmod u+rx prompts)"
    )


# --- D9 / D11 / D12: output files -------------------------------------------------------------------
def done_row(rid: str) -> bytes:
    return orjson.dumps({"id": rid, "completion_tokens": 3, "content": "old"}) + b"\n"


def test_a_byte_order_mark_does_not_make_the_first_done_row_unreadable(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 3)
    (ws.outputs / "d").mkdir(parents=True)
    (ws.outputs / "d" / "raw_responses.jsonl").write_bytes(b"\xef\xbb\xbf" + done_row(ids[0]))
    result = run_cli(ws, "--server-url", sim.url, *FAST)
    assert result.returncode == 0, result.stderr
    assert "1 already done" in result.stderr and "unreadable" not in result.stderr
    assert sim.stats()["generate_requests"] == 2


@pytest.mark.parametrize("name", ["raw_responses.jsonl", "errors.jsonl"])
def test_an_output_file_that_is_a_folder_is_one_line_exit_5(ws, make_sim, name):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 2)
    (ws.outputs / "d" / name).mkdir(parents=True)
    result = run_cli(ws, "--server-url", sim.url, *FAST)
    assert result.returncode == 5
    assert last_line(result.stderr).startswith(f"run_inference.py: error: outputs/d/{name}: ")
    assert last_line(result.stderr).endswith("it is a folder: move it aside and rerun")
    assert sim.stats()["generate_requests"] == 0


def test_an_unreadable_results_file_is_one_line_exit_5(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 2)
    path = ws.outputs / "d" / "raw_responses.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    path.chmod(0o200)
    result = run_cli(ws, "--server-url", sim.url, *FAST)
    assert result.returncode == 5
    assert last_line(result.stderr) == (
        "run_inference.py: error: outputs/d/raw_responses.jsonl: cannot read the results file (Permission denied); "
        "make it readable and writable (chmod u+rw outputs/d/raw_responses.jsonl) and rerun"
    )


@pytest.mark.parametrize("name", ["raw_responses.jsonl", "errors.jsonl"])
def test_a_read_only_output_file_is_found_before_any_request_is_sent(ws, make_sim, name):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 3)
    folder = ws.outputs / "d"
    folder.mkdir(parents=True)
    (folder / "raw_responses.jsonl").write_bytes(done_row(ids[0]))
    (folder / "errors.jsonl").write_bytes(b"")
    (folder / name).chmod(0o444)
    result = run_cli(ws, "--server-url", sim.url, *FAST)
    assert result.returncode == 5
    assert last_line(result.stderr) == (
        f"run_inference.py: error: outputs/d/{name}: cannot open for writing "
        f"(Permission denied); make it writable (chmod u+w outputs/d/{name}) and rerun"
    )
    assert sim.stats()["generate_requests"] == 0


def test_a_read_only_lock_file_is_named_as_the_lock_file(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 1)
    lock = ws.outputs / "d" / ".lock"
    lock.parent.mkdir(parents=True)
    lock.write_bytes(b"")
    lock.chmod(0o444)
    result = run_cli(ws, "--server-url", sim.url, *FAST)
    assert result.returncode == 5
    assert last_line(result.stderr) == (
        "run_inference.py: error: outputs/d/.lock: cannot open the lock file "
        "(Permission denied); make it writable (chmod u+rw outputs/d/.lock) or remove it"
    )


def test_an_error_row_whose_id_is_a_list_does_not_crash_the_run(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 2)
    (ws.outputs / "d").mkdir(parents=True)
    (ws.outputs / "d" / "errors.jsonl").write_bytes(b'{"id": ["x"], "status": "failed"}\n')
    result = run_cli(ws, "--server-url", sim.url, *FAST)
    assert result.returncode == 0, result.stderr
    ws.assert_exactly_once("d", ids)


def test_a_dry_run_says_what_it_would_do_to_a_torn_line_and_does_nothing(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 2)
    path = ws.outputs / "d" / "raw_responses.jsonl"
    path.parent.mkdir(parents=True)
    content = done_row(ids[0]) + b'{"id": "d-0001", "con'
    path.write_bytes(content)
    result = run_cli(ws, "--server-url", sim.url, "--dry-run", *FAST)
    assert result.returncode == 0, result.stderr
    assert "would move a torn last line (21 bytes) to raw_responses.jsonl.torn" in result.stderr
    assert "moved a torn" not in result.stderr.replace("would move a torn", "")
    assert path.read_bytes() == content and not (path.parent / "raw_responses.jsonl.torn").exists()


def test_the_locks_of_many_datasets_take_one_descriptor_and_still_exclude_each_other(tmp_path):
    before = len(os.listdir("/proc/self/fd"))
    stores = [DatasetStore(tmp_path, f"d{i}") for i in range(50)]
    for store in stores:
        store.lock()
    assert len(os.listdir("/proc/self/fd")) - before <= 1
    with pytest.raises(RunLockedError, match=f"another run \\(pid {os.getpid()}\\) is writing dataset 'd7'"):
        DatasetStore(tmp_path, "d7").lock()
    for store in stores:
        store.close()
    assert len(os.listdir("/proc/self/fd")) == before
    again = DatasetStore(tmp_path, "d7")
    again.lock()
    again.close()


def test_appends_to_many_datasets_keep_few_descriptors_and_every_line(tmp_path):
    stores = [DatasetStore(tmp_path, f"d{i}") for i in range(WRITE_POOL.capacity + 20)]
    for round_ in range(2):
        for store in stores:
            store.append_result(ResultRecord.from_dict({"id": f"p{round_}", "content": ""}))
    assert len(WRITE_POOL) <= WRITE_POOL.capacity
    for store in stores:
        store.close()
    assert len(WRITE_POOL) == 0
    for store in stores:
        assert [orjson.loads(x)["id"] for x in store.results_path.read_bytes().splitlines()] == ["p0", "p1"]


def test_a_missing_output_folder_that_cannot_be_created_is_a_store_error(tmp_path):
    (tmp_path / "file").write_bytes(b"")
    with pytest.raises(StoreWriteError, match="cannot create the output folder"):
        DatasetStore(tmp_path / "file", "d").lock()


# --- D5 / D12: progress -------------------------------------------------------------------------------
def test_a_run_whose_stderr_reader_goes_away_still_finishes_every_prompt(ws, make_sim):
    sim = make_sim("chatml", "--token-delay", "0.02")
    ids = ws.dataset("short", "d", 24)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(RUN),
            "--server-url",
            sim.url,
            "--max-tokens",
            "16",
            "--concurrency",
            "2",
            "--status-interval",
            "0.05",
        ],
        cwd=ws.root,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    proc.stderr.readline()  # as `| head -1` does
    wait_until(lambda: sim.stats()["generate_requests"] >= 1, timeout=120, what="the run to be sending")
    proc.stderr.close()
    assert proc.wait(timeout=300) == 0
    ws.assert_exactly_once("d", ids)


def test_progress_writes_to_a_closed_pipe_never_raise_and_the_log_goes_on(tmp_path):
    read_end, write_end = os.pipe()
    os.close(read_end)
    stream = os.fdopen(write_end, "w")
    log = tmp_path / "run.log"
    progress = Progress(2, stream, 1.0, log, tty=False)
    tally = watched(progress)
    progress.start(2)
    progress.print_block("plan")
    progress.message("first")
    answered(progress, tally, 5)
    progress.tick()
    progress.message("second")
    progress.close()
    stream.close()  # the descriptor now points at /dev/null: closing flushes without an error
    text = log.read_text()
    assert "plan" in text and "first" in text and "second" in text and "done 1/2" in text


def test_a_tty_bar_on_a_closed_stream_never_raises(tmp_path):
    stream = io.StringIO()
    log = tmp_path / "run.log"
    progress = Progress(3, stream, 1.0, log, tty=True)
    tally = watched(progress)
    progress.start(3)
    assert progress._bar is not None  # a real tqdm bar is drawn on the "terminal"
    stream.close()
    answered(progress, tally, 1)  # the bar's update hits the closed stream: the bar is given up, nothing raises
    progress.message("after")
    progress.tick()
    progress.budget_closed("d", 10, 5, 0, 1)
    progress.print_block("summary")
    progress.close()
    assert progress._bar is None and not progress._stream_ok
    logged = log.read_text()
    assert "after" in logged and "summary" in logged  # the log file is still written
    assert "done 1/" in logged


def test_the_total_and_eta_stay_sane_after_a_token_budget_closes():
    progress = Progress(10, io.StringIO(), 1.0, None, tty=False)
    tally = watched(progress)
    progress.start(10)
    for _ in range(3):
        answered(progress, tally, 4)
    tally.in_flight += 1
    progress.budget_closed("d", 10, 12, 1, 50)  # more withdrawn than is left: the caller miscounted
    assert progress.total == 4  # 3 done + 1 in flight
    assert "done 3/4 (75.0%)" in progress.status_line()
    # 3 answers in no time: too few to give a rate, so the ETA is still being estimated, never negative
    assert progress.eta() is None and "ETA estimating" in progress.status_line()
    tally.in_flight -= 1
    answered(progress, tally, 4)
    assert progress.eta() == 0.0


def test_the_bar_total_follows_a_closed_budget():
    progress = Progress(10, io.StringIO(), 1.0, None, tty=True)
    tally = watched(progress)
    progress.start(10)
    answered(progress, tally, 1)
    progress.budget_closed("d", 10, 5, 0, 4)
    assert progress._bar is not None and progress._bar.total == 6
    progress.close()


# --- D9 / D11: arguments --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url, problem",
    [
        ("http://127.0.0.1:99999", "port 99999 is not between 1 and 65535"),
        ("http://[::1", "is not a valid URL (Invalid port: ':1'); e.g. http://127.0.0.1:30000"),
        ("http://", "has no host; e.g. http://127.0.0.1:30000"),
    ],
)
def test_a_server_url_that_cannot_be_used_is_one_line_exit_2(ws, url, problem):
    ws.dataset("short", "d", 1)
    result = run_cli(ws, "--server-url", url)
    assert result.returncode == 2
    assert last_line(result.stderr).startswith(f"run_inference.py: error: --server-url '{url}'")
    assert last_line(result.stderr).endswith(problem)


def test_a_password_in_the_server_url_is_never_printed_by_the_argument_check(ws):
    ws.dataset("short", "d", 1)
    result = run_cli(ws, "--server-url", "http://user:s3cret@[::1")
    assert result.returncode == 2
    assert "s3cret" not in result.stderr and "user:***@" in result.stderr


def test_display_url_hides_the_password_and_a_user_part_that_may_be_a_token():
    assert RunConfig(server_url="http://u:pw@h:8/x").display_url == "http://u:***@h:8/x"
    assert RunConfig(server_url="https://h:8/a@b").display_url == "https://h:8/a@b"
    assert RunConfig(server_url="http://u@h").display_url == "http://***@h"  # a token as the user


def test_an_api_key_with_a_trailing_newline_is_used_without_it(ws, make_sim):
    sim = make_sim("chatml", "--api-key", "k3y")
    ids = ws.dataset("short", "d", 2)
    result = run_cli(ws, "--server-url", sim.url, "--api-key", "k3y\n", *FAST)
    assert result.returncode == 0, result.stderr
    ws.assert_exactly_once("d", ids)


def test_a_non_ascii_api_key_is_one_line_exit_2(ws):
    ws.dataset("short", "d", 1)
    result = run_cli(ws, "--server-url", "http://127.0.0.1:9", "--api-key", "clé")
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        "run_inference.py: error: the API key ($SGLANG_API_KEY or --api-key) has a character "
        "an HTTP header cannot carry (non-ASCII or a control character); check it for a "
        "stray character"
    )
    assert "clé" not in result.stderr


@pytest.mark.parametrize("tokenizer", ["models/missing", "a/b/c", ".tok"])
def test_a_tokenizer_that_can_only_be_a_local_path_fails_at_once(ws, make_sim, tokenizer):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 1)
    (ws.root / "models").mkdir()
    result = run_cli(ws, "--server-url", sim.url, "--tokenizer", tokenizer, *FAST)
    assert result.returncode == 2
    assert last_line(result.stderr).startswith(f"run_inference.py: error: tokenizer folder {tokenizer} not found; ")


@pytest.mark.parametrize("script, prog", [(RUN, "run_inference.py"), (REPO / "compute_budget.py", "compute_budget.py")])
def test_ctrl_c_during_the_imports_is_interrupted_exit_130(ws, tmp_path, script, prog):
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name in ('synthgen.cli.run', 'synthgen.cli.budget'):\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
    )
    env = cli_env(PYTHONPATH=str(hook))
    result = subprocess.run(
        [sys.executable, str(script), "--help"],
        cwd=ws.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert (result.returncode, result.stderr) == (130, f"{prog}: interrupted\n")


# --- D12: budget -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_budget_json_gets_the_mode_of_a_normal_file(ws, umask, mode):
    ws.dataset("short", "d", 3)
    result = run_cli(
        ws,
        "--partition",
        "short",
        "--default-avg",
        "100",
        "--out",
        "budget.json",
        script=REPO / "compute_budget.py",
        preexec=lambda: os.umask(umask),
    )
    assert result.returncode == 0, result.stderr
    assert (ws.root / "budget.json").stat().st_mode & 0o777 == mode


def test_small_generation_times_and_rates_do_not_read_zero():
    assert [fmt_hours(h) for h in (0, 0.1 / 3600, 5 / 3600, 0.05, 2)] == ["0 s", "<1 s", "5 s", "3.0 min", "2.0 h"]
    assert [fmt_number(v) for v in (Fraction(1, 25), Fraction(3, 2), 1500)] == ["0.04", "1.5", "1,500"]


@pytest.mark.parametrize("script", ["run_inference.py", "export_training.py", "score_teacher.py", "compute_budget.py"])
def test_a_script_run_outside_its_environment_says_what_to_install_in_one_line(tmp_path, script):
    # -S: no site-packages, as a Python without the requirements (the system's, no venv) has none.
    argv = [sys.executable, "-S", str(REPO / script), "--help"]
    result = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=cli_env())
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"{script}: the Python package ")
    assert "pip install -r requirements.txt" in result.stderr
