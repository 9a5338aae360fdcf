"""The first hour of a new user: mistakes answered in one line with the
fix, hints that run as printed, runs that end by saying what to do next. Through the real CLI."""

from __future__ import annotations

import io
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from simharness import free_port, sim_command, wait_until
from workspace import BUDGET, REPO, cli_env, last_line

from synthgen.cli.run import main as run_main
from synthgen.demo import commands, install

COMMON = ("--max-tokens", "256", "--concurrency", "4", "--status-interval", "0.2")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--regenerate", "al"), "invalid choice: 'al' (choose from 'last', 'each', 'all'); did you mean all?"),
        (("--partiton", "short"), "unrecognized arguments: --partiton short; did you mean --partition?"),
        (("--max-tokns=64",), "unrecognized arguments: --max-tokns=64; did you mean --max-tokens?"),
    ],
)
def test_a_mistyped_flag_or_value_of_run_inference_is_one_line_with_the_closest_valid_one(ws, args, expected):
    result = ws.run(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert expected in lines[0] and lines[0].startswith("run_inference.py: error: ")
    assert lines[0].endswith("(see run_inference.py --help)")


def test_a_mistyped_flag_of_compute_budget_names_the_closest_flag(ws):
    result = ws.run("--tokens-per-datset", "5M", script=BUDGET)
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        "compute_budget.py: error: unrecognized arguments: --tokens-per-datset 5M; did you mean "
        "--tokens-per-dataset? (see compute_budget.py --help)"
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (
            ("--tool-call-parser", "lfm2"),
            "--tool-call-parser: SGLang 0.5.23 knows the tool-call parser 'lfm2', but this tool does not reproduce "
            "it: LFM2's Python-call reader",
        ),
        (
            ("--reasoning-parser", "beam"),
            "--reasoning-parser: SGLang 0.5.23 knows the reasoning parser 'beam', but this tool does not reproduce",
        ),
        (
            ("--tool-call-parser", "qwen3coder"),
            "--tool-call-parser: 'qwen3coder' is not a tool-call parser of SGLang 0.5.23 (newer than this tool, or "
            "misspelt); did you mean qwen3_coder? (names this tool applies: apertus2509,",
        ),
    ],
)
def test_a_parser_name_this_tool_does_not_apply_is_one_line_saying_why(ws, args, expected):
    ws.dataset("short", "d", 1)
    result = ws.run(*args)
    assert result.returncode == 2, result.stderr
    assert last_line(result.stderr).startswith(f"run_inference.py: error: {expected}"), result.stderr


@pytest.mark.parametrize("flag", ["--server-wait", "--drain-timeout"])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_a_non_finite_wait_is_refused_in_one_line(ws, flag, value):
    ws.dataset("short", "d", 1)
    result = ws.run(flag, value)
    assert result.returncode == 2, result.stderr
    assert last_line(result.stderr) == (
        f"run_inference.py: error: {flag} must be a number of seconds, 0 or more, got {value}"
    )


def test_a_log_file_inside_an_output_dir_that_does_not_exist_yet_is_created(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 3)
    result = ws.run("--server-url", sim.url, "--output-dir", "fresh/out", "--log-file", "fresh/out/run.log", *COMMON)
    assert result.returncode == 0, result.stderr
    log = (ws.root / "fresh" / "out" / "run.log").read_text()
    assert "done 3/3" in log
    ws.outputs = ws.root / "fresh" / "out"
    ws.assert_exactly_once("d", ids)


