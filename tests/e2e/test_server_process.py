"""ServerProcess against real processes: the simulator as the server, and small Python commands
that exit at once, never answer, spawn children or ignore SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from simharness import free_port, sim_argv, wait_until

from synthgen.demo import commands, install
from synthgen.errors import EXIT_SERVER
from synthgen.launch.launcher import (
    ServerLaunchError,
    ServerProcess,
    decide_launch,
    describe_exit,
    restart_delay,
    split_command,
    url_host_port,
)
from synthgen.launch.procs import port_taken
from synthgen.launch.serverlog import short_tail

PY = sys.executable


def health_check(url: str):
    async def is_healthy() -> bool:
        try:
            async with httpx.AsyncClient(timeout=5.0, trust_env=False) as client:
                return (await client.get(url + "/health")).status_code == 200
        except httpx.HTTPError:
            return False

    return is_healthy


def alive_in_group(pgid: int) -> list[str]:
    """Members of the group that ps shows as not dead/zombie: an outside view of 'no orphans'."""
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat="], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if int(line.split()[1]) == pgid and not line.split()[2].startswith("Z")]


def group_is_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    # Only zombies may remain (orphans waiting for a reaper that does not run here): not alive.
    return not alive_in_group(pgid)


@pytest.fixture
def servers():
    """ServerProcesses made by a test; every one is stopped afterwards, whatever happened."""
    made: list[ServerProcess] = []

    def make(*args, **kwargs) -> ServerProcess:
        server = ServerProcess(*args, **kwargs)
        made.append(server)
        return server

    yield make
    for server in made:
        server.stop(grace=5.0)


# -- pure helpers


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 2.0), (2, 4.0), (3, 8.0), (4, 16.0), (5, 30.0), (9, 30.0)],
)
def test_restart_delay_doubles_from_the_initial_delay_up_to_the_cap(attempt, expected):
    assert restart_delay(attempt, initial=2.0, cap=30.0) == expected


def test_short_tail_keeps_the_last_non_empty_lines_on_one_line_and_cuts_long_ones():
    text = "first\n\nsecond\nthird  \n" + "x" * 500 + "\n\n"
    assert short_tail(text, lines=3, line_chars=20) == "second | third | " + "x" * 17 + "..."


def test_describe_exit_names_the_signal_that_killed_a_process():
    assert describe_exit(3) == "code 3"
    assert describe_exit(-9) == "code -9 (killed by SIGKILL)"


def test_split_command_splits_a_shell_style_string_and_keeps_an_argv_list():
    assert split_command("python -m sglang.launch_server --model-path '/m dir' --port 1") == [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m dir",
        "--port",
        "1",
    ]
    assert split_command(["a b", "c"]) == ["a b", "c"]
    with pytest.raises(ServerLaunchError):
        split_command("   ")


def test_url_host_port_falls_back_to_the_schemes_default_port():
    assert url_host_port("http://127.0.0.1:30000") == ("127.0.0.1", 30000)
    assert url_host_port("http://localhost") == ("localhost", 80)
    assert url_host_port("https://example.org/x") == ("example.org", 443)


def test_a_healthy_server_at_the_url_is_used_instead_of_launching_another():
    decision = decide_launch("http://127.0.0.1:30000", healthy=True, port_taken=True)
    assert not decision.launch
    assert decision.message == "a server already answers at http://127.0.0.1:30000; using it instead of launching one"


def test_a_free_port_means_launch():
    assert decide_launch("http://127.0.0.1:30000", healthy=False, port_taken=False).launch


def test_a_port_held_by_something_unhealthy_is_an_error_naming_the_port():
    with pytest.raises(ServerLaunchError, match="port 30000 of http://127.0.0.1:30000 is taken") as info:
        decide_launch("http://127.0.0.1:30000", healthy=False, port_taken=True)
    assert info.value.exit_code == EXIT_SERVER


def test_port_taken_sees_a_listening_socket_and_not_a_closed_port():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert port_taken("127.0.0.1", port)
    assert not port_taken("127.0.0.1", port)


# -- real processes


def test_the_simulator_starts_becomes_ready_and_its_log_gets_a_header(servers, tokenizers, tmp_path):
    port = free_port()
    log = tmp_path / "out" / "server.log"
    server = servers(sim_argv(tokenizers["chatml"], port), log, name="sim")
    server.start()
    seconds = asyncio.run(server.wait_ready(health_check(f"http://127.0.0.1:{port}"), timeout=60))
    assert seconds >= 0
    assert server.exited() is None
    assert httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False).status_code == 200
    header = log.read_text().splitlines()[1]
    assert header.startswith("===== synthgen ") and f": starting sim: {PY} " in header
    server.stop(grace=10)
    assert server.exited() is not None


def test_a_command_that_exits_at_once_fails_with_its_exit_code_and_log_tail(servers, tmp_path):
    code = "import sys; print('loading model'); print('OSError: no such model /nope', flush=True); sys.exit(7)"
    server = servers([PY, "-c", code], tmp_path / "server.log", name="sglang")
    server.start()
    with pytest.raises(ServerLaunchError) as info:
        asyncio.run(server.wait_ready(health_check("http://127.0.0.1:9"), timeout=60))
    message = str(info.value)
    assert message.startswith(f"sglang exited with code 7 before it was ready (log {tmp_path / 'server.log'}): ")
    assert message.endswith("loading model | OSError: no such model /nope")
    assert "\n" not in message
    assert info.value.exit_code == EXIT_SERVER


def test_a_missing_program_fails_at_start_with_one_line(servers, tmp_path):
    server = servers("/nonexistent/sglang-server --port 1", tmp_path / "server.log")
    with pytest.raises(ServerLaunchError, match=r"^could not start server \(/nonexistent/sglang-server\): "):
        server.start()


def test_a_command_that_never_becomes_healthy_times_out_with_its_log_tail(servers, tmp_path):
    code = "import time; print('Loading weights', flush=True); time.sleep(600)"
    server = servers([PY, "-c", code], tmp_path / "server.log", name="sglang")
    server.start()
    wait_until(lambda: server.log_contains("Loading weights"), what="the child's first line")
    statuses: list[str] = []
    with pytest.raises(ServerLaunchError) as info:
        asyncio.run(
            server.wait_ready(
                health_check("http://127.0.0.1:9"),
                timeout=1,
                on_status=statuses.append,
                status_interval=0,
                poll_interval=0.05,
            )
        )
    assert str(info.value) == (f"sglang never became ready within 1 s (log {tmp_path / 'server.log'}): Loading weights")
    # Polled twenty times with a status each time allowed: the unchanged log line is said once, not twenty times.
    assert len(statuses) == 1 and re.fullmatch(r"sglang loading, \d+ s: Loading weights", statuses[0])
    assert server.exited() is None  # left for the caller to stop


def test_a_killed_server_is_restarted_and_ready_again_with_the_exit_code_reported(servers, tokenizers, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    events: list[str] = []
    server = servers(
        sim_argv(tokenizers["chatml"], port),
        tmp_path / "server.log",
        name="sim",
        backoff_initial=0.0,
        on_event=events.append,
    )
    server.start()
    first_pid = server.pid
    asyncio.run(server.wait_ready(health_check(url), timeout=60))
    os.killpg(first_pid, signal.SIGKILL)
    wait_until(lambda: server.exited() is not None, what="the killed server to exit")

    asyncio.run(server.restart("connection refused"))
    asyncio.run(server.wait_ready(health_check(url), timeout=60))

    assert server.pid != first_pid
    assert server.restarts == 1
    assert len(events) == 1
    assert events[0].startswith(
        "sim exited with code -9 (killed by SIGKILL) (connection refused); restart 1/3 in 0 s: "
    )
    assert events[0].endswith('"GET /health HTTP/1.1" 200 -')  # the dead server's last log line
    assert group_is_gone(first_pid)
    assert server.log_path.read_text().count("starting sim") == 2


def test_restarts_beyond_the_limit_raise_with_the_log_tail(servers, tmp_path):
    code = "import sys; print('CUDA out of memory', flush=True); sys.exit(1)"
    events: list[str] = []
    server = servers(
        [PY, "-c", code], tmp_path / "server.log", name="sglang", max_restarts=2, backoff_initial=0.0,
        on_event=events.append,
    )  # fmt: skip

    async def crash_loop() -> None:
        server.start()
        while True:
            try:
                await server.wait_ready(health_check("http://127.0.0.1:9"), timeout=60)
            except ServerLaunchError:
                await server.restart("crashed at start")

    with pytest.raises(ServerLaunchError) as info:
        asyncio.run(crash_loop())
    assert str(info.value) == (
        "sglang exited with code 1 (crashed at start) and was already restarted 2 times; giving up "
        f"(log {tmp_path / 'server.log'}): CUDA out of memory"
    )
    assert [event.split(";")[1].split(" in ")[0] for event in events] == [" restart 1/2", " restart 2/2"]


def test_stop_leaves_no_process_of_the_group_alive_including_children(servers, tmp_path):
    # A leader with two children of its own, like SGLang's scheduler and detokenizer processes.
    code = (
        "import subprocess, sys, time\n"
        "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']) for _ in range(2)]\n"
        "print('children', *[k.pid for k in kids], flush=True)\n"
        "time.sleep(600)\n"
    )
    server = servers([PY, "-c", code], tmp_path / "server.log")
    server.start()
    pgid = server.pid
    assert pgid is not None
    wait_until(lambda: server.log_contains("children"), what="the children to start")
    assert len(alive_in_group(pgid)) == 3

    server.stop(grace=10)

    assert group_is_gone(pgid)
    assert server.exited() == -signal.SIGTERM
    server.stop(grace=10)  # idempotent
    assert group_is_gone(pgid)


def test_stop_kills_a_server_that_ignores_sigterm_after_the_grace_period(servers, tmp_path):
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ignoring SIGTERM', flush=True)\n"
        "time.sleep(600)\n"
    )
    server = servers([PY, "-c", code], tmp_path / "server.log")
    server.start()
    pgid = server.pid
    assert pgid is not None
    wait_until(lambda: server.log_contains("ignoring SIGTERM"), what="the handler to be installed")

    server.stop(grace=0.5)

    assert server.exited() == -signal.SIGKILL
    assert group_is_gone(pgid)


def test_stop_before_start_and_close_with_keep_do_nothing(servers, tmp_path):
    never_started = servers([PY, "-c", "pass"], tmp_path / "a.log")
    never_started.stop()
    assert never_started.exited() is None

    kept = servers([PY, "-c", "import time; time.sleep(600)"], tmp_path / "b.log", keep=True)
    kept.start()
    kept.close()
    assert kept.exited() is None
    kept.stop(grace=5)
    assert kept.exited() == -signal.SIGTERM


# -- the demo server's install and command (synthgen.demo), without installing anything


def fake_cache(tmp_path: Path, python_script: str) -> commands.DemoPaths:
    """A cache whose venv 'python' is a shell script, so install steps run real processes fast."""
    paths = commands.DemoPaths(tmp_path / "real-sglang")
    paths.python.parent.mkdir(parents=True)
    paths.python.write_text("#!/bin/sh\n" + python_script)
    paths.python.chmod(0o755)
    return paths


def test_the_cache_is_under_synthgen_cache_when_set_and_in_the_checkout_otherwise(monkeypatch, tmp_path):
    monkeypatch.setenv(commands.CACHE_ENV, str(tmp_path))
    assert commands.DemoPaths.default().cache == tmp_path / "real-sglang"
    monkeypatch.delenv(commands.CACHE_ENV)
    assert commands.DemoPaths.default().cache == commands.REPO / ".cache" / "real-sglang"


def test_torch_comes_from_the_pytorch_cpu_index_only_when_the_configured_indexes_lack_it():
    assert install.torch_pip_options(configured_has_it=True) == []
    assert install.torch_pip_options(configured_has_it=False) == ["--extra-index-url", install.PYTORCH_CPU_INDEX]


def installed_cache(tmp_path: Path, python_script: str) -> commands.DemoPaths:
    """A fake cache whose install is done (stamp and shim), the tiny model not built."""
    paths = fake_cache(tmp_path, python_script)
    (paths.shim / "sgl_kernel").mkdir(parents=True)
    (paths.shim / "sgl_kernel" / "__init__.py").write_text("")
    paths.stamp.write_text(json.dumps({"spec_hash": install.spec_hash()}))
    return paths


def test_demo_command_on_a_set_up_cache_installs_nothing_and_carries_its_environment(tmp_path):
    paths = installed_cache(tmp_path, "exit 0\n")
    (paths.tiny).mkdir(parents=True)
    (paths.tiny / "config.json").write_text("{}")
    (paths.tiny / "recipe.json").write_text(json.dumps({"tiny_hash": install.tiny_hash()}))
    said: list[str] = []

    argv = install.demo_command(30123, say=said.append, paths=paths)

    assert said == []
    assert argv[:5] == ["env", "-u", "VIRTUAL_ENV", "-u", "PYTHONHOME"]
    assert "SGLANG_USE_CPU_ENGINE=1" in argv and f"PYTHONPATH={paths.shim}" in argv
    server = argv.index(str(paths.python))
    assert argv[server:] == commands.server_command(paths, 30123, extra=install.DEMO_FLAGS)
    assert argv[-2:] == ["--max-running-requests", "64"]
    assert argv[server + 1 : server + 7] == [
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(paths.tiny),
        "--port",
        "30123",
    ]


# The fake python records its arguments; run as the model build (model.py OUT), it writes OUT/config.json.
FAKE_BUILD = (
    'echo "$@" >> "$(dirname "$0")/calls"\ncase "$1" in *model.py) mkdir -p "$2" && echo {} > "$2/config.json";; esac\n'
)


def test_a_changed_model_recipe_rebuilds_only_the_model_with_a_line_saying_how_long_it_took(tmp_path, monkeypatch):
    paths = installed_cache(tmp_path, FAKE_BUILD)
    calls = paths.python.parent / "calls"
    said: list[str] = []

    assert install.setup(paths, said.append) is True
    assert calls.read_text().split() == [str(install.BUILD_TINY), str(paths.tiny) + ".partial"]  # no pip, no venv
    assert said[0] == "building the tiny model 1/1 ..." and re.fullmatch(r"tiny model: done in \d+ s", said[1])
    assert len(said) == 2 and install.is_setup(paths) and paths.tiny.name == f"tiny-v{commands.TINY_VERSION}"
    assert install.setup(paths, said.append) is False and len(said) == 2  # built: nothing to do

    recipe = tmp_path / "demo_model.py"
    recipe.write_text("# another recipe\n")
    monkeypatch.setattr(install, "TINY_SOURCES", (recipe,))
    assert not install.is_setup(paths) and install.is_installed(paths)
    assert install.demo_command(30123, say=said.append, paths=paths)[0] == "env"
    assert said[2] == "demo server: building the tiny model 1/1 ..." and len(said) == 4  # not "first use: installing"
    assert install.is_setup(paths) and len(calls.read_text().splitlines()) == 2


def test_an_install_that_cannot_get_torch_fails_with_one_line_naming_the_step_and_the_fix(tmp_path):
    # Every pip call "fails" the way pip does when no index has the pinned build.
    paths = fake_cache(
        tmp_path, 'echo "WARNING: Retrying (noise)"\necho "ERROR: No matching distribution found for x"\nexit 1\n'
    )
    said: list[str] = []

    with pytest.raises(install.DemoSetupError) as info:
        install.demo_command(30123, say=said.append, paths=paths)

    message = str(info.value)
    assert "\n" not in message
    assert message == (
        "the demo SGLang server could not be installed: ERROR: No matching distribution found for x. Fix: check "
        "network access to the package indexes and about 4 GB free disk, then retry (torch (CPU wheel) from "
        f"{install.PYTORCH_CPU_INDEX} failed with exit 1; full output in {paths.setup_log})"
    )
    assert info.value.exit_code == EXIT_SERVER
    assert re.fullmatch(r"demo server: venv: done in \d+ s", said.pop(2))
    assert said[1:] == [
        "demo server: creating a venv 1/7 ...",
        "demo server: installing torch (CPU wheel) 2/7 ...",
        f"demo server: {install.TORCH} is not on the configured package indexes; taking it from "
        f"{install.PYTORCH_CPU_INDEX}",
    ]
    assert not install.is_setup(paths)
