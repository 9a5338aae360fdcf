"""Start and stop the real SGLang server and sglang-router from integration tests.

A thin, pytest-free wrapper around scripts/real_sglang.py, which it runs as a subprocess so the
test process never imports torch or sglang. Every server is started in its own process group and
registered by the script; always `stop()` what you start (a fixture's finalizer is the place).

    from tests.integration import realserver

    if not realserver.is_setup():
        ...skip, or realserver.ensure_setup()   # about 2-4 min and 3 GB the first time
    a = realserver.start_server()               # {"pid", "port", "url", "log"}; ~22 s to ready
    b = realserver.start_server(extra_args=["--api-key", "sk-test"])
    r = realserver.start_router([a["url"], b["url"]])
    ...
    for s in (r, b, a):
        realserver.stop(s["pid"])

The tiny model in model_dir() is a Qwen2 with context 2048 and a 2048-token byte-level BPE
tokenizer (specials <|endoftext|>=0, <|im_start|>=1, <|im_end|>=2 eos, <think>=3, </think>=4)
and a ChatML template; it answers every prompt with <think>...</think>, a short answer and its EOS
(greedy: always the same 29 tokens); see synthgen/demo/model.py. Each server takes about 2 GB
of memory.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from synthgen.demo.commands import DemoPaths

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "real_sglang.py"

START_TIMEOUT = 180.0
ROUTER_TIMEOUT = 60.0
STOP_GRACE = 30.0


class RealServerError(RuntimeError):
    """The script failed; the message carries its stderr (with the server's log tail)."""


def _run(args: Sequence[str], timeout: float) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(SCRIPT), *args]
    try:
        result = subprocess.run(
            cmd,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise RealServerError(f"real_sglang.py {args[0]} did not finish within {timeout:.0f} s") from exc
    if result.returncode != 0:
        raise RealServerError(f"real_sglang.py {' '.join(args)} failed ({result.returncode}):\n{result.stderr or ''}")
    return result


def _started(args: Sequence[str], timeout: float) -> dict:
    # The script itself waits `timeout` for readiness and kills a server that misses it; the
    # margin here only guards against the script hanging.
    result = _run(args, timeout=timeout + 60)
    return json.loads(result.stdout.strip().splitlines()[-1])


def is_setup() -> bool:
    """True when `setup` has completed for the current pinned spec (cheap: checks a stamp)."""
    cmd = [sys.executable, str(SCRIPT), "status"]
    return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=60).returncode == 0


def ensure_setup() -> None:
    """Install everything if needed (progress goes to this process's stderr); seconds when done.
    On failure the error is the script's one-line reason."""
    cmd = [sys.executable, str(SCRIPT), "setup"]
    last = ""
    with subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as proc:
        assert proc.stderr is not None
        for line in proc.stderr:  # shown as it comes: the first install takes minutes
            sys.stderr.write(line)
            last = line.strip() or last
        code = proc.wait()
    if code != 0:
        raise RealServerError(last.removeprefix("real_sglang: ") or f"real_sglang.py setup failed ({code})")


def model_dir() -> Path:
    """The tiny model + tokenizer directory (exists once set up; honours $SYNTHGEN_CACHE)."""
    return DemoPaths.default().tiny


def start_server(port: int = 0, extra_args: Sequence[str] = (), timeout: float = START_TIMEOUT) -> dict:
    """Start a real SGLang server on 127.0.0.1 (port 0 picks a free one) and wait until it is
    ready. `extra_args` go to sglang.launch_server, e.g. ["--api-key", "k"]. Returns
    {"pid", "port", "url", "log"}."""
    args = ["start", "--port", str(port), "--timeout", str(timeout)]
    if extra_args:
        args += ["--", *extra_args]
    return _started(args, timeout)


def start_router(worker_urls: Sequence[str], port: int = 0, timeout: float = ROUTER_TIMEOUT) -> dict:
    """Start sglang-router (round_robin) in front of `worker_urls` and wait until every worker
    is registered. Returns {"pid", "port", "url", "log"}."""
    args = ["start-router", "--port", str(port), "--timeout", str(timeout), "--worker-urls", *worker_urls]
    return _started(args, timeout)


def stop(pid: int) -> None:
    """Stop a server or router started here: SIGTERM its process group, SIGKILL after a grace."""
    _run(["stop", "--pid", str(pid), "--grace", str(STOP_GRACE)], timeout=STOP_GRACE + 30)