def run_as_printed(ws, command: str):
    """A command line the run printed, run as a user pastes it (python = this interpreter)."""
    argv = shlex.split(command)
    assert argv[0] == "python", command
    return subprocess.run(
        [sys.executable, str(REPO / argv[1]), *argv[2:]],
        cwd=ws.root,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_a_run_ends_with_where_the_rows_are_and_an_export_command_that_runs_as_printed(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "alpha", 3)
    ws.dataset("short", "beta", 2)
    ws.dataset("long", "other", 2)  # not run: the export must not ask for it
    result = ws.run("--partition", "short", "--server-url", sim.url, *COMMON)
    assert result.returncode == 0, result.stderr
    last = last_line(result.stderr)
    match = re.fullmatch(r"rows: (.*); report: (.*); export them with: (.*)", last)
    assert match, result.stderr
    assert match.group(1) == "outputs/alpha/raw_responses.jsonl, outputs/beta/raw_responses.jsonl"
    assert (ws.root / match.group(2)).is_file()  # the run's report page
    assert match.group(3) == "python export_training.py --partition short --format tokens --out tokens.jsonl"
    sft = (
        "for SFT trainers, the text re-rendered by the chat template (the export's render check counts the rows "
        "whose text renders to other ids than the model saw): python export_training.py --partition short "
        "--format messages --out sft.jsonl"
    )
    assert result.stderr.splitlines()[-2] == sft
    exported = run_as_printed(ws, match.group(3))
    assert exported.returncode == 0, exported.stderr
    assert len((ws.root / "tokens.jsonl").read_text().splitlines()) == 5
    exported = run_as_printed(ws, sft.split(": ")[-1])
    assert exported.returncode == 0, exported.stderr
    assert len((ws.root / "sft.jsonl").read_text().splitlines()) == 5

    again = ws.run("--partition", "short", "--server-url", sim.url, *COMMON)
    assert again.returncode == 0 and "nothing to do" in again.stderr
    assert last_line(again.stderr) == last  # the rerun that has nothing to do says the same


def test_the_printed_export_command_runs_when_one_dataset_of_the_partition_had_every_prompt_skipped(ws, make_sim):
    # as with the bundled prompts/short, --regenerate all skips every tool conversation: that
    # dataset has no results file, and the printed `--partition short` export used to exit 2 ("run it first").
    sim = make_sim("chatml")
    ws.dataset("short", "alpha", 2)
    tools = [orjson.loads(line) for line in (REPO / "prompts/short/agent_tools.jsonl").read_bytes().splitlines()]
    ws.dataset("short", "tools", tools)
    result = ws.run("--partition", "short", "--regenerate", "all", "--server-url", sim.url, *COMMON)
    assert "tools: 3 prompts skipped (cannot_regenerate)" in result.stderr, result.stderr
    command = re.search(r"export them with: (.*)", result.stderr).group(1)
    exported = run_as_printed(ws, command)
    assert exported.returncode == 0, exported.stderr
    assert len((ws.root / "tokens.jsonl").read_text().splitlines()) == 2
    assert (
        "note: tools: no results (outputs/tools/raw_responses.jsonl), left out: not run yet, or every prompt was "
        "skipped (see outputs/tools/errors.jsonl)"
    ) in exported.stderr.splitlines()


def test_failed_prompts_end_with_the_rerun_command_with_the_api_key_left_out(ws, make_sim):
    # The simulator's context is 256 tokens; --max-seq-len 100000 sends the long prompt, which it rejects.
    sim = make_sim("chatml", "--context-length", "256")
    ws.dataset("short", "d", [{"id": "ok", "prompt": "short"}, {"id": "long", "prompt": "word " * 400}])
    args = ("--server-url", sim.url, "--max-seq-len", "100000", "--max-tokens", "16", "--api-key", "s3cret")
    result = ws.run(*args)
    assert result.returncode == 1, result.stderr
    expected = (
        f"WARNING: 1 prompt failed (see outputs/d/errors.jsonl); rerun to retry them: python run_inference.py "
        f'--server-url {sim.url} --max-seq-len 100000 --max-tokens 16 --api-key "$SGLANG_API_KEY"'
    )
    assert expected in result.stderr.splitlines()
    assert "s3cret" not in result.stderr


def test_on_a_terminal_the_bar_is_closed_before_the_summary(ws, make_sim, monkeypatch):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 4)
    monkeypatch.chdir(ws.root)
    out = io.StringIO()
    code = run_main(["--server-url", sim.url, *COMMON], stream=out, tty=True)
    assert code == 0, out.getvalue()
    text = out.getvalue()
    bar_end = text.rfind("4/4")  # the bar's last drawing
    assert 0 <= bar_end < text.index("TOTAL"), text


def test_the_budget_hint_runs_as_printed_when_the_other_partition_and_an_unmeasured_dataset_exist(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "chat", 4)
    ws.dataset("short", "math", 3)  # no estimate: no entry in the file
    ws.dataset("long", "other", 2)  # another partition: no entry either
    planned = ws.run(
        "--partition",
        "short",
        "--avg-tokens",
        "chat=100",
        "--tokens-per-dataset",
        "250",
        "--out",
        "budget.json",
        script=BUDGET,
    )
    assert planned.returncode == 0, planned.stderr
    hint = last_line(planned.stderr).split("use it with: ", 1)[1]
    assert hint == "python run_inference.py --partition short --dataset chat --budget budget.json"
    result = run_as_printed(ws, f"{hint} --server-url {sim.url} {' '.join(COMMON)}")
    assert result.returncode == 0, result.stderr
    assert len(ws.results("chat")) == 2 and not (ws.outputs / "math").exists()


