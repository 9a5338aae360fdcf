"""Which kept rows go where: the validation split by a hash of the conversation, the order by the seed."""

from __future__ import annotations

from pathlib import Path

from synthgen.export.config import ExportConfig
from synthgen.export.scan import RowRef
from synthgen.export.select import split_rows


def refs(n: int) -> list[RowRef]:
    return [RowRef("chat", f"id{i}", Path("x"), i, 1) for i in range(n)]


def test_the_validation_split_is_the_same_for_the_same_seed_and_keeps_rows_on_their_side_as_data_grows():
    config = ExportConfig(datasets=(), val_fraction=0.2, seed=7, shuffle=True)
    train, val = split_rows(refs(1000), config)
    again_train, again_val = split_rows(refs(1000), config)
    assert (train, val) == (again_train, again_val)
    assert 150 < len(val) < 250 and len(train) + len(val) == 1000
    _, grown_val = split_rows(refs(2000), config)
    assert {r.id for r in val} <= {r.id for r in grown_val}
    _, other_val = split_rows(refs(1000), ExportConfig(datasets=(), val_fraction=0.2, seed=8))
    assert {r.id for r in other_val} != {r.id for r in val}


def test_shuffle_changes_the_order_but_not_the_rows_and_no_shuffle_keeps_input_order():
    ordered, _ = split_rows(refs(50), ExportConfig(datasets=()))
    shuffled, _ = split_rows(refs(50), ExportConfig(datasets=(), shuffle=True, seed=3))
    assert ordered == refs(50)
    assert shuffled != ordered and sorted(shuffled, key=lambda r: r.offset) == ordered
