"""The formats table and the rows each format makes from one result row."""

from __future__ import annotations

import pytest
from result_rows import multi_turn_row

from synthgen.export import formats
from synthgen.export.formats.tokens import token_rows


def test_every_format_is_one_entry_of_the_table_and_the_default_is_in_it():
    assert set(formats.names()) == {"specforge", "tokens", "messages"}
    assert formats.DEFAULT in formats.names()
    table = {name: (f.needs_ids, f.render_check) for name, f in formats.FORMATS.items()}
    assert table == {"specforge": (False, True), "tokens": (True, False), "messages": (False, True)}
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
