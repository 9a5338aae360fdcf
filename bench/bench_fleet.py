#!/usr/bin/env python3
"""Auto concurrency behind smg: is a two-worker fleet kept as busy as one server?

smg 1.13 answers 404 on ``/v1/loads`` but lists its workers at ``GET /workers``; ``--concurrency auto``
then polls each worker's own ``/v1/loads`` and steers by their sum (``synthgen/run/concurrency.py``,
``LoadMonitor``). This bench measures what that gives on the simulator's KV-capacity (scheduler) mode,
the same servers and workload as ``bench_concurrency.py``'s ``both`` (short and long answers mixed).

Each round runs ``run_inference.py`` (as a user runs it) four times, back to back, each against fresh
simulators:

- ``one auto`` / ``one flood``: one simulator, asked directly, ``--concurrency auto`` / every prompt at once;
- ``fleet auto`` / ``fleet flood``: smg (the pinned one of ``tests/integration/smg.py``, installed into
  ``$SYNTHGEN_CACHE/smg-venv`` on first use) in front of ``--workers`` simulators, with that many times the
  prompts, so every worker has one server's work.

Flooding keeps every server's waiting queue full from the first to the last prompt: it is the busiest a
server can be kept, and ``vs flood`` (wall time over the same target's flooding wall time) is how close
auto comes to it. Figures come from each simulator's ``/sim/stats``, sampled every 25 ms: wall (the first
request any worker received to the last answer), and per worker, over the span from its first request to
the moment the last prompt had been received by some worker (the final drain left out, as in
``bench_concurrency.py``), ``busy``: the share of that span with a running request; from its first request
to the run's last answer (the drain included, so flooding, whose prompts are all received at once, is
measured over the same stretch as auto): ``KV`` (mean share of the KV pool held) and ``run`` (mean
running requests); and the requests it answered, its peak running and its retractions. The CLI's own
``concurrency:`` summary line is printed under each run.

The machine may be loaded by other work (the load average is printed): compare rows of one round, and
look at the spread over rounds before trusting a difference.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from bench.bench_concurrency import PARTITION, prompts_for, write_partition
from bench.simproc import Simulator, build_tokenizer, cli_command, cli_env, scheduler_args
from tests.integration import smg

SAMPLE_EVERY = 0.025
RUNS = (("one", "auto"), ("fleet", "auto"), ("one", "flood"), ("fleet", "flood"))


@dataclass
class Worker:
    """One simulator's figures over a run."""

    served: int = 0
    busy: float | None = None  # share of its span with a running request
    kv_mean: float | None = None  # mean KV pool share held, from its first request to the run's end
    running_mean: float | None = None  # the same for running requests
    peak_running: int = 0
    retractions: int = 0


@dataclass
class Figures:
    round: int
    target: str  # "one" or "fleet"
    policy: str  # "auto" or "flood"
    wall_s: float = 0.0
    workers: list[Worker] = field(default_factory=list)
    summary: str = ""  # the CLI's "concurrency: ..." line
    versus_flood: float | None = None

    @property
    def busy(self) -> float | None:
        values = [w.busy for w in self.workers if w.busy is not None]
        return statistics.fmean(values) if values else None

    @property
    def kv(self) -> float | None:
        values = [w.kv_mean for w in self.workers if w.kv_mean is not None]
        return statistics.fmean(values) if values else None


