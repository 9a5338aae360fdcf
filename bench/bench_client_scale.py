"""Client scaling: CPU per completed prompt and who bounds the wall, from 32 to 1,024 requests in flight.

The simulator (``tests/support/sglang_sim.py``, per-request engine) answers every prompt after a fixed
``--answer-seconds`` (``--output-len-dist fixed:L`` tokens at ``--token-delay answer/L``) and has
room for everything in flight, so the server alone would need ``ceil(prompts / N) * answer``
seconds at N in flight. Each run keeps N in flight with ``run_inference.py --concurrency N``
(driver ``cli``), or sends the same token ids through ``SGLangClient.generate`` from this process
(driver ``client``: the HTTP client alone, with ``--transport`` one of ``spread`` (the run's),
``httpcore`` (httpx's default, one pool) or ``aiohttp`` (httpx-aiohttp, if installed)).

Figures per run: the client's CPU per completed prompt (the CLI child's rusage, minus the CPU of a
``--dry-run`` start-up of the same command; the ``client`` driver: this process's CPU while it
sends), the simulator's CPU per prompt (its /proc stat), the server's peak in flight, the wall
from the first request received to the last answer, the server-bound ideal and the verdict:
``server-bound`` when the wall is within 15% of the ideal plus a second, else ``client-bound``
when the client's CPU was at least 75% of the wall (one core is all one asyncio process has),
else ``sim-bound`` when the simulator used more CPU than the client, else ``machine-bound`` (the
wall went to other load). The load average goes next to every row: on a shared machine read the
CPU columns, they hardly move with load.

    python -m bench.bench_client_scale                                  # cli, 32 128 512 1024
    python -m bench.bench_client_scale --driver client --transport httpcore spread aiohttp
    python -m bench.bench_client_scale --in-flight 1024 --profile /tmp/cli.prof   # cProfile the CLI
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
from tokenizers import Tokenizer

from bench.simproc import Simulator, build_tokenizer, cli_command, cli_env

PARTITION = "scale"
CLK_TCK = os.sysconf("SC_CLK_TCK")
# cProfile of the event-loop thread in CPU time (its default clock is the wall's, which on a shared
# machine charges other processes' time to whatever call was waiting): python -c PROFILE OUT SCRIPT ARGS...
PROFILE = """
import cProfile, os, runpy, sys, time
out, sys.argv = sys.argv[1], sys.argv[2:]
sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
profiler = cProfile.Profile(time.thread_time)
profiler.enable()
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    profiler.disable()
    profiler.dump_stats(out)
"""


@dataclass
class Row:
    driver: str
    transport: str
    in_flight: int
    prompts: int
    done: int = 0
    client_cpu_ms: float = 0.0  # per completed prompt
    sim_cpu_ms: float = 0.0
    wall_s: float = 0.0
    ideal_s: float = 0.0
    peak_in_flight: int = 0
    load: float = 0.0

    @property
    def client_busy(self) -> float:
        """The client's CPU over the wall: near 1, one core is all it can have."""
        return self.client_cpu_ms * self.done / 1000 / self.wall_s if self.wall_s else 0.0

    @property
    def verdict(self) -> str:
        if self.wall_s <= 1.15 * self.ideal_s + 1.0:
            return "server-bound"
        if self.client_busy >= 0.75:
            return "client-bound"
        return "sim-bound" if self.sim_cpu_ms > self.client_cpu_ms else "machine-bound"


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def texts(count: int, chars: int) -> list[str]:
    words = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing".split()
    out = []
    for i in range(count):
        body = " ".join(words[(i * 7 + k) % len(words)] for k in range(chars // 5))
        out.append(f"Question {i}: {body}"[:chars])
    return out


def write_prompts(root: Path, prompts: list[str]) -> None:
    folder = root / "prompts" / PARTITION
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "scale.jsonl", "wb") as fh:
        for i, text in enumerate(prompts):
            record = {"id": f"p{i:06d}", "messages": [{"role": "user", "content": text}]}
            fh.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))


