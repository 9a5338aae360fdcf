"""smg (PyPI ``smg``, the maintained successor of sglang-router) for the integration tier: the pinned
install in ``$SYNTHGEN_CACHE/smg-venv`` (or ``.cache/smg-venv`` in the checkout), and one gateway process
per test in front of the given workers (docs/sglang_api.md §11)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
from simharness import free_port

SMG_VERSION = "1.13.0"
REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60.0


def venv() -> Path:
    cache = os.environ.get("SYNTHGEN_CACHE")
    return (Path(cache) if cache else REPO / ".cache") / "smg-venv"


def binary() -> Path:
    return venv() / "bin" / "smg"


def _version_ok(path: Path) -> bool:
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return SMG_VERSION in out.stdout + out.stderr


def ensure_smg() -> tuple[Path | None, str]:
    """The pinned smg binary, installed on first use; (None, why) when it cannot be had."""
    path = binary()
    if path.exists() and _version_ok(path):
        return path, ""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv())], check=True, capture_output=True, timeout=300)
        pip = [str(venv() / "bin" / "python"), "-m", "pip", "install", "--quiet", f"smg=={SMG_VERSION}"]
        result = subprocess.run(pip, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"could not install smg=={SMG_VERSION} into {venv()}: {exc}"
    if result.returncode != 0 or not _version_ok(path):
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"could not install smg=={SMG_VERSION} into {venv()}: {tail[0]}"
    return path, ""


class Gateway:
    """One smg process; ``url``; ``close()`` stops it (its own process group only)."""

    def __init__(self, smg: Path, worker_urls: Sequence[str], *args: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.TemporaryFile()
        cmd = [str(smg), "launch", "--host", "127.0.0.1", "--port", str(self.port), "--worker-urls", *worker_urls]
        cmd += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
        # Its default grace period makes every stop take ~5 s; a test's gateway has nothing left to drain.
        cmd += ["--shutdown-grace-period-secs", "0", *args]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready(len(worker_urls))

    def _wait_ready(self, workers: int) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"smg exited ({self.proc.returncode}) at start: {self.log_text()[-2000:]}")
            try:
                ready = httpx.get(self.url + "/readiness", timeout=5.0, trust_env=False).json()
                if ready.get("healthy_workers") == workers:
                    return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        self.close()
        raise RuntimeError(f"smg was not ready with {workers} workers in {READY_TIMEOUT:.0f} s")

    def log_text(self) -> str:
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
