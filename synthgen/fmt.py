"""Durations as status lines, messages and summaries print them (a base module: imports nothing)."""

from __future__ import annotations


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "?"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """A count and its noun as a sentence says it: "1 prompt", "2 prompts", "1,024 rows"."""
    return f"{n:,} {noun if n == 1 else nouns or noun + 's'}"
