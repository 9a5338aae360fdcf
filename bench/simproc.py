"""The SGLang simulator and a test tokenizer as a benchmark uses them: programs started as a user
would start them (``python tests/sglang_sim.py``, ``python tests/tiny_tokenizers.py``), spoken to
over HTTP. Figures come from the simulator's counters (``GET /sim/stats``) and from output files,
never from log wording.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "run_inference.py"
SIM = REPO / "tests" / "sglang_sim.py"
TOKENIZERS = REPO / "tests" / "tiny_tokenizers.py"
READY_TIMEOUT = 60.0


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI run: offline, unbuffered, no API key from the caller's shell."""
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_API_KEY"}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONUNBUFFERED="1",
        TRANSFORMERS_NO_ADVISORY_WARNINGS="1",
        **extra,
    )
    return env


def build_tokenizer(out_dir: Path, style: str = "chatml") -> Path:
    subprocess.run(
        [sys.executable, str(TOKENIZERS), str(out_dir), style],
        check=True,
        env=cli_env(PYTHONPATH=str(REPO)),  # the recipe it uses is the package's (synthgen.server.bpe)
        stdout=subprocess.DEVNULL,
    )
    return out_dir


class Simulator:
    """``python tests/sglang_sim.py --tokenizer-dir DIR *args`` until the ``with`` block ends."""

    def __init__(self, tokenizer_dir: Path, *args: str, log: Path | None = None):
        self._log = open(log or os.devnull, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(SIM), "--tokenizer-dir", str(tokenizer_dir), *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        line = self._ready_line()
        if not line.startswith("SIM READY port="):
            self.close()
            raise RuntimeError(f"the simulator did not start: {line!r}")
        self.port = int(line.split()[2].removeprefix("port="))
        self.url = f"http://127.0.0.1:{self.port}"
        self.http = httpx.Client(base_url=self.url, timeout=60.0, trust_env=False)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stats(self) -> dict:
        response = self.http.get("/sim/stats")
        response.raise_for_status()
        return response.json()

    def _ready_line(self) -> str:
        assert self.proc.stdout is not None
        fd, received = self.proc.stdout.fileno(), b""
        deadline = time.monotonic() + READY_TIMEOUT
        while b"\n" not in received:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                break
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            received += chunk
        return received.decode(errors="replace").strip()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()
        if hasattr(self, "http"):
            self.http.close()

    def __enter__(self) -> Simulator:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()
