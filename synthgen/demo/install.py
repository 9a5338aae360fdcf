"""The demo server: real SGLang 0.5.23 on the CPU with a tiny offline model (`--launch-server demo`).

This module owns installing that server and building its model (into the project's cache,
.cache/real-sglang/ in the checkout, or $SYNTHGEN_CACHE/real-sglang); synthgen.demo.commands owns
where things live and the commands that start the server and sglang-router. It is the genuine SGLang
HTTP layer, tokenizer manager, scheduler, radix cache and detokenizer running a tiny hand-set model
(synthgen/demo/model.py) that answers every prompt with a `<think>` block, a short answer and its
end-of-turn token: only the API behaviour and the shape of the rows mean anything, not the speed or
the text. scripts/real_sglang.py is the command line over it, used by the integration tests. Standard
library only, so any python3 runs it.

    argv = demo_command(30000, say=print)   # installs on first use (minutes, ~2.5 GB), then instant
    ServerProcess(argv, log_path).start()   # synthgen.launch.launcher

Cache layout (gitignored):

    venv/         python venv: CPU torch, sglang (no deps), its CPU-usable deps, sglang-router
    shim/         import-only stand-in for the `sgl_kernel` package (see SHIM_SOURCE)
    tiny-v3/      the tiny Qwen2 model + tokenizer (context 2048, vocabulary 2048), built in seconds;
                  its recipe.json holds the hash of its recipe (TINY_SOURCES): rebuilt alone when that changes
    install.json  stamp: hash of the pinned install spec; the install is skipped while it matches
    run/PID.json  one per process started by scripts/real_sglang.py; its `stop` only kills those
    logs/, tmp/, pip-cache/, hf/, xdg/   logs, TMPDIR and caches of the processes started here

Errors: DemoSetupError (a ServerError, exit code 3), one short line: the cause and the fix first, then
which step failed and where its full output is (logs/setup.log).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from synthgen.demo.commands import (
    CACHE_ENV,
    TINY_VERSION,
    DemoPaths,
    Say,
    _cache_vars,
    _quiet,
    child_env,
    server_command,
    server_env,
)
from synthgen.errors import ServerError

BUILD_TINY = Path(__file__).with_name("model.py")  # run by the demo venv's python, never imported
# The tiny model's recipe: the build script and the tokenizer recipe it imports. Editing either
# rebuilds the model alone (seconds), not the install.
TINY_SOURCES = (BUILD_TINY, Path(__file__).with_name("bpe.py"))
# Where the pinned CPU torch comes from when the configured package indexes do not have it.
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# A line at least this often while an install step runs (pip is silent for minutes on a big wheel).
HEARTBEAT = 15.0
# What the install needs: the venv is 3.1 GB, pip's cache and temporary files come on top while it runs.
NEEDS_FREE_GB = 4.0
# The pinned wheels (CPU torch, sglang-router, triton ...) exist for this platform only.
PLATFORM = ("linux", "x86_64")
# The line of pip's output that says why an index could not be reached (pip hides it in a retry
# WARNING and then reports only "No matching distribution found").
NETWORK_ERROR = re.compile(
    r"Name or service not known|Temporary failure in name resolution|nodename nor servname|"
    r"Failed to establish a new connection|Connection refused|Network is unreachable|No route to host|"
    r"Connection reset|timed out|ProxyError|SSLError|CERTIFICATE_VERIFY_FAILED|403 Client Error|"
    r"407 Proxy Authentication",
    re.IGNORECASE,
)
DISK_FULL = re.compile(r"No space left on device|Disk quota exceeded", re.IGNORECASE)
# The fix for an index that cannot be reached; docs/server.md says more.
MIRROR_FIX = "point pip at a mirror or proxy it can reach (PIP_INDEX_URL, HTTPS_PROXY or pip.conf; docs/server.md)"

# ---------------------------------------------------------------------------------------------
# The pinned spec. Changing anything here (or the shim or the patch) changes the stamp hash, and
# the next `setup` redoes the steps; a change of the tiny model's recipe rebuilds only the model.
# ---------------------------------------------------------------------------------------------

# The CPU build: from the configured package indexes where they have it (this machine: a local
# wheel folder), else from the PyTorch CPU index (see torch_pip_options). `+cpu` is pinned on
# purpose: plain `torch==2.13.0` would also match PyPI's multi-GB CUDA build.
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


class DemoSetupError(ServerError):
    """The demo server could not be installed or built; the message says which step and why."""


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
        "import_check": IMPORT_CHECK,
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def tiny_hash() -> str:
    """The tiny model's recipe: TINY_VERSION and the text of TINY_SOURCES."""
    recipe = {"version": TINY_VERSION, "sources": {p.name: p.read_text(encoding="utf-8") for p in TINY_SOURCES}}
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()


