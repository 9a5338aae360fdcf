"""Streaming's cost: plain /generate against streamed at ``stream_interval`` 1, 16 and 256.

The same requests (fixed-length answers, all in flight at once) go through ``SGLangClient.generate``
plain, then streamed with a progress callback (what checkpoints and the loop guard use), against:

- ``sim``: the simulator in its scheduler mode (``tests/support/sglang_sim.py --max-total-tokens``),
  whose decode step takes ``--step-time`` plus ``--step-time-per-req`` per running request; its
  chunks are built and sent by Python handler threads, as the real tokenizer manager builds its own;
- ``real``: SGLang 0.5.23 on this CPU with the tiny model (``scripts/real_sglang.py``; pass
  ``--real-url`` to use a server already running), ``ignore_eos`` so every answer is as long as asked.

Figures per mode: wall, output tokens per second and its ratio to plain, chunks received, the
client's CPU per request, and the server's CPU (the simulator's process; the real server's whole
process group). Cumulative chunks carry every id so far, so interval 1 costs O(answer^2) bytes
per request on both sides; a coarse interval costs about nothing. Load average is printed: on a
shared machine, run it twice before trusting a difference.

    python -m bench.bench_streaming                       # sim and real, the defaults below
    python -m bench.bench_streaming --targets sim --sim-length 4000
    python -m bench.bench_streaming --targets real --real-url http://127.0.0.1:30000
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.simproc import Simulator, build_tokenizer
from synthgen.server.client import SGLangClient

CLK_TCK = os.sysconf("SC_CLK_TCK")
# None: plain, first and again last, so the drift of a shared machine shows.
MODES: tuple[int | None, ...] = (None, 256, 16, 1, None)
HEADER = "target mode        reqs   tokens  wall s     tok/s  vs plain   chunks  client ms/req  server CPU s  kept"


@dataclass
class Row:
    target: str
    mode: str
    requests: int
    tokens: int
    wall: float
    chunks: int
    client_cpu: float  # seconds
    server_cpu: float  # seconds
    honoured: bool | None

    @property
    def rate(self) -> float:
        return self.tokens / self.wall if self.wall else 0.0


def cpu_of(pids: list[int]) -> float:
    """User + system CPU seconds of these running processes."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def group_pids(pgid: int) -> list[int]:
    """Every process in the process group ``pgid`` (a real server and its scheduler, detokenizer)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid:
                pids.append(int(entry.name))
    return pids


async def drive(url: str, payloads: list[dict], interval: int | None) -> tuple[int, float, int, float, bool | None]:
    """Send every payload at once; returns tokens, wall, chunks, client CPU, interval honoured."""
    client = SGLangClient(url, None, len(payloads), 3600.0)
    chunks = 0

    def progress(ids: list[int]) -> None:
        nonlocal chunks
        chunks += 1

    async def one(payload: dict) -> int:
        if interval is None:
            generation = await client.generate(payload)
        else:
            generation = await client.generate(payload, progress, stream_interval=interval)
        return len(generation.output_ids or [])

    cpu, started = time.process_time(), time.monotonic()
    try:
        tokens = sum(await asyncio.gather(*(one(payload) for payload in payloads)))
    finally:
        await client.aclose()
    wall = time.monotonic() - started
    return tokens, wall, chunks + len(payloads), time.process_time() - cpu, client.stream_interval_honoured


def measure(target: str, url: str, payloads: list[dict], server_pids) -> list[Row]:
    """Every mode in turn, after an unmeasured warm-up (connections, the server's first batches)."""
    asyncio.run(drive(url, payloads[:4], None))
    rows = []
    for interval in MODES:
        before = cpu_of(server_pids())
        tokens, wall, chunks, client_cpu, honoured = asyncio.run(drive(url, payloads, interval))
        mode = "plain" if interval is None else f"stream@{interval}"
        rows.append(
            Row(target, mode, len(payloads), tokens, wall, chunks, client_cpu, cpu_of(server_pids()) - before, honoured)
        )
        print_row(rows[-1], rows[0])
    return rows


def print_row(row: Row, plain: Row) -> None:
    ratio = row.rate / plain.rate if plain.rate else 0.0
    print(
        f"{row.target:5} {row.mode:11} {row.requests:5} {row.tokens:8,} {row.wall:7.1f} {row.rate:9,.0f} "
        f"{ratio:6.2f}x {row.chunks:8,} {1000 * row.client_cpu / row.requests:10.1f} {row.server_cpu:9.1f}"
        f"  {'' if row.honoured is None else row.honoured}",
        flush=True,
    )


def run_sim(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = build_tokenizer(Path(tmp) / "tok")
        sim_args = [
            "--max-total-tokens", str(args.sim_requests * (args.sim_length + 64) * 2),
            "--step-time", str(args.step_time),
            "--step-time-per-req", str(args.step_time_per_req),
            "--output-len-dist", f"fixed:{args.sim_length}",
            "--context-length", str(args.sim_length + 512),
        ]  # fmt: skip
        with Simulator(tokenizer, *sim_args) as sim:
            payloads = [
                {
                    "input_ids": [100 + i % 50, 200 + i // 50, 7, 8, 9],
                    "sampling_params": {"max_new_tokens": args.sim_length},
                }
                for i in range(args.sim_requests)
            ]
            measure("sim", sim.url, payloads, lambda: [sim.pid])


def run_real(args: argparse.Namespace) -> None:
    from tests.integration import realserver

    server = None
    if args.real_url:
        url, pgid = args.real_url, args.real_pgid
    else:
        if not realserver.is_setup():
            raise SystemExit("the real server is not set up: python scripts/real_sglang.py setup")
        server = realserver.start_server()
        url, pgid = server["url"], server["pid"]
    try:
        payloads = [
            {
                "input_ids": [1, 872, 198, 100 + i, 201, 300, 2, 198, 1, 77, 198],
                "sampling_params": {"max_new_tokens": args.real_length, "ignore_eos": True, "temperature": 0},
            }
            for i in range(args.real_requests)
        ]
        measure("real", url, payloads, lambda: group_pids(pgid) if pgid else [])
    finally:
        if server:
            realserver.stop(server["pid"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", nargs="+", choices=("sim", "real"), default=["sim", "real"])
    parser.add_argument("--sim-requests", type=int, default=64, help="requests, all in flight (default %(default)s)")
    parser.add_argument("--sim-length", type=int, default=1000, help="output tokens each (default %(default)s)")
    parser.add_argument("--step-time", type=float, default=0.005, help="sim seconds per step (default %(default)s)")
    parser.add_argument("--step-time-per-req", type=float, default=0.0001, help="sim step seconds per running request")
    parser.add_argument("--real-requests", type=int, default=16, help="requests, all in flight (default %(default)s)")
    parser.add_argument("--real-length", type=int, default=200, help="output tokens each (default %(default)s)")
    parser.add_argument("--real-url", help="a real SGLang server already running (default: start one)")
    parser.add_argument("--real-pgid", type=int, help="its process group, for its CPU (default: not measured)")
    args = parser.parse_args(argv)
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    print(HEADER)
    for target in args.targets:
        run_sim(args) if target == "sim" else run_real(args)
    print(f"load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
