#!/usr/bin/env python3
"""Scale: a 1,000,000-prompt dataset and a 5 GB results file, through run_inference.py.

Two start-up measurements, each a ``run_inference.py`` subprocess against the simulator
(``tests/support/sglang_sim.py``) on data written to a temp dir, stopped (SIGTERM) once its first
``/generate`` reached the simulator and the run's first page (``report.html``, written at the start from
every row already in the folder) is on disk:

- ``prompts``: one dataset of ``--prompts`` short prompts (a user message of ~90 characters, ids of
  8 characters), and the same command on ``--baseline`` prompts. Figures: seconds from launch to the
  first request, the CLI's peak RSS (VmHWM, polled every 20 ms, up to its first page), and the memory a
  prompt costs:
  (peak - baseline's peak) / (prompts - baseline prompts).
- ``resume``: a dataset whose ``raw_responses.jsonl`` already holds ``--results-gb`` GB of rows
  (built as the runner builds them: ``bench_rows.RowMaker``, token ids included, ~95 KB a row)
  for all but ``--left`` of its prompts. Figures: seconds to the first request (the resume scan
  reads the whole file first), seconds to the first page (the page reads it too, beside the requests),
  peak RSS up to then; and ``DatasetStore.scan`` timed alone in this process.

Every measurement runs ``--repeat`` times (default 3): the machine is shared, read the spread.

    python -m bench.bench_scale                          # 1M prompts and 5 GB: ~3-5 min, ~5.5 GB of temp
    python -m bench.bench_scale --only prompts --prompts 200000
    python -m bench.bench_scale --only resume --results-gb 1
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from bench.bench_rows import RowMaker, Shape
from bench.bench_run import text_pool
from bench.simproc import RUN, Simulator, build_tokenizer, cli_command, cli_env
from synthgen.data.conversations import prompt_hash
from synthgen.data.store import DatasetStore

PARTITION = "scale"
DATASET = "big"
ANSWERS = 64  # distinct answers in a results file (write_results)


@dataclass
class Startup:
    first_request_s: float | None
    peak_mb: float  # up to the first page
    cpu_s: float  # the CLI's CPU time up to its first request: moves less with other load than the wall
    page_s: float | None = None  # launch to the first report.html


def cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def vm_hwm_mb(pid: int) -> float | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


PAD = text_pool(1 << 20)


def prompt_row(i: int, chars: int = 0) -> dict[str, Any]:
    """Prompt ``i``: a short question, padded with ``chars`` characters of prose."""
    pad = PAD[i % 997 : i % 997 + chars] if chars else ""
    content = f"Question {i}: what is {i % 977} times {i % 31}? Answer briefly.{pad}"
    return {"id": f"p{i:07d}", "messages": [{"role": "user", "content": content}]}


def write_prompts(path: Path, count: int, chars: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as fh:
        for start in range(0, count, 10_000):
            fh.write(
                b"".join(
                    orjson.dumps(prompt_row(i, chars), option=orjson.OPT_APPEND_NEWLINE)
                    for i in range(start, min(count, start + 10_000))
                )
            )


def startup(ws: Path, sim_url: str, cli: Path = RUN, timeout: float = 600.0) -> Startup:
    """Launch the CLI (``cli``: a run_inference.py) on ``ws``; stop it once its first request reaches the simulator."""
    command = cli_command(ws, sim_url, PARTITION, 8, 32, run=cli)
    stats_url = sim_url + "/sim/stats"
    import httpx

    before = httpx.get(stats_url).json()["generate_requests"]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=ws, env=cli_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    page = ws / "outputs" / "report.html"
    page.unlink(missing_ok=True)
    first = page_s = None
    peak = cpu = 0.0
    try:
        while proc.poll() is None and time.monotonic() - t0 < timeout:
            peak = max(peak, vm_hwm_mb(proc.pid) or 0.0)
            if first is None:
                cpu = cpu_seconds(proc.pid) or cpu
                stats = httpx.get(stats_url).json()
                if stats["in_flight"] or stats["generate_requests"] > before:
                    first = time.monotonic() - t0
                    # Held until the first page is in: the next run must find prompts left to send.
                    httpx.post(sim_url + "/pause_generation", json={"mode": "in_place"})
            if page_s is None and page.exists():
                page_s = time.monotonic() - t0
            if first is not None and page_s is not None:
                break
            time.sleep(0.02)
    finally:
        peak = max(peak, vm_hwm_mb(proc.pid) or 0.0)
        httpx.post(sim_url + "/continue_generation", json={})
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # it finishes what is in flight and its closing work
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    if first is None:
        print(err.decode(errors="replace")[-2000:], file=sys.stderr)
    return Startup(first, peak, cpu, page_s)


def spread(values: list[float], spec: str = ".2f") -> str:
    values = sorted(values)
    return f"{format(values[len(values) // 2], spec)} (min {format(values[0], spec)}, max {format(values[-1], spec)})"


def bench_prompts(root: Path, sim_url: str, prompts: int, baseline: int, repeat: int, cli: Path) -> None:
    sizes = {}
    for count in (baseline, prompts):
        ws = root / f"prompts-{count}"
        write_prompts(ws / "prompts" / PARTITION / f"{DATASET}.jsonl", count)
        sizes[count] = ws
    mb = (sizes[prompts] / "prompts" / PARTITION / f"{DATASET}.jsonl").stat().st_size / 1e6
    firsts, peaks, per_prompt, cpus = [], [], [], []
    for k in range(repeat):
        base = startup(sizes[baseline], sim_url, cli)
        big = startup(sizes[prompts], sim_url, cli)
        if big.first_request_s is None:
            print(f"  run {k + 1}: no request reached the simulator")
            continue
        cost = (big.peak_mb - base.peak_mb) * 1048576 / (prompts - baseline)
        firsts.append(big.first_request_s)
        peaks.append(big.peak_mb)
        per_prompt.append(cost)
        cpus.append(big.cpu_s - base.cpu_s)
        print(
            f"  run {k + 1}: {prompts:,} prompts first request {big.first_request_s:.2f} s (CPU {big.cpu_s:.1f} s), "
            f"peak {big.peak_mb:.0f} MB; {baseline:,} prompts first request {base.first_request_s or 0:.2f} s "
            f"(CPU {base.cpu_s:.1f} s), peak {base.peak_mb:.0f} MB; "
            f"{cost:.0f} B a prompt (load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    if firsts:
        print(
            f"prompts: {prompts:,} ({mb:.0f} MB): first request {spread(firsts)} s, "
            f"peak RSS {spread(peaks, '.0f')} MB, memory a prompt {spread(per_prompt, '.0f')} B, CPU over the "
            f"baseline's {spread(cpus)} s"
        )


def write_results(ws: Path, target_bytes: int, left: int, prompt_chars: int, answer_tokens: int) -> tuple[int, int]:
    """A prompt file and a results file of ~``target_bytes`` answering all but ``left`` of its prompts.

    The answers (text, token ids, timings) of ``ANSWERS`` rows are made once and dealt out in turn, each
    row with its own prompt, id and hash: a row costs one ``to_json``, so 5 GB take about a minute."""
    prompt_tokens = prompt_chars // 4 + 20
    maker = RowMaker(Shape((prompt_tokens, prompt_tokens), answer_tokens, 0.75, 4.0, 163840), seed=1)
    answers = [maker.row(k) for k in range(ANSWERS)]
    results = ws / "outputs" / DATASET / "raw_responses.jsonl"
    results.parent.mkdir(parents=True)
    rows = size = 0
    with open(results, "wb") as out:
        while size < target_bytes:
            prompt = prompt_row(rows, prompt_chars)
            answer = answers[rows % ANSWERS]
            record = replace(
                answer,
                id=str(prompt["id"]),
                dataset=DATASET,
                partition=PARTITION,
                source=f"{PARTITION}/{DATASET}.jsonl",
                prompt_hash=prompt_hash(prompt["messages"], None),  # type: ignore[arg-type]
                settings=None,
                messages=[*prompt["messages"], answer.messages[-1]],
            )
            line = record.to_json()
            out.write(line)
            size += len(line)
            rows += 1
    write_prompts(ws / "prompts" / PARTITION / f"{DATASET}.jsonl", rows + left, prompt_chars)
    return rows, size


def bench_resume(root: Path, sim_url: str, args: argparse.Namespace) -> None:
    ws, gigabytes, repeat = root / "resume", args.results_gb, args.repeat
    started = time.monotonic()
    rows, size = write_results(ws, int(gigabytes * 1e9), args.left, args.prompt_chars, args.answer_tokens)
    print(f"  wrote {rows:,} rows, {size / 1e9:.2f} GB in {time.monotonic() - started:.0f} s", flush=True)
    firsts, peaks, scans, cpus, pages = [], [], [], [], []
    for k in range(repeat):
        t = time.perf_counter()
        state = DatasetStore(ws / "outputs", DATASET).scan()
        scans.append(time.perf_counter() - t)
        assert len(state.done) >= rows, (len(state.done), rows)  # earlier runs here may have added a few
        run = startup(ws, sim_url, args.run)
        if run.first_request_s is None:
            print(f"  run {k + 1}: no request reached the simulator")
            continue
        firsts.append(run.first_request_s)
        peaks.append(run.peak_mb)
        cpus.append(run.cpu_s)
        pages.append(run.page_s or float("nan"))
        print(
            f"  run {k + 1}: first request {run.first_request_s:.2f} s (CPU {run.cpu_s:.1f} s), "
            f"first page {run.page_s or float('nan'):.2f} s, peak {run.peak_mb:.0f} MB; "
            f"DatasetStore.scan alone {scans[-1]:.2f} s (load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    if firsts:
        print(
            f"resume: {size / 1e9:.2f} GB, {rows:,} rows: first request {spread(firsts)} s "
            f"(CPU {spread(cpus)} s), first page {spread(pages)} s, peak RSS to it "
            f"{spread(peaks, '.0f')} MB; DatasetStore.scan {spread(scans)} s "
            f"= {size / 1e9 / min(scans):.2f} GB/s at best"
        )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=("prompts", "resume"), help="one of the two measurements")
    p.add_argument("--prompts", type=int, default=1_000_000, help="prompts of the large dataset (default 1,000,000)")
    p.add_argument("--baseline", type=int, default=1_000, help="prompts of the baseline dataset (default 1,000)")
    p.add_argument("--results-gb", type=float, default=5.0, help="size of the results file (default 5)")
    p.add_argument("--left", type=int, default=100, help="prompts the results file does not answer (default 100)")
    p.add_argument("--prompt-chars", type=int, default=8000, help="resume: characters of each prompt (default 8,000)")
    p.add_argument(
        "--answer-tokens", type=int, default=1000, help="resume: mean answer tokens of a row (default 1,000)"
    )
    p.add_argument("--repeat", type=int, default=3, help="runs of each measurement (default 3)")
    p.add_argument("--work-dir", type=Path, help="where to make the scratch folder (default: the system temp dir)")
    p.add_argument(
        "--run",
        type=Path,
        default=RUN,
        help="the run_inference.py to measure, e.g. another checkout's for an A/B (default: this tree's)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="synthgen-scale-", dir=args.work_dir))
    print(f"bench_scale: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    try:
        tokenizer_dir = build_tokenizer(root / "tokenizer", style="chatml")
        with Simulator(tokenizer_dir, "--token-delay", "0.05") as sim:
            if args.only in (None, "prompts"):
                bench_prompts(root, sim.url, args.prompts, args.baseline, args.repeat, args.run)
            if args.only in (None, "resume"):
                bench_resume(root, sim.url, args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
