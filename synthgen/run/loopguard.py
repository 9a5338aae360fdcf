"""The loop guard: tells, while an answer streams, that its tail has become a repetition loop.

Pure logic over output token ids, modelled on vLLM's ``repetition_detection`` sampling parameters
(``max_pattern_size``, ``min_pattern_size``, ``min_count``; vllm/v1/core/sched/utils.py): the tail
is a loop when its last ``min_count`` blocks of some ``pattern_size`` ids are the same block. SGLang
has no such stop, so the client watches the stream and ends the request itself.

vLLM's check is opt-in with sizes the caller picks; ours is on for every request, so it must leave
legitimate repetition alone. Legitimate repetition ends (a zero matrix, 100 default JSON records, 200
identical CSV rows, base64 of zero bytes: thousands of ids of one row repeated, then the answer goes
on); a degenerate loop runs to ``--max-tokens``. So the repeated run must span a share of the
answer's budget (``budget``, its max_new_tokens) before it is cut, and a share that depends on what
repeats:

- **text** (a pattern whose visible characters are mostly letters and whose ids are mostly distinct:
  a sentence, a paragraph of reasoning, "Wait, let me check again"): ``text_share`` of the budget
  (at least ``min_span``): 10%, 3,277 ids at --max-tokens 32,768;
- **data** (anything else: rows of numbers, cells, markup, fill such as ``0x00, `` or ``AAAA``):
  ``data_share`` of the budget, 40%, 13,107 ids at 32,768. A degenerate loop of data rows looks the
  same as a long table until it runs past any table the answer could hold.

Without ``decode`` (ids to text) every pattern is judged as data. ``min_tokens`` output ids come
before any look. ``bench/bench_loopguard.py`` measures both kinds against files of the machine,
structured answers and loops (docs/resume.md gives the figures).

Usage, one guard per request (it remembers how far it has looked)::

    guard = LoopGuard(budget=max_new_tokens, decode=tokenizer.decode)
    for ids in chunks:  # the output ids so far, as the stream grows
        if (found := guard.check(ids)) is not None:
            ...  # abort the request; found.as_dict() describes the loop

A check looks only at the tail, and only once ``check_every`` new ids have come since the last:
its cost is O(max_pattern_size) comparisons plus one slice comparison per candidate size (and one
decode of a pattern of at most ``max_pattern_size`` ids while a repetition longer than the text span
is under way), so the cost per streamed token stays a few comparisons however long the answer grows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Repetition:
    """A loop found in the output: ``pattern`` (``pattern_size`` ids) repeats ``count`` whole
    times from output index ``start`` to the end."""

    pattern_size: int
    count: int
    start: int
    pattern: tuple[int, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "pattern_size": self.pattern_size,
            "count": self.count,
            "start": self.start,
            "pattern": list(self.pattern),
        }


# The budget when none is given: --max-tokens' default.
DEFAULT_BUDGET = 32768
# A pattern is text when at least this share of its visible characters are letters and this share
# of its ids are distinct (prose measured 0.81-0.97 and 0.57-1.0; data rows 0-0.73 or 0.03-0.47).
TEXT_LETTERS = 0.75
TEXT_DISTINCT = 0.5


class LoopGuard:
    """Detects a repetition loop in the tail of a growing list of output ids (see the module
    docstring for the parameters' meaning). ``min_span=512, text_share=0, data_share=0`` is the
    guard as it was before the spans scaled with the budget (it cut long tables)."""

    def __init__(
        self,
        budget: int = DEFAULT_BUDGET,
        decode: Callable[[list[int]], str] | None = None,
        *,
        max_pattern_size: int = 512,
        min_pattern_size: int = 1,
        min_count: int = 4,
        min_tokens: int = 768,
        min_span: int = 2048,
        text_share: float = 0.10,
        data_share: float = 0.40,
        check_every: int = 64,
    ):
        if not 1 <= min_pattern_size <= max_pattern_size:
            raise ValueError("pattern sizes must satisfy 1 <= min_pattern_size <= max_pattern_size")
        if min_count < 2:
            raise ValueError("min_count must be at least 2: one occurrence is no repetition")
        self.max_pattern_size = max_pattern_size
        self.min_pattern_size = min_pattern_size
        self.min_count = min_count
        self.min_tokens = min_tokens
        self.text_span = max(min_span, int(budget * text_share))
        self.data_span = max(self.text_span, int(budget * data_share))
        self.decode = decode
        self.check_every = max(1, check_every)
        self._checked = 0  # how many ids the last check saw
        self._kinds: dict[tuple[int, ...], bool] = {}  # pattern -> is text (a loop shows few)

    def check(self, ids: Sequence[int]) -> Repetition | None:
        """The loop at the end of ``ids`` (all output ids so far), or None."""
        end = len(ids)
        if end < self._checked:  # a new attempt: start over
            self._checked = 0
        if end < self.min_tokens or end - self._checked < self.check_every:
            return None
        self._checked = end
        last = ids[-1]
        data = 0  # a size whose pattern is data: its multiples are data too
        for size in range(self.min_pattern_size, min(self.max_pattern_size, end // self.min_count) + 1):
            if ids[end - 1 - size] != last:  # the cheap test that rules out almost every size
                continue
            if not self._periodic(ids, size, self.text_span):
                continue
            if self.data_span > self.text_span and (data and size % data == 0 or not self._is_text(ids, size)):
                data = data or size
                if not self._periodic(ids, size, self.data_span):
                    continue
            return self._describe(ids, size)
        return None

    def _periodic(self, ids: Sequence[int], size: int, span: int) -> bool:
        """Period ``size`` over the last max(span, min_count patterns) ids: each id equals the one ``size`` before."""
        end, span = len(ids), max(self.min_count * size, span)
        if span > end:
            return False
        near = min(span, size + 64)  # the last 64 first: most candidates fail there, without copying the span
        if ids[end - near : end - size] != ids[end - near + size : end]:
            return False
        return ids[end - span : end - size] == ids[end - span + size : end]

    def _is_text(self, ids: Sequence[int], size: int) -> bool:
        """The pattern ending the output reads as text (see TEXT_LETTERS, TEXT_DISTINCT)."""
        if self.decode is None:
            return False
        pattern = tuple(ids[len(ids) - size :])
        known = self._kinds.get(pattern)
        if known is None:
            visible = [c for c in self.decode(list(pattern)) if not c.isspace()]
            letters = sum(c.isalpha() for c in visible)
            known = letters >= TEXT_LETTERS * len(visible) > 0 and len(set(pattern)) >= TEXT_DISTINCT * size
            if len(self._kinds) < 64:
                self._kinds[pattern] = known
        return known

    @staticmethod
    def _describe(ids: Sequence[int], size: int) -> Repetition:
        end = len(ids)
        start = end - size
        while start > 0 and ids[start - 1] == ids[start - 1 + size]:
            start -= 1
        count = (end - start) // size
        first = end - count * size  # whole patterns only, ending at the end
        return Repetition(size, count, first, tuple(ids[first : first + size]))
