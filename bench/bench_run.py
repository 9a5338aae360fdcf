#!/usr/bin/env python3
"""Benchmark run_inference.py against the SGLang simulator; prints figures, decides nothing.

For each size given to --prompts it writes --datasets synthetic datasets of that many long
prompts into a scratch workspace, starts ``tests/support/sglang_sim.py`` (a real HTTP server) and runs
``run_inference.py`` in a subprocess, as a user would. It measures:

- first request: seconds from launching the CLI to the first /generate reaching the server
  (``/sim/stats`` polled every 5 ms until a request is in flight). The CLI's stderr lines are
  timestamped as they arrive, which splits that time into "plan printed" (every file scanned)
  and "model line printed" (server queried, tokenizer loaded);
- wall time, and completed prompts/s and output tokens/s from the result files the CLI wrote;
- CPU time of the CLI (``os.wait4`` rusage) and of the simulator (/proc), per completed prompt;
- the CLI's RSS when the first request arrived, half-way and at the end, and its peak: VmRSS
  and VmHWM from /proc/<pid>/status, read every 20 ms until it exits. (Not ``ru_maxrss``: a
  child started by vfork+exec inherits the parent's high-water mark in it.)
- requests in flight over time, rebuilt from the simulator's request log (completion times) and
  each result's latencies: as the CLI saw them (completion - its latency_s) and as the server
  did (completion - e2e latency). Time-weighted mean, minimum and time below half the pool
  between the pool first filling and the last request being sent, and the count when each
  dataset's first request goes out. ``/sim/stats`` sampled every --poll-interval seconds
  gives a coarse server-side minimum beside them.

Then, in this process, it times ``synthgen.data.prompts.scan_dataset`` (the validation pass the CLI
makes over every file before its first request) over the largest run's files, and measures
the index it keeps with tracemalloc.

The CLI and the simulator are both Python processes on this machine: throughput is that of
the pair (the simulator decodes every prompt and re-encodes an echo of it), and other load on
the machine shows up in every figure. Run it twice before trusting a difference.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from bench.simproc import RUN, Simulator, build_tokenizer, cli_command, cli_env
from synthgen.data.prompts import DatasetSource, scan_dataset
from synthgen.data.records import ResultRecord
from synthgen.data.store import iter_results

PARTITION = "bench"
# Word-like text, so tokenizing costs what it would on prose (3.5 characters per token here).
WORDS = (
    "the of and to in is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there been one all we their has would when if so no will more "
    "about can said them some could into him time only my than then its two also after first new "
    "function return value error request server model token prompt dataset result memory process "
    "because between through without against during before under around however therefore"
).split()


# ------------------------------------------------------------------------------------ inputs
def text_pool(chars: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    words: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


def write_dataset(path: Path, name: str, prompts: int, chars: int, pool: str) -> None:
    """``prompts`` lines with a user message of about ``chars`` characters, no two alike."""
    path.parent.mkdir(parents=True, exist_ok=True)
    span = len(pool) - chars
    with open(path, "wb") as fh:
        for i in range(prompts):
            start = (i * 7919) % span
            row = {
                "id": f"{name}-{i:07d}",
                "messages": [
                    {"role": "system", "content": "You are a careful assistant."},
                    {"role": "user", "content": f"Question {i} of {name}: " + pool[start : start + chars]},
                ],
            }
            fh.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))


# ------------------------------------------------------------------------------------ one run
@dataclass
class Pool:
    """In-flight figures over one view of the run's requests."""

    full_s: float | None = None  # when --concurrency requests were first in flight
    last_send_s: float | None = None
    mean: float | None = None  # time-weighted, from full_s to last_send_s
    low: int | None = None  # minimum, same window
    below_half_s: float | None = None  # time with fewer than concurrency / 2, same window

    def cell(self) -> str:
        return f"{fmt(self.mean, '.1f')} / {fmt(self.low, 'd')} / {fmt(self.below_half_s, '.1f')}"


