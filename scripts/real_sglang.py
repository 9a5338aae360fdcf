#!/usr/bin/env python3
"""Install and run the real SGLang 0.5.23 server and sglang-router on a CPU-only machine.

This is the "real server" side of the integration tests: the genuine SGLang HTTP layer,
tokenizer manager, scheduler, radix cache and detokenizer, running a tiny randomly initialised
model that scripts/build_tiny_model.py builds offline. Only the API behaviour means anything;
the speed and the generated text do not.

Everything lives in <repo>/.cache/real-sglang (gitignored), so a fresh checkout installs what it
needs and nothing is left elsewhere:

    venv/         python venv: CPU torch, sglang (no deps), its CPU-usable deps, sglang-router
    shim/         import-only stand-in for the `sgl_kernel` package (see SHIM_SOURCE)
    tiny/         the tiny Qwen2 model + tokenizer (context 2048, vocabulary 2048)
    setup.json    stamp: hash of the pinned spec; setup is skipped while it matches
    run/PID.json  one per process started here; `stop` only kills what is registered
    logs/, tmp/, pip-cache/, hf/, xdg/   logs, TMPDIR and caches of the processes started here

This script uses only the standard library, so any python3 can run it; the venv is made from
the interpreter that runs `setup` (tested with CPython 3.11).

Examples:
    python3 scripts/real_sglang.py setup
    python3 scripts/real_sglang.py start --port 0                   # prints {"pid":..,"port":..,"url":..,"log":..}
    python3 scripts/real_sglang.py start --port 0 -- --api-key sk-test
    python3 scripts/real_sglang.py start-router --port 0 --worker-urls http://127.0.0.1:P1 http://127.0.0.1:P2
    python3 scripts/real_sglang.py stop --pid PID
    python3 scripts/real_sglang.py status
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "real-sglang"
VENV = CACHE / "venv"
VENV_PY = VENV / "bin" / "python"
SHIM = CACHE / "shim"
TINY = CACHE / "tiny"
STAMP = CACHE / "setup.json"
RUN = CACHE / "run"
LOGS = CACHE / "logs"
BUILD_TINY = REPO / "scripts" / "build_tiny_model.py"

# ---------------------------------------------------------------------------------------------
# The pinned spec. Changing anything here (or the shim, the patch or build_tiny_model.py)
# changes the stamp hash, and the next `setup` redoes the steps.
# ---------------------------------------------------------------------------------------------

# The CPU build, from the machine's local wheel directory. `+cpu` is pinned on purpose: plain
# `torch==2.13.0` would also match PyPI's multi-GB CUDA build on a machine without that wheel.
TORCH = "torch==2.13.0+cpu"

# The pip steps, in order: (what, requirements, extra pip options).
PIP_STEPS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("torch (CPU wheel)", (TORCH,), ()),
    # sglang's metadata requires torch==2.14.1 (only a CUDA build on PyPI) and CUDA-only kernels
    # (flashinfer, sglang-kernel, flash-attn-4, deep-ep, cutlass-dsl, ...): install it bare.
    ("sglang 0.5.23 (no deps)", ("sglang==0.5.23",), ("--no-deps",)),
    # What sglang needs at import time and for plain decoding, minus its CUDA-only packages.
    # Pinned to the versions resolved by the first working install (2026-11); their own deps
    # float. pip reports sglang's unmet CUDA requirements as conflicts afterwards: expected.
    (
        "sglang's CPU-usable deps",
        (
            "transformers==5.19.0",
            "tokenizers==0.23.2",
            "safetensors==0.8.0",
            "aiohttp==3.14.5",
            "fastapi==0.165.0",
            "uvicorn==0.54.0",
            "uvloop==0.23.0",
            "pyzmq==27.3.0",
            "orjson==3.13.0",
            "psutil==7.2.2",
            "setproctitle==1.3.8",
            "requests==2.34.2",
            "msgspec==0.23.0",
            "pybase64==1.5.1",
            "python-multipart==0.0.34",
            "prometheus_client==0.26.0",
            "partial-json-parser==0.2.1.1.post7",
            "interegular==0.3.3",
            "openai==2.8.0",
            "tiktoken==0.14.0",
            "pillow==13.0.0",
            "einops==0.8.2",
            "scipy==1.17.1",
            "sentencepiece==0.2.1",
            "xxhash==4.1.0",
            "zstandard==0.25.0",
            "watchfiles==1.3.0",
            "distro==1.9.0",
            "python-dateutil==2.9.0.post0",
            "blobfile==3.0.0",
            "anthropic==2.14.0",
            "openai-harmony==0.0.4",
            "llguidance==1.9.1",
            "gguf==0.19.0",
            # sglang/srt/utils/common.py does `import triton` at import time (only for @triton.jit
            # decorators); on a CPU it warns "Triton is not supported on current platform".
            "triton==3.9.0",
            # Imported at start-up by sglang modules although never used for plain decoding.
            "ipython==9.18.1",
            "dill==0.4.1",
            "jsonschema==4.26.0",
            "soundfile==0.13.1",
            "easydict==1.14",
            "ninja==1.13.2",
            "py-spy==0.4.3",
            "nvidia-ml-py==13.615.71",
            "numba==0.65.1",
            "xgrammar==0.2.7",
            "compressed-tensors==0.18.0",
            # Imported by sglang/srt/multimodal/internvl_utils.py even for text models. PyPI only
            # has a CUDA build; see patch_torchvision() for why it still works.
            "torchvision==0.28.0",
            "httpx==0.28.1",
        ),
        (),
    ),
    ("sglang-router 0.3.2", ("sglang-router==0.3.2",), ()),
)

# Keeps every pip step after the first from replacing the CPU torch with a CUDA one.
CONSTRAINTS = f"{TORCH}\ntorchvision==0.28.0\n"

# SGLang's CPU engine (SGLANG_USE_CPU_ENGINE=1) imports 8 names from `sgl_kernel` at import time
# (cache_move.py etc.: copy_all_layer_kv_cache_cpu, assign_*_cpu, speculative-decoding helpers).
# Its CPU build is not on PyPI (sglang-kernel/sgl-kernel wheels hold only CUDA .so files) and
# compiling it needs AVX-512 and far more time than 2 cores allow. Without Intel AMX, plain
# decoding calls none of them (layers run forward_native, torch_native attention needs no
# kernel), so an import-only package suffices; any call would raise, never silently misbehave.
SHIM_SOURCE = '''\
"""Import-only stand-in for SGLang's CPU kernel package (see scripts/real_sglang.py); any call raises."""
__version__ = "0.0.0+shim"


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def _stub(*args, **kwargs):
        raise NotImplementedError(f"sgl_kernel shim: {name} is not implemented")

    _stub.__name__ = name
    return _stub
