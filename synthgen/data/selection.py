"""Which prompts a run takes from a dataset: pure functions, no I/O.

``first`` keeps file order. ``random`` orders ids by a keyed hash of (seed, id), so the pick
depends only on the seed and the set of ids: re-ordering the input file, resuming, or raising
the cap never changes a prompt already picked (a larger cap takes a superset).

Completed ids count toward the cap: with cap N and k of the dataset's ids already done, the
run takes the next N - k not-done ids in selection order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

SAMPLE_MODES = ("first", "random")


def random_key(seed: int, prompt_id: str) -> bytes:
    return hashlib.blake2b(f"{seed}\x00{prompt_id}".encode(), digest_size=8).digest()


def order(ids: Sequence[str], mode: str = "first", seed: int = 0, grouped: bool = False) -> list[str]:
    """``grouped``: ids are ``<conversation>#<k>`` (--regenerate each); random order then moves whole
    conversations, their turns staying together and in order, so the server's prefix cache serves
    the history they share."""
    if mode == "first":
        return list(ids)
    if mode == "random":
        if grouped:
            return sorted(ids, key=lambda i: (random_key(seed, i.rpartition("#")[0]), int(i.rpartition("#")[2])))
        return sorted(ids, key=lambda i: random_key(seed, i))
    raise ValueError(f"unknown sample mode {mode!r}")


@dataclass(frozen=True, slots=True)
class Selection:
    available: int  # unique ids in the dataset
    cap: int | None  # None: no cap
    already_done: int  # ids of this dataset found in raw_responses.jsonl
    pending: list[str]  # ids this run will try, in selection order

    @property
    def target(self) -> int:
        """How many of this dataset's prompts the output should hold when the run is complete."""
        return min(self.available, self.cap) if self.cap is not None else self.available


def select(
    ids: Sequence[str],
    done: set[str] | frozenset[str],
    cap: int | None,
    mode: str = "first",
    seed: int = 0,
    grouped: bool = False,
) -> Selection:
    done_here = sum(1 for i in ids if i in done)
    candidates = [i for i in order(ids, mode, seed, grouped) if i not in done]
    if cap is not None:
        candidates = candidates[: max(0, cap - done_here)]
    return Selection(available=len(ids), cap=cap, already_done=done_here, pending=candidates)
