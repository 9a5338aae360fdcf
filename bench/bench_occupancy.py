#!/usr/bin/env python3
"""Occupancy at a fixed concurrency: run_inference.py against a SpecForge-script-like peer.

The server: the simulator's scheduler with a KV pool too large to matter, so only its slots bound
it (``--max-running-requests``, 32 by default), answers drawn from a long tail
(``--output-len-dist longtail:LO-HI``: most short, one in a hundred over 21 x LO), a fixed decode
step. The work: three datasets of 300 short prompts in one partition. Two clients, each a child
process started fresh, at the same ``--concurrency`` (48 by default), run back-to-back and
interleaved, ``--repeat`` times, each against a fresh simulator:

- ``synthgen``: ``run_inference.py --concurrency 48`` as a user runs it;
- ``baseline`` (with ``--baseline DIR``): DIR's ``run_inference.py``, an earlier commit's, say;
- ``peer``: what SpecForge's ``regenerate_train_data.py`` does, reduced to its scheduling: one
  dataset at a time (the script takes one input file), every prompt of it submitted to a pool of 48
  threads, each a blocking HTTP request (``/generate`` with the chat-templated text), the rows written
  as they complete; the next dataset starts once the last answer of the one before is in.

Figures per run: wall (the child's launch to its exit), span (first request received to last
answered, from ``/sim/stats``), occupancy (the server's running sequences integrated over the span,
over slots x span: the share of the slots in use, ``running_time`` in ``/sim/stats``), occupancy
over the wall, and the child's CPU (user + system from ``wait4``). CPU moves least with other load.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from bench.bench_run import text_pool
from bench.simproc import REPO, RUN, Simulator, build_tokenizer, cli_command, cli_env, scheduler_args

PARTITION = "bench"
CLIENTS = ("synthgen", "peer", "baseline")


@dataclass
class Figures:
    client: str
    repeat: int
    wall_s: float = 0.0
    span_s: float = 0.0
    occupancy: float = 0.0  # running_time / (slots * span)
    occupancy_wall: float = 0.0  # running_time / (slots * wall)
    cpu_s: float = 0.0
    completed: int = 0
    load: float = 0.0


# ------------------------------------------------------------------------------------ inputs
def write_partition(root: Path, datasets: int, prompts: int) -> list[Path]:
    """``datasets`` files of ``prompts`` short user messages, none alike; their paths in name order."""
    pool = text_pool(20000)
    folder = root / "prompts" / PARTITION
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for d in range(datasets):
        name = f"ds{d}"
        path = folder / f"{name}.jsonl"
        with open(path, "wb") as fh:
            for i in range(prompts):
                start = (i * 7919 + d * 104729) % (len(pool) - 80)
                text = f"Question {i} of {name}: " + pool[start : start + 80]
                row = {"id": f"{name}-{i:05d}", "messages": [{"role": "user", "content": text}]}
                fh.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))
        paths.append(path)
    return paths


# ------------------------------------------------------------------------------------ the peer
def peer_main(url: str, concurrency: int, max_tokens: int, out_dir: Path, files: list[Path]) -> int:
    """SpecForge's script's scheduling: per file, a thread pool of ``concurrency`` blocking requests."""
    out_dir.mkdir(parents=True, exist_ok=True)
    http = httpx.Client(
        base_url=url, timeout=600.0, trust_env=False, limits=httpx.Limits(max_connections=concurrency + 4)
    )

    def one(row: dict) -> dict:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in row["messages"])
        body = {"text": text + "<|im_start|>assistant\n", "sampling_params": {"max_new_tokens": max_tokens}}
        answer = http.post("/generate", json=body).json()
        return {"id": row["id"], "messages": [*row["messages"], {"role": "assistant", "content": answer["text"]}]}

    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as executor:
        for path in files:
            rows = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
            with open(out_dir / path.name, "wb") as fh:
                for future in concurrent.futures.as_completed([executor.submit(one, row) for row in rows]):
                    fh.write(orjson.dumps(future.result(), option=orjson.OPT_APPEND_NEWLINE))
    http.close()
    return 0


# ------------------------------------------------------------------------------------ one run
def command_for(client: str, url: str, ws: Path, files: list[Path], args) -> list[str]:
    if client == "peer":
        return [
            sys.executable,
            "-m",
            "bench.bench_occupancy",
            "--peer-child",
            url,
            str(ws / "peer-out"),
            "--concurrency",
            str(args.concurrency),
            "--max-tokens",
            str(args.max_tokens),
            *map(str, files),
        ]
    run = Path(args.baseline) / "run_inference.py" if client == "baseline" else RUN
    return cli_command(ws, url, PARTITION, args.max_tokens, args.concurrency, *args.cli_args.split(), run=run)


def run_one(args, tokenizer_dir: Path, client: str, repeat: int) -> Figures:
    sim_args = scheduler_args(10_000_000, args.slots, args.step_time, None, "--output-len-dist", args.output_len_dist)
    with tempfile.TemporaryDirectory(prefix="bench-occ-") as tmp, Simulator(tokenizer_dir, *sim_args) as sim:
        ws = Path(tmp)
        files = write_partition(ws, args.datasets, args.prompts)
        command = command_for(client, sim.url, ws, files, args)
        env = cli_env(PYTHONPATH=str(REPO))
        with open(ws / "stderr.txt", "wb") as err:
            started = time.monotonic()
            child = subprocess.Popen(command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=err, stderr=err)
            _, status, usage = os.wait4(child.pid, 0)  # this child's own CPU time
            wall = time.monotonic() - started
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{client} exited {status}: {(ws / 'stderr.txt').read_text()[-2000:]}")
        stats = httpx.get(sim.url + "/sim/stats", trust_env=False).json()
    span = stats["last_finish_at"] - stats["first_request_at"]
    running = stats["running_time"]
    return Figures(
        client,
        repeat,
        wall_s=wall,
        span_s=span,
        occupancy=running / (args.slots * span),
        occupancy_wall=running / (args.slots * wall),
        cpu_s=usage.ru_utime + usage.ru_stime,
        completed=stats["completed"],
        load=os.getloadavg()[0],
    )


# ------------------------------------------------------------------------------------ report
def report(runs: list[Figures]) -> str:
    lines = ["client    run  wall s  span s  occupancy  occ/wall  CPU s  done  load"]
    for f in runs:
        lines.append(
            f"{f.client:<9} {f.repeat:3d}  {f.wall_s:6.2f}  {f.span_s:6.2f}  {f.occupancy:9.3f}  "
            f"{f.occupancy_wall:8.3f}  {f.cpu_s:5.2f}  {f.completed:4d}  {f.load:4.1f}"
        )
    lines += ["", "client    best wall  spread  best occ  occ range      CPU range     wall vs peer (best)"]
    peer_best = min((f.wall_s for f in runs if f.client == "peer"), default=None)
    for client in CLIENTS:
        mine = [f for f in runs if f.client == client]
        if not mine:
            continue
        walls, occ, cpu = [f.wall_s for f in mine], [f.occupancy for f in mine], [f.cpu_s for f in mine]
        versus = f"{min(walls) / peer_best:.3f}" if peer_best else "-"
        lines.append(
            f"{client:<9} {min(walls):9.2f}  {max(walls) - min(walls):6.2f}  {max(occ):8.3f}  "
            f"{min(occ):.3f}-{max(occ):.3f}  {min(cpu):5.2f}-{max(cpu):5.2f}   {versus}"
            f"   (median wall {statistics.median(walls):.2f})"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Server occupancy, wall and client CPU at a fixed concurrency: run_inference.py vs a "
        "SpecForge-script-like peer, on the simulator's slots with long-tailed answers.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n  python -m bench.bench_occupancy\n"
        "  python -m bench.bench_occupancy --clients synthgen --repeat 1\n"
        "  python -m bench.bench_occupancy --clients synthgen --cli-args='--loop-guard off --checkpoint-tokens 0'\n",
    )
    add = parser.add_argument
    add("--clients", nargs="+", choices=CLIENTS, default=["synthgen", "peer"], help="default: synthgen peer")
    add(
        "--baseline",
        type=Path,
        help="client 'baseline': the run_inference.py of this checkout (e.g. a `git archive` of an earlier commit)",
    )
    add("--repeat", type=int, default=3, help="runs of each client, interleaved (default 3)")
    add("--concurrency", type=int, default=48, help="requests in flight, both clients (default 48)")
    add("--slots", type=int, default=32, help="simulator --max-running-requests (default 32)")
    add("--datasets", type=int, default=3, help="datasets in the partition (default 3)")
    add("--prompts", type=int, default=300, help="prompts per dataset (default 300)")
    add("--max-tokens", type=int, default=1024, help="max_new_tokens (default 1024)")
    add("--step-time", type=float, default=0.01, help="simulator --step-time (default 0.01)")
    add("--output-len-dist", default="longtail:16-640", help="simulator --output-len-dist (default longtail:16-640)")
    add("--cli-args", default="", help="more run_inference.py options, for synthgen and baseline (one string)")
    add("--peer-child", nargs=2, metavar=("URL", "OUT_DIR"), help=argparse.SUPPRESS)
    add("files", nargs="*", type=Path, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if "baseline" in args.clients and args.baseline is None:
        parser.error("client baseline needs --baseline DIR")
    if args.peer_child:
        url, out_dir = args.peer_child
        return peer_main(url, args.concurrency, args.max_tokens, Path(out_dir), args.files)
    tmp = Path(tempfile.mkdtemp(prefix="bench-occ-tok-"))
    try:
        tokenizer_dir = build_tokenizer(tmp / "tok")
        print(
            f"simulator: {args.slots} slots, step {args.step_time} s, {args.output_len_dist}; "
            f"{args.datasets} x {args.prompts} prompts; --concurrency {args.concurrency}; "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        runs = []
        for repeat in range(1, args.repeat + 1):
            for client in args.clients:
                runs.append(run_one(args, tokenizer_dir, client, repeat))
                f = runs[-1]
                print(f"{client} {repeat}: wall {f.wall_s:.2f} s, occupancy {f.occupancy:.3f}, CPU {f.cpu_s:.2f} s")
        print(report(runs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