'''

# PyPI's torchvision is a CUDA build: its _C.so needs libtorch_cuda.so, so its C++ ops do not
# load with CPU torch, and _meta_registrations.py then crashes at import ("operator
# torchvision::nms does not exist") on two unguarded register_fake decorators. Guard those two;
# the CPU torchvision wheels live only on the PyTorch index, which is not reachable here.
TV_PATTERN = re.compile(r'^@torch\.library\.register_fake\("torchvision::(q?nms)"\)', re.MULTILINE)
TV_REPLACEMENT = (
    r'@(torch.library.register_fake("torchvision::\1") if torchvision.extension._has_ops() else (lambda f: f))'
)
TV_GUARDED = "if torchvision.extension._has_ops() else (lambda f: f))"

IMPORT_CHECK = (
    "import torch, sglang.srt.entrypoints.http_server, sglang.srt.managers.scheduler, "
    "sglang.srt.model_executor.model_runner, sglang_router; "
    "assert torch.__version__ == '2.13.0+cpu', torch.__version__; "
    "print('sglang', sglang.__version__, 'torch', torch.__version__)"
)

# ---------------------------------------------------------------------------------------------
# Server flags
# ---------------------------------------------------------------------------------------------

# Flag/value pairs kept on one line each.
# fmt: off
SERVER_FLAGS = (
    "--device", "cpu",
    "--host", "127.0.0.1",
    # SGLang's CPU default on x86 is intel_amx, which calls the compiled sgl_kernel ops;
    # torch_native is plain torch.
    "--attention-backend", "torch_native",
    # What SGLang resolves to on CPU anyway; explicit so a new default cannot pick a CUDA kernel.
    "--sampling-backend", "pytorch",
    # No structured output (json_schema/regex/ebnf) here, so no grammar backend to build;
    # such requests are therefore not testable against this server.
    "--grammar-backend", "none",
    # Sized for the tiny model: keeps the KV pool (and so the memory) small.
    "--max-total-tokens", "65536",
    # Without it the idle scheduler busy-polls a whole core; this machine has two.
    "--sleep-on-idle",
)
# fmt: on
SERVER_READY_LINE = "ready to roll"  # "The server is fired up and ready to roll!"


class HarnessError(Exception):
    """A failure the user can act on; printed as one line (plus a log tail where useful)."""


def say(msg: str) -> None:
    print(f"[real_sglang] {msg}", file=sys.stderr, flush=True)


def child_env(**extra: str) -> dict[str, str]:
    """Environment for every process started here: caches and temp files stay inside CACHE."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    for d in ("tmp", "pip-cache", "hf", "xdg", "sglang"):
        (CACHE / d).mkdir(parents=True, exist_ok=True)
    env.update(
        TMPDIR=str(CACHE / "tmp"),
        PIP_CACHE_DIR=str(CACHE / "pip-cache"),
        HF_HOME=str(CACHE / "hf"),
        XDG_CACHE_HOME=str(CACHE / "xdg"),
        SGLANG_CACHE_DIR=str(CACHE / "sglang"),
        # No hub is reachable; offline mode makes transformers fail fast instead of retrying.
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


# ---------------------------------------------------------------------------------------------
# setup
# ---------------------------------------------------------------------------------------------


def spec_hash() -> str:
    spec = {
        "python": list(sys.version_info[:2]),
        "pip_steps": PIP_STEPS,
        "constraints": CONSTRAINTS,
        "shim": SHIM_SOURCE,
        "tv_patch": [TV_PATTERN.pattern, TV_REPLACEMENT],
        "build_tiny": BUILD_TINY.read_text(encoding="utf-8"),
        "import_check": IMPORT_CHECK,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def is_setup() -> bool:
    try:
        stamp = json.loads(STAMP.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        stamp.get("spec_hash") == spec_hash()
        and VENV_PY.exists()
        and (TINY / "config.json").exists()
        and (SHIM / "sgl_kernel" / "__init__.py").exists()
    )


def run_step(what: str, cmd: list[str], env: dict[str, str]) -> None:
    """Run one setup step; its output goes to logs/setup.log and is shown only if it fails
    (pip's many harmless warnings would otherwise bury the progress lines)."""
    started = time.monotonic()
    say(f"{what} ...")
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / "setup.log"
    with open(log, "ab") as fh:
        offset = fh.tell()
        fh.write(f"\n=== {what}: {' '.join(cmd)}\n".encode())
        fh.flush()
        code = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise HarnessError(f"setup step failed ({what}): exit {code}; tail of {log}:\n{log_tail(log, offset)}")
    say(f"{what}: done in {time.monotonic() - started:.0f} s")


def patch_torchvision(env: dict[str, str]) -> None:
    out = subprocess.run(
        [
            str(VENV_PY),
            "-c",
            "import importlib.util as u; print(u.find_spec('torchvision').submodule_search_locations[0])",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    path = Path(out) / "_meta_registrations.py"
    text = path.read_text(encoding="utf-8")
    patched = TV_PATTERN.sub(TV_REPLACEMENT, text)
    if patched.count(TV_GUARDED) != 2:
        raise HarnessError(f"torchvision patch: expected 2 guarded register_fake lines in {path}; torchvision changed?")
    if patched != text:
        path.write_text(patched, encoding="utf-8")
        say(f"torchvision: guarded the nms/qnms fake-op registrations in {path.name}")


def write_shim() -> None:
    pkg = SHIM / "sgl_kernel"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(SHIM_SOURCE, encoding="utf-8")


def build_tiny(env: dict[str, str]) -> None:
    # Built next to its final place and renamed, so a killed build never looks complete.
    partial = CACHE / "tiny.partial"
    shutil.rmtree(partial, ignore_errors=True)
    run_step("tiny model", [str(VENV_PY), str(BUILD_TINY), str(partial)], env)
    shutil.rmtree(TINY, ignore_errors=True)
    partial.rename(TINY)


def cmd_setup(args: argparse.Namespace) -> int:
    CACHE.mkdir(parents=True, exist_ok=True)
    # Parallel test workers may all call setup; the first installs, the others wait for it.
    with open(CACHE / "setup.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if args.force:
            say(f"--force: removing {VENV}, {TINY} and the stamp")
            for path in (VENV, TINY):
                shutil.rmtree(path, ignore_errors=True)
            STAMP.unlink(missing_ok=True)
        if is_setup():
            say(f"already set up ({CACHE}); `setup --force` rebuilds")
            return 0
        return install()


def install() -> int:
    started = time.monotonic()
    STAMP.unlink(missing_ok=True)
    env = child_env()
    if not VENV_PY.exists():
        run_step("venv", [sys.executable, "-m", "venv", str(VENV)], env)
    constraints = CACHE / "constraints.txt"
    constraints.write_text(CONSTRAINTS, encoding="utf-8")
    pip = [str(VENV_PY), "-m", "pip", "install", "--quiet", "--no-input", "--progress-bar", "off"]
    for i, (what, reqs, opts) in enumerate(PIP_STEPS):
        # The first step installs torch itself; every later one is held to that torch.
        pins = ["-c", str(constraints)] if i else []
        run_step(what, pip + pins + list(opts) + list(reqs), env)
    patch_torchvision(env)
    write_shim()
    build_tiny(env)
    run_step(
        "import check",
        [str(VENV_PY), "-c", IMPORT_CHECK],
        child_env(SGLANG_USE_CPU_ENGINE="1", PYTHONPATH=str(SHIM)),
    )
    STAMP.write_text(json.dumps({"spec_hash": spec_hash(), "finished_at": time.time()}) + "\n", encoding="utf-8")
    say(f"setup complete in {time.monotonic() - started:.0f} s; venv {dir_size_gb(VENV):.1f} GB")
    return 0


def dir_size_gb(path: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total / 1e9


def cmd_status(args: argparse.Namespace) -> int:
    running = []
    for info in registered():
        if live_members(info["pid"]):
            running.append(info)
        else:  # died without `stop` (crash, reboot): forget it
            (RUN / f"{info['pid']}.json").unlink(missing_ok=True)
    if is_setup():
        print(f"setup complete: {CACHE}")
    else:
        print(f"setup not done: run `python3 {Path(__file__).relative_to(REPO)} setup` (about 2-4 min, 3 GB)")
    for info in running:
        print(f"running: {info['kind']} pid {info['pid']} {info['url']} log {info['log']}")
    return 0 if is_setup() else 1


# ---------------------------------------------------------------------------------------------
# start / start-router / stop
# ---------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url: str, timeout: float = 5.0) -> int:
    """Status code of a GET, or 0 when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            resp.read()
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return 0


def http_get_json(url: str, timeout: float = 5.0) -> dict:
    """Body of a GET as a JSON object, or {} when there is none."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            body = json.loads(resp.read())
    except (OSError, ValueError):
        return {}
    return body if isinstance(body, dict) else {}


def log_tail(path: Path, offset: int, lines: int = 40) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def log_contains(path: Path, offset: int, needle: str) -> bool:
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return needle.encode() in fh.read()
    except OSError:
        return False


def spawn_and_wait(kind: str, cmd: list[str], env: dict[str, str], port: int, log: Path, timeout: float, ready) -> int:
    """Start `cmd` in its own session (so `stop` can kill the whole group), wait until
    `ready(url, log, offset)` holds, register it and print its JSON line."""
    log.parent.mkdir(parents=True, exist_ok=True)
    # Appended, not truncated: the readiness check only reads what this start wrote.
    with open(log, "ab") as fh:
        offset = fh.tell()
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=str(CACHE),
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    info = {"pid": proc.pid, "port": port, "url": url, "log": str(log)}
    say(f"{kind} pid {proc.pid} starting on {url} (log {log})")
    started = time.monotonic()
    deadline = started + timeout
    while True:
        code = proc.poll()
        if code is not None:
            raise HarnessError(f"{kind} exited with {code} before it was ready; log tail:\n{log_tail(log, offset)}")
        if ready(url, log, offset):
            break
        if time.monotonic() > deadline:
            kill_group(proc.pid, grace=10.0)
            proc.wait()
            raise HarnessError(f"{kind} not ready after {timeout:.0f} s, killed; log tail:\n{log_tail(log, offset)}")
        time.sleep(0.5)
    RUN.mkdir(parents=True, exist_ok=True)
    (RUN / f"{proc.pid}.json").write_text(json.dumps({**info, "kind": kind, "cmd": cmd}) + "\n", encoding="utf-8")
    say(f"{kind} ready in {time.monotonic() - started:.1f} s")
    print(json.dumps(info), flush=True)
    return 0


def require_setup() -> None:
    if not is_setup():
        raise HarnessError(f"real SGLang is not set up: run `python3 {Path(__file__).relative_to(REPO)} setup`")


def cmd_start(args: argparse.Namespace) -> int:
    require_setup()
    port = args.port or free_port()
    log = Path(args.log) if args.log else LOGS / f"sglang-{port}.log"
    cmd = [
        str(VENV_PY),
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(args.model),
        "--port",
        str(port),
        *SERVER_FLAGS,
        *args.extra,
    ]
    env = child_env(SGLANG_USE_CPU_ENGINE="1", PYTHONPATH=str(SHIM))

    # Seen here: connection refused for ~19 s, then /health 503 for ~2 s while SGLang sends
    # itself a warm-up /generate, then the ready line and /health 200. Both are checked so that
    # readiness does not hang on that order, which SGLang does not promise.
    def ready(url: str, log: Path, offset: int) -> bool:
        return log_contains(log, offset, SERVER_READY_LINE) and http_get(url + "/health") == 200

    return spawn_and_wait("sglang", cmd, env, port, log, args.timeout, ready)


def cmd_start_router(args: argparse.Namespace) -> int:
    require_setup()
    port = args.port or free_port()
    log = Path(args.log) if args.log else LOGS / f"router-{port}.log"
    cmd = [
        str(VENV_PY),
        "-m",
        "sglang_router.launch_router",
        "--worker-urls",
        *args.worker_urls,
        "--policy",
        "round_robin",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        # Its metrics endpoint defaults to a fixed port (29000), which would clash between
        # two routers (or with anything else on this machine).
        "--prometheus-port",
        str(free_port()),
        "--prometheus-host",
        "127.0.0.1",
        *args.extra,
    ]

    # /health is only the router's own liveness, and it registers workers in the background:
    # until one is in, proxied routes fail. /get_model_info proves a worker answers through it;
    # /readiness that every worker is registered, so round-robin tests see all of them.
    def ready(url: str, log: Path, offset: int) -> bool:
        if http_get(url + "/health") != 200 or http_get(url + "/get_model_info") != 200:
            return False
        status = http_get_json(url + "/readiness")
        return status.get("healthy_workers") == len(args.worker_urls)

    return spawn_and_wait("router", cmd, child_env(), port, log, args.timeout, ready)


def live_members(pgid: int) -> list[int]:
    """Pids of the process group's members that are not zombies (a zombie leader waits for a
    reaper that may never come in a container, and must not count as still running)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command name: state ppid pgrp ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def kill_group(pgid: int, grace: float) -> bool:
    """SIGTERM the group, SIGKILL what is left after `grace` seconds; True when none is left."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not live_members(pgid):
                return True
            time.sleep(0.2)
        if sig == signal.SIGTERM:
            say(f"process group {pgid} still alive after {grace:.0f} s: SIGKILL")
    return not live_members(pgid)


def registered() -> list[dict]:
    infos = []
    for path in sorted(RUN.glob("*.json")) if RUN.exists() else []:
        try:
            infos.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return infos


def cmd_stop(args: argparse.Namespace) -> int:
    entry = RUN / f"{args.pid}.json"
    # Only groups started by this script are killed; a mistyped pid must not take anything else down.
    if not entry.exists():
        raise HarnessError(f"pid {args.pid} was not started by this script (no {entry}); not killing it")
    if args.pid in (0, 1, os.getpgrp()):
        raise HarnessError(f"refusing to kill process group {args.pid}")
    if not live_members(args.pid):
        say(f"pid {args.pid}: already stopped")
    elif not kill_group(args.pid, args.grace):
        raise HarnessError(f"process group {args.pid} survived SIGKILL: {live_members(args.pid)}")
    else:
        say(f"pid {args.pid}: stopped")
    entry.unlink(missing_ok=True)
    return 0


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


def port_arg(text: str) -> int:
    port = int(text)
    if not 0 <= port < 65536:
        raise argparse.ArgumentTypeError("port must be 0..65535 (0 picks a free one)")
    return port


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="real_sglang.py",
        description=__doc__.split("\n\n")[0],
        epilog="Examples:\n" + __doc__.split("Examples:\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("setup", help="install SGLang, sglang-router and the tiny model (idempotent)")
    p.add_argument("--force", action="store_true", help="delete the venv and model first and rebuild")
    p.set_defaults(func=cmd_setup)

    p = sub.add_parser("status", help="say whether setup is complete (exit 0) or not (exit 1); list running servers")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser(
        "start",
        help="start an SGLang server, wait until ready, print its JSON line",
        epilog="Arguments after `--` go to sglang.launch_server unchanged, e.g. -- --api-key KEY",
    )
    p.add_argument("--port", type=port_arg, default=0, help="port on 127.0.0.1; 0 picks a free one (default)")
    p.add_argument("--model", type=Path, default=TINY, help=f"model directory (default {TINY.relative_to(REPO)})")
    p.add_argument("--log", help="log file, appended to (default .cache/real-sglang/logs/sglang-PORT.log)")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for readiness (default 180)")
    p.set_defaults(func=cmd_start)

    p = sub.add_parser(
        "start-router",
        help="start sglang-router in front of workers, wait, print its JSON line",
        epilog="Arguments after `--` go to sglang_router.launch_router unchanged",
    )
    p.add_argument("--port", type=port_arg, default=0, help="port on 127.0.0.1; 0 picks a free one (default)")
    p.add_argument("--worker-urls", nargs="+", required=True, metavar="URL", help="worker base URLs")
    p.add_argument("--log", help="log file, appended to (default .cache/real-sglang/logs/router-PORT.log)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for readiness (default 60)")
    p.set_defaults(func=cmd_start_router)

    p = sub.add_parser("stop", help="stop a server or router started here (SIGTERM its group, then SIGKILL)")
    p.add_argument("--pid", type=int, required=True, help="the pid printed by start / start-router")
    p.add_argument("--grace", type=float, default=30.0, help="seconds between SIGTERM and SIGKILL (default 30)")
    p.set_defaults(func=cmd_stop)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    args.extra = extra
    try:
        return args.func(args)
    except HarnessError as exc:
        if args.debug:
            raise
        print(f"real_sglang: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