NEVER_STARTED = f"{sys.executable} -c \"raise SystemExit('must not be started')\""


def test_a_dry_run_with_a_tokenizer_needs_no_server_and_launches_none(ws, tokenizers, tmp_path):
    ws.dataset("short", "d", 2)
    result = ws.run(
        "--dry-run",
        "--tokenizer",
        str(tokenizers["chatml"]),
        "--max-seq-len",
        "512",
        "--server-url",
        "http://127.0.0.1:9",
        "--launch-server",
        NEVER_STARTED,
    )
    assert result.returncode == 0, result.stderr
    assert "first request (d / d-0000): POST http://127.0.0.1:9/generate" in result.stderr
    assert "context length: 512" in result.stderr
    assert "started server" not in result.stderr and not (ws.outputs / "server.log").exists()


def test_a_dry_run_without_a_server_or_tokenizer_says_what_it_needs(ws):
    ws.dataset("short", "d", 1)
    result = ws.run("--dry-run", "--server-url", "http://127.0.0.1:9")
    assert result.returncode == 3
    assert last_line(result.stderr).endswith(
        "; a dry run without a server needs --tokenizer PATH (and --max-seq-len N)"
    ), result.stderr


def test_nothing_to_do_is_answered_before_any_server_is_launched_also_in_a_dry_run(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 2)
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    for extra in ((), ("--dry-run",)):
        result = ws.run("--server-url", "http://127.0.0.1:9", *COMMON, "--launch-server", NEVER_STARTED, *extra)
        assert result.returncode == 0, result.stderr
        assert "nothing to do" in result.stderr and "started server" not in result.stderr
    assert not (ws.outputs / "server.log").exists()


# --- the demo install: errors that name the cause and the fix, and a line while a step works ---------------


def fake_demo_cache(tmp_path: Path, python_script: str) -> commands.DemoPaths:
    """A cache whose venv 'python' is a shell script, so install steps run real processes fast."""
    paths = commands.DemoPaths(tmp_path / "real-sglang")
    paths.python.parent.mkdir(parents=True)
    paths.python.write_text("#!/bin/sh\n" + python_script)
    paths.python.chmod(0o755)
    return paths


def test_an_unreachable_index_is_named_as_the_cause_with_the_mirror_fix_not_as_a_missing_version(tmp_path):
    # What pip prints when DNS fails: the cause only in a retry warning, then a misleading "no matching".
    pip = (
        "echo \"WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError(': "
        "Failed to establish a new connection: [Errno -2] Name or service not known')'\"\n"
        'echo "ERROR: No matching distribution found for torch==2.13.0+cpu"\nexit 1\n'
    )
    paths = fake_demo_cache(tmp_path, pip)
    with pytest.raises(install.DemoSetupError) as info:
        install.demo_command(30123, paths=paths)
    message = str(info.value)
    # The cause and the fix first, short; the step, its exit and the log after; pip's lines stay in the log.
    assert "\n" not in message and len(message.replace(str(paths.setup_log), "LOG")) < 360, message
    assert message.startswith(
        "the demo SGLang server could not be installed: a package index could not be reached "
        "(Name or service not known). Fix: point pip at a mirror or proxy it can reach (PIP_INDEX_URL, "
    )
    assert message.endswith(
        f"then retry (torch (CPU wheel) from {install.PYTORCH_CPU_INDEX} failed with exit 1; "
        f"full output in {paths.setup_log})"
    )
    assert "WARNING" not in message and "No matching distribution" not in message


def test_a_full_disk_is_named_as_the_cause_with_synthgen_cache_as_the_fix(tmp_path):
    paths = fake_demo_cache(tmp_path, 'echo "ERROR: [Errno 28] No space left on device"\nexit 1\n')
    with pytest.raises(install.DemoSetupError) as info:
        install.demo_command(30123, paths=paths)
    assert str(info.value).startswith(
        "the demo SGLang server could not be installed: the disk is full. Fix: free about 4 GB, or set "
        "SYNTHGEN_CACHE=/path/with/room"
    )


@pytest.mark.parametrize(("system", "machine"), [("darwin", "arm64"), ("linux", "aarch64"), ("win32", "AMD64")])
def test_the_demo_says_it_runs_on_linux_x86_64_only_before_installing_anything(tmp_path, system, machine):
    paths = commands.DemoPaths(tmp_path / "real-sglang")
    with pytest.raises(install.DemoSetupError, match=r"^--launch-server demo runs on Linux x86_64 only"):
        install.preflight(paths, system, machine)
    install.preflight(paths, "linux", "x86_64")  # this one is fine