def run_command(ws: Path, url: str, in_flight: int, max_tokens: int) -> list[str]:
    extra = ("--max-concurrency", str(max(in_flight, 1024)), "--status-interval", "10")
    return cli_command(ws, url, PARTITION, max_tokens, in_flight, *extra)


def run_child(command: list[str], cwd: Path) -> tuple[float, str]:
    """Run ``command``; its CPU seconds (user + system, from wait4) and its stderr's tail."""
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen(command, cwd=cwd, env=cli_env(), stdin=subprocess.DEVNULL, stdout=err, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-3000:]
    if child.returncode not in (0,):
        raise RuntimeError(f"{command[1]} exited {child.returncode}: {tail}")
    return usage.ru_utime + usage.ru_stime, tail


async def drive_client(
    url: str, requests: list[list[int]], in_flight: int, max_tokens: int, transport: str, per_pool: int | None
) -> int:
    """Keep ``in_flight`` requests going through SGLangClient with the given transport; answers received."""
    import httpx

    from synthgen.server.client import SGLangClient, SpreadTransport, build_payload, new_rid

    chosen: httpx.AsyncBaseTransport | None
    if transport == "spread":
        chosen = SpreadTransport(in_flight + 4, per_pool) if per_pool else SpreadTransport(in_flight + 4)
    elif transport == "httpcore":
        limits = httpx.Limits(max_connections=in_flight + 4, max_keepalive_connections=in_flight + 4)
        chosen = httpx.AsyncHTTPTransport(limits=limits)
    else:
        from httpx_aiohttp import AiohttpTransport

        chosen = AiohttpTransport(limits=httpx.Limits(max_connections=in_flight + 4))
    client = SGLangClient(url, None, in_flight, 600.0, transport=chosen)
    gate = asyncio.Semaphore(in_flight)
    done = 0

    async def one(ids: list[int]) -> None:
        nonlocal done
        try:
            await client.generate(build_payload(ids, max_tokens, {}, new_rid()))
            done += 1
        finally:
            gate.release()

    tasks = []
    for ids in requests:
        await gate.acquire()
        tasks.append(asyncio.create_task(one(ids)))
    await asyncio.gather(*tasks)
    await client.aclose()
    return done


def run_one(args: argparse.Namespace, tok_dir: Path, tokenizer: Tokenizer, in_flight: int, transport: str) -> Row:
    prompts = args.prompts or max(args.min_prompts, args.rounds * in_flight)
    row = Row(args.driver, transport if args.driver == "client" else "spread", in_flight, prompts)
    length = args.answer_tokens
    answer = args.answer_seconds or max(0.5, in_flight * args.budget_ms / 1000)
    sim_args = ["--output-len-dist", f"fixed:{length}", "--token-delay", str(answer / length)]
    rounds = math.ceil(prompts / in_flight)
    row.ideal_s = rounds * answer
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp, Simulator(tok_dir, *sim_args) as sim:
        ws = Path(tmp)
        items = texts(prompts, args.prompt_chars)
        sim_before = proc_cpu(sim.pid)
        row.load = os.getloadavg()[0]
        if args.driver == "cli":
            write_prompts(ws, items)
            command = run_command(ws, sim.url, in_flight, length + 8)
            start_cpu, _ = run_child([*command, "--dry-run"], ws)
            sim.client.post("/sim/reset")
            sim_before = proc_cpu(sim.pid)
            if args.profile:
                command = [command[0], "-c", PROFILE, args.profile, *command[1:]]
            cpu, _ = run_child(command, ws)
            cpu -= start_cpu
            with open(ws / "outputs" / "scale" / "raw_responses.jsonl", "rb") as fh:
                row.done = sum(1 for _ in fh)
        else:
            requests = [
                tokenizer.encode(f"<|im_start|>user\n{t}<|im_end|>\n<|im_start|>assistant\n").ids for t in items
            ]
            started = time.process_time()
            row.done = asyncio.run(drive_client(sim.url, requests, in_flight, length + 8, transport, args.per_pool))
            cpu = time.process_time() - started
        stats = sim.stats()
        sim_cpu = proc_cpu(sim.pid) - sim_before
    row.client_cpu_ms = 1000 * cpu / max(1, row.done)
    row.sim_cpu_ms = 1000 * sim_cpu / max(1, row.done)
    if stats["first_request_at"] is not None and stats["last_finish_at"] is not None:
        row.wall_s = stats["last_finish_at"] - stats["first_request_at"]
    row.peak_in_flight = stats["peak_in_flight"]
    return row


