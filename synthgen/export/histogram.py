"""Terminal histograms of integer lengths, with quantiles marked, for reports read in a plain
terminal or a nohup log: plain ASCII, fixed width, no ANSI codes, no carriage returns.

    completion tokens  n=6  min 10  p50 300  p90 4,000  p99 4,000  max 4,000
           0 -    999  ######################################## 5  p50
       1,000 -  1,999                                           0
       ...
       4,000 -  4,999  ########                                 1  p90 p99

Bins have a "nice" width (1, 2 or 5 times a power of ten) so their edges read as round numbers.
Quantiles are nearest-rank: the value at rank ceil(q * n), always one of the data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

QUANTILES = (("p50", 0.50), ("p90", 0.90), ("p99", 0.99))
BAR = "#"


def quantile(ordered: Sequence[int], q: float) -> int:
    """Nearest-rank quantile of already sorted values (not empty)."""
    rank = max(1, math.ceil(q * len(ordered)))
    return ordered[rank - 1]


def nice_width(span: int, bins: int) -> int:
    """The smallest width of 1, 2 or 5 times a power of ten that covers ``span`` in ``bins`` bins."""
    raw = max(1, math.ceil(span / bins))
    power = 1
    while True:
        for step in (1, 2, 5):
            if step * power >= raw:
                return step * power
        power *= 10


def histogram(values: Sequence[int], title: str, bins: int = 10, bar_width: int = 40) -> list[str]:
    """Lines of a histogram of ``values`` (non-negative integers); one summary line when empty."""
    if not values:
        return [f"{title}  n=0"]
    ordered = sorted(values)
    marks = {name: quantile(ordered, q) for name, q in QUANTILES}
    head = (
        f"{title}  n={len(ordered):,}  min {ordered[0]:,}  "
        + "  ".join(f"{name} {value:,}" for name, value in marks.items())
        + f"  max {ordered[-1]:,}"
    )
    width = nice_width(ordered[-1] - ordered[0] + 1, bins)
    start = ordered[0] // width * width
    count = (ordered[-1] - start) // width + 1
    counts = [0] * count
    for value in ordered:
        counts[(value - start) // width] += 1
    edges = [(start + i * width, start + (i + 1) * width - 1) for i in range(count)]
    label_width = max(len(f"{hi:,}") for _, hi in edges)
    count_width = max(len(f"{c:,}") for c in counts)
    tallest = max(counts)
    lines = [head]
    for (lo, hi), n in zip(edges, counts, strict=True):
        # A non-empty bin always shows at least one mark, so rare long tails stay visible.
        bar = BAR * max(1 if n else 0, round(n / tallest * bar_width))
        here = [name for name, value in marks.items() if lo <= value <= hi]
        line = f"  {lo:>{label_width},} - {hi:>{label_width},}  {bar:<{bar_width}} {n:>{count_width},}"
        if here:
            line += "  " + " ".join(here)
        lines.append(line)
    return lines