# ------------------------------------------------------------------------------------ observing
class FleetObserver(threading.Thread):
    """Samples every simulator's ``/sim/stats``: sums KV use and running requests per worker until
    every prompt is answered, and keeps each worker's stats at the moment the last prompt was received."""

    def __init__(self, urls: list[str], total: int):
        super().__init__(daemon=True)
        self.http = [httpx.Client(base_url=url, timeout=30.0, trust_env=False) for url in urls]
        self.total = total
        self.at_last_send: list[dict] | None = None
        self.last_send_at: float | None = None
        self.kv_sum = [0.0] * len(urls)
        self.running_sum = [0.0] * len(urls)
        self.samples = [0] * len(urls)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            stats = [client.get("/sim/stats").json() for client in self.http]
            now = time.time()
            unanswered = self.total - sum(one["generate_requests"] for one in stats)
            for i, one in enumerate(stats):
                if one["first_request_at"] is not None and unanswered > 0:  # from its first request to the end
                    self.kv_sum[i] += one["token_usage"]
                    self.running_sum[i] += one["running"]
                    self.samples[i] += 1
            if self.at_last_send is None:
                received = sum(one["generate_requests"] + one["http_in_flight"] for one in stats)
                if received >= self.total:
                    self.at_last_send, self.last_send_at = stats, now
            self.stop.wait(SAMPLE_EVERY)

    def finish(self, round_: int, target: str, policy: str) -> Figures:
        self.stop.set()
        self.join()
        final = [client.get("/sim/stats").json() for client in self.http]
        for client in self.http:
            client.close()
        figures = Figures(round_, target, policy)
        starts = [s["first_request_at"] for s in final if s["first_request_at"] is not None]
        ends = [s["last_finish_at"] for s in final if s["last_finish_at"] is not None]
        if starts and ends:
            figures.wall_s = max(ends) - min(starts)
        for i, stats in enumerate(final):
            worker = Worker(
                served=stats["completed"], peak_running=stats["peak_running"], retractions=stats["retractions"]
            )
            last, start = self.at_last_send, stats["first_request_at"]
            if last is not None and start is not None and self.last_send_at is not None:
                span = self.last_send_at - start
                worker.busy = min(1.0, last[i]["busy_time"] / span) if span > 0 else None
            if self.samples[i]:
                worker.kv_mean = self.kv_sum[i] / self.samples[i]
                worker.running_mean = self.running_sum[i] / self.samples[i]
            figures.workers.append(worker)
        return figures


