#!/usr/bin/env python3
"""Input formats: the first request of a 1,000,000-row dataset as JSONL, as parquet and as a
``save_to_disk`` arrow folder, through run_inference.py against the simulator.

The same rows (``bench_scale.prompt_row``: a user message of ~60 characters, ids of 8 characters) are
written as ``prompts/inputs/big.jsonl``, ``prompts/inputs/big.parquet`` (row groups of ``--row-group``
rows, as a hub's conversion writes them) and ``prompts/inputs/big/`` (arrow IPC stream shards of
500,000 rows and a ``state.json``, as ``datasets.save_to_disk`` writes them), each in a workspace of
its own. Each is run as ``bench_scale.startup`` runs one: launched, stopped once its first
``/generate`` reached the simulator. Figures per format: seconds from launch to the first request (the
run validates every row before it sends one), the CLI's CPU seconds up to then, its peak RSS; and
``scan_dataset`` alone in this process (seconds, rows a second). ``--repeat`` runs each (default 3):
the machine is shared, read the spread.

    python -m bench.bench_inputs                    # 1M rows: ~3-6 min, ~0.4 GB of temp
    python -m bench.bench_inputs --rows 200000 --repeat 1
    python -m bench.bench_inputs --scan-only       # scan_dataset alone, as shipped and with the cyclic GC on

``--scan-only`` times ``scan_dataset`` in this process (wall, CPU, and the seconds the cyclic garbage
collector ran during it) as shipped (the scan holds the collector off) and with the collector left running,
the way it ran before: the collector's full passes were what made a parquet scan slower than JSONL's.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from bench.bench_scale import prompt_row, spread, startup, write_prompts
from bench.simproc import RUN, Simulator, build_tokenizer
from synthgen.data import prompts
from synthgen.data.prompts import discover, scan_dataset

PARTITION = "scale"  # the partition bench_scale.startup runs
DATASET = "big"
CHUNK = 50_000  # rows built at a time: the writer never holds the whole dataset


def chunks(rows: int) -> list[range]:
    return [range(start, min(rows, start + CHUNK)) for start in range(0, rows, CHUNK)]


def write_parquet(path: Path, rows: int, row_group: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = None
    for part in chunks(rows):
        table = pa.Table.from_pylist([prompt_row(i) for i in part])
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table, row_group_size=row_group)
    if writer is not None:
        writer.close()


def write_saved(folder: Path, rows: int, shard_rows: int = 500_000) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shards = [range(s, min(rows, s + shard_rows)) for s in range(0, rows, shard_rows)]
    names = [f"data-{k:05d}-of-{len(shards):05d}.arrow" for k in range(len(shards))]
    for name, shard in zip(names, shards, strict=True):
        writer = None
        with pa.OSFile(str(folder / name), "wb") as sink:
            for start in range(shard.start, shard.stop, CHUNK):
                table = pa.Table.from_pylist([prompt_row(i) for i in range(start, min(shard.stop, start + CHUNK))])
                writer = writer or pa.ipc.new_stream(sink, table.schema)
                writer.write_table(table, max_chunksize=1000)  # datasets writes batches of 1,000 rows
            if writer is not None:
                writer.close()
    (folder / "state.json").write_text(json.dumps({"_data_files": [{"filename": n} for n in names]}))
    (folder / "dataset_info.json").write_text("{}")


def build(root: Path, rows: int, row_group: int) -> dict[str, Path]:
    """One workspace a format, each with prompts/scale/big.<format> (or big/)."""
    spaces = {name: root / name for name in ("jsonl", "parquet", "arrow")}
    folder = {name: ws / "prompts" / PARTITION for name, ws in spaces.items()}
    write_prompts(folder["jsonl"] / f"{DATASET}.jsonl", rows)
    write_parquet(folder["parquet"] / f"{DATASET}.parquet", rows, row_group)
    write_saved(folder["arrow"] / DATASET, rows)
    return spaces


def size_mb(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 1e6


def scan_alone(ws: Path) -> tuple[float, int]:
    (source,) = discover(ws / "prompts", PARTITION)
    t0 = time.perf_counter()
    index = scan_dataset(source)
    return time.perf_counter() - t0, len(index.ids)


class GcClock:
    """The seconds the cyclic garbage collector runs, and its full (generation 2) passes."""

    def __init__(self) -> None:
        self.seconds, self.full, self._at = 0.0, 0, 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._at = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._at
            self.full += info["generation"] == 2


def scan_with_gc(ws: Path, collector_on: bool) -> tuple[float, float, GcClock]:
    """(wall, CPU) seconds of scan_dataset, and the collector's time in it; ``collector_on``: as before the
    scan held it off."""
    (source,) = discover(ws / "prompts", PARTITION)
    clock, held = GcClock(), prompts._no_cyclic_gc
    gc.collect()
    gc.callbacks.append(clock)
    if collector_on:
        prompts._no_cyclic_gc = contextlib.nullcontext  # type: ignore[assignment]
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        scan_dataset(source)
        return time.perf_counter() - t0, time.process_time() - c0, clock
    finally:
        prompts._no_cyclic_gc = held  # type: ignore[assignment]
        gc.callbacks.remove(clock)


def scan_only(spaces: dict[str, Path], repeat: int) -> None:
    for k in range(repeat):
        for name, ws in spaces.items():
            for on in (True, False):
                wall, cpu, clock = scan_with_gc(ws, on)
                print(
                    f"  run {k + 1} {name} collector {'on ' if on else 'off'}: scan_dataset {wall:.2f} s "
                    f"(CPU {cpu:.2f} s, of it the collector {clock.seconds:.2f} s in {clock.full} full passes) "
                    f"(load average {os.getloadavg()[0]:.1f})",
                    flush=True,
                )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows of the dataset (default 1,000,000)")
    p.add_argument("--row-group", type=int, default=100_000, help="rows of a parquet row group (default 100,000)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each format (default 3)")
    p.add_argument("--work-dir", type=Path, help="where to make the scratch folder (default: the system temp dir)")
    p.add_argument("--scan-only", action="store_true", help="time scan_dataset alone, with the cyclic GC off and on")
    args = p.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="synthgen-inputs-", dir=args.work_dir))
    print(f"bench_inputs: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    try:
        spaces = build(root, args.rows, args.row_group)
        for name, ws in spaces.items():
            data = next((ws / "prompts" / PARTITION).iterdir())
            print(f"  {name}: {data.name} {size_mb(data):.0f} MB", flush=True)
        if args.scan_only:
            scan_only(spaces, args.repeat)
            return 0
        tokenizer_dir = build_tokenizer(root / "tokenizer", style="chatml")
        results: dict[str, dict[str, list[float]]] = {
            n: {"first": [], "cpu": [], "peak": [], "scan": []} for n in spaces
        }
        with Simulator(tokenizer_dir, "--token-delay", "0.05") as sim:
            for k in range(args.repeat):
                for name, ws in spaces.items():
                    run = startup(ws, sim.url, RUN)
                    scan_s, count = scan_alone(ws)
                    assert count == args.rows, (name, count)
                    figures = results[name]
                    if run.first_request_s is not None:
                        figures["first"].append(run.first_request_s)
                    figures["cpu"].append(run.cpu_s)
                    figures["peak"].append(run.peak_mb)
                    figures["scan"].append(scan_s)
                    print(
                        f"  run {k + 1} {name}: first request {run.first_request_s or float('nan'):.2f} s "
                        f"(CPU {run.cpu_s:.1f} s), peak {run.peak_mb:.0f} MB; scan_dataset {scan_s:.2f} s "
                        f"(load average {os.getloadavg()[0]:.1f})",
                        flush=True,
                    )
        for name, figures in results.items():
            if not figures["first"]:
                print(f"{name}: no request reached the simulator")
                continue
            rate = args.rows / sorted(figures["scan"])[len(figures["scan"]) // 2]
            print(
                f"{name}: {args.rows:,} rows: first request {spread(figures['first'])} s, "
                f"CPU {spread(figures['cpu'])} s, peak RSS {spread(figures['peak'], '.0f')} MB; "
                f"scan_dataset {spread(figures['scan'])} s "
                f"({rate:,.0f} rows/s)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
