"""Example rows, so a person learns what a dataset's data is by reading some of it (pure; bounded memory).

    Examples.add(row)         every counted row of a dataset is offered once, as the rows stream past
    Examples.chosen(median)   the rows to show, each with why it was chosen: the shortest, a row of median
                              length, the longest (by output tokens), then the first rows cut at the token
                              limit and the first the loop guard ended
    examples_section(...)     their HTML: prompt, reasoning and answer of each, every character escaped

Rows are read once and never again: the page keeps a clipped copy of the few it may show. The median row is
picked, at the end, among a fixed sample of up to ``SAMPLED`` rows (those whose key hashes lowest: the same
rows whatever order the file holds them in) as the one nearest the median of every row's length. Texts are
clipped to their head and tail (a cut row's end, or a loop, is in its tail), saying how much was left out.
"""

from __future__ import annotations

import hashlib
import heapq
import json  # not orjson: a tool call may hold a lone surrogate (JSON allows one), which orjson refuses
from dataclasses import dataclass, replace
from html import escape
from typing import Any

from synthgen.data.rowread import Row

SAMPLED = 16  # rows kept as candidates for the median
FIRST = 2  # cut rows and looped rows shown, each
HEAD, TAIL = 700, 300  # characters kept of a long text
PROMPT_HEAD, PROMPT_TAIL = 300, 100


def clip(text: str, head: int = HEAD, tail: int = TAIL) -> str:
    """``text`` whole when short, else its head and tail around a note of what was left out; any lone
    surrogate (JSON may carry one) replaced, so the page always encodes."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    if len(text) <= head + tail + 40:
        return text
    return f"{text[:head]}\n[… {len(text) - head - tail:,} characters left out …]\n{text[-tail:]}"


def _last_prompt(fields: dict[str, Any]) -> str:
    """The last user message's text (text parts of a multi-part content joined)."""
    messages = fields.get("messages")
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                parts = [p.get("text") for p in content if isinstance(p, dict)]
                content = "\n".join(p for p in parts if isinstance(p, str))
            return content if isinstance(content, str) else ""
    return ""


@dataclass(frozen=True, slots=True)
class Example:
    id: str
    sample: int
    finish: str
    output_tokens: int
    turns: int
    tool_calls: int
    reasoning_open: bool  # the last turn's reasoning never closed (cut inside it)
    prompt: str
    reasoning: str
    answer: str
    calls: str  # the last turn's tool calls as JSON ("" without)
    why: tuple[str, ...] = ()

    @classmethod
    def of(cls, row: Row) -> Example:
        last = row.turns[-1]
        return cls(
            id=clip(row.id, 200, 0),
            sample=row.sample,
            finish=row.finish,
            output_tokens=row.output_tokens,
            turns=len(row.turns),
            tool_calls=sum(len(t.tool_calls or ()) for t in row.turns),
            reasoning_open=not last.reasoning_complete,
            prompt=clip(_last_prompt(row.fields), PROMPT_HEAD, PROMPT_TAIL),
            reasoning=clip(last.reasoning_content),
            answer=clip(last.content),
            calls=clip(json.dumps(last.tool_calls, ensure_ascii=False, default=str)) if last.tool_calls else "",
        )


def _rank(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


@dataclass
class Examples:
    shortest: Example | None = None
    longest: Example | None = None
    cut: list[Example] | None = None
    looped: list[Example] | None = None
    _sampled: list[tuple[int, int, Example]] | None = None  # a heap of (-rank, tokens, example): lowest ranks kept

    def add(self, row: Row) -> None:
        tokens = row.output_tokens
        if self.shortest is None or tokens < self.shortest.output_tokens:
            self.shortest = Example.of(row)
        if self.longest is None or tokens > self.longest.output_tokens:
            self.longest = Example.of(row)
        if row.looped:
            self.looped = _first(self.looped, row)
        elif row.cut:
            self.cut = _first(self.cut, row)
        heap = self._sampled = self._sampled if self._sampled is not None else []
        rank = -_rank(row.key)
        if len(heap) < SAMPLED:
            heapq.heappush(heap, (rank, tokens, Example.of(row)))
        elif rank > heap[0][0]:
            heapq.heapreplace(heap, (rank, tokens, Example.of(row)))

    def chosen(self, median: int) -> list[Example]:
        """The rows to show, in the page's order, each once (a row chosen twice says both whys)."""
        near = min(self._sampled or [], key=lambda s: (abs(s[1] - median), s[0]), default=None)
        picks = [
            ("shortest", self.shortest),
            ("median length", near[2] if near else None),
            ("longest", self.longest),
            *(("cut at the token limit", e) for e in self.cut or ()),
            *(("ended by the loop guard", e) for e in self.looped or ()),
        ]
        out: dict[tuple[str, int], Example] = {}
        for why, example in picks:
            if example is None:
                continue
            key = (example.id, example.sample)
            seen = out.get(key)
            out[key] = replace(example, why=(*seen.why, why) if seen else (why,))
        return list(out.values())


def _first(kept: list[Example] | None, row: Row) -> list[Example]:
    kept = kept or []
    return kept if len(kept) >= FIRST else [*kept, Example.of(row)]


# --- the page's section ----------------------------------------------------------------------------------
def _text(label: str, text: str, note: str = "") -> str:
    body = f"<pre>{escape(text)}</pre>" if text else '<p class="none">(none)</p>'
    return f"<dt>{escape(label)}{escape(note)}</dt><dd>{body}</dd>"


def example_html(e: Example) -> str:
    sample = f", sample {e.sample}" if e.sample else ""
    turns = f", last of {e.turns} turns" if e.turns > 1 else ""
    calls = f", {e.tool_calls:,} tool call{'s' if e.tool_calls != 1 else ''}" if e.tool_calls else ""
    tokens = f"{e.output_tokens:,} output token{'s' if e.output_tokens != 1 else ''}"
    summary = (
        f'<span class="why">{escape(" · ".join(e.why))}</span>: <code>{escape(e.id)}</code>{escape(sample)}, '
        f"{tokens}, finish <b>{escape(e.finish)}</b>{escape(turns + calls)}"
    )
    return (
        f'<details class="example"><summary>{summary}</summary><dl>'
        + _text("prompt", e.prompt, " (the last user message)")
        + _text("reasoning", e.reasoning, " (still open: cut before it closed)" if e.reasoning_open else "")
        + _text("answer", e.answer)
        + (_text("tool calls", e.calls, " (the last turn's, as JSON)") if e.calls else "")
        + "</dl></details>"
    )


def examples_section(examples: list[Example]) -> str:
    if not examples:
        return ""
    return (
        '<div class="examples"><h4>Example rows</h4><p class="legend">Read some of the data: the shortest, a '
        "median and the longest row by output tokens, and the first rows cut or ended by the loop guard; long "
        f"texts show their first {HEAD:,} and last {TAIL:,} characters.</p>"
        + "".join(example_html(e) for e in examples)
        + "</div>"
    )
