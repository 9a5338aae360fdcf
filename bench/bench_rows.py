#!/usr/bin/env python3
"""What token ids in every result row cost: file size and the time and memory of the scans that
read a whole raw_responses.jsonl. Prints figures, decides nothing.

It writes two results files with the same rows, built the way the runner builds them
(``synthgen.data.records.build_result`` on a ``Turn``, written with ``ResultRecord.to_json``): one
without ids (``input_ids``/``output_ids`` None, as rows were before ids were kept) and one with
them. Rows are single-turn reasoning answers: a system and a user message of --prompt-tokens
tokens, an answer of about --answer-tokens tokens (--reasoning-share of it reasoning, the rest
content), text at --chars-per-token characters a token. The answer sits in the row three times,
as the runner writes it: the flat ``reasoning_content``/``content``, the generated turn at the
end of ``messages``, and the raw ``output_text``. Ids are drawn uniformly from a --vocab sized
vocabulary (Kimi-K2's 163,840 by default); real text uses low ids (frequent tokens) more often,
so real ids print shorter and these files are, if anything, larger than real ones. The with-ids
file is written up to --size-mb; the other gets the same rows.

Then each scan runs in a child process of its own (``python -m bench.bench_rows --child ...``),
so its peak RSS (VmHWM) is its own:

- ``recover``: ``DatasetStore.recover(repair=False)``, the resume scan every run makes before its
  first request (orjson parses each whole line, a ``DoneEntry`` is kept per row), on a warm page
  cache, and once more after the file's pages were dropped (``posix_fadvise(DONTNEED)``), so it
  reads the disk;
- ``budget``: ``budget_cli.measure_outputs``, compute_budget.py's read of the completed rows;
- ``export``: ``export.scan_dataset``, export_training.py's first pass (format specforge, no
  tokenizer: no re-tokenization check).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from bench.bench_run import text_pool
from bench.simproc import REPO, cli_env
from synthgen.cli.budget import measure_outputs
from synthgen.data.records import ResultRecord, RowContext, Turn, build_result
from synthgen.data.store import DatasetStore
from synthgen.export.config import DatasetRef, ExportConfig
from synthgen.export.scan import scan_dataset

DATASET = "rows"
RESULTS = "raw_responses.jsonl"
STOP_ID = 163586  # Kimi-K2's <|im_end|>: output ids end with the matched stop token
SCANS = ("recover", "budget", "export")


# ------------------------------------------------------------------------------------ rows
@dataclass(frozen=True)
class Shape:
    """What a generated row looks like."""

    prompt_tokens: tuple[int, int]  # uniform between
    answer_tokens: int  # mean; each row draws from 0.75x to 1.25x of it
    reasoning_share: float
    chars_per_token: float
    vocab: int


class RowMaker:
    """Realistic result rows, fast: text and ids are slices of pools made once."""

    def __init__(self, shape: Shape, seed: int):
        self.shape = shape
        self.rng = random.Random(seed)
        longest = int((shape.prompt_tokens[1] + shape.answer_tokens * 1.25) * shape.chars_per_token)
        self.text = text_pool(longest * 4, seed)
        id_rng = random.Random(seed + 1)
        self.ids = [id_rng.randrange(shape.vocab) for _ in range(1 << 20)]

    def _text(self, tokens: int) -> str:
        chars = int(tokens * self.shape.chars_per_token)
        start = self.rng.randrange(len(self.text) - chars)
        return self.text[start : start + chars]

    def _ids(self, count: int) -> list[int]:
        start = self.rng.randrange(len(self.ids) - count)
        return self.ids[start : start + count]

    def row(self, i: int) -> ResultRecord:
        shape, rng = self.shape, self.rng
        prompt_tokens = rng.randint(*shape.prompt_tokens)
        answer = rng.randint(int(shape.answer_tokens * 0.75), int(shape.answer_tokens * 1.25))
        reasoning_tokens = int(answer * shape.reasoning_share)
        reasoning, content = self._text(reasoning_tokens), self._text(answer - reasoning_tokens)
        prompt = [
            {"role": "system", "content": "You are a careful assistant. Think step by step before answering."},
            {"role": "user", "content": self._text(prompt_tokens - 20)},
        ]
        turn = Turn(
            reasoning_content=reasoning,
            content=content,
            tool_calls=None,
            had_reasoning=True,
            finish_reason="stop",
            finish_detail={"type": "stop", "matched": STOP_ID},
            reasoning_complete=True,
            prompt_tokens=prompt_tokens,
            completion_tokens=answer,
            cached_tokens=rng.randrange(prompt_tokens),
            output_text=f"{reasoning}</think>{content}",
            input_ids=self._ids(prompt_tokens),
            output_ids=[*self._ids(answer - 1), STOP_ID],
            latency_s=round(rng.uniform(20, 200), 3),
            server_latency_s=round(rng.uniform(20, 200), 3),
            attempts=1,
            request_id=f"synthgen-{rng.getrandbits(128):032x}",
        )
        ctx = RowContext(
            id=f"{DATASET}-{i:08d}",
            dataset=DATASET,
            partition="bench",
            source=f"bench/{DATASET}.jsonl",
            prompt_hash=f"{rng.getrandbits(256):064x}",
            tools=None,
            model="moonshotai/Kimi-K2.5",
            sampling_params={"temperature": 1.0, "top_p": 0.95},
            chat_template_kwargs={"thinking": True},
            regenerate="last",
            settings="s1",
        )
        return build_result(ctx, [*prompt, turn.message()], [turn], "2025-01-01T00:00:00.000000+00:00")


def write_files(maker: RowMaker, with_ids: Path, without_ids: Path, target_bytes: int) -> int:
    """Rows into both files until the with-ids one reaches ``target_bytes``; returns the row count."""
    for path in (with_ids, without_ids):
        path.parent.mkdir(parents=True, exist_ok=True)
    rows = written = 0
    with open(with_ids, "wb") as a, open(without_ids, "wb") as b:
        while written < target_bytes:
            record = maker.row(rows)
            line = record.to_json()
            a.write(line)
            b.write(dataclasses.replace(record, input_ids=None, output_ids=None).to_json())
            written += len(line)
            rows += 1
        for fh in (a, b):
            fh.flush()
            os.fsync(fh.fileno())  # clean pages, so DONTNEED can drop them before the cold scan
    return rows


# ------------------------------------------------------------------------------------ one scan (child)
def vm_kb(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def drop_pages(path: Path) -> None:
    """Ask the kernel to forget this file's cached pages (this file only, nothing else on the machine)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run_scan(scan: str, output_dir: Path) -> int:
    """Runs one scan, then prints its figures as a JSON line."""
    path = output_dir / DATASET / RESULTS
    before = vm_kb("VmRSS")
    started, cpu_started = time.perf_counter(), time.process_time()
    if scan == "recover":
        rows = len(DatasetStore(output_dir, DATASET).recover(repair=False).done)
    elif scan == "budget":
        measured = measure_outputs(output_dir, DATASET)
        rows = measured.rows if measured is not None else 0
    else:
        ref = DatasetRef(DATASET, path)
        rows = len(scan_dataset(ref, ExportConfig(datasets=(ref,), format="specforge")).kept)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    print(
        orjson.dumps(
            {"seconds": seconds, "cpu_s": cpu, "rows": rows, "rss_before_kb": before, "peak_kb": vm_kb("VmHWM")}
        ).decode()
    )
    return 0


