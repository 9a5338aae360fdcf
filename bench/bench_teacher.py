#!/usr/bin/env python3
"""What the teacher scoring pass costs the client: CPU per scored position in the nested and the base64
transports, peak memory as the number of rows grows, and the side file's bytes per position. Prints figures,
decides nothing.

A results file of --rows synthetic rows (a --prompt-tokens prompt, an --output-tokens answer, ids drawn from
the tiny tokenizer's vocabulary) is scored by ``score_teacher.py`` against the simulator
(``tests/support/sim_logprobs.py`` answers top-k logprobs), each pass in a child process whose CPU time and
peak RSS come from ``os.wait4``. The simulator's own CPU is not counted. Side-file bytes: on disk
(zstd parquet; the simulator's toy distributions compress far better than real ones) and the top-k columns as
written (Arrow values + list offsets, before encoding and compression), both per scored position, beside K x 8.

    python -m bench.bench_teacher                      # 300 and 1,200 rows, K=20 (~2-4 min)
    python -m bench.bench_teacher --rows 200 --top-k 8
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from bench.simproc import REPO, Simulator, build_tokenizer, cli_env
from synthgen.data.records import ResultRecord

SCORE = REPO / "score_teacher.py"


def write_rows(folder: Path, rows: int, prompt: int, output: int, vocab: int, seed: int = 1) -> None:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "raw_responses.jsonl", "wb") as fh:
        for i in range(rows):
            row = {
                "id": f"r{i:06d}",
                "dataset": folder.name,
                "input_ids": [rng.randrange(vocab) for _ in range(prompt)],
                "output_ids": [rng.randrange(vocab) for _ in range(output)],
            }
            fh.write(ResultRecord.from_dict(row).to_json())


def score(out_dir: Path, url: str, transport: str, top_k: int, concurrency: int) -> dict[str, float]:
    argv = [sys.executable, str(SCORE), "--output-dir", str(out_dir), "--dataset", "d", "--server-url", url]
    argv += ["--top-k", str(top_k), "--transport", transport, "--concurrency", str(concurrency)]
    started = time.monotonic()
    proc = subprocess.Popen(argv, env=cli_env(PYTHONPATH=str(REPO)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    if status != 0:
        raise SystemExit(
            f"score_teacher.py failed ({status}): {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}"
        )
    return {"cpu": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024, "wall": wall}


def side_figures(folder: Path) -> tuple[int, int]:
    """(bytes on disk, bytes of the topk_ids + topk_logprobs columns as written: Arrow buffers, values and
    list offsets, before parquet's encodings and compression)."""
    disk = raw = 0
    for part in sorted(folder.glob("part-*.parquet")):
        disk += part.stat().st_size
        raw += pq.read_table(part, columns=["topk_ids", "topk_logprobs"]).nbytes
    return disk, raw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[300, 1200])
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--output-tokens", type=int, default=256)
    parser.add_argument("--top-k", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench_teacher."))
    try:
        tokenizer = build_tokenizer(root / "tok")
        vocab = 1000
        print(
            f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs; K={args.top_k}, "
            f"rows of {args.prompt_tokens} prompt + {args.output_tokens} output tokens"
        )
        print(
            f"{'rows':>6} {'transport':>9} {'positions':>10} {'wall s':>7} {'CPU s':>6} {'CPU us/pos':>10} "
            f"{'peak RSS MB':>11} {'disk B/pos':>10} {'top-k B/pos':>11} {'K x 8':>6}"
        )
        with Simulator(tokenizer) as sim:
            for rows in args.rows:
                for transport in ("nested", "b64"):
                    out = root / f"out-{rows}-{transport}"
                    write_rows(out / "d", rows, args.prompt_tokens, args.output_tokens, vocab)
                    figures = score(out, sim.url, transport, args.top_k, args.concurrency)
                    positions = rows * args.output_tokens
                    disk, raw = side_figures(out / "d" / "teacher")
                    print(
                        f"{rows:>6,} {transport:>9} {positions:>10,} {figures['wall']:>7.1f} {figures['cpu']:>6.1f} "
                        f"{1e6 * figures['cpu'] / positions:>10.1f} {figures['rss_mb']:>11.0f} "
                        f"{disk / positions:>10.1f} {raw / positions:>11.1f} {args.top_k * 8:>6}",
                        flush=True,
                    )
                    shutil.rmtree(out)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