@dataclass
class RunFigures:
    prompts: int
    file_mb: float
    exit_code: int = -1
    first_request_s: float | None = None
    wall_s: float = 0.0
    completed: int = 0
    output_tokens: int = 0
    client_cpu_s: float = 0.0
    sim_cpu_s: float | None = None
    rss_first_mb: float | None = None
    rss_mid_mb: float | None = None
    rss_end_mb: float | None = None
    peak_rss_mb: float = 0.0
    client_pool: Pool | None = None
    server_pool: Pool | None = None
    sampled_min_in_flight: int | None = None  # server, from /sim/stats, in the client pool's window
    boundaries: list[str] = field(default_factory=list)
    stderr_tail: list[str] = field(default_factory=list)


def memory_mb(pid: int) -> tuple[float, float] | None:
    """(VmRSS, VmHWM) in MB, or None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    kb = {k: int(v.split()[0]) for k, v in (ln.split(":", 1) for ln in text.splitlines()) if k in ("VmRSS", "VmHWM")}
    return (kb["VmRSS"] / 1024, kb["VmHWM"] / 1024) if len(kb) == 2 else None


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def read_lines_timed(stream, t0: float, into: list[tuple[float, str]]) -> None:
    for raw in stream:
        into.append((time.monotonic() - t0, raw.decode(errors="replace").rstrip("\n")))


def run_once(args, tokenizer_dir: Path, ws: Path, per_dataset: int, pool: str) -> RunFigures:
    names = [f"ds{k}" for k in range(args.datasets)]
    for name in names:
        write_dataset(ws / "prompts" / PARTITION / f"{name}.jsonl", name, per_dataset, args.prompt_chars, pool)
    file_bytes = sum(p.stat().st_size for p in (ws / "prompts" / PARTITION).glob("*.jsonl"))
    total = per_dataset * args.datasets
    figures = RunFigures(total, file_bytes / 1e6)
    request_log = ws / "sim_requests.jsonl"
    sim_args = ["--context-length", str(args.context_length), "--request-log", str(request_log)]
    if args.token_delay:
        sim_args += ["--token-delay", str(args.token_delay)]

    with Simulator(tokenizer_dir, *sim_args) as sim:
        command = cli_command(
            ws, sim.url, PARTITION, args.max_tokens, args.concurrency, "--status-interval", str(args.status_interval)
        )
        stderr_lines: list[tuple[float, str]] = []
        samples: list[tuple[float, int]] = []  # (seconds since launch, server in-flight)
        t0_wall = time.time()
        t0 = time.monotonic()
        proc = subprocess.Popen(
            command, cwd=ws, env=cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        reader = threading.Thread(target=read_lines_timed, args=(proc.stderr, t0, stderr_lines), daemon=True)
        reader.start()
        next_sample = 0.0
        while True:
            # wait4 rather than Popen.wait: its rusage has this one child's CPU time.
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            now = time.monotonic() - t0
            memory = memory_mb(proc.pid)
            if memory:
                figures.rss_end_mb, figures.peak_rss_mb = memory
            if figures.first_request_s is None:
                stats = sim.stats()  # tiny until requests arrive, so polling it this often is cheap
                if stats["in_flight"] or stats["generate_requests"]:
                    figures.first_request_s, figures.rss_first_mb = now, figures.rss_end_mb
                    if args.startup_only:
                        proc.terminate()  # the CLI drains what is in flight and exits 143
                time.sleep(0.005)
                continue
            if now >= next_sample:
                stats = sim.stats()
                samples.append((now, stats["in_flight"]))
                if figures.rss_mid_mb is None and stats["completed"] >= total / 2:
                    figures.rss_mid_mb = figures.rss_end_mb
                next_sample = now + args.poll_interval
            time.sleep(0.02)
        figures.wall_s = time.monotonic() - t0
        proc.returncode = figures.exit_code = os.waitstatus_to_exitcode(status)
        figures.client_cpu_s = usage.ru_utime + usage.ru_stime
        figures.sim_cpu_s = cpu_seconds(sim.pid)
        reader.join(5)
        proc.stderr.close()

    figures.stderr_tail = [line for _, line in stderr_lines[-12:]]

    rows: list[ResultRecord] = []
    for name in names:
        rows += iter_results(ws / "outputs" / name / "raw_responses.jsonl")
    figures.completed = len(rows)
    figures.output_tokens = sum(r.completion_tokens for r in rows)
    in_flight_timeline(figures, rows, request_log, t0_wall, args.concurrency, names)
    pool = figures.client_pool
    if pool is not None and pool.full_s is not None:
        window = [n for t, n in samples if pool.full_s <= t <= pool.last_send_s]
        figures.sampled_min_in_flight = min(window, default=None)
    return figures


def pool_figures(spans: list[tuple[float, float, str]], concurrency: int) -> Pool:
    events = sorted([(a, 1) for a, _, _ in spans] + [(e, -1) for _, e, _ in spans])
    pool = Pool(last_send_s=max(a for a, _, _ in spans))
    last_send = pool.last_send_s
    count, area, below, previous = 0, 0.0, 0.0, 0.0
    for t, step in events:
        if pool.full_s is not None and previous < last_send:
            span = max(min(t, last_send) - previous, 0.0)
            area += count * span
            below += span if count < concurrency / 2 else 0.0
        count += step
        previous = t
        if pool.full_s is None and count >= concurrency:
            pool.full_s = t
        elif pool.full_s is not None and t < last_send:
            pool.low = count if pool.low is None else min(pool.low, count)
    if pool.full_s is not None and last_send > pool.full_s:
        pool.mean, pool.below_half_s = area / (last_send - pool.full_s), below
    return pool


def in_flight_timeline(
    figures: RunFigures, rows: list[ResultRecord], request_log: Path, t0_wall: float, concurrency: int, names: list[str]
) -> None:
    """In-flight counts over time as the server saw them and as the CLI saw them.

    The simulator logs when it finished each request; a result row carries the server's e2e
    latency (from the request body read to the answer) and the CLI's own latency (from send to
    answer). Completion minus either gives that side's start: the server view misses the time
    a request waits inside a busy simulator before it is read, the client view is early by the
    time the answer takes to reach the CLI's event loop.
    """
    if not request_log.exists() or not rows:
        return
    done_at = {}
    for line in request_log.read_bytes().splitlines():
        entry = orjson.loads(line)
        done_at[entry["rid"]] = entry["time"] - t0_wall
    server, client = [], []  # (start, end, dataset), seconds since launch
    for row in rows:
        end = done_at.get(row.request_id)
        if end is not None and row.server_latency_s is not None:
            server.append((end - row.server_latency_s, end, row.dataset))
            client.append((end - row.latency_s, end, row.dataset))
    if not server:
        return
    figures.server_pool, figures.client_pool = pool_figures(server, concurrency), pool_figures(client, concurrency)
    for before, after in zip(names, names[1:], strict=False):
        firsts = [a for a, _, d in client if d == after]
        if not firsts:
            continue
        t = min(firsts)
        in_flight = sum(1 for a, e, _ in client if a < t < e)
        of_before = sum(1 for a, e, d in client if d == before and a < t < e)
        last_before = max((a for a, _, d in client if d == before), default=t)
        gap = (last_before - t) * 1e3
        figures.boundaries.append(
            f"{before}->{after} at {t:.1f} s: {in_flight} in flight ({of_before} of {before}); the last {before} "
            f"request went out {abs(gap):.0f} ms {'after' if gap > 0 else 'before'} the first {after} one"
        )


# ------------------------------------------------------------------------------------ fixed costs
def cli_start_seconds() -> float:
    """Best of three ``run_inference.py --version``: interpreter start plus the CLI's imports."""
    best = float("inf")
    for _ in range(3):
        started = time.monotonic()
        subprocess.run([sys.executable, str(RUN), "--version"], env=cli_env(), capture_output=True, check=True)
        best = min(best, time.monotonic() - started)
    return best