@dataclass
class ScanFigures:
    file: str
    scan: str
    mb: float
    rows: int
    seconds: float
    cpu_s: float  # user + system CPU of the scan: what other load on the machine does not inflate
    rss_before_mb: float
    peak_mb: float


def scan_in_child(label: str, scan: str, output_dir: Path, cold: bool = False) -> ScanFigures:
    path = output_dir / DATASET / RESULTS
    if cold:
        drop_pages(path)
    done = subprocess.run(
        [sys.executable, "-m", "bench.bench_rows", "--child", scan, str(output_dir)],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        check=True,
        text=True,
    )
    figures = orjson.loads(done.stdout.strip().splitlines()[-1])
    return ScanFigures(
        label,
        scan + (" cold" if cold else ""),
        path.stat().st_size / 1e6,
        figures["rows"],
        figures["seconds"],
        figures["cpu_s"],
        figures["rss_before_kb"] / 1024,
        figures["peak_kb"] / 1024,
    )


# ------------------------------------------------------------------------------------ report
def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in [header, *rows]]


def report(rows: int, sizes: dict[str, int], scans: list[ScanFigures]) -> str:
    lines = table(
        ("file", "rows", "MB", "bytes/row", "vs no ids"),
        [
            (label, f"{rows:,}", f"{size / 1e6:,.0f}", f"{size / rows:,.0f}", f"{size / sizes['no ids']:.2f}x")
            for label, size in sizes.items()
        ],
    )
    lines.append("")
    lines += table(
        (
            "file",
            "scan",
            "rows",
            "s",
            "MB/s",
            "s per GB",
            "CPU s",
            "CPU s per GB",
            "RSS before MB",
            "peak RSS MB",
            "growth MB",
        ),
        [
            (
                f.file,
                f.scan,
                f"{f.rows:,}",
                f"{f.seconds:.2f}",
                f"{f.mb / f.seconds:,.0f}",
                f"{f.seconds / f.mb * 1e3:.2f}",
                f"{f.cpu_s:.2f}",
                f"{f.cpu_s / f.mb * 1e3:.2f}",
                f"{f.rss_before_mb:.0f}",
                f"{f.peak_mb:.0f}",
                f"{f.peak_mb - f.rss_before_mb:.0f}",
            )
            for f in scans
        ],
    )
    by = {(f.file, f.scan): f for f in scans}
    for scan in ("recover", *SCANS[1:]):
        a, b = by.get(("no ids", scan)), by.get(("ids", scan))
        if a and b:
            lines.append(
                f"{scan}: {b.cpu_s / a.cpu_s:.2f}x the CPU time with ids; CPU per row "
                f"{a.cpu_s / a.rows * 1e3:.3f} ms without, {b.cpu_s / b.rows * 1e3:.3f} ms with"
            )
    return "\n".join(lines)


