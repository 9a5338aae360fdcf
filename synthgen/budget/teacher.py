"""``compute_budget.py --teacher-topk K``: what scoring the planned rows with the teacher costs (pure).

Per dataset: the scored positions are the planned output tokens (an --existing file's trained tokens), the
prefill tokens are every id sent (prompt + output: the scoring pass generates nothing), and the side file
holds K x 8 bytes a position plus 4 a token sent, before compression (teacherfile.side_bytes). The prompt
length comes from the dataset's stored rows (their average prompt_tokens); without any, prefill is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from synthgen.budget.plan import DatasetPlan, Plan
from synthgen.data.teacherfile import side_bytes


@dataclass(frozen=True, slots=True)
class TeacherCost:
    name: str
    positions: int | None
    prefill_tokens: int | None
    side_bytes: int | None


def dataset_cost(d: DatasetPlan, avg_prompt: Fraction | None, top_k: int) -> TeacherCost:
    if d.existing:
        positions, prefill = d.expected_tokens, d.total_tokens
    elif d.fixed or d.samples is None or d.expected_tokens is None:
        return TeacherCost(d.name, None, None, None)
    else:
        positions = d.expected_tokens
        prefill = None if avg_prompt is None else positions + round(avg_prompt * d.samples)
    size = None if positions is None or prefill is None else side_bytes(positions, prefill, top_k)
    return TeacherCost(d.name, positions, prefill, size)


def plan_costs(plan: Plan, avg_prompts: dict[str, Fraction | None], top_k: int) -> list[TeacherCost]:
    return [dataset_cost(d, avg_prompts.get(d.name), top_k) for d in plan.datasets]


def _cell(value: int | None) -> str:
    return "?" if value is None else f"{value:,}"


def format_teacher_table(costs: list[TeacherCost], top_k: int) -> str:
    lines = [f"teacher scoring (--teacher-topk {top_k}): prefill only, one request per row", ""]
    lines.append(f"{'dataset':<28} {'positions':>14} {'prefill tokens':>16} {'side file (GB)':>15}")
    for c in costs:
        size = "?" if c.side_bytes is None else f"{c.side_bytes / 1e9:.3f}"
        lines.append(f"{c.name:<28} {_cell(c.positions):>14} {_cell(c.prefill_tokens):>16} {size:>15}")
    known = [c for c in costs if c.side_bytes is not None]
    total_prefill = sum(c.prefill_tokens or 0 for c in known)
    total_size = sum(c.side_bytes or 0 for c in known)
    lines.append(f"{'total':<28} {'':>14} {total_prefill:>16,} {total_size / 1e9:>15.3f}")
    if len(known) < len(costs):
        lines.append("? : no stored rows to measure the prompt length from (run a few first), or no estimate")
    return "\n".join(lines)


def teacher_json(costs: list[TeacherCost], top_k: int) -> dict[str, Any]:
    return {
        "top_k": top_k,
        "datasets": {
            c.name: {"positions": c.positions, "prefill_tokens": c.prefill_tokens, "side_file_bytes": c.side_bytes}
            for c in costs
        },
    }