def _stamp_matches(path: Path, key: str, expected: str) -> bool:
    try:
        return bool(json.loads(path.read_text(encoding="utf-8")).get(key) == expected)
    except (OSError, ValueError, AttributeError):
        return False


def is_installed(paths: DemoPaths) -> bool:
    """True when the install (venv, shim) completed for the current pinned spec (cheap: reads a stamp)."""
    return (
        _stamp_matches(paths.stamp, "spec_hash", spec_hash())
        and paths.python.exists()
        and (paths.shim / "sgl_kernel" / "__init__.py").exists()
    )


def is_tiny_built(paths: DemoPaths) -> bool:
    """True when the tiny model was built from the current recipe."""
    return (paths.tiny / "config.json").exists() and _stamp_matches(
        paths.tiny / "recipe.json", "tiny_hash", tiny_hash()
    )


def is_setup(paths: DemoPaths) -> bool:
    """True when setup completed for the current pinned spec and model recipe (cheap: reads stamps)."""
    return is_installed(paths) and is_tiny_built(paths)


def setup(paths: DemoPaths, say: Say = _quiet, force: bool = False) -> bool:
    """Install everything unless already done; True when it installed. Concurrent callers (parallel
    test workers, two runs) serialise on a lock: the first installs, the others wait for it."""
    paths.cache.mkdir(parents=True, exist_ok=True)
    with open(paths.cache / "setup.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if force:
            say(f"--force: removing {paths.venv}, {paths.tiny} and the stamp")
            for path in (paths.venv, paths.tiny):
                shutil.rmtree(path, ignore_errors=True)
            paths.stamp.unlink(missing_ok=True)
        if is_setup(paths):
            return False
        if is_installed(paths):  # only the model's recipe changed: seconds, under 1 MB
            steps = _Steps(paths, say, total=1)
            t = steps.begin("building the tiny model")
            _build_tiny(paths, steps, child_env(paths))
            steps.end("tiny model", t)
        else:
            preflight(paths)
            _install(paths, say)
        return True


class _Steps:
    """Numbered progress lines ("installing torch (CPU wheel) 2/7 ...") and the setup log."""

    TOTAL = 3 + len(PIP_STEPS)  # venv, the pip steps, tiny model, import check

    def __init__(self, paths: DemoPaths, say: Say, total: int = TOTAL):
        self.paths, self.say, self.done, self.total = paths, say, 0, total

    def begin(self, doing: str) -> float:
        self.done += 1
        self.say(f"{doing} {self.done}/{self.total} ...")
        return time.monotonic()

    def run(self, what: str, cmd: list[str], env: dict[str, str], check: bool = True) -> int:
        """Run one command, its output appended to logs/setup.log (pip's many harmless warnings
        would bury the progress lines), with a line every HEARTBEAT seconds while it runs; raise
        DemoSetupError on failure when `check`, naming the cause (network, disk) and its fix."""
        self.paths.logs.mkdir(parents=True, exist_ok=True)
        log = self.paths.setup_log
        started = time.monotonic()
        with open(log, "ab") as fh:
            fh.write(f"\n=== {what}: {' '.join(cmd)}\n".encode())
            fh.flush()
            offset = fh.tell()
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT)
            try:
                while True:
                    try:
                        code = proc.wait(timeout=HEARTBEAT)
                        break
                    except subprocess.TimeoutExpired:
                        self.say(f"  {what}: still working, {time.monotonic() - started:.0f} s (log {log})")
            finally:
                if proc.poll() is None:  # Ctrl-C or a signal while it ran: it goes with us
                    proc.kill()
                    proc.wait()
        if code != 0 and check:
            raise DemoSetupError(failure_message(what, code, _read_from(log, offset), log, self.paths.cache))
        return code

    def end(self, what: str, started: float) -> None:
        self.say(f"{what}: done in {time.monotonic() - started:.0f} s")