LEGEND = """\
recover: DatasetStore.recover(repair=False), the resume scan; "cold": after posix_fadvise(DONTNEED) on the file
budget: budget_cli.measure_outputs; export: export.scan_dataset (specforge, no tokenizer)
s: wall time; CPU s: the scan's user + system CPU time (other load on the machine moves s, hardly CPU s)
RSS before: the child's RSS after imports, before the scan; peak: its VmHWM after; growth: the difference"""


# ------------------------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_rows",
        description="Write two raw_responses.jsonl files with the same realistic rows, without and with token ids, "
        "and measure their size and the resume, budget and export scans over them (time, MB/s, peak "
        "RSS). Prints figures, no pass/fail.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  # the default: a with-ids file of about 2 GB (and its twin without ids, ~1.2 GB); ~3 min\n"
        "  python -m bench.bench_rows\n\n"
        "  # a quick look: about 200 MB\n"
        "  python -m bench.bench_rows --quick\n\n"
        "  # shorter answers, scratch files on another disk, kept afterwards\n"
        "  python -m bench.bench_rows --answer-tokens 1000 --work-dir /data/tmp --keep\n",
    )
    p.add_argument(
        "--size-mb",
        type=float,
        default=2000,
        help="size of the with-ids file in MB (default: 2000); rows are added until it is reached",
    )
    p.add_argument("--quick", action="store_true", help="--size-mb 200")
    p.add_argument(
        "--prompt-tokens",
        type=int,
        nargs=2,
        default=[1000, 3000],
        metavar=("MIN", "MAX"),
        help="prompt length in tokens, uniform between (default: 1000 3000)",
    )
    p.add_argument(
        "--answer-tokens",
        type=int,
        default=4000,
        help="mean answer length in tokens, each row 0.75x-1.25x of it (default: 4000)",
    )
    p.add_argument(
        "--reasoning-share", type=float, default=0.75, help="share of the answer that is reasoning (default: 0.75)"
    )
    p.add_argument("--chars-per-token", type=float, default=4.0, help="characters of text per token (default: 4)")
    p.add_argument("--vocab", type=int, default=163840, help="ids are drawn from 0..VOCAB-1 (default: 163840)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--work-dir", type=Path, help="where to make the scratch folder (default: the system temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the scratch folder and its files")
    p.add_argument("--child", nargs=2, metavar=("SCAN", "OUTPUT_DIR"), help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        return run_scan(args.child[0], Path(args.child[1]))
    size_mb = 200.0 if args.quick else args.size_mb
    low, high = args.prompt_tokens
    if size_mb <= 0 or not 20 < low <= high or args.answer_tokens < 4 or not 0 < args.reasoning_share < 1:
        print(
            "bench_rows.py: need --size-mb > 0, 20 < MIN <= MAX prompt tokens, --answer-tokens >= 4 and "
            "0 < --reasoning-share < 1",
            file=sys.stderr,
        )
        return 2
    root = Path(tempfile.mkdtemp(prefix="synthgen-bench-rows-", dir=args.work_dir))
    free_mb = shutil.disk_usage(root).free / 1e6
    if free_mb < size_mb * 1.8:
        print(
            f"bench_rows.py: {root} has {free_mb:,.0f} MB free; the two files need about {size_mb * 1.7:,.0f} MB",
            file=sys.stderr,
        )
        shutil.rmtree(root, ignore_errors=True)
        return 2
    shape = Shape((low, high), args.answer_tokens, args.reasoning_share, args.chars_per_token, args.vocab)
    dirs = {"no ids": root / "no-ids", "ids": root / "ids"}
    try:
        print(
            f"bench: rows of {low:,}-{high:,} prompt tokens and ~{args.answer_tokens:,}-token answers "
            f"({args.reasoning_share:.0%} reasoning), {args.chars_per_token} chars/token, ids from a "
            f"{args.vocab:,} vocabulary; with-ids file up to {size_mb:,.0f} MB in {root}; {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        started = time.monotonic()
        rows = write_files(
            RowMaker(shape, args.seed),
            dirs["ids"] / DATASET / RESULTS,
            dirs["no ids"] / DATASET / RESULTS,
            int(size_mb * 1e6),
        )
        print(f"  wrote {rows:,} rows twice in {time.monotonic() - started:.0f} s", flush=True)
        sizes = {label: (d / DATASET / RESULTS).stat().st_size for label, d in dirs.items()}
        scans: list[ScanFigures] = []
        for scan in SCANS:
            for label, d in dirs.items():
                scans.append(scan_in_child(label, scan, d))
                print(f"  {label} {scan}: {scans[-1].seconds:.2f} s", flush=True)
        for label, d in dirs.items():
            scans.append(scan_in_child(label, "recover", d, cold=True))
            print(f"  {label} recover cold: {scans[-1].seconds:.2f} s", flush=True)
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}\n")
        print(report(rows, sizes, scans))
        print(LEGEND)
        if args.keep:
            print(f"kept {root}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
