"""Headless Chromium for tests of the run report (Debian's ``chromium`` package, which ``.ci/run`` installs):
``browse`` opens a page with a profile of its own and no connection of Chromium's own; a test without a
Chromium is skipped, saying why."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

NAMES = ("chromium", "chromium-browser", "google-chrome")
CONSOLE = re.compile(r":CONSOLE[^\]]*\] (.*)")


def chromium() -> str:
    for name in NAMES:
        path = shutil.which(name)
        if path:
            return path
    why = os.environ.get("SYNTHGEN_NO_BROWSER") or "no chromium on PATH"
    pytest.skip(f"browser test skipped: {why}; install Debian's chromium package (apt-get install chromium)")


def browse(page: Path, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """One headless Chromium on ``page`` with a profile of its own; its console messages go to stderr."""
    command = [
        # No sandbox (tests run as root); no connection of Chromium's own (this machine has no network).
        chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
        "--disable-quic", "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp / 'profile'}", "--enable-logging=stderr", "--v=0", *args, page.as_uri(),
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def console(result: subprocess.CompletedProcess[str]) -> list[str]:
    return CONSOLE.findall(result.stderr)


def rendered_dom(page: Path, tmp: Path) -> str:
    """The page's DOM as Chromium rendered it (``--dump-dom``)."""
    result = browse(page, tmp, "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout
