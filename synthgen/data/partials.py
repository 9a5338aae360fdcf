"""Partial outputs: what the server generated for a request that was ended before it finished (the
run stopped and aborted it, or the server aborted it), kept so that a later attempt or run continues
it instead of paying for it again.

    outputs/<dataset>/partial_outputs.jsonl
        {"id", "turn", "start", "output_ids", "segments", "prompt_hash", "settings"} per line,
        "segment_seeds" where the attempts sent a sampling_seed, and "max_new_tokens", "extended_by"
        where the output is a cut answer being extended by --continue-cut (the turn's whole budget:
        the cut answer's length plus the ``extended_by`` tokens it was given)

``id`` is the work's key (``samples.sample_key``: the prompt id, with the sample after the first), so each
(id, sample) has its own partial. A line holds the ids from position ``start`` on: 0 for a whole partial
(a stop's, an abort's), the ids since the previous line for a checkpoint of a streaming request
(``--checkpoint-tokens``), so the file grows by each id once. ``segments`` is the number of tokens each
attempt added, for the whole partial as of that line (their sum is ``start + len(output_ids)``), and
``segment_seeds`` the sampling_seed each of those attempts sent (null: none). A request is continued by
sending the prompt ids plus ``output_ids`` with what is left of its ``max_new_tokens``, under the same
seed: for temperature/top-p/top-k/min-p sampling, seeded or not, that draws from the same distribution as
one uninterrupted request (``continuation_blocker`` names the settings where it does not).

The rules are those of ``store.PartialTurns``: every line is one ``os.write`` of a whole line on
an O_APPEND descriptor; a line with ``start`` 0 replaces what an id had, a later one extends it
only where it begins (one that does not fit is passed over); a torn or unreadable line is passed
over. A
run continues only partials made for the prompt its line makes now and under the run's settings
(``usable``); ``open`` rewrites the file with those alone (atomically) before the first append,
and ``compact`` at the end drops those of prompts whose row is written.
"""

from __future__ import annotations

import dataclasses
import errno
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from synthgen.data.openfiles import limit_error, open_output
from synthgen.data.records import typed_list
from synthgen.data.rowread import Row
from synthgen.data.samples import split_key
from synthgen.data.sampling_keys import continuation_rows
from synthgen.data.store import WRITE_POOL, iter_rows, rewrite_lines
from synthgen.errors import StoreWriteError

NAME = "partial_outputs.jsonl"


def continuation_blocker(sampling: dict[str, Any]) -> str | None:
    """Why a request with these sampling params cannot be continued from a partial output (None: it
    can): penalties that count output tokens and min_new_tokens are not carried over by a new request
    (the rows of sampling_keys with a ``continuation``). A sampling_seed is: SGLang keys each token's
    draw by the seed and the token's position, which a continuation keeps."""
    for row in continuation_rows():
        value = sampling.get(row.key, row.neutral)
        if row.blocks_continuation(value):
            return f"{row.key} {value}: {row.continuation}, so a continuation is not the same distribution"
    return None


@dataclass(frozen=True, slots=True)
class Extension:
    """A cut answer being extended by --continue-cut: the turn's whole ``max_new_tokens`` (the cut
    answer's length plus ``extended_by``), so a rerun continues the extension to the same end."""

    max_new_tokens: int
    extended_by: int

    @property
    def cut_at(self) -> int:
        """The cut answer's length: where the extension began."""
        return self.max_new_tokens - self.extended_by

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Extension | None:
        budget, extra = row.get("max_new_tokens"), row.get("extended_by")
        if type(budget) is not int or type(extra) is not int or not 0 < extra < budget:
            return None
        return cls(budget, extra)


