"""One server against two given as ``--server-url`` twice (no gateway): the same prompts, the same
simulators (scheduler mode: a server runs at most ``--max-running`` requests at once, so a second server
is real capacity), run alternately so a loaded machine weighs on both alike.

    python -m bench.bench_multi_server [--prompts 128] [--max-running 4] [--step-time 0.02] [--concurrency auto]

Prints per run: wall time, output tok/s, the requests each server took, and the concurrency line.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

from bench.simproc import RUN, Simulator, build_tokenizer, cli_env


def run(root: Path, urls: list[str], out: str, concurrency: str) -> tuple[str, str, list[str]]:
    args = [arg for url in urls for arg in ("--server-url", url)]
    command = [sys.executable, str(RUN), *args, "--concurrency", concurrency, "--max-tokens", "64", "--output-dir", out]
    done = subprocess.run(command, cwd=root, env=cli_env(), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"run failed ({done.returncode}): {done.stderr[-2000:]}")
    total = next(line for line in done.stderr.splitlines() if line.startswith("TOTAL"))
    rate = re.split(r"\s+", total)[-2]
    wall = re.split(r"\s+", total)[-1]
    servers = [line.strip() for line in done.stderr.splitlines() if "requests sent" in line]
    servers += [line for line in done.stderr.splitlines() if line.startswith("concurrency:")]
    return wall, rate, servers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=128)
    parser.add_argument("--max-running", type=int, default=4)
    parser.add_argument("--step-time", type=float, default=0.02)
    parser.add_argument("--concurrency", default="auto")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tokenizer = build_tokenizer(root / "tok")
        folder = root / "prompts" / "short"
        folder.mkdir(parents=True)
        rows = [{"id": f"p{i}", "prompt": f"question {i}"} for i in range(args.prompts)]
        (folder / "d.jsonl").write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
        sim_args = ("--max-total-tokens", "100000", "--max-running-requests", str(args.max_running))
        sim_args += ("--step-time", str(args.step_time))
        with Simulator(tokenizer, *sim_args) as a, Simulator(tokenizer, *sim_args) as b:
            for n, (name, urls) in enumerate([("one", [a.url]), ("two", [a.url, b.url])] * 2):
                wall, rate, servers = run(root, urls, f"out{n}", args.concurrency)
                print(f"{name} server(s): {wall}, {rate} tok/s; " + "; ".join(servers), flush=True)


if __name__ == "__main__":
    main()