def scan_cost(paths: list[Path]) -> str:
    """Time scan_dataset over the files (as plan() does), then measure the index it keeps."""
    sources = [DatasetSource(p.stem, PARTITION, p) for p in paths]
    size_mb = sum(p.stat().st_size for p in paths) / 1e6
    started = time.perf_counter()
    prompts = sum(len(scan_dataset(s).ids) for s in sources)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    indexes = [scan_dataset(s) for s in sources]
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del indexes
    return (
        f"scan_dataset over {len(paths)} files: {prompts:,} prompts, {size_mb:.0f} MB in {seconds:.2f} s = "
        f"{size_mb / seconds:.0f} MB/s ({seconds / size_mb * 1e3:.1f} s per GB); the indexes keep "
        f"{kept / 1e6:.1f} MB = {kept / prompts:.0f} B per prompt (peak {peak / 1e6:.1f} MB)"
    )


# ------------------------------------------------------------------------------------ report
def fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def per_prompt_ms(cpu_s: float | None, prompts: int) -> str:
    return "-" if cpu_s is None or not prompts else f"{cpu_s / prompts * 1e3:.1f}"


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in [header, *rows]]


def report(runs: list[RunFigures], startup_only: bool) -> str:
    lines = ["start-up and memory of the CLI"]
    lines += table(
        ("prompts", "file MB", "1st request s", "RSS@1st MB", "RSS mid MB", "RSS end MB", "peak RSS MB"),
        [
            (
                f"{f.prompts:,}",
                f"{f.file_mb:.0f}",
                fmt(f.first_request_s, ".2f"),
                fmt(f.rss_first_mb, ".0f"),
                fmt(f.rss_mid_mb, ".0f"),
                fmt(f.rss_end_mb, ".0f"),
                f"{f.peak_rss_mb:.0f}",
            )
            for f in runs
        ],
    )
    if startup_only:
        lines.append("(--startup-only: each run was stopped by SIGTERM at its first request)")
        return "\n".join(lines)
    lines += ["", "throughput and requests in flight"]
    lines += table(
        (
            "prompts",
            "done",
            "exit",
            "wall s",
            "prompts/s",
            "out tok/s",
            "CPU ms/prompt CLI",
            "sim",
            "CLI in-flight mean/min/s<half",
            "server in-flight",
            "sampled min",
        ),
        [
            (
                f"{f.prompts:,}",
                f"{f.completed:,}",
                str(f.exit_code),
                f"{f.wall_s:.1f}",
                f"{f.completed / f.wall_s:.1f}",
                f"{f.output_tokens / f.wall_s:,.0f}",
                per_prompt_ms(f.client_cpu_s, f.completed),
                per_prompt_ms(f.sim_cpu_s, f.completed),
                f.client_pool.cell() if f.client_pool else "-",
                f.server_pool.cell() if f.server_pool else "-",
                fmt(f.sampled_min_in_flight, "d"),
            )
            for f in runs
        ],
    )
    for f in runs:
        pool = f.client_pool or Pool()
        lines.append(
            f"{f.prompts:,} prompts: CLI pool full at {fmt(pool.full_s, '.2f')} s, last request sent at "
            f"{fmt(pool.last_send_s, '.1f')} s; " + ("; ".join(f.boundaries) or "one dataset")
        )
        if f.exit_code != 0 or f.completed != f.prompts:
            lines.append("  CLI stderr tail:\n    " + "\n    ".join(f.stderr_tail))
    return "\n".join(lines)


