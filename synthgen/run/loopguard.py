"""The loop guard: tells, while an answer streams, that its tail has become a repetition loop.

Pure logic over output token ids, modelled on vLLM's ``repetition_detection`` sampling parameters
(``max_pattern_size``, ``min_pattern_size``, ``min_count``; vllm/v1/core/sched/utils.py): the tail
is a loop when its last ``min_count`` blocks of some ``pattern_size`` ids are the same block. SGLang
has no such stop, so the client watches the stream and ends the request itself.

Normal text and code repeat too (list markers, table rows, ``0, 0, 0``, a few identical lines),
so two bounds keep them apart: no look before ``min_tokens`` output ids, and the repeated run must
span at least ``min_span`` ids as well as ``min_count`` patterns. A degenerate loop runs until
``--max-tokens`` (thousands of ids), so waiting for ``min_span`` ids of it costs little.

Usage, one guard per request (it remembers how far it has looked)::

    guard = LoopGuard()
    for ids in chunks:  # the output ids so far, as the stream grows
        if (found := guard.check(ids)) is not None:
            ...  # abort the request; found.as_dict() describes the loop

A check looks only at the tail, and only once ``check_every`` new ids have come since the last:
its cost is O(max_pattern_size) comparisons plus one slice comparison per candidate size, so the
cost per streamed token stays a few comparisons however long the answer grows.
"""

from __future__ import annotations

from collections.abc import Sequence
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


class LoopGuard:
    """Detects a repetition loop in the tail of a growing list of output ids (see the module
    docstring for the parameters' meaning; the defaults never flag normal text or code in the
    tests, and catch a loop within about ``min_span + check_every`` ids of its start)."""

    def __init__(
        self,
        max_pattern_size: int = 512,
        min_pattern_size: int = 1,
        min_count: int = 4,
        min_tokens: int = 768,
        min_span: int = 512,
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
        self.min_span = min_span
        self.check_every = max(1, check_every)
        self._checked = 0  # how many ids the last check saw

    def check(self, ids: Sequence[int]) -> Repetition | None:
        """The loop at the end of ``ids`` (all output ids so far), or None."""
        end = len(ids)
        if end < self._checked:  # a new attempt: start over
            self._checked = 0
        if end < self.min_tokens or end - self._checked < self.check_every:
            return None
        self._checked = end
        last = ids[-1]
        for size in range(self.min_pattern_size, min(self.max_pattern_size, end // self.min_count) + 1):
            if ids[end - 1 - size] != last:  # the cheap test that rules out almost every size
                continue
            span = max(self.min_count * size, self.min_span)
            if span > end:
                continue
            # Period ``size`` over the last ``span`` ids: each id equals the one ``size`` before.
            if ids[end - span : end - size] == ids[end - span + size : end]:
                return self._describe(ids, size)
        return None

    @staticmethod
    def _describe(ids: Sequence[int], size: int) -> Repetition:
        end = len(ids)
        start = end - size
        while start > 0 and ids[start - 1] == ids[start - 1 + size]:
            start -= 1
        count = (end - start) // size
        first = end - count * size  # whole patterns only, ending at the end
        return Repetition(size, count, first, tuple(ids[first : first + size]))
