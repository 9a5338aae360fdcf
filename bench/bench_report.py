#!/usr/bin/env python3
"""What the run report costs: writing <output-dir>/report.html over an output folder of --rows rows.

Rows come from ``tests/support/report_page.make_rows`` (single- and multi-turn answers, some cut at
4,096 tokens, tool calls; reasoning and answer text at three characters a token, no token ids unless
--ids), split over --datasets datasets, with a night's timeline (8 h of 10 s samples). Then, as the run
does it (``synthgen.report.folder.FolderReport`` + ``write_page``):

- first page: every row parsed once (a run's first page, or export_training.py --html);
- rewrite, nothing new: what each --report-interval costs while no row was added;
- rewrite after --new more rows were appended (only those are parsed).

Prints figures, decides nothing. ``python -m bench.bench_report`` (100,000 rows, about 40 s with the
folder's writing).
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import orjson

from synthgen.report.folder import FolderReport, write_page
from tests.support.report_page import make_rows, make_timeline, write_jsonl


def timed(folder: FolderReport, page: Path) -> tuple[float, int]:
    start = time.perf_counter()
    html = folder.page(300.0, "bench")
    write_page(page, html)
    return time.perf_counter() - start, len(html.encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--datasets", type=int, default=4)
    parser.add_argument("--new", type=int, default=1_000, help="rows appended before the last rewrite")
    parser.add_argument("--ids", action="store_true", help="rows carry output_ids (about 3x the bytes)")
    parser.add_argument("--dir", type=Path, help="where to build the folder (default: a temporary one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        out = Path(tmp)
        per = args.rows // args.datasets
        names = [f"ds{i}" for i in range(args.datasets)]
        for name in names:
            write_jsonl(out / name / "raw_responses.jsonl", make_rows(name, per, ids=args.ids))
        write_jsonl(out / "timeline.jsonl", make_timeline(time.time() - 8 * 3600))
        size = sum(p.stat().st_size for p in out.glob("*/raw_responses.jsonl")) / 1e6
        page = out / "report.html"
        folder = FolderReport(out)
        first, page_bytes = timed(folder, page)
        tracemalloc.start()  # what the figures keep between rewrites (traced apart: tracing slows parsing)
        kept = FolderReport(out)
        kept.refresh()
        held = tracemalloc.get_traced_memory()[0] / 1e6
        del kept
        tracemalloc.stop()
        again, _ = timed(folder, page)
        extra = make_rows(names[0], per + args.new, seed=0, ids=args.ids)[per:]
        with open(out / names[0] / "raw_responses.jsonl", "ab") as fh:
            fh.write(b"".join(orjson.dumps(r) + b"\n" for r in extra))
        more, _ = timed(folder, page)
        print(
            f"rows {per * args.datasets:,} in {args.datasets} datasets, {size:,.0f} MB; page {page_bytes / 1e3:,.0f} kB"
        )
        print(f"first page (every row parsed)  {first:6.2f} s   {size / first:,.0f} MB/s")
        print(f"kept between rewrites          {held:6.1f} MB   ({held * 1e6 / (per * args.datasets):,.0f} B per row)")
        print(f"rewrite, no new rows           {again:6.2f} s")
        print(f"rewrite after {args.new:,} new rows     {more:6.2f} s")


if __name__ == "__main__":
    main()