def test_a_long_install_step_says_it_is_still_working(tmp_path, monkeypatch):
    # The step ends only once a "still working" line was said: no race with the clock.
    flag = tmp_path / "heard"
    paths = fake_demo_cache(tmp_path, f"while [ ! -e {flag} ]; do sleep 0.01; done\nexit 1\n")
    monkeypatch.setattr(install, "HEARTBEAT", 0.05)
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if "still working" in line:
            flag.touch()

    with pytest.raises(install.DemoSetupError):
        install.demo_command(30123, say=say, paths=paths)
    assert any(
        re.fullmatch(
            r"demo server:   torch \(CPU wheel\): configured indexes: still working, \d+ s \(log .*setup\.log\)", s
        )
        for s in said
    ), said


def test_the_lock_file_of_a_finished_run_says_it_is_free_not_a_pid(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 1)
    result = ws.run("--server-url", sim.url, *COMMON)
    assert result.returncode == 0, result.stderr
    text = (ws.outputs / "d" / ".lock").read_text()
    assert re.fullmatch(r"free: the run with pid \d+ ended at \S+\n", text), text


def test_the_export_says_which_flag_brings_back_rows_cut_at_max_tokens(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 3)
    result = ws.run("--server-url", sim.url, "--max-tokens", "3", "--concurrency", "2")
    assert result.returncode == 0, result.stderr
    command = re.search(r"export them with: (.*)", result.stderr).group(1)
    exported = run_as_printed(ws, command)
    assert exported.returncode == 2  # nothing kept
    assert "note: 3 rows dropped as truncated: finish_reason length; --keep-truncated keeps them" in exported.stderr
    assert run_as_printed(ws, command + " --keep-truncated").returncode == 0
    # Cut before any answer: SpecForge's validator refuses those rows, the export says so and what keeps them.
    kept = run_as_printed(ws, command.replace("--format tokens", "--format specforge") + " --keep-truncated")
    assert kept.returncode == 2
    assert "note: 3 rows dropped as cut_empty: kept by --keep-truncated but SpecForge's validator" in kept.stderr


def test_the_summary_of_a_launched_server_run_shows_the_start_up_apart(ws, tokenizers):
    port = free_port()
    ws.dataset("short", "d", 2)
    result = ws.run(
        "--server-url",
        f"http://127.0.0.1:{port}",
        *COMMON,
        "--launch-server",
        sim_command(tokenizers["chatml"], port),
    )
    assert result.returncode == 0, result.stderr
    line = r"\nnot in these figures: (\S+) before the first request \(server start-up (\S+), then asking the server "
    assert re.search(line + r"and loading the tokenizer (\S+)\)\n", result.stderr), result.stderr


def test_a_second_signal_cancels_as_many_requests_in_flight_as_the_first_said_it_waits_for(ws, make_sim):
    # --regenerate each: later turns wait for earlier ones as tasks that hold no request; they are not "in flight".
    sim = make_sim("chatml")
    rows = [{"id": f"c{i}", "messages": [
        {"role": "user", "content": f"q{i}a"}, {"role": "assistant", "content": "a"},
        {"role": "user", "content": f"q{i}b"}, {"role": "assistant", "content": "b"},
    ]} for i in range(6)]  # fmt: skip
    ws.dataset("short", "d", rows)
    sim.pause()  # every request is held: the run is certainly mid-way when the signals come
    log = ws.root / "run.log"
    proc = ws.start(
        "--server-url", sim.url, "--regenerate", "each", "--concurrency", "2", "--max-tokens", "64",
        "--drain-timeout", "600", "--keep-partials", "off", "--log-file", str(log),
    )  # fmt: skip
    wait_until(lambda: sim.stats()["in_flight"] >= 2, timeout=120, what="two requests held by the server")
    proc.send_signal(signal.SIGINT)
    wait_until(lambda: log.exists() and "SIGINT: no new requests" in log.read_text(), timeout=60)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    text = log.read_text()
    waited = re.search(r"waiting up to \S+ for (\d+) in flight", text)
    cancelled = re.search(r"ending (\d+) requests in flight and (\d+) waiting to be sent", text)
    assert waited and cancelled, text
    assert waited.group(1) == cancelled.group(1) == "2" and int(cancelled.group(2)) > 0
