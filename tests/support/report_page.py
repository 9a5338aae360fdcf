"""Reading a run report back in tests: the numbers it marks with ``data-stat``, and the same numbers
computed independently from the rows (``expected_stats``), so a test compares the two."""

from __future__ import annotations

import re
from collections import Counter
from html import unescape
from pathlib import Path

import orjson

STAT = re.compile(r'data-stat="([^"]+)">([^<]*)<')


def page_stats(html: str) -> dict[str, str]:
    """Every ``data-stat`` key of the page and the text it shows (the last one, where a key repeats)."""
    return {unescape(key): unescape(text) for key, text in STAT.findall(html)}


def read_rows(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()] if path.exists() else []


def pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def expected_stats(name: str, rows: list[dict], errors: list[dict]) -> dict[str, str]:
    """What the page must say about dataset ``name``, from its rows and errors, counted here from scratch."""
    seen: set[str] = set()
    unique = []
    for row in rows:
        if row["id"] not in seen:
            seen.add(row["id"])
            unique.append(row)

    def turns(row: dict) -> list[dict]:
        return row.get("turns") or [row]

    cut = sum(1 for r in unique if any(t.get("finish_reason") == "length" for t in turns(r)))
    empty = sum(
        1
        for r in unique
        if any(
            t.get("reasoning_complete") is not False
            and not (t.get("content") or "").strip()
            and not (t.get("tool_calls") or [])
            for t in turns(r)
        )
    )
    finish = Counter(r["finish_reason"] for r in unique)
    latest = {e["id"]: e for e in errors}
    kinds = Counter((e["status"], e["error_type"]) for rid, e in latest.items() if rid not in seen)
    out = {
        f"{name}/rows": f"{len(unique):,}",
        f"{name}/stop": f"{finish['stop']:,}",
        f"{name}/length": f"{finish['length']:,}",
        f"{name}/cut": f"{cut:,}",
        f"{name}/cut_share": pct(cut, len(unique)),
        f"{name}/empty": f"{empty:,}",
        f"{name}/output_tokens": f"{sum(r['completion_tokens'] for r in unique):,}",
        f"{name}/tool_calls": f"{sum(len(t.get('tool_calls') or []) for r in unique for t in turns(r)):,}",
        f"{name}/turns": f"{sum(len(turns(r)) for r in unique):,}",
        f"{name}/failed": f"{sum(n for (status, _), n in kinds.items() if status == 'failed'):,}",
        f"{name}/skipped": f"{sum(n for (status, _), n in kinds.items() if status != 'failed'):,}",
    }
    for (status, kind), n in kinds.items():
        out[f"{name}/errors/{status}/{kind}"] = f"{n:,}"
    prompts = sorted(r["prompt_tokens"] for r in unique if r["finish_reason"] == "stop")
    if prompts:
        out[f"{name}/prompt/stop/max"] = f"{prompts[-1]:,}"
        out[f"{name}/prompt/stop/n"] = f"{len(prompts):,}"
    return out
