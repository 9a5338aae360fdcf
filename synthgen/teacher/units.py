"""What the scoring pass scores: one unit per stored row, sample and generated turn (pure but for reading).

A unit is the ids the teacher sees, ``input_ids`` (prompt ids + output ids, exactly as stored, never
re-rendered), and ``start``, the first position whose distribution is wanted: the first generated token.
A row of one generated turn is named as the export names it (``<dataset>/<id>``, ``@s<k>`` for a
sample); a row of several generated turns (``--regenerate all``) gives one unit per turn, ``#<k>``
added. An ``--existing`` token row is ``<name>/<line>`` with ``start`` its first ``loss_mask`` 1 (every
trained position after it is scored too; position 0 has no distribution and is never scored).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from synthgen.data import samples
from synthgen.data.records import ResultRecord, typed_list
from synthgen.data.store import iter_results
from synthgen.data.tokenrows import ExistingSource, iter_token_rows


@dataclass(frozen=True, slots=True)
class Unit:
    id: str
    input_ids: list[int]
    start: int

    @property
    def positions(self) -> int:
        return len(self.input_ids) - self.start


@dataclass
class UnitCounts:
    rows: int = 0
    units: int = 0
    no_ids: int = 0  # rows stored without token ids: nothing the teacher could see exactly
    empty: int = 0  # turns with no output token, rows with no trained token
    duplicate: int = 0  # an id met again in the file: the first is scored

    def left_out(self) -> dict[str, int]:
        """What was not made a unit, by reason (the reasons with none left out are not listed)."""
        found = {"no_ids": self.no_ids, "empty": self.empty, "duplicate": self.duplicate}
        return {reason: n for reason, n in found.items() if n}


def row_export_id(record: ResultRecord) -> str:
    sample = record.sample if isinstance(record.sample, int) and not isinstance(record.sample, bool) else None
    return samples.export_id(f"{record.dataset}/{record.id}", sample)


def record_units(record: ResultRecord, counts: UnitCounts) -> list[Unit]:
    base = row_export_id(record)
    spans = []
    for turn in record.finished_turns:
        prompt, output = typed_list(turn.get("input_ids"), int), typed_list(turn.get("output_ids"), int)
        if prompt is None or output is None:
            counts.no_ids += 1
            return []
        spans.append((prompt, output))
    units = []
    for k, (prompt, output) in enumerate(spans):
        if not output or not prompt:
            counts.empty += 1
            continue
        unit_id = base if len(spans) == 1 else f"{base}#{k}"
        units.append(Unit(unit_id, prompt + output, len(prompt)))
    return units


def dataset_units(results: Path, counts: UnitCounts) -> Iterator[Unit]:
    """Every unit of a results file, in file order, each id once."""
    seen: set[str] = set()
    for record in iter_results(results):
        counts.rows += 1
        for unit in record_units(record, counts):
            if unit.id in seen:
                counts.duplicate += 1
                continue
            seen.add(unit.id)
            counts.units += 1
            yield unit


def existing_units(source: ExistingSource, counts: UnitCounts) -> Iterator[Unit]:
    for line, _, row in iter_token_rows(source.path):
        counts.rows += 1
        mask = row["loss_mask"]
        start = next((i for i, m in enumerate(mask) if m), None)
        if start is None or len(mask) < 2:
            counts.empty += 1
            continue
        counts.units += 1
        yield Unit(f"{source.name}/{line}", list(row["input_ids"]), max(start, 1))
