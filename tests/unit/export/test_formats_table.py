"""The formats table and the rows each format makes from one result row."""

from __future__ import annotations

from pathlib import Path

import pytest
from result_rows import multi_turn_row

from synthgen.export import formats
from synthgen.export.formats.tokens import token_rows


def test_every_format_is_one_entry_of_the_table_and_the_default_is_in_it():
    assert set(formats.names()) == {"specforge", "tokens", "messages", "axolotl-kd", "topk-sparse"}
    assert formats.DEFAULT in formats.names()
    table = {name: (f.needs_ids, f.render_check) for name, f in formats.FORMATS.items()}
    assert table == {
        "specforge": (False, True),
        "tokens": (True, False),
        "messages": (False, True),
        "axolotl-kd": (True, False),
        "topk-sparse": (True, False),
    }
    assert [name for name, f in formats.FORMATS.items() if f.teacher] == ["axolotl-kd", "topk-sparse"]
    assert formats.get("specforge").refuse is not None and formats.get("tokens").refuse is None


def test_a_format_registered_twice_is_refused():
    with pytest.raises(ValueError, match="registered twice"):
        formats.register("tokens", shape="", needs_ids=True, render_check=False)(lambda record: [])


def test_a_multi_turn_row_whose_turns_chain_is_one_sequence_with_every_generated_span_masked():
    rows = token_rows(multi_turn_row(chained=True))
    assert rows == [{"id": "chat/mt", "input_ids": [1, 5, 10, 2, 6, 11, 12, 2], "loss_mask": [0, 0, 1, 1, 0, 1, 1, 1]}]


def test_a_multi_turn_row_whose_history_was_re_rendered_differently_is_one_row_per_turn():
    rows = token_rows(multi_turn_row(chained=False))
    assert rows == [
        {"id": "chat/mt#0", "input_ids": [1, 5, 10, 2], "loss_mask": [0, 0, 1, 1]},
        {"id": "chat/mt#1", "input_ids": [1, 5, 99, 6, 11, 12, 2], "loss_mask": [0, 0, 0, 0, 1, 1, 1]},
    ]


def test_the_formats_table_of_docs_export_md_follows_the_code():
    docs = (Path(__file__).resolve().parents[3] / "docs/export.md").read_text()
    rows = {}
    for line in docs.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 5:
            rows[cells[0].strip("`")] = cells[1:]
    assert list(rows) == sorted(formats.names())
    for name, (shape, ids, check, own) in rows.items():
        entry = formats.get(name)
        assert shape.startswith(f"`{entry.shape}`"), name
        assert ids.startswith("yes" if entry.needs_ids else "no") and check.startswith(
            "yes" if entry.render_check else "no"
        )
        assert (own == "-") == (entry.refuse is None), name
