"""Where each prompt of a scanned dataset starts, by prompt id, in ~30 bytes a prompt.

A dict of ``id -> (offset, line)`` tuples cost ~150 bytes a prompt beside the id itself (1M prompts:
150 MB). ``PromptOffsets`` keeps the offsets and line numbers in two arrays parallel to the
index's list of ids (file order), and finds an id through its hash: the ids' hashes sorted once
(numpy, 16 bytes a prompt with the permutation), searched by bisection, the id itself compared
(hashes may collide). ``duplicates`` finds repeated ids the same way, without a set of them.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping

import numpy as np
import numpy.typing as npt


class PromptOffsets(Mapping[str, tuple[int, int]]):
    """prompt id -> (byte offset of its line, line number), over ``ids`` and the arrays ``starts`` and
    ``lines`` that the scan appends to in step with it."""

    def __init__(self, ids: list[str]):
        self.ids = ids
        self.starts = array("q")
        self.lines = array("q")
        self._table: tuple[npt.NDArray[np.int64], npt.NDArray[np.intp]] | None = None

    def _sorted(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp]]:
        """(the ids' hashes in order, their positions); built on first use, again if ids were added."""
        if self._table is None or len(self._table[0]) != len(self.ids):
            hashes = np.fromiter((hash(i) for i in self.ids), dtype=np.int64, count=len(self.ids))
            order = np.argsort(hashes, kind="stable")
            self._table = (hashes[order], order)
        return self._table

    def position(self, prompt_id: str) -> int | None:
        """The index of ``prompt_id`` in ``ids`` (its first one), or None."""
        keys, order = self._sorted()
        key = hash(prompt_id)
        at = int(np.searchsorted(keys, key))
        while at < len(keys) and keys[at] == key:
            position = int(order[at])
            if self.ids[position] == prompt_id:
                return position
            at += 1
        return None

    def has_duplicates(self) -> bool:
        """Whether an id occurs twice."""
        keys, order = self._sorted()
        same = np.flatnonzero(keys[1:] == keys[:-1])  # equal ids have equal hashes: all are among these
        candidates = [self.ids[int(p)] for p in order[np.union1d(same, same + 1)]]
        return len(set(candidates)) != len(candidates)

    def __getitem__(self, prompt_id: str) -> tuple[int, int]:
        position = self.position(prompt_id)
        if position is None:
            raise KeyError(prompt_id)
        return self.starts[position], self.lines[position]

    def __contains__(self, prompt_id: object) -> bool:
        return isinstance(prompt_id, str) and self.position(prompt_id) is not None

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)