@dataclass(frozen=True, slots=True)
class Partial:
    id: str
    turn: int  # regenerate=all: the turn it is part of (0 otherwise)
    output_ids: list[int]
    segments: list[int]  # tokens per attempt, in order
    prompt_hash: str | None
    settings: str | None
    start: int = 0  # as a line: output_ids hold the ids from here on (see the module docstring)
    seeds: list[int | None] | None = None  # the sampling_seed each attempt sent (None: no attempt sent one)
    extension: Extension | None = None  # --continue-cut: the cut answer's extension this output is part of

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Partial | None:
        rid, turn, start = row.get("id"), row.get("turn", 0), row.get("start", 0)
        ids, segments = typed_list(row.get("output_ids"), int), typed_list(row.get("segments"), int)
        if not isinstance(rid, str) or not all(isinstance(n, int) and not isinstance(n, bool) for n in (turn, start)):
            return None
        if not ids or segments is None or start < 0 or sum(segments) != start + len(ids):
            return None
        digest, settings = row.get("prompt_hash"), row.get("settings")
        return cls(
            rid,
            turn,
            ids,
            segments,
            digest if isinstance(digest, str) else None,
            settings if isinstance(settings, str) else None,
            start,
            _seeds(row.get("segment_seeds"), len(segments)),
            Extension.from_dict(row),
        )

    def to_json(self, start: int = 0) -> bytes:
        """The line of this partial from id ``start`` on (0: the whole)."""
        row = {"id": self.id, "turn": self.turn, "start": start, "output_ids": self.output_ids[start:]}
        row |= {"segments": self.segments, "prompt_hash": self.prompt_hash, "settings": self.settings}
        if self.seeds is not None:
            row["segment_seeds"] = self.seeds
        if self.extension is not None:
            row |= {"max_new_tokens": self.extension.max_new_tokens, "extended_by": self.extension.extended_by}
        return orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)

    def extended(self, line: Partial) -> Partial | None:
        """This partial with a later line of its id applied, or None when the line does not fit."""
        if line.start == 0:
            return line
        if line.turn != self.turn or line.start != len(self.output_ids):
            return None
        return dataclasses.replace(line, output_ids=self.output_ids + line.output_ids, start=0)

    @property
    def tokens(self) -> int:
        return len(self.output_ids)

    def head(self, n: int) -> Partial:
        """This partial's first ``n`` ids (all of it when it has no more), its segments and seeds cut to match."""
        if n >= self.tokens:
            return self
        segments, seeds, total = [], [], 0
        for i, made in enumerate(self.segments):
            if total >= n:
                break
            segments.append(min(made, n - total))
            seeds.append(None if self.seeds is None else self.seeds[i])
            total += segments[-1]
        recorded = seeds if self.seeds is not None else None
        return dataclasses.replace(self, output_ids=self.output_ids[: max(n, 0)], segments=segments, seeds=recorded)


def _seeds(value: Any, segments: int) -> list[int | None] | None:
    """A line's ``segment_seeds``: one int (or null) per segment, else None (not recorded, or not readable)."""
    if not isinstance(value, list) or len(value) != segments:
        return None
    if not all(s is None or (isinstance(s, int) and not isinstance(s, bool)) for s in value):
        return None
    return value


def merged(lines: list[Partial]) -> dict[str, Partial]:
    """Each id's partial, its lines applied in file order (see the module docstring)."""
    out: dict[str, Partial] = {}
    for line in lines:
        have = out.get(line.id)
        if have is None:
            if line.start == 0:
                out[line.id] = line
            continue
        after = have.extended(line)
        if after is not None:
            out[line.id] = after
    return out


def usable(
    rows: list[Partial], done: set[str], hashes: dict[str, str], settings: str | None
) -> tuple[dict[str, Partial], list[Partial]]:
    """(the partials a run may continue, by key; those it must discard: made for another prompt text
    or other settings). Done samples' partials are neither (compact drops them). ``hashes`` are by
    prompt id: every sample of a prompt is checked against its prompt's. ``settings`` None: not
    known yet (a dry run, before the server is asked), not compared."""
    keep: dict[str, Partial] = {}
    discard: list[Partial] = []
    for row in merged(rows).values():
        if row.id in done:
            continue
        if row.prompt_hash is None or row.prompt_hash != hashes.get(split_key(row.id)[0]):
            discard.append(row)
        elif settings is not None and row.settings != settings:
            discard.append(row)
        else:
            keep[row.id] = row
    return keep, discard


