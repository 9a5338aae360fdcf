"""The parser registry (names registered beside their code, refused twice or when not SGLang's) and the
shared block scanner."""

from __future__ import annotations

import pytest

from synthgen.chat.parsers import registry
from synthgen.chat.parsers.scan import BlockScan


def test_registered_names_are_sglangs_and_a_second_registration_is_refused():
    assert set(registry.REASONING) <= set(registry.SGLANG_REASONING)
    assert set(registry.TOOL_CALL) <= set(registry.SGLANG_TOOL_CALL)
    with pytest.raises(RuntimeError, match="'qwen25' is registered twice"):
        registry.tool_parser("qwen25", family="JSON", splits="x")(lambda text, tools: None)
    with pytest.raises(RuntimeError, match="'qwen9' is not one of SGLang 0.5.23's names"):
        registry.tool_parser("qwen9", family="JSON", splits="x")(lambda text, tools: None)
    assert "qwen9" not in registry.TOOL_CALL


def test_the_table_lists_every_sglang_name_once_in_sglangs_order():
    rows = registry.parser_table().splitlines()[2:]
    names = [row.split(" | ")[1].strip("`") for row in rows]
    assert names == [*registry.SGLANG_REASONING, *registry.SGLANG_TOOL_CALL]


def test_the_block_scanner_gives_blocks_the_text_between_and_the_rest():
    scan = BlockScan("a<b>1</b>c<b>2</b>d", "<b>", "</b>")
    blocks = [(b.before, b.inner, b.outer, b.closed) for b in scan]
    assert blocks == [("a", "1", "<b>1</b>", True), ("c", "2", "<b>2</b>", True)]
    assert scan.rest == "d"


def test_the_block_scanner_stops_at_a_block_that_does_not_close():
    scan = BlockScan("a<b>1</b>c<b>2 cut", "<b>", "</b>")
    blocks = [(b.before, b.inner, b.closed, b.end) for b in scan]
    assert blocks == [("a", "1", True, 9), ("c", "2 cut", False, 18)]
    assert scan.rest == ""
    assert [b.inner for b in BlockScan("no blocks", "<b>", "</b>")] == []
