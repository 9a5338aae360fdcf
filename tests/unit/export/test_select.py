"""Which kept rows go where: the validation split by a hash of the conversation, the order by the seed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from synthgen.errors import UsageError
from synthgen.export.config import ExportConfig, ExportRequest
from synthgen.export.pipeline import export
from synthgen.export.scan import RowRef
from synthgen.export.select import choose_datasets, split_rows


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


def test_a_dataset_without_results_is_a_note_and_none_with_results_is_an_error(tmp_path):
    for name in ("alpha", "beta", "gamma"):
        (tmp_path / "prompts/short").mkdir(parents=True, exist_ok=True)
        (tmp_path / f"prompts/short/{name}.jsonl").write_text('{"id": "1", "prompt": "hi"}\n')
    (tmp_path / "outputs/beta").mkdir(parents=True)
    (tmp_path / "outputs/beta/raw_responses.jsonl").write_text("")
    request = ExportRequest(partition="short", prompts_dir=tmp_path / "prompts", output_dir=tmp_path / "outputs")
    notes: list[str] = []
    present, missing = choose_datasets(request, notes.append)
    assert [ref.name for ref in present] == ["beta"] and [ref.name for ref in missing] == ["alpha", "gamma"]
    assert [n.split(":")[0] for n in notes] == ["alpha", "gamma"]
    assert "every prompt was skipped" in notes[0]
    with pytest.raises(UsageError, match=r"no results for dataset 'alpha' \(nor the 1 other datasets chosen\)"):
        choose_datasets(ExportRequest(datasets=("alpha", "gamma"), output_dir=tmp_path / "outputs"), notes.append)
    out = tmp_path / "outputs/alpha/raw_responses.jsonl"  # a later run would read the export as its results
    with pytest.raises(UsageError, match="is inside the dataset folder .*alpha being read"):
        export(replace(request, out=out))
    assert not out.exists()