def _read_from(log: Path, offset: int) -> str:
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _tail(text: str, lines: int = 2, chars: int = 120) -> str:
    """A step's last lines, minus pip's harmless noise, each cut to `chars`, as one short line."""
    # pip's warnings (ignored index locations, retries) bury the one line that says why.
    noise = ("WARNING:", "[notice]")
    kept = [line.strip() for line in text.splitlines() if line.strip() and not line.startswith(noise)]
    return " | ".join(line if len(line) <= chars else line[: chars - 3] + "..." for line in kept[-lines:])


def failure_message(what: str, code: int, output: str, log: Path, cache: Path) -> str:
    """One short line: the cause (the network, the disk) and the fix first, then which step failed and
    where its full output is; pip's own lines stay in the log."""
    step = f"({what} failed with exit {code}; full output in {log})"
    head = "the demo SGLang server could not be installed"
    if DISK_FULL.search(output):
        return (
            f"{head}: the disk is full. Fix: free about {NEEDS_FREE_GB:.0f} GB, or set {CACHE_ENV}=/path/with/room "
            f"(now {cache.parent}), then retry {step}"
        )
    network = next((line.strip() for line in output.splitlines() if NETWORK_ERROR.search(line)), None)
    if network:
        cause = NETWORK_ERROR.findall(network)[-1]  # the innermost: "Name or service not known"
        return f"{head}: a package index could not be reached ({cause}). Fix: {MIRROR_FIX}, then retry {step}"
    return (
        f"{head}: {_tail(output) or 'no output'}. Fix: check network access to the package indexes and "
        f"about {NEEDS_FREE_GB:.0f} GB free disk, then retry {step}"
    )


def preflight(paths: DemoPaths, system: str | None = None, machine: str | None = None) -> None:
    """Before installing: the platform the pinned wheels exist for, and the free disk space."""
    system = system or sys.platform
    machine = (machine or platform.machine()).lower()
    if (system, "amd64" if machine == "x86_64" else machine) != (PLATFORM[0], "amd64"):
        raise DemoSetupError(
            f"--launch-server demo runs on Linux x86_64 only (its pinned CPU wheels exist only there); this is "
            f"{system} {machine}: start an SGLang server yourself and pass --server-url (or --launch-server CMD)"
        )
    paths.cache.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(paths.cache).free / 1e9
    if free < NEEDS_FREE_GB:
        raise DemoSetupError(
            f"the demo SGLang server needs about {NEEDS_FREE_GB:.0f} GB free to install; {paths.cache} has "
            f"{free:.1f} GB: free some, or put the cache elsewhere with {CACHE_ENV}=/path/with/room"
        )


def torch_pip_options(configured_has_it: bool) -> list[str]:
    """Where pip looks for the pinned CPU torch: the configured indexes (a local wheel folder on
    this machine) when they have it, else also the PyTorch CPU index, the one place that publishes
    `+cpu` builds. The configured index stays first, so torch's own dependencies still come from
    the usual place (a company mirror, say); only the exact `+cpu` pin can match the extra index."""
    return [] if configured_has_it else ["--extra-index-url", PYTORCH_CPU_INDEX]


def _install(paths: DemoPaths, say: Say) -> None:
    started = time.monotonic()
    paths.stamp.unlink(missing_ok=True)
    env = child_env(paths)
    steps = _Steps(paths, say)
    t = steps.begin("creating a venv")
    if not paths.python.exists():
        steps.run("venv", [sys.executable, "-m", "venv", str(paths.venv)], env)
    steps.end("venv", t)
    constraints = paths.cache / "constraints.txt"
    constraints.write_text(CONSTRAINTS, encoding="utf-8")
    pip = [str(paths.python), "-m", "pip", "install", "--quiet", "--no-input", "--progress-bar", "off"]
    for i, (what, reqs, opts) in enumerate(PIP_STEPS):
        t = steps.begin(f"installing {what}")
        extra: list[str] = []
        if i == 0:
            # A dry run resolves without installing: it asks the configured indexes whether they
            # have this exact build, which they answer at once either way.
            probe = steps.run(f"{what}: configured indexes", pip + ["--dry-run", "--no-deps", *reqs], env, check=False)
            extra = torch_pip_options(probe == 0)
            if extra:
                say(f"{TORCH} is not on the configured package indexes; taking it from {PYTORCH_CPU_INDEX}")
        # The first step installs torch itself; every later one is held to that torch.
        pins = ["-c", str(constraints)] if i else []
        where = f" from {PYTORCH_CPU_INDEX}" if extra else ""
        steps.run(what + where, pip + pins + extra + list(opts) + list(reqs), env)
        steps.end(what, t)
    _patch_torchvision(paths, env)
    _write_shim(paths)
    t = steps.begin("building the tiny model")
    _build_tiny(paths, steps, env)
    steps.end("tiny model", t)
    t = steps.begin("checking that SGLang imports")
    steps.run("import check", [str(paths.python), "-c", IMPORT_CHECK], child_env(paths, **server_env(paths)))
    steps.end("import check", t)
    paths.stamp.write_text(json.dumps({"spec_hash": spec_hash(), "finished_at": time.time()}) + "\n", encoding="utf-8")
    say(f"setup complete in {time.monotonic() - started:.0f} s; venv {dir_size_gb(paths.venv):.1f} GB")


