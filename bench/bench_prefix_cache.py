#!/usr/bin/env python3
"""How much of the prompt SGLang's prefix cache serves in ``--regenerate each`` runs, with the
turns of a conversation sent next to each other (file order) against interleaved (``--sample
random``). Prints figures, decides nothing.

With ``--regenerate each`` a conversation of K assistant turns becomes K prompts, and prompt k
is a prefix of prompt k+1 (its history, then assistant turn k and the next user turn). Once
prompt k has been prefilled, the server's radix cache holds its KV, so prompt k+1 only needs
its new tokens computed; the answer's ``meta_info.cached_tokens`` (a row's ``cached_tokens``)
says how many prompt tokens were served that way. The simulator has no prefix cache, so this
runs the real SGLang server on the CPU with its tiny model (``scripts/real_sglang.py start``;
installed by ``scripts/real_sglang.py setup``), whose tokenizer the CLI uses.

It writes one dataset of --conversations conversations, each of --turns user/assistant pairs
with user turns of about --user-tokens tokens, and runs ``run_inference.py --regenerate each
--max-tokens 8`` on it once in file order and once with ``--sample random`` (prompts ordered by a
hash of their ``<id>#<k>`` ids, which scatters a conversation's turns over the run), each on a
fresh --output-dir after ``POST /flush_cache``, for every --concurrency given. The server gets
``--max-total-tokens`` --kv-tokens (default 4096, a fifth of the dataset: a real run's cache cannot
hold every conversation either) and, with --schedule-policy, that policy. Figures, from the
rows: the share of prompt tokens served from the cache, overall and for turns after the first;
the ideal share (each prompt's longest common prefix with an earlier turn of its conversation);
how far apart a conversation's consecutive turns are in send order; the wall time of the CLI.
The CLI's own summary line about the prefix cache is printed as it said it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

from bench.bench_run import text_pool
from bench.simproc import REPO, cli_command, cli_env
from synthgen.data.records import ResultRecord
from synthgen.data.selection import order
from synthgen.data.store import iter_results

HARNESS = REPO / "scripts" / "real_sglang.py"
PARTITION = "bench"
DATASET = "multiturn"
CHARS_PER_TOKEN = 3.8  # the tiny model's tokenizer on bench_run's word text
SUMMARY_MARK = "prefix cache"


# ------------------------------------------------------------------------------------ input
def conversations(count: int, turns: int, user_tokens: int, assistant_tokens: int) -> list[dict]:
    """Records of ``turns`` user/assistant pairs; no two messages alike, so only a conversation's
    own history can come from the cache."""
    user_chars, assistant_chars = int(user_tokens * CHARS_PER_TOKEN), int(assistant_tokens * CHARS_PER_TOKEN)
    pool = text_pool((user_chars + assistant_chars) * 40, seed=7)
    span = len(pool) - max(user_chars, assistant_chars)
    records, cursor = [], 0
    for c in range(count):
        messages = []
        for k in range(turns):
            for role, chars in (("user", user_chars), ("assistant", assistant_chars)):
                cursor = (cursor + 7919) % span
                messages.append(
                    {"role": role, "content": f"Conversation {c}, {role} turn {k}: " + pool[cursor : cursor + chars]}
                )
        records.append({"id": f"conv-{c:03d}", "messages": messages})
    return records


def write_dataset(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        for record in records:
            fh.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))


def send_order(records: list[dict], turns: int, sample: str) -> list[str]:
    """The prompt ids in the order the CLI takes them (synthgen.data.selection, as the run selects)."""
    ids = [f"{r['id']}#{k}" for r in records for k in range(turns)]
    return order(ids, sample)


def turn_gap(ids: list[str]) -> float:
    """Mean distance in send order between turn k and turn k+1 of the same conversation."""
    where = {pid: i for i, pid in enumerate(ids)}
    gaps = []
    for pid, i in where.items():
        conv, k = pid.rsplit("#", 1)
        after = where.get(f"{conv}#{int(k) + 1}")
        if after is not None:
            gaps.append(abs(after - i))
    return sum(gaps) / len(gaps) if gaps else 0.0


# ------------------------------------------------------------------------------------ server
class RealServer:
    """``scripts/real_sglang.py start --port 0`` until the ``with`` block ends, then ``stop --pid``."""

    def __init__(self, timeout: float, server_args: list[str]):
        argv = [sys.executable, str(HARNESS), "start", "--port", "0", "--timeout", str(timeout), "--", *server_args]
        done = subprocess.run(argv, cwd=REPO, env=cli_env(), capture_output=True, text=True)
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            raise RuntimeError(f"the real SGLang server did not start (exit {done.returncode}): {tail}")
        info = json.loads(lines[-1])
        self.pid, self.url, self.log = int(info["pid"]), str(info["url"]), str(info["log"])
        self.http = httpx.Client(base_url=self.url, timeout=60.0, trust_env=False)

    def flush_cache(self) -> None:
        """Empty the radix cache; SGLang refuses while requests run, so retry for a while."""
        deadline = time.monotonic() + 60
        while True:
            response = self.http.post("/flush_cache")
            if response.status_code == 200:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"/flush_cache answered {response.status_code}: {response.text[:200]}")
            time.sleep(0.5)

    def context_length(self) -> int | None:
        """max_model_len from /v1/models, where SGLang reports the context length."""
        models = self.http.get("/v1/models").json().get("data") or [{}]
        value = models[0].get("max_model_len")
        return value if isinstance(value, int) else None

    def close(self) -> None:
        self.http.close()
        subprocess.run(
            [sys.executable, str(HARNESS), "stop", "--pid", str(self.pid)], cwd=REPO, env=cli_env(), capture_output=True
        )

    def __enter__(self) -> RealServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# ------------------------------------------------------------------------------------ one run
@dataclass
class RunFigures:
    sample: str
    concurrency: int
    exit_code: int
    wall_s: float
    rows: int
    prompt_tokens: int
    cached_tokens: int
    later_prompt_tokens: int  # turns after a conversation's first
    later_cached_tokens: int
    ideal_cached_tokens: int
    turn_gap: float
    summary_line: str
    stderr_tail: list[str]


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def ideal_cached(rows: list[ResultRecord]) -> int:
    """What a perfect cache could serve: each prompt's longest common prefix with an earlier turn of
    its conversation (SGLang always computes at least a prompt's last token, hence the - 1)."""
    by_conv: dict[str, list[tuple[int, list[int]]]] = defaultdict(list)
    for row in rows:
        conv, k = row.id.rsplit("#", 1)
        by_conv[conv].append((int(k), row.input_ids or []))
    total = 0
    for turns in by_conv.values():
        turns.sort()
        for i, (_, ids) in enumerate(turns):
            best = max((common_prefix(ids, earlier) for _, earlier in turns[:i]), default=0)
            total += min(best, len(ids) - 1)
    return total


def run_cli(
    server: RealServer, root: Path, sample: str, concurrency: int, records: list[dict], turns: int
) -> RunFigures:
    out = root / f"out-{sample}-{concurrency}"
    server.flush_cache()
    argv = [
        *cli_command(root, server.url, PARTITION, 8, concurrency, outputs=out),
        "--regenerate",
        "each",
        "--sample",
        sample,
        "--status-interval",
        "30",
    ]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, env=cli_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True)
    wall = time.monotonic() - started
    rows = list(iter_results(out / DATASET / "raw_responses.jsonl"))
    later = [r for r in rows if not r.id.endswith("#0")]
    summary = [ln.strip() for ln in done.stderr.splitlines() if SUMMARY_MARK in ln]
    return RunFigures(
        sample=sample,
        concurrency=concurrency,
        exit_code=done.returncode,
        wall_s=wall,
        rows=len(rows),
        prompt_tokens=sum(r.prompt_tokens for r in rows),
        cached_tokens=sum(r.cached_tokens or 0 for r in rows),
        later_prompt_tokens=sum(r.prompt_tokens for r in later),
        later_cached_tokens=sum(r.cached_tokens or 0 for r in later),
        ideal_cached_tokens=ideal_cached(rows),
        turn_gap=turn_gap(send_order(records, turns, sample)),
        summary_line=summary[-1] if summary else "(no prefix cache line)",
        stderr_tail=done.stderr.strip().splitlines()[-8:],
    )


