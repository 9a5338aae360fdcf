"""Tokens the server generated against tokens kept in rows, when runs are interrupted with long answers
in flight: SIGTERMs (the drain shorter than an answer, as on a host where an answer takes minutes),
SIGKILLs of the run, and a server crash; each scenario then reruns to the end.

    python -m bench.bench_waste [--prompts 60] [--concurrency 24] [--length 1000-2000] [--step-time 0.01]
                                [--scenario "SIGKILL x2"] [--mode nothing|stop-only|default]
                                [--no-abort-request] [--drain-timeout 1]

Three ways are compared: nothing kept (``--keep-partials off --checkpoint-tokens 0``: what the run did
before; the requests in flight are ended, their output thrown away and generated again by the rerun);
stop-only keeping (``--checkpoint-tokens 0``: a stop ends them through /abort_request and keeps their
output so far, which the rerun continues; a crash still loses it); and the default, which also
streams each request and saves its output every 256 tokens, so a crash loses at most ~256 a request.

Generated is the simulator's own count of every token a decode step made (``tokens_decoded``,
scheduler mode), answered or not; kept is the sum of the rows' completion_tokens. After a SIGKILL
the simulator, as SGLang, ends a streamed request at once and a plain one at its next check of the
client (every 4 s): the tokens made until then for nobody are counted as thrown away. Answers are
``[sim:long=N]`` prompts (varied words; N uniform over ``--length``), so the loop guard, on by
default, has nothing to end.
"""

from __future__ import annotations

import argparse
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench.simproc import RUN, Simulator, build_tokenizer, cli_env
from tests.support.simharness import Sim, wait_until

# name -> (label, the run's options)
MODES = {
    "nothing": ("before: nothing kept", ("--keep-partials", "off", "--checkpoint-tokens", "0", "--loop-guard", "off")),
    "stop-only": ("stop-only keeping", ("--checkpoint-tokens", "0", "--loop-guard", "off")),
    "default": ("default (checkpoints 256)", ()),
}
SCENARIOS = ("SIGTERM x3", "SIGKILL x2", "server crash")


def prompts(count: int, length: str) -> bytes:
    """The prompts file: each answer's length drawn from ``length`` (LO-HI, uniform, seeded), asked of the
    simulator with ``[sim:long=N]``: varied words, as a real answer, which the loop guard leaves alone
    (the simulator's ``--output-len-dist`` pads answers with one repeated id, which it rightly ends)."""
    low, high = (int(n) for n in length.split("-"))
    draw = random.Random(0)
    lines = (
        orjson.dumps({"id": f"q{i:04d}", "prompt": f"question {i} [sim:long={draw.randint(low, high)}]"}) + b"\n"
        for i in range(count)
    )
    return b"".join(lines)


def rows(out: Path) -> list[dict]:
    path = out / "d" / "raw_responses.jsonl"
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


