"""What a scoring pass costs, before it is spent (pure over the units): prefill tokens and side-file bytes.

The side file holds per scored position K int32 ids + K float32 logprobs (the K x 8 bytes that dominate),
a float32 token logprob, and per row its input ids (int32); parquet's compression then shrinks the ids
(measured in bench/bench_teacher.py), so the figure is an upper bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from synthgen.data.teacherfile import side_bytes
from synthgen.teacher.units import Unit


@dataclass
class Cost:
    rows: int = 0
    positions: int = 0  # scored positions: the distributions the side file holds
    prefill_tokens: int = 0  # every id sent: the scoring pass is prefill only
    side_bytes: int = 0  # before compression


def cost_of(units: Iterable[Unit], top_k: int) -> Cost:
    cost = Cost()
    for unit in units:
        cost.rows += 1
        cost.positions += unit.positions
        cost.prefill_tokens += len(unit.input_ids)
    cost.side_bytes = side_bytes(cost.positions, cost.prefill_tokens, top_k)
    return cost


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size} B"
