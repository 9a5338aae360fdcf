"""Test support (not part of the package): the trainers' data code beside the demo server, for the tests
that load exports with the trainers' own code.

SpecForge (the ``specforge`` package on PyPI) requires CUDA-era pins (torch 2.11, sglang 0.5.14, flash
kernels); its data code (specforge.data: build_eagle3_dataset, the template registry and parsers,
prepare_prompt_tasks) needs only torch, transformers, datasets and pydantic. So it is installed without its
dependencies, pinned, into a folder of its own next to the demo venv, which already has CPU torch and
transformers; the venv's python runs it with that folder on PYTHONPATH. speculators' data preparation
(speculators.data_generation.preprocessing.build_speculator_training_dataset) is installed the same way: its
package without dependencies, plus hs-connectors, which it imports at load time; and axolotl's KD code
(the axolotl-kd export's check) as its package alone. The demo venv itself is not changed
(its setup stamp stays valid), and a fresh machine builds this after the demo setup.

    real-sglang/specforge/        pip --target: specforge (no deps), datasets and what the venv lacks for it
    real-sglang/specforge.json    stamp: hash of the pins; setup is skipped while it matches

    setup_specforge(DemoPaths.default(), say=print)    # after demo.setup(); ~15 s and 150 MB the first time
    env = specforge_env(paths)                         # for subprocesses of paths.python
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import subprocess
import time
from pathlib import Path

from synthgen.demo.commands import DemoPaths, Say, _quiet, child_env
from synthgen.demo.install import DemoSetupError, _tail, is_setup

# Pinned: specforge's data code and the packages the demo venv does not have for it (datasets and its
# pandas, pyarrow, multiprocess; everything else datasets needs is in the venv already).
SPECFORGE_PINS = (
    "specforge==0.2.0",
    "datasets==5.2.0",
    "multiprocess==0.70.19",
    "pandas==3.1.1",
    "pyarrow==26.0.1",
    # speculators declares datasets<=5.1.0; its data preparation runs with 5.2.0 (pinned above for SpecForge).
    "speculators==0.9.0",
    "hs-connectors==0.9.0",
    # axolotl's KD code (integrations/kd: transform_logprobs, the top-k forward-KL loss) for the axolotl-kd
    # export's check; tests/integration/axolotl_kd_check.py loads those files by path, so no dependency of its own.
    "axolotl==0.19.0",
)
IMPORT_CHECK = (
    "import specforge.data.preprocessing, specforge.data.prompt_builder, specforge.data.template, datasets, "
    "speculators.data_generation.preprocessing, axolotl; "
    "print('specforge', len(specforge.data.template.TEMPLATE_REGISTRY.get_all_template_names()), 'templates')"
)


def overlay(paths: DemoPaths) -> Path:
    return paths.cache / "specforge"


def _stamp(paths: DemoPaths) -> Path:
    return paths.cache / "specforge.json"


def spec_hash() -> str:
    return hashlib.sha256(json.dumps([SPECFORGE_PINS, IMPORT_CHECK]).encode()).hexdigest()


def is_specforge_setup(paths: DemoPaths) -> bool:
    try:
        stamp = json.loads(_stamp(paths).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return stamp.get("spec_hash") == spec_hash() and (overlay(paths) / "specforge").is_dir()


def specforge_env(paths: DemoPaths) -> dict[str, str]:
    """The environment for the demo venv's python with SpecForge's data code importable."""
    return child_env(paths, PYTHONPATH=str(overlay(paths)), TOKENIZERS_PARALLELISM="false")


def setup_specforge(paths: DemoPaths, say: Say = _quiet) -> bool:
    """Install SpecForge's data code unless already done; True when it installed. Needs the demo setup."""
    if not is_setup(paths):
        raise DemoSetupError(
            "SpecForge's data code is installed into the demo server's venv, which is not set up; "
            "run python scripts/real_sglang.py setup first"
        )
    with open(paths.cache / "specforge.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_specforge_setup(paths):
            return False
        started = time.monotonic()
        _stamp(paths).unlink(missing_ok=True)
        target = overlay(paths)
        env = specforge_env(paths)
        pip = [str(paths.python), "-m", "pip", "install", "--quiet", "--no-input", "--progress-bar", "off"]
        say(f"installing SpecForge's data code ({', '.join(SPECFORGE_PINS)}) into {target} ...")
        _run(paths, "pip install", [*pip, "--no-deps", "--upgrade", "--target", str(target), *SPECFORGE_PINS], env)
        _run(paths, "import check", [str(paths.python), "-c", IMPORT_CHECK], env)
        _stamp(paths).write_text(json.dumps({"spec_hash": spec_hash(), "finished_at": time.time()}) + "\n")
        say(f"SpecForge's data code installed in {time.monotonic() - started:.0f} s")
        return True


def _run(paths: DemoPaths, what: str, cmd: list[str], env: dict[str, str]) -> None:
    paths.logs.mkdir(parents=True, exist_ok=True)
    log = paths.logs / "specforge-setup.log"
    with open(log, "ab") as fh:
        fh.write(f"\n=== {what}: {' '.join(cmd)}\n".encode())
        fh.flush()
        offset = fh.tell()
        code = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise DemoSetupError(
            f"SpecForge's data code could not be installed: {what} failed with exit {code} "
            f"({_tail(_read_from(log, offset)) or 'no output'}; full log {log}); "
            "check network access to the package indexes"
        )


def _read_from(log: Path, offset: int) -> str:
    """What a step wrote to ``log`` after ``offset``."""
    with open(log, "rb") as fh:
        fh.seek(offset)
        return fh.read().decode(errors="replace")