class PartialOutputs:
    """outputs/<dataset>/partial_outputs.jsonl (see the module docstring)."""

    def __init__(self, folder: Path):
        self.path = Path(folder) / NAME

    def load(self) -> list[Partial]:
        """Read-only: every readable line, in file order (``merged`` makes them partials)."""
        try:
            return [p for row in iter_rows(self.path) if (p := Partial.from_dict(row)) is not None]
        except OSError as exc:
            raise StoreWriteError(f"{self.path}: cannot read ({exc.strerror})") from exc

    def open(self, keep: dict[str, Partial]) -> None:
        """Before the run appends: the file holds ``keep`` alone (a torn last line goes too)."""
        if self.path.exists():
            self._rewrite(list(keep.values()))

    def compact(self, done: set[str]) -> None:
        """At the end of a run: one line per id, none of a prompt whose row is written (no file once
        nothing is left)."""
        WRITE_POOL.release((self, self.path))  # an append descriptor would point at the replaced file
        if not self.path.exists():
            return
        rows = self.load()
        kept = [row for row in merged(rows).values() if row.id not in done]
        if len(kept) != len(rows):  # one line per partial left
            self._rewrite(kept)

    def _rewrite(self, rows: list[Partial]) -> None:
        WRITE_POOL.release((self, self.path))
        rewrite_lines(self.path, [row.to_json() for row in rows])

    def append(self, partial: Partial, start: int = 0) -> None:
        """One whole line (``partial``'s ids from ``start`` on); a failed write is cut back to where it began."""
        line = partial.to_json(start)
        try:
            with WRITE_POOL.use((self, self.path), self._open) as fd:
                start = os.fstat(fd).st_size
                try:
                    os.write(fd, line)
                except OSError:
                    os.ftruncate(fd, start)
                    raise
        except OSError as exc:
            limited = limit_error(exc, self.path)
            if limited is not None:
                raise limited from exc
            reason = "disk full" if exc.errno == errno.ENOSPC else exc.strerror
            raise StoreWriteError(f"{self.path}: write failed ({reason}); rerun to resume") from exc

    def _open(self) -> int:
        return open_output(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def close(self) -> None:
        WRITE_POOL.release((self, self.path))


TOKEN_KEYS = (
    "tokens",
    "loop_rows",
    "loop_tokens",
    "cut_rows",
    "cut_tokens",
    "continued_rows",
    "continued_tokens",
    "extended_rows",
    "partials",
    "partial_tokens",
)


def add_row_tokens(out: dict[str, int], row: Row) -> None:
    """Count one row into a :func:`token_report` tally."""
    tokens = row.output_tokens
    out["tokens"] += tokens
    if row.looped:
        out["loop_rows"] += 1
        out["loop_tokens"] += tokens
    elif row.cut_unanswered:
        out["cut_rows"] += 1
        out["cut_tokens"] += tokens
    last = row.turns[-1]
    if last.segments and len(last.segments) > 1:
        out["continued_rows"] += 1
        out["continued_tokens"] += sum(last.segments[:-1])
    out["extended_rows"] += bool(last.extended_by)


def add_waiting(out: dict[str, int], folder: Path) -> None:
    """The partial outputs waiting in a dataset's folder, into a :func:`token_report` tally."""
    waiting = merged(PartialOutputs(folder).load())
    out["partials"], out["partial_tokens"] = len(waiting), sum(p.tokens for p in waiting.values())


def token_report(rows: Iterable[Row], folder: Path | None = None) -> dict[str, int]:
    """What a dataset's tokens went into, for ``export_training.py --report``: output tokens in rows;
    of them, rows the exports leave out (loops the loop guard ended, answers cut at --max-tokens with
    their reasoning open); rows continued from partial outputs (and the tokens of their earlier
    attempts); rows --continue-cut extended; and, with ``folder``, the partial outputs waiting there."""
    out = dict.fromkeys(TOKEN_KEYS, 0)
    for row in rows:
        add_row_tokens(out, row)
    if folder is not None:
        add_waiting(out, folder)
    return out
