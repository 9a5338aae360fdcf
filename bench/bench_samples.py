"""Cost per sample against cost per prompt: does --samples-per-prompt (with a mix) cost the client what a
prompt costs today?

Runs ``run_inference.py`` as a subprocess against the simulator twice on one dataset: ``P`` prompts with one
sample each (the run of today), then ``P / N`` prompts with ``N`` samples each and a two-recipe
``--sampling-mix`` (the same number of requests and rows). Prints, for each, the CLI's CPU time per row
(user + system, from the child's rusage), wall time and rows per second. No pass/fail threshold; the
simulator shares the machine, so run it twice before trusting a difference.

    python -m bench.bench_samples                       # 2,000 rows each way, N = 4
    python -m bench.bench_samples --rows 4000 --samples 8
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench.simproc import Simulator, build_tokenizer, cli_command, cli_env

MIX = '[{"weight": 3, "temperature": 0.0}, {"weight": 1, "temperature": 0.8, "top_p": 0.95}]'


def write_prompts(path: Path, prompts: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = (orjson.dumps({"id": f"p{i:06d}", "prompt": f"question {i}: " + "word " * 200}) for i in range(prompts))
    path.write_bytes(b"\n".join(rows) + b"\n")


def run_cli(work: Path, url: str, prompts: int, extra: list[str], args: argparse.Namespace) -> tuple[float, float, int]:
    """(CLI CPU seconds, wall seconds, rows written) of one run on a fresh output folder."""
    write_prompts(work / "prompts" / "bench" / "ds.jsonl", prompts)
    out = work / f"out-{len(extra)}"
    flags = ("--status-interval", "5", "--report-interval", "0", *extra)
    command = cli_command(work, url, "bench", args.max_tokens, args.concurrency, *flags, outputs=out)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(command, check=True, env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    rows = sum(1 for _ in (out / "ds" / "raw_responses.jsonl").open("rb"))
    return cpu, wall, rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2000, help="rows (requests) of each run (default: 2000)")
    p.add_argument("--samples", type=int, default=4, help="samples per prompt of the second run (default: 4)")
    p.add_argument("--max-tokens", type=int, default=16, help="--max-tokens given to the CLI (default: 16)")
    p.add_argument("--concurrency", type=int, default=32, help="--concurrency given to the CLI (default: 32)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-samples-") as scratch:
        work = Path(scratch)
        tokenizer = build_tokenizer(work / "tok")
        with Simulator(tokenizer, "--context-length", "65536") as sim:
            today = run_cli(work / "a", sim.url, args.rows, [], args)
            n = args.samples
            mixed = run_cli(
                work / "b", sim.url, args.rows // n, ["--samples-per-prompt", str(n), "--sampling-mix", MIX], args
            )
    print(f"{'run':<36} {'rows':>6} {'CLI CPU ms/row':>15} {'wall s':>7} {'rows/s':>7}")
    for label, (cpu, wall, rows) in (
        (f"{args.rows:,} prompts x 1 sample", today),
        (f"{args.rows // args.samples:,} prompts x {args.samples} samples, 2 recipes", mixed),
    ):
        print(f"{label:<36} {rows:>6,} {1000 * cpu / rows:>15.2f} {wall:>7.1f} {rows / wall:>7.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