def _patch_torchvision(paths: DemoPaths, env: dict[str, str]) -> None:
    where = "import importlib.util as u; print(u.find_spec('torchvision').submodule_search_locations[0])"
    out = subprocess.run(
        [str(paths.python), "-c", where], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    path = Path(out) / "_meta_registrations.py"
    text = path.read_text(encoding="utf-8")
    patched = TV_PATTERN.sub(TV_REPLACEMENT, text)
    if patched.count(TV_GUARDED) != 2:
        raise DemoSetupError(
            f"torchvision patch: expected 2 guarded register_fake lines in {path}; torchvision changed?"
        )
    if patched != text:
        path.write_text(patched, encoding="utf-8")


def _write_shim(paths: DemoPaths) -> None:
    pkg = paths.shim / "sgl_kernel"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(SHIM_SOURCE, encoding="utf-8")


def _build_tiny(paths: DemoPaths, steps: _Steps, env: dict[str, str]) -> None:
    # Built next to its final place and renamed, so a killed build never looks complete.
    partial = paths.tiny.with_name(paths.tiny.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    steps.run("tiny model", [str(paths.python), str(BUILD_TINY), str(partial)], env)
    (partial / "recipe.json").write_text(json.dumps({"tiny_hash": tiny_hash()}) + "\n", encoding="utf-8")
    shutil.rmtree(paths.tiny, ignore_errors=True)
    partial.rename(paths.tiny)


def dir_size_gb(path: Path) -> float:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total / 1e9


# What the demo server can hold, said by the server itself (its /v1/loads max_running_requests, which
# --concurrency auto starts from): left to SGLang's CPU default, the KV pool let auto put 422-531 requests in
# flight on a 2-core machine, each waiting minutes for its first token.
DEMO_FLAGS = ("--max-running-requests", "64")


def demo_command(port: int, say: Say = _quiet, paths: DemoPaths | None = None) -> list[str]:
    """argv that starts the demo server (real SGLang on the CPU, tiny model) on 127.0.0.1:`port`,
    installing it first if needed, with one progress line per step to `say`
    ("demo server: installing torch (CPU wheel) 2/8 ..."). The argv carries its environment
    (`env -u ... K=V ... python -m sglang.launch_server ...`), so it runs as is in any process
    group and can be printed for the user to run by hand. Raises DemoSetupError."""
    paths = paths or DemoPaths.default()

    def progress(message: str) -> None:
        say(f"demo server: {message}")

    if not is_installed(paths):  # not when only the tiny model is rebuilt (setup says so)
        preflight(paths)
        progress(
            f"first use: installing SGLang 0.5.23 (CPU) and a tiny model into {paths.cache} (about 3-8 minutes "
            f"and ~3 GB of disk; {CACHE_ENV}=DIR puts it elsewhere)"
        )
    setup(paths, progress)
    # child_env() also creates the cache folders the variables point at.
    variables = {**{k: child_env(paths)[k] for k in _cache_vars(paths)}, **server_env(paths)}
    unset = [arg for name in ("VIRTUAL_ENV", "PYTHONHOME") for arg in ("-u", name)]
    return ["env", *unset, *(f"{k}={v}" for k, v in variables.items()), *server_command(paths, port, extra=DEMO_FLAGS)]