# ------------------------------------------------------------------------------------ report
def share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in [header, *rows]]


def report(runs: list[RunFigures]) -> str:
    lines = table(
        (
            "order",
            "concurrency",
            "exit",
            "rows",
            "turn gap",
            "prompt tok",
            "cached tok",
            "cached",
            "turns>0 cached",
            "ideal",
            "wall s",
        ),
        [
            (
                "file" if f.sample == "first" else "random",
                str(f.concurrency),
                str(f.exit_code),
                str(f.rows),
                f"{f.turn_gap:.1f}",
                f"{f.prompt_tokens:,}",
                f"{f.cached_tokens:,}",
                share(f.cached_tokens, f.prompt_tokens),
                share(f.later_cached_tokens, f.later_prompt_tokens),
                share(f.ideal_cached_tokens, f.prompt_tokens),
                f"{f.wall_s:.1f}",
            )
            for f in runs
        ],
    )
    lines.append("")
    for f in runs:
        order_name = "file order" if f.sample == "first" else "--sample random"
        lines.append(f"{order_name}, --concurrency {f.concurrency}: {f.summary_line}")
        if f.exit_code != 0:
            lines.append("  CLI stderr tail:\n    " + "\n    ".join(f.stderr_tail))
    return "\n".join(lines)


LEGEND = """\
turn gap: mean distance in send order between turn k and k+1 of a conversation (1 = next to each other)
cached: cached_tokens / prompt_tokens over all rows; turns>0: the same over turns after a conversation's first
ideal: what a cache that kept everything would serve (each prompt's common prefix with an earlier turn)
wall s: the CLI's run, start to exit (start-up and tokenizer load included)"""


