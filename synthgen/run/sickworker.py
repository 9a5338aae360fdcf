"""A worker whose answers turn to garbage is caught from the answers, not written as data.

Engine faults reported for several models in 2026 make a replica answer with one token repeated to the
end (``!!!!!!!!``), or with text that is no text at all (replacement characters, control bytes), while
it still answers 200 with ``finish_reason`` "length" or "stop". Such an answer is not a loop the model
fell into (the loop guard's job, a pattern that starts after real text): it is the whole answer.

:func:`garbage_reason` judges one answer; :class:`WorkerHealth` keeps a per-worker tally and says when a
worker's garbage comes in a burst: then the run stops sending and names it, instead of filling a
dataset with garbage for hours (one sick host must not cost the night's data).
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

MIN_TOKENS = 16  # shorter answers ("4", "Yes.") are never judged ...
MIN_CHARS = 32
# ... unless their worker has answered garbage already: a sick worker's garbage is as short as the room
# a prompt leaves it, and "!!!!!!!!" of 8 tokens from it is no answer.
SUSPECT_MIN_TOKENS = 4
SUSPECT_MIN_CHARS = 4
NOT_TEXT = frozenset("\ufffd\x00")


def garbage_reason(
    output_ids: list[int] | None, text: str, stop_ids: frozenset[int] = frozenset(), suspect: bool = False
) -> str | None:
    """Why this whole answer is garbage, or None when it may be an answer.

    Judged: every generated token the same id (stop tokens left out); text that is one character
    repeated (``!!!!``); text that is mostly replacement characters or NUL bytes. Short answers are
    never garbage, except from a ``suspect`` worker (one seen answering garbage), where only the
    shortest are spared."""
    min_tokens, min_chars = (SUSPECT_MIN_TOKENS, SUSPECT_MIN_CHARS) if suspect else (MIN_TOKENS, MIN_CHARS)
    ids = [t for t in output_ids or () if t not in stop_ids]
    body = text.strip()
    # A short answer of one token repeated is garbage only when its text has no letter or digit either.
    short_ok = len(ids) >= MIN_TOKENS or not any(ch.isalnum() for ch in body)
    if len(ids) >= min_tokens and len(set(ids)) == 1 and short_ok:
        return f"one token (id {ids[0]}) repeated {len(ids)} times"
    if len(body) >= min_chars and (output_ids is None or len(ids) >= min_tokens):
        if len(set(body)) == 1 and not body[0].isalnum():
            return f"the answer is {body[0]!r} repeated {len(body)} times"
        bad = sum(1 for ch in body if ch in NOT_TEXT)
        if bad * 2 >= len(body):
            return f"{bad} of {len(body)} characters are not text (U+FFFD or NUL)"
    return None


@dataclass
class WorkerHealth:
    """Garbage answers per worker; ``burst`` of the last ``window`` answers of one worker being garbage
    makes it sick. A good answer from a worker does not wipe its record: the window slides."""

    burst: int = 5
    window: int = 10
    _recent: dict[str, deque[bool]] = field(default_factory=dict)
    garbage: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    last_reason: dict[str, str] = field(default_factory=dict)

    def record(self, worker: str, reason: str | None) -> bool:
        """Count one answer of ``worker`` (``reason`` from :func:`garbage_reason`); True when the worker
        is now sick."""
        recent = self._recent.setdefault(worker, deque(maxlen=self.window))
        recent.append(reason is not None)
        self.answers[worker] += 1
        if reason is not None:
            self.garbage[worker] += 1
            self.last_reason[worker] = reason
        return sum(recent) >= self.burst

    def sick(self) -> list[str]:
        return sorted(w for w, recent in self._recent.items() if sum(recent) >= self.burst)

    def describe(self, worker: str) -> str:
        return (
            f"worker {worker} answered garbage {self.garbage[worker]} times in {self.answers[worker]} answers "
            f"(last: {self.last_reason.get(worker, '?')})"
        )
