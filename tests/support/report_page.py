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
        # A row is a sample of a prompt: (id, sample); an error row's id is that key (sample 0: the id alone).
        key = row["id"] if not row.get("sample") else f"{row['id']}\x1fs{row['sample']}"
        if key not in seen:
            seen.add(key)
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


# --- a made-up output folder: rows of every kind the page shows, a timeline with an outage and a restart ---
def make_rows(name: str, count: int, seed: int = 0, ids: bool = False) -> list[dict]:
    """``count`` result rows: mostly ``stop``, some cut at 4,096 tokens (``length``, reasoning never
    closed), some with an empty answer, some with tool calls, some conversations of several turns."""
    import random

    rng = random.Random(f"{name}-{seed}")
    rows = []
    for i in range(count):
        cut = rng.random() < 0.06
        tokens = 4096 if cut else max(8, int(rng.lognormvariate(6.3, 0.8)))
        reasoning = "r" * int(tokens * 3 * rng.uniform(0.4, 0.9))
        content = "" if cut or rng.random() < 0.03 else "c" * max(1, int(tokens * 3 * rng.uniform(0.1, 0.5)))
        calls = (
            [{"type": "function", "function": {"name": "search", "arguments": "{}"}}] if rng.random() < 0.2 else None
        )
        row = {
            "id": f"{name}-{i:06d}",
            "dataset": name,
            "reasoning_content": reasoning,
            "content": content,
            "finish_reason": "length" if cut else "stop",
            "reasoning_complete": not cut,
            "prompt_tokens": max(1, int(rng.lognormvariate(5.2, 0.6))),
            "completion_tokens": tokens,
            "tool_calls": calls,
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": content}],
        }
        if ids:
            row["output_ids"] = [rng.randrange(160000) for _ in range(tokens)]
        if rng.random() < 0.05:  # a conversation with every assistant turn generated (regenerate=all)
            first = {
                "reasoning_content": "r" * 30,
                "content": "c" * 20,
                "finish_reason": "stop",
                "completion_tokens": 17,
            }
            row["turns"] = [first, {k: row[k] for k in ("reasoning_content", "content", "finish_reason", "tool_calls")}]
            row["turns"][1]["completion_tokens"] = tokens - 17 if tokens > 17 else tokens
            row["completion_tokens"] = 17 + row["turns"][1]["completion_tokens"]
        rows.append(row)
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))


def make_timeline(start: float, hours: float = 8.0, every: float = 10.0, seed: int = 0) -> list[dict]:
    """A night's samples: a busy server, an outage of five minutes a third of the way in and a restart."""
    import random

    rng = random.Random(seed)
    n = int(hours * 3600 / every)
    down_from, down_to = n // 3, n // 3 + int(300 / every)
    lines: list[dict] = []
    tokens = done = 0
    for k in range(n):
        t = start + k * every
        down = down_from <= k < down_to
        rate = 0.0 if down else 900 + 150 * rng.random()
        tokens += int(rate * every)
        done += 0 if down else rng.randint(1, 3)
        if k == down_from:
            lines.append({"t": t, "run": "r1", "event": "outage", "detail": "connection refused"})
        if k == down_to:
            lines.append({"t": t, "run": "r1", "event": "recovered", "detail": "after 300 s"})
        lines.append(
            {
                "t": t, "run": "r1", "tok_s": round(rate, 1), "in_flight": 0 if down else 64,
                "running": None if down else 58 + rng.randint(-4, 4), "waiting": None if down else rng.randint(0, 8),
                "target": 72, "done": done, "failed": 0, "skipped": 0, "tokens": tokens,
                "restarts": 1 if k >= down_to else 0, "down": down,
            }
        )  # fmt: skip
    lines.append({"t": start + n * every, "run": "r1", "event": "end", "detail": ""})
    return lines


def make_folder(out: Path, sizes: dict[str, int], start: float) -> None:
    """An output folder as a night's run leaves it: rows, an errors.jsonl, a timeline."""
    for name, count in sizes.items():
        write_jsonl(out / name / "raw_responses.jsonl", make_rows(name, count))
    errors = [
        {
            "id": "x1",
            "dataset": "",
            "status": "failed",
            "error_type": "timeout",
            "error": "read timeout",
            "attempts": 5,
        },
        {"id": "x2", "dataset": "", "status": "skipped", "error_type": "prompt_too_long", "error": "too long"},
    ]
    first = next(iter(sizes))
    write_jsonl(out / first / "errors.jsonl", errors)
    write_jsonl(out / "timeline.jsonl", make_timeline(start))


def with_mix(rows: list[dict], samples: int, recipes: int = 1, workers: tuple[str, ...] = ()) -> list[dict]:
    """``rows`` as a run with ``--samples-per-prompt samples`` (and a mix of ``recipes``) wrote them: each
    prompt's samples in a row, every other prompt's samples all the same answer; their worker in turn."""
    out = []
    for i, row in enumerate(rows):
        prompt, sample = divmod(i, samples)
        row = {**row, "id": f"{row['dataset']}-p{prompt:05d}", "sample": sample}
        row["output_text"] = f"same {prompt}" if prompt % 2 else f"answer {prompt}/{sample}"
        if recipes > 1:
            row["recipe"] = {"index": (prompt + sample) % recipes, "temperature": 0.6}
        if workers:
            row["worker"] = workers[i % len(workers)]
        out.append(row)
    return out