# ------------------------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_prefix_cache",
        description="Run run_inference.py --regenerate each against the real SGLang server (CPU, tiny model) with "
        "a conversation's turns sent together (file order) and scattered (--sample random), and report "
        "the share of prompt tokens served from the server's prefix cache. Prints figures, no pass/fail.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  # the default: 16 conversations x 4 turns, --concurrency 1 and 16 (~4 min with server start)\n"
        "  python -m bench.bench_prefix_cache\n\n"
        "  # the server holds back requests that share a prefix with one in the same batch\n"
        "  python -m bench.bench_prefix_cache --schedule-policy lpm --concurrency 16\n\n"
        "  # a cache big enough for the whole dataset (as a small run on a big server)\n"
        "  python -m bench.bench_prefix_cache --kv-tokens 65536 --concurrency 16\n\n"
        "needs: python scripts/real_sglang.py setup (once; a few minutes)\n",
    )
    p.add_argument("--conversations", type=int, default=16, help="conversations in the dataset (default: 16)")
    p.add_argument("--turns", type=int, default=4, help="user/assistant pairs per conversation (default: 4)")
    p.add_argument("--user-tokens", type=int, default=150, help="tokens of each user turn (default: 150)")
    p.add_argument(
        "--assistant-tokens", type=int, default=50, help="tokens of each assistant turn in the dataset (default: 50)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        nargs="+",
        default=[1, 16],
        metavar="N",
        help="--concurrency values given to the CLI, one pair of runs each (default: 1 16)",
    )
    p.add_argument(
        "--kv-tokens",
        type=int,
        default=4096,
        help="the server's --max-total-tokens, its KV pool and so the most its prefix cache can hold "
        "(default: 4096, a fifth of this dataset: as in a real run, the cache cannot keep a "
        "conversation's history while the whole dataset goes by)",
    )
    p.add_argument(
        "--schedule-policy",
        help="the server's --schedule-policy (default: SGLang's, fcfs); lpm "
        "holds back a request whose prefix another one in the batch shares",
    )
    p.add_argument("--server-timeout", type=float, default=300, help="seconds the server may take to start")
    p.add_argument("--work-dir", type=Path, help="where to make the scratch folder (default: the system temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder (prompts, outputs)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if (
        min(args.conversations, args.turns, args.user_tokens, args.assistant_tokens, args.kv_tokens, *args.concurrency)
        < 1
    ):
        print("bench_prefix_cache.py: every count must be at least 1", file=sys.stderr)
        return 2
    root = Path(tempfile.mkdtemp(prefix="synthgen-bench-prefix-", dir=args.work_dir))
    try:
        records = conversations(args.conversations, args.turns, args.user_tokens, args.assistant_tokens)
        write_dataset(root / "prompts" / PARTITION / f"{DATASET}.jsonl", records)
        started = time.monotonic()
        server_args = ["--max-total-tokens", str(args.kv_tokens)]
        if args.schedule_policy:
            server_args += ["--schedule-policy", args.schedule_policy]
        with RealServer(args.server_timeout, server_args) as server:
            print(
                f"bench: {args.conversations} conversations x {args.turns} turns, user turns ~{args.user_tokens} "
                f"tokens, assistant ~{args.assistant_tokens}; real SGLang at {server.url} ({' '.join(server_args)}, "
                f"context {server.context_length()}) up in {time.monotonic() - started:.0f} s; "
                f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
            runs = []
            for concurrency in args.concurrency:
                for sample in ("first", "random"):
                    runs.append(run_cli(server, root, sample, concurrency, records, args.turns))
                    f = runs[-1]
                    print(
                        f"  {sample} --concurrency {concurrency}: exit {f.exit_code}, {f.rows} rows in "
                        f"{f.wall_s:.1f} s, cached {share(f.cached_tokens, f.prompt_tokens)}",
                        flush=True,
                    )
        print()
        print(report(runs))
        print(LEGEND)
        if args.keep:
            print(f"kept {root}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