class Bench:
    def __init__(self, root: Path, tokenizer: Path, args: argparse.Namespace):
        self.root, self.tokenizer, self.args = root, tokenizer, args
        self.sim_args = (
            "--max-total-tokens",
            "4000000",
            "--max-running-requests",
            str(args.concurrency),
            "--step-time",
            str(args.step_time),
            *(("--no-abort-request",) if args.no_abort_request else ()),
        )

    def command(self, out: Path, mode: tuple[str, ...]) -> list[str]:
        high = int(self.args.length.split("-")[1])
        return [
            *(sys.executable, str(RUN), "--server-url", self.sim.url, "--output-dir", str(out)),
            *("--max-tokens", str(high + 100), "--concurrency", str(self.args.concurrency)),
            *("--drain-timeout", str(self.args.drain_timeout), "--status-interval", "5", *mode),
        ]

    def start(self, out: Path, mode: tuple[str, ...]) -> subprocess.Popen[bytes]:
        log = open(out.parent / f"{out.name}.log", "ab")  # noqa: SIM115  (the child keeps it)
        return subprocess.Popen(self.command(out, mode), cwd=self.root, env=cli_env(), stdout=log, stderr=log)

    def half_an_answer_later(self, proc: subprocess.Popen[bytes], out: Path) -> None:
        """Wait (on the server's decode steps, not the clock) until the run's answers in flight are half done."""
        low = int(self.args.length.split("-")[0])
        wait_until(lambda: self.sim.stats()["running"] > 0 or proc.poll() is not None, timeout=600)
        steps = self.sim.stats()["decode_steps"]
        wait_until(lambda: self.sim.stats()["decode_steps"] >= steps + low // 2 or proc.poll() is not None, timeout=600)
        if proc.poll() is not None:
            log = (out.parent / f"{out.name}.log").read_text()[-3000:]
            raise RuntimeError(f"the run ended before it could be interrupted (exit {proc.returncode}):\n{log}")

    def scenario(self, name: str, mode: tuple[str, ...]) -> tuple[int, int, float]:
        """(tokens generated, tokens kept in rows, the longest time from a SIGTERM to the run's exit)
        for one scenario in one mode."""
        out = self.root / f"out-{len(list(self.root.glob('out-*')))}"
        generated, stop = 0, 0.0
        with Simulator(self.tokenizer, *self.sim_args) as sim:
            self.sim: Sim = sim
            if name == "server crash":
                proc = self.start(out, mode)
                self.half_an_answer_later(proc, out)
                sim.pause()  # nothing more is decoded: the count read now is the count at the crash
                generated += sim.stats()["tokens_decoded"]
                sim.kill()
                sim.restart()
                assert proc.wait(timeout=3600) == 0
            else:
                sig = signal.SIGTERM if name.startswith("SIGTERM") else signal.SIGKILL
                for _ in range(int(name[-1])):
                    proc = self.start(out, mode)
                    self.half_an_answer_later(proc, out)
                    signalled = time.monotonic()
                    proc.send_signal(sig)
                    proc.wait(timeout=600)
                    if sig == signal.SIGTERM:
                        stop = max(stop, time.monotonic() - signalled)
                    else:  # the server generates for nobody until it sees the client gone (plain: within 4 s)
                        wait_until(lambda: self.sim.stats()["running"] == 0, timeout=600)
                final = subprocess.run(self.command(out, mode), cwd=self.root, env=cli_env(), capture_output=True)
                assert final.returncode == 0, final.stderr.decode()[-2000:]
            generated += sim.stats()["tokens_decoded"]
        kept = sum(r["completion_tokens"] for r in rows(out))
        assert len(rows(out)) == self.args.prompts
        return generated, kept, stop


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--length", default="1000-2000", help="answer lengths in tokens, LO-HI (uniform)")
    parser.add_argument("--step-time", type=float, default=0.01, help="seconds per decode step")
    parser.add_argument("--scenario", choices=SCENARIOS, action="append", help="default: all")
    parser.add_argument("--mode", choices=MODES, action="append", help="default: all")
    parser.add_argument("--drain-timeout", type=float, default=1.0, help="the runs' --drain-timeout (default 1 s)")
    parser.add_argument(
        "--no-abort-request", action="store_true", help="the server answers /abort_request 404, as smg 1.13 does"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tokenizer = build_tokenizer(root / "tok")
        (root / "prompts" / "p").mkdir(parents=True)
        (root / "prompts" / "p" / "d.jsonl").write_bytes(prompts(args.prompts, args.length))
        bench = Bench(root, tokenizer, args)
        refused = ", /abort_request refused (404)" if args.no_abort_request else ""
        print(f"{args.prompts} prompts, answers of {args.length} tokens, {args.concurrency} in flight{refused}")
        head = f"{'scenario':<14} {'mode':<28} {'generated':>10} {'kept':>10} {'thrown away':>12} {'stop s':>7}"
        print(f"{head} {'wall':>7}")
        for name in args.scenario or SCENARIOS:
            for label, mode in (MODES[m] for m in args.mode or MODES):
                started = time.monotonic()
                generated, kept, stop = bench.scenario(name, mode)
                waste = 1 - kept / generated if generated else 0.0
                wall = time.monotonic() - started
                line = f"{name:<14} {label:<28} {generated:>10,} {kept:>10,} {waste:>12.1%}"
                stopped = f"{stop:7.1f}" if stop else f"{'-':>7}"
                print(f"{line} {stopped} {wall:>6.0f}s", flush=True)


if __name__ == "__main__":
    main()