LEGEND = """\
1st request s: when the first /generate was in flight at the server (from /sim/stats)
RSS@1st / mid / end: the CLI's RSS at the first request, at half the prompts done, just before exit;
  peak RSS: its VmHWM just before exit
CPU ms/prompt: user+sys CPU of the CLI and of the simulator over the run, per completed prompt
CLI / server in-flight: requests in flight as the CLI saw them (send to answer) and as the server did
  (body read to answer), from the pool first filling to the last request sent: time-weighted mean,
  minimum, and seconds with fewer than --concurrency / 2; sampled min: server, from /sim/stats every
  --poll-interval s. Dataset boundaries are counted in the CLI view."""


# ------------------------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_run",
        description="Time run_inference.py against the SGLang simulator for several dataset sizes: first-request "
        "latency, the CLI's memory, throughput and the server's in-flight count across dataset "
        "boundaries; then the cost of the validation scan. Prints figures, no pass/fail.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  # the default: 2 datasets of 1,000, then of 10,000 prompts of 8,000 characters (~5 min)\n"
        "  python -m bench.bench_run\n\n"
        "  # a quick look with a slower server, so the pool is never short of CPU\n"
        "  python -m bench.bench_run --prompts 200 2000 --token-delay 0.02\n\n"
        "  # start-up only, up to 1.6 GB of prompt files\n"
        "  python -m bench.bench_run --prompts 1000 10000 100000 --startup-only\n\n"
        "  # four datasets of short prompts, files kept for inspection\n"
        "  python -m bench.bench_run --prompts 500 5000 --datasets 4 --prompt-chars 500 --keep\n",
    )
    p.add_argument(
        "--prompts",
        type=int,
        nargs="+",
        default=[1000, 10000],
        metavar="N",
        help="prompts per dataset; one run per value, in order (default: 1000 10000)",
    )
    p.add_argument("--datasets", type=int, default=2, metavar="K", help="datasets per run (default: 2)")
    p.add_argument(
        "--prompt-chars",
        type=int,
        default=8000,
        metavar="C",
        help="characters of each user message (default: 8000, about 2,300 tokens)",
    )
    p.add_argument("--max-tokens", type=int, default=16, help="--max-tokens given to the CLI (default: 16)")
    p.add_argument("--concurrency", type=int, default=32, help="--concurrency given to the CLI (default: 32)")
    p.add_argument("--status-interval", type=float, default=5.0, help="--status-interval given to the CLI (default: 5)")
    p.add_argument(
        "--token-delay", type=float, default=0.005, help="simulator seconds per generated token (default: 0.005)"
    )
    p.add_argument("--context-length", type=int, default=65536, help="simulator context length (default: 65536)")
    p.add_argument(
        "--poll-interval",
        type=float,
        default=0.25,
        help="seconds between /sim/stats samples once requests flow (default: 0.25)",
    )
    p.add_argument(
        "--startup-only",
        action="store_true",
        help="stop each run (SIGTERM) once its first request arrives: start-up figures for sizes too "
        "big to run through",
    )
    p.add_argument("--work-dir", type=Path, help="where to make the scratch folder (default: the system temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder (prompts, outputs, request logs)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.datasets < 1 or min(args.prompts) < 1 or args.prompt_chars < 1 or args.concurrency < 1:
        print(
            "bench_run.py: --prompts, --datasets, --prompt-chars and --concurrency must be at least 1", file=sys.stderr
        )
        return 2
    root = Path(tempfile.mkdtemp(prefix="synthgen-bench-", dir=args.work_dir))
    try:
        tokenizer_dir = build_tokenizer(root / "tokenizer", style="chatml")
        pool = text_pool(args.prompt_chars * 8)
        print(
            f"bench: {args.datasets} datasets x {' / '.join(map(str, args.prompts))} prompts of "
            f"{args.prompt_chars:,} chars; CLI --max-tokens {args.max_tokens} --concurrency {args.concurrency}; "
            f"simulator --token-delay {args.token_delay}; {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.1f}",
            flush=True,
        )
        print(f"CLI start (run_inference.py --version, best of 3): {cli_start_seconds():.2f} s", flush=True)
        runs = []
        for i, per_dataset in enumerate(args.prompts):
            runs.append(run_once(args, tokenizer_dir, root / f"run{i}-{per_dataset}", per_dataset, pool))
            print(
                f"  ran {runs[-1].prompts:,} prompts in {runs[-1].wall_s:.1f} s "
                f"(load average now {os.getloadavg()[0]:.1f})",
                flush=True,
            )
        print()
        print(report(runs, args.startup_only))
        print(LEGEND)
        print()
        i = args.prompts.index(max(args.prompts))
        largest = root / f"run{i}-{args.prompts[i]}" / "prompts" / PARTITION
        print(scan_cost(sorted(largest.glob("*.jsonl"))))
        if args.keep:
            print(f"kept {root}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
