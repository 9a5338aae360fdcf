"""The demo server's places and commands: where its cache lives, the environment its processes get,
and the argv of the SGLang server and of sglang-router (synthgen.demo.install installs what they run).

    paths = DemoPaths.default()                  # $SYNTHGEN_CACHE/real-sglang, else <repo>/.cache/real-sglang
    argv = server_command(paths, 30000)          # run it with child_env(paths, **server_env(paths))

Standard library only, so any python3 runs it (scripts/real_sglang.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CACHE_ENV = "SYNTHGEN_CACHE"  # the project's cache root; the demo server lives in its real-sglang/
SKIP_REAL_ENV = "SYNTHGEN_SKIP_REAL"
# The tiny model's recipe version names its folder (tiny-v3/), so checkouts with another recipe (an
# older commit, another worktree) sharing one cache each keep their own model instead of rebuilding
# each other's. Bump it when the model's behaviour or its recipe's files change (synthgen.demo.install
# hashes the recipe).
TINY_VERSION = 3

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
    # Without it the scheduler never fills its load report's gen_throughput (/v1/loads answers 0), and the
    # status line's server rate reads 0 tok/s all run.
    "--enable-metrics",
)
# fmt: on
SERVER_READY_LINE = "ready to roll"  # "The server is fired up and ready to roll!"


Say = Callable[[str], None]


def _quiet(_message: str) -> None:
    pass


# ---------------------------------------------------------------------------------------------
# Where things live
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DemoPaths:
    """Everything of the demo server under one cache directory."""

    cache: Path

    @classmethod
    def default(cls) -> DemoPaths:
        """$SYNTHGEN_CACHE/real-sglang when set, else <repo>/.cache/real-sglang."""
        root = os.environ.get(CACHE_ENV)
        return cls((Path(root) if root else REPO / ".cache") / "real-sglang")

    @property
    def venv(self) -> Path:
        return self.cache / "venv"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def shim(self) -> Path:
        return self.cache / "shim"

    @property
    def tiny(self) -> Path:
        return self.cache / f"tiny-v{TINY_VERSION}"

    @property
    def stamp(self) -> Path:
        # Not setup.json: that stamp (of versions before TINY_VERSION) also hashed the model's
        # recipe, and an older checkout on the same cache would take this one's as its own.
        return self.cache / "install.json"

    @property
    def run(self) -> Path:
        return self.cache / "run"

    @property
    def logs(self) -> Path:
        return self.cache / "logs"

    @property
    def setup_log(self) -> Path:
        return self.logs / "setup.log"


def child_env(paths: DemoPaths, **extra: str) -> dict[str, str]:
    """Environment for every process started here: caches and temp files stay inside the cache."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    for d in ("tmp", "pip-cache", "hf", "xdg", "sglang"):
        (paths.cache / d).mkdir(parents=True, exist_ok=True)
    env.update(_cache_vars(paths))
    env.update(extra)
    return env


def _cache_vars(paths: DemoPaths) -> dict[str, str]:
    return {
        "TMPDIR": str(paths.cache / "tmp"),
        "PIP_CACHE_DIR": str(paths.cache / "pip-cache"),
        "HF_HOME": str(paths.cache / "hf"),
        "XDG_CACHE_HOME": str(paths.cache / "xdg"),
        "SGLANG_CACHE_DIR": str(paths.cache / "sglang"),
        # No hub is reachable; offline mode makes transformers fail fast instead of retrying.
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }


def server_env(paths: DemoPaths) -> dict[str, str]:
    """The variables the SGLang server needs on top of child_env()."""
    return {"SGLANG_USE_CPU_ENGINE": "1", "PYTHONPATH": str(paths.shim)}


# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------


def server_command(paths: DemoPaths, port: int, model: Path | None = None, extra: Sequence[str] = ()) -> list[str]:
    """argv of the real SGLang server on 127.0.0.1:`port` (run it with child_env + server_env)."""
    model = model or paths.tiny
    command = [str(paths.python), "-m", "sglang.launch_server", "--model-path", str(model), "--port", str(port)]
    return [*command, *SERVER_FLAGS, *extra]


def router_command(
    paths: DemoPaths, port: int, worker_urls: Sequence[str], prometheus_port: int, extra: Sequence[str] = ()
) -> list[str]:
    """argv of sglang-router (round robin) on 127.0.0.1:`port` in front of `worker_urls`."""
    # Flag/value pairs kept on one line each.
    # fmt: off
    return [
        str(paths.python), "-m", "sglang_router.launch_router",
        "--worker-urls", *worker_urls,
        "--policy", "round_robin",
        "--host", "127.0.0.1",
        "--port", str(port),
        # Its metrics endpoint defaults to a fixed port (29000), which would clash between two
        # routers (or with anything else on this machine).
        "--prometheus-port", str(prometheus_port),
        "--prometheus-host", "127.0.0.1",
        *extra,
    ]
    # fmt: on