# ------------------------------------------------------------------------------------ one run
def run_cli(url: str, ws: Path, concurrency: str, max_tokens: int, log: Path | None) -> str:
    """``run_inference.py`` on the workspace's partition; returns its ``concurrency:`` summary line.
    With ``log``, its stderr is written there."""
    command = cli_command(ws, url, PARTITION, max_tokens, concurrency, "--status-interval", "5")
    result = subprocess.run(
        command, cwd=ws, env=cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    stderr = result.stderr.decode(errors="replace")
    if log is not None:
        log.write_text(stderr)
    if result.returncode != 0:
        raise RuntimeError(f"run_inference.py exited {result.returncode}: {stderr[-2000:]}")
    return next((line.strip() for line in stderr.splitlines() if line.strip().startswith("concurrency:")), "")


def sim_args(args: argparse.Namespace) -> list[str]:
    return scheduler_args(args.kv_tokens, args.max_running, args.step_time, args.step_time_per_req)


def run_one(args: argparse.Namespace, tokenizer_dir: Path, round_: int, target: str, policy: str) -> Figures:
    workers = args.workers if target == "fleet" else 1
    rows = prompts_for("both", {"short": args.short_prompts * workers, "long": args.long_prompts * workers})
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp, ExitStack() as stack:
        ws = Path(tmp)
        write_partition(ws, rows)
        sims = [stack.enter_context(Simulator(tokenizer_dir, *sim_args(args))) for _ in range(workers)]
        url = sims[0].url
        if target == "fleet":
            options = ["--policy", args.policy, *shlex.split(args.smg_args)]
            gateway = smg.Gateway(args.smg, [sim.url for sim in sims], *options)
            stack.callback(gateway.close)
            url = gateway.url
        observer = FleetObserver([sim.url for sim in sims], len(rows))
        observer.start()
        log = args.log_dir / f"{round_}-{target}-{policy}.log" if args.log_dir else None
        summary = run_cli(url, ws, "auto" if policy == "auto" else str(len(rows)), args.max_tokens, log)
        figures = observer.finish(round_, target, policy)
    figures.summary = summary
    return figures


# ------------------------------------------------------------------------------------ report
def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def report_run(f: Figures) -> str:
    lines = [f"{f.round:>5}  {f.target:<6} {f.policy:<6} {f.wall_s:6.1f}  {fmt(f.versus_flood, '.3f'):>8}"]
    for i, w in enumerate(f.workers):
        lines.append(
            f"{'':>35}w{i}  {w.served:6d}  {fmt(w.busy, '.3f'):>5}  {fmt(w.kv_mean, '.2f'):>4}  "
            f"{fmt(w.running_mean, '5.1f'):>5}  {w.peak_running:8d}  {w.retractions:7d}"
        )
    if f.summary:
        lines.append(f"{'':>7}{f.summary}")
    return "\n".join(lines)


HEADER = "round  target policy wall s  vs flood  worker served   busy    KV    run  peak run  retract"


def spread(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.fmean(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def report_summary(runs: list[Figures]) -> str:
    lines = ["", "over rounds: mean (min-max)", "target policy  vs flood               busy (mean of workers)  KV mean"]
    for target, policy in RUNS:
        mine = [f for f in runs if f.target == target and f.policy == policy]
        versus = [f.versus_flood for f in mine if f.versus_flood is not None]
        busy = [f.busy for f in mine if f.busy is not None]
        kv = [f.kv for f in mine if f.kv is not None]
        lines.append(f"{target:<6} {policy:<6}  {spread(versus):<21}  {spread(busy):<23}  {spread(kv)}")
    return "\n".join(lines)


def set_versus_flood(runs: list[Figures]) -> None:
    flood = {(f.round, f.target): f.wall_s for f in runs if f.policy == "flood"}
    for f in runs:
        if flood.get((f.round, f.target)):
            f.versus_flood = f.wall_s / flood[f.round, f.target]


# ------------------------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="--concurrency auto behind smg (a fleet of simulators) against one simulator, and flooding.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n  python -m bench.bench_fleet\n"
        "  python -m bench.bench_fleet --rounds 1 --runs fleet-auto --smg-args=--disable-worker-overload-protection\n",
    )
    add = parser.add_argument
    add("--runs", nargs="+", default=[f"{t}-{p}" for t, p in RUNS], help="which runs, in order (default: all four)")
    add("--log-dir", type=Path, help="write each run's stderr here (ROUND-TARGET-POLICY.log)")
    add("--rounds", type=int, default=2, help="rounds of the four runs (default 2)")
    add("--workers", type=int, default=2, help="simulators behind smg (default 2)")
    add("--policy", default="round_robin", help="smg --policy (default round_robin)")
    add("--smg-args", default="", help="more smg launch options, one string (default none)")
    add("--short-prompts", type=int, default=100, help="short-answer prompts per worker (default 100)")
    add("--long-prompts", type=int, default=16, help="long-answer prompts per worker (default 16)")
    add("--max-tokens", type=int, default=448, help="max_new_tokens per request (default 448)")
    add("--kv-tokens", type=int, default=8000, help="simulator --max-total-tokens (default 8000)")
    add("--max-running", type=int, default=1024, help="simulator --max-running-requests (default 1024)")
    add("--step-time", type=float, default=0.02, help="simulator --step-time (default 0.02)")
    add("--step-time-per-req", type=float, default=0.0001, help="simulator --step-time-per-req (default 0.0001)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.log_dir:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    args.smg, why = smg.ensure_smg()
    if args.smg is None:
        print(why, file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix="bench-fleet-tok-"))
    try:
        tokenizer_dir = build_tokenizer(tmp / "tok")
        print(
            f"smg {smg.SMG_VERSION} --policy {args.policy} {args.smg_args}, {args.workers} workers; "
            f"simulator KV {args.kv_tokens} tokens, step {args.step_time} s + {args.step_time_per_req} s/request; "
            f"per worker {args.short_prompts} short + {args.long_prompts} long prompts, max_tokens {args.max_tokens}; "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        runs = []
        for round_ in range(1, args.rounds + 1):
            for target, policy in (run.split("-") for run in args.runs):
                started = time.monotonic()
                runs.append(run_one(args, tokenizer_dir, round_, target, policy))
                print(
                    f"round {round_} {target} {policy}: {time.monotonic() - started:.1f} s "
                    f"(load average {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
        set_versus_flood(runs)
        print(HEADER)
        for f in runs:
            print(report_run(f))
        print(report_summary(runs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