def report(rows: list[Row]) -> str:
    lines = [
        "driver  transport  in flight  prompts   done  peak  client CPU ms/prompt  vs 32  sim CPU ms/prompt  "
        "wall s  server s  client busy  verdict        load"
    ]
    base = {(r.driver, r.transport): r.client_cpu_ms for r in rows if r.in_flight == min(x.in_flight for x in rows)}
    for r in rows:
        ratio = r.client_cpu_ms / base[(r.driver, r.transport)] if base.get((r.driver, r.transport)) else float("nan")
        lines.append(
            f"{r.driver:<7} {r.transport:<9} {r.in_flight:9d} {r.prompts:8d} {r.done:6d} {r.peak_in_flight:5d}  "
            f"{r.client_cpu_ms:20.1f}  {ratio:5.2f}  {r.sim_cpu_ms:17.1f}  {r.wall_s:6.1f}  {r.ideal_s:8.1f}  "
            f"{r.client_busy:11.2f}  {r.verdict:<13} {r.load:5.1f}"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Client CPU per prompt and server- or client-bound wall, 32 -> 1,024 requests in flight.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n")[-1],
    )
    add = parser.add_argument
    add("--driver", choices=("cli", "client"), default="cli", help="run_inference.py, or SGLangClient alone")
    add("--transport", nargs="+", default=["spread"], help="client driver: spread httpcore aiohttp (default spread)")
    add("--in-flight", nargs="+", type=int, default=[32, 128, 512, 1024], help="default: 32 128 512 1024")
    add("--per-pool", type=int, help="client driver, spread: connections per pool (default: the client's)")
    add("--rounds", type=int, default=2, help="prompts = rounds x in flight, at least --min-prompts (default 2)")
    add("--min-prompts", type=int, default=1024, help="default 1024")
    add("--prompts", type=int, help="the same number of prompts at every in-flight count")
    add("--prompt-chars", type=int, default=400, help="user message length (default 400, ~100 tokens)")
    add("--answer-tokens", type=int, default=40, help="output tokens per answer (default 40)")
    add(
        "--answer-seconds",
        type=float,
        help="server time per answer (default: in flight x --budget-ms, at least 0.5 s: 20.5 s at 1,024)",
    )
    add(
        "--budget-ms",
        type=float,
        default=20.0,
        help="client CPU per prompt at which a core just keeps up with the default answers (default 20)",
    )
    add("--repeat", type=int, default=1, help="runs per configuration (default 1)")
    add("--profile", help="cli driver: cProfile the CLI's main thread (CPU time) into this file (last run wins)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-tok-"))
    rows = []
    try:
        tok_dir = build_tokenizer(tmp / "tok")
        tokenizer = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
        print(
            f"driver {args.driver}; answers {args.answer_tokens} tokens in "
            f"{args.answer_seconds or f'max(0.5, in flight x {args.budget_ms:g} ms)'} s; "
            f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        transports = args.transport if args.driver == "client" else ["spread"]
        for _ in range(args.repeat):
            for transport in transports:
                for in_flight in args.in_flight:
                    row = run_one(args, tok_dir, tokenizer, in_flight, transport)
                    rows.append(row)
                    print(report([row]).splitlines()[1], flush=True)
        print(report(rows))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
