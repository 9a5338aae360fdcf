"""The SGLang simulator and a test tokenizer as a benchmark uses them: programs started as a user
would start them (``python tests/support/sglang_sim.py``, ``python tests/support/tiny_tokenizers.py``), spoken to
over HTTP. Figures come from the simulator's counters (``GET /sim/stats``) and from output files,
never from log wording.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.simharness import Sim, start_sim

REPO = Path(__file__).resolve().parent.parent
RUN = REPO / "run_inference.py"
TOKENIZERS = REPO / "tests" / "support" / "tiny_tokenizers.py"


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


def cli_command(
    ws: Path,
    url: str,
    partition: str,
    max_tokens: int,
    concurrency: int | str,
    *extra: str,
    outputs: Path | None = None,
    run: Path = RUN,
) -> list[str]:
    """``python run_inference.py`` as a bench runs it: the partition under ``ws/prompts``, rows under
    ``outputs`` (default ``ws/outputs``), the simulator's URL, then ``extra``; ``run``: another
    checkout's script for an A/B."""
    return [
        sys.executable,
        str(run),
        "--partition",
        partition,
        "--prompts-dir",
        str(ws / "prompts"),
        "--output-dir",
        str(outputs if outputs is not None else ws / "outputs"),
        "--server-url",
        url,
        "--max-tokens",
        str(max_tokens),
        "--concurrency",
        str(concurrency),
        *extra,
    ]


def scheduler_args(
    kv_tokens: int, max_running: int, step_time: float, step_time_per_req: float | None = None, *extra: str
) -> list[str]:
    """The simulator's scheduler mode (a KV pool, slots, a decode step) at a 4,096-token context."""
    args = ["--max-total-tokens", str(kv_tokens), "--max-running-requests", str(max_running)]
    args += ["--step-time", str(step_time)]
    if step_time_per_req is not None:
        args += ["--step-time-per-req", str(step_time_per_req)]
    return [*args, "--context-length", "4096", *extra]


def build_tokenizer(out_dir: Path, style: str = "chatml") -> Path:
    subprocess.run(
        [sys.executable, str(TOKENIZERS), str(out_dir), style],
        check=True,
        env=cli_env(PYTHONPATH=str(REPO)),  # the recipe it uses is the package's (synthgen.demo.bpe)
        stdout=subprocess.DEVNULL,
    )
    return out_dir


def Simulator(tokenizer_dir: Path, *args: str) -> Sim:  # noqa: N802  (reads as the class it returns)
    """``python tests/support/sglang_sim.py --tokenizer-dir DIR *args``, started and waited for by the tests' own
    harness (one place starts the simulator and reads its ready line); a context manager."""
    return start_sim(tokenizer_dir, *args)
