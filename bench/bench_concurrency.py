#!/usr/bin/env python3
"""Compare in-flight policies on the simulator's scheduler: auto, fixed 16 / 64 / 256, flooding.

Workloads (one partition each): ``short`` (answers of about 50 tokens), ``long`` (about 400) and
``both`` (the two datasets in one run); the short one fits about eight times as many running
requests in the server's KV pool as the long one, so their best fixed concurrencies differ by
about that much. Every run gets a fresh simulator in scheduler mode (``tests/support/sglang_sim.py
--max-total-tokens``), so the KV pool, the queue and the decode step behave like SGLang's.

Two drivers send the prompts:

- ``cli`` runs ``run_inference.py --concurrency N`` as a user would (``auto`` only once the CLI
  accepts it: ``--help`` is checked);
- ``inproc`` sends the same prompts, tokenized here, straight to ``/generate`` from this process,
  bounded by ``synthgen.run.concurrency.InFlightLimit`` and, for ``auto``, steered by its
  ``LoadMonitor`` + ``AutoConcurrency`` with their defaults. It measures the controller without
  the CLI's own costs.

Figures come from the simulator's ``/sim/stats``, sampled every 20 ms by a thread: wall time
(first request received to last answered), busy fraction (time with a running request, over the
time from the first request to the last request received, i.e. excluding the final drain), tail
(last request received to the end), peak in flight (HTTP requests held by the server), peak
running, mean queue time per request, retractions. With ``--budget`` each workload is run once
more per policy with a cap of output tokens per dataset, and the overshoot over the cap is read
from the answers (inproc: counted as they arrive; cli: the result files).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
from tokenizers import Tokenizer

from bench.bench_run import text_pool
from bench.simproc import RUN, Simulator, build_tokenizer, cli_command, cli_env, scheduler_args
from synthgen.run.concurrency import AutoConcurrency, InFlightLimit, LoadMonitor

PARTITION = "bench"
DATASETS = {"short": 60, "long": 700}  # characters of the user message; the fake model echoes it twice
POLICIES = ("auto", "16", "64", "256", "flood")


@dataclass
class Figures:
    workload: str
    policy: str
    wall_s: float = 0.0
    busy_fraction: float | None = None
    tail_s: float | None = None
    peak_in_flight: int = 0
    peak_running: int = 0
    queue_s_mean: float = 0.0
    retractions: int = 0
    completed: int = 0
    overshoot: dict[str, int] = field(default_factory=dict)
    note: str = ""


# ------------------------------------------------------------------------------------ inputs
def prompts_for(workload: str, counts: dict[str, int]) -> list[tuple[str, str]]:
    """(dataset, user message) in send order; ``both`` sends the long dataset first."""
    names = {"short": ["short"], "long": ["long"], "both": ["long", "short"]}[workload]
    pool = text_pool(20000)
    rows = []
    for name in names:
        chars = DATASETS[name]
        for i in range(counts[name]):
            start = (i * 7919) % (len(pool) - chars)
            rows.append((name, f"Question {i} of {name}: " + pool[start : start + chars]))
    return rows


def write_partition(root: Path, rows: list[tuple[str, str]]) -> None:
    folder = root / "prompts" / PARTITION
    folder.mkdir(parents=True, exist_ok=True)
    for name in {name for name, _ in rows}:
        with open(folder / f"{name}.jsonl", "wb") as fh:
            for i, (_, text) in enumerate(row for row in rows if row[0] == name):
                fh.write(
                    orjson.dumps(
                        {"id": f"{name}-{i:05d}", "messages": [{"role": "user", "content": text}]},
                        option=orjson.OPT_APPEND_NEWLINE,
                    )
                )


# ------------------------------------------------------------------------------------ observing
class Observer(threading.Thread):
    """Samples /sim/stats every 20 ms; keeps the sample at which the last request arrived."""

    def __init__(self, url: str, total: int | None):
        super().__init__(daemon=True)
        self.http = httpx.Client(base_url=url, timeout=30.0, trust_env=False)
        self.total = total
        self.at_last_send: dict | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            stats = self.http.get("/sim/stats").json()
            received = stats["generate_requests"] + stats["http_in_flight"]  # answered + still held
            if self.at_last_send is None and self.total and received >= self.total:
                self.at_last_send = {**stats, "now": time.time()}
            self.stop.wait(0.02)

    def finish(self, workload: str, policy: str) -> Figures:
        self.stop.set()
        self.join()
        stats = self.http.get("/sim/stats").json()
        self.http.close()
        figures = Figures(
            workload,
            policy,
            completed=stats["completed"],
            retractions=stats["retractions"],
            peak_in_flight=stats["peak_in_flight"],
            peak_running=stats["peak_running"],
        )
        start, end = stats["first_request_at"], stats["last_finish_at"]
        if start is not None and end is not None:
            figures.wall_s = end - start
        if stats["completed"]:
            figures.queue_s_mean = stats["queue_time_total"] / stats["completed"]
        last = self.at_last_send
        if last is not None and start is not None and end is not None:
            figures.tail_s = end - last["now"]
            span = last["now"] - start
            figures.busy_fraction = min(1.0, last["busy_time"] / span) if span > 0 else None
        return figures


# ------------------------------------------------------------------------------------ drivers
async def drive_inproc(
    url: str, requests: list[tuple[str, list[int]]], policy: str, max_tokens: int, cap: int | None
) -> dict[str, int]:
    """Send every request under the policy; with ``cap``, stop launching a dataset's requests once
    its answered output tokens reach the cap, so the overshoot is what was in flight then (the
    runner's gate also counts the expected tokens of requests in flight, and overshoots less).
    Returns the output tokens per dataset."""
    http = httpx.AsyncClient(
        base_url=url, timeout=600.0, trust_env=False, limits=httpx.Limits(max_connections=len(requests) + 8)
    )
    initial = len(requests) if policy == "flood" else (64 if policy == "auto" else int(policy))
    controller = AutoConcurrency() if policy == "auto" else None
    limit = InFlightLimit(controller.target if controller else initial)
    monitor_task = None
    if controller is not None:
        monitor = LoadMonitor(_Loads(http), limit, controller, on_message=lambda text: print("  [auto]", text))
        await monitor.poll_once()  # sized from the server before the first request
        monitor_task = asyncio.create_task(monitor.run())
    done: dict[str, int] = {}

    async def one(dataset: str, ids: list[int]) -> None:
        try:
            answer = (
                await http.post("/generate", json={"input_ids": ids, "sampling_params": {"max_new_tokens": max_tokens}})
            ).json()
            done[dataset] = done.get(dataset, 0) + answer["meta_info"]["completion_tokens"]
        finally:
            limit.release()

    tasks = []
    for dataset, ids in requests:
        await limit.acquire()
        if cap is not None and done.get(dataset, 0) >= cap:
            limit.release()
            continue
        tasks.append(asyncio.create_task(one(dataset, ids)))
    await asyncio.gather(*tasks)
    if monitor_task is not None:
        monitor_task.cancel()
        await asyncio.gather(monitor_task, return_exceptions=True)
        print("  " + monitor.summary_line())
    await http.aclose()
    return done


class _Loads:
    """The LoadSource the monitor needs, over the driver's own httpx client."""

    def __init__(self, http: httpx.AsyncClient):
        self.http = http

    async def loads(self, path: str = "/v1/loads") -> dict | None:
        try:
            response = await self.http.get(path)
        except httpx.HTTPError:
            return None
        return response.json() if response.status_code == 200 else None


def cli_accepts_auto() -> bool:
    help_text = subprocess.run(
        [sys.executable, str(RUN), "--help"], capture_output=True, text=True, env=cli_env()
    ).stdout
    return "auto" in help_text.split("--concurrency", 1)[-1].split("--request-timeout", 1)[0]


def drive_cli(url: str, ws: Path, policy: str, total: int, max_tokens: int, cap: int | None) -> dict[str, int]:
    concurrency = str(total) if policy == "flood" else policy
    command = cli_command(ws, url, PARTITION, max_tokens, concurrency, "--status-interval", "5")
    if cap is not None:
        command += ["--max-tokens-per-dataset", str(cap)]
    result = subprocess.run(
        command,
        cwd=ws,
        env=cli_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"run_inference.py exited {result.returncode}: {result.stderr[-2000:]}")
    done = {}
    for path in (ws / "outputs").glob("*/raw_responses.jsonl"):
        with open(path, "rb") as fh:
            done[path.parent.name] = sum(orjson.loads(line).get("completion_tokens") or 0 for line in fh)
    return done


# ------------------------------------------------------------------------------------ one run
def run_one(args, tokenizer_dir: Path, tokenizer: Tokenizer, workload: str, policy: str, cap: int | None) -> Figures:
    counts = {"short": args.short_prompts, "long": args.long_prompts}
    rows = prompts_for(workload, counts)
    sim_args = scheduler_args(args.kv_tokens, args.max_running, args.step_time, args.step_time_per_req)
    with tempfile.TemporaryDirectory(prefix="bench-conc-") as tmp, Simulator(tokenizer_dir, *sim_args) as sim:
        ws = Path(tmp)
        observer = Observer(sim.url, None if cap is not None else len(rows))
        if args.driver == "cli":
            write_partition(ws, rows)
            observer.start()
            done = drive_cli(sim.url, ws, policy, len(rows), args.max_tokens, cap)
        else:
            requests = [(name, chatml_ids(tokenizer, text)) for name, text in rows]
            observer.start()
            done = asyncio.run(drive_inproc(sim.url, requests, policy, args.max_tokens, cap))
        figures = observer.finish(workload, policy)
    if cap is not None:
        figures.overshoot = {name: tokens - cap for name, tokens in sorted(done.items())}
    return figures


def chatml_ids(tokenizer: Tokenizer, text: str) -> list[int]:
    return tokenizer.encode(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n").ids


# ------------------------------------------------------------------------------------ report
def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def report(runs: list[Figures], budget: list[Figures], cap: int | None) -> str:
    lines = [
        "workload  policy   wall s  vs flood  busy  tail s  peak in-flight  peak running  "
        "1.25*run+16  queue s/req  retractions"
    ]
    flood = {f.workload: f.wall_s for f in runs if f.policy == "flood"}
    for f in runs:
        versus = f"{f.wall_s / flood[f.workload]:.3f}" if flood.get(f.workload) else "-"
        lines.append(
            f"{f.workload:<9} {f.policy:<7} {f.wall_s:7.1f}  {versus:>8}  {fmt(f.busy_fraction, '.3f'):>4}  "
            f"{fmt(f.tail_s, '6.1f'):>6}  {f.peak_in_flight:14d}  {f.peak_running:12d}  "
            f"{1.25 * f.peak_running + 16:11.0f}  {f.queue_s_mean:11.2f}  {f.retractions:11d}  {f.note}"
        )
    if budget:
        lines += ["", f"--max-tokens-per-dataset {cap}: output tokens over the cap, per dataset"]
        for f in budget:
            over = ", ".join(f"{name} {tokens:+,d}" for name, tokens in f.overshoot.items())
            lines.append(f"{f.workload:<9} {f.policy:<7} {over}  (peak in flight {f.peak_in_flight})")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Compare --concurrency auto, fixed values and flooding on the simulator's scheduler mode.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Examples:\n  python -m bench.bench_concurrency\n"
        "  python -m bench.bench_concurrency --driver cli --policies 16 64 256 flood\n",
    )
    add = parser.add_argument
    add("--driver", choices=("inproc", "cli"), default="inproc", help="who sends the prompts (default inproc)")
    add("--policies", nargs="+", default=list(POLICIES), help=f"default: {' '.join(POLICIES)}")
    add("--workloads", nargs="+", default=["short", "long", "both"], help="default: short long both")
    add("--short-prompts", type=int, default=600, help="prompts in the short-answer dataset (default 600)")
    add("--long-prompts", type=int, default=100, help="prompts in the long-answer dataset (default 100)")
    add("--max-tokens", type=int, default=448, help="max_new_tokens per request (default 448)")
    add("--kv-tokens", type=int, default=8000, help="simulator --max-total-tokens (default 8000)")
    add("--max-running", type=int, default=1024, help="simulator --max-running-requests (default 1024)")
    add("--step-time", type=float, default=0.005, help="simulator --step-time (default 0.005)")
    add("--step-time-per-req", type=float, default=0.0001, help="simulator --step-time-per-req (default 0.0001)")
    add(
        "--budget",
        type=int,
        default=None,
        metavar="TOKENS",
        help="also run each workload with this --max-tokens-per-dataset and report the overshoot",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    policies = list(args.policies)
    if args.driver == "cli" and "auto" in policies and not cli_accepts_auto():
        print("run_inference.py does not accept --concurrency auto yet: skipping auto", flush=True)
        policies.remove("auto")
    tmp = Path(tempfile.mkdtemp(prefix="bench-conc-tok-"))
    try:
        tokenizer_dir = build_tokenizer(tmp / "tok")
        tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
        print(
            f"driver {args.driver}; simulator KV {args.kv_tokens} tokens, step {args.step_time} s "
            f"+ {args.step_time_per_req} s/request; max_tokens {args.max_tokens}; "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        runs, budget = [], []
        for workload in args.workloads:
            for policy in policies:
                started = time.monotonic()
                runs.append(run_one(args, tokenizer_dir, tokenizer, workload, policy, None))
                print(f"{workload} {policy}: {time.monotonic() - started:.1f} s", flush=True)
            if args.budget:
                for policy in policies:
                    budget.append(run_one(args, tokenizer_dir, tokenizer, workload, policy, args.budget))
        print(report(runs, budget, args.budget))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
