"""Which rows are dropped, and why: one reason per row, in order; a format's own reason from its entry."""

from __future__ import annotations

import pytest
from result_rows import old_row, record, tool_row, truncated_row

from synthgen.data.records import ResultRecord
from synthgen.data.rowread import Row, from_dict
from synthgen.export import formats
from synthgen.export.filters import drop_reason


@pytest.mark.parametrize(
    ("row", "fmt", "keep", "reason"),
    [
        (record("a"), "specforge", False, None),
        (truncated_row(), "specforge", False, "truncated"),
        (truncated_row(), "specforge", True, "cut_empty"),  # SpecForge's validator refuses an empty answer
        (truncated_row(content="A partial"), "specforge", True, None),
        (truncated_row(), "tokens", True, None),
        (truncated_row(), "messages", True, None),
        (record("u", reasoning_complete=False), "specforge", False, "unclosed"),
        (record("e", content="  \n"), "specforge", False, "empty"),
        (tool_row(), "specforge", False, None),  # an empty answer beside a tool call is the call
        (record("s", content="</think>The answer"), "specforge", False, "stray"),
        (record("h", reasoning_content="x<|channel|>final"), "specforge", False, "stray"),
        (ResultRecord.from_dict(old_row("o")), "tokens", False, "no_ids"),
        (ResultRecord.from_dict(old_row("o")), "messages", False, None),
        # A loop the guard ended is no training data in any format, --keep-truncated or not.
        (record("l", finish_reason="repetition"), "specforge", False, "repetition"),
        (record("l", finish_reason="repetition"), "tokens", True, "repetition"),
        (record("l", finish_reason="repetition"), "messages", True, "repetition"),
    ],
)
def test_each_filter_drops_the_row_it_is_for_and_nothing_else(row, fmt, keep, reason):
    read = from_dict(row.to_dict())
    assert isinstance(read, Row), read
    assert drop_reason(read, formats.get(fmt), keep) == reason
