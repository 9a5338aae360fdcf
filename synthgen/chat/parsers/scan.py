"""The block scanner the parsers share: ``OPEN ... CLOSE`` blocks found left to right, in linear time.

    scan = BlockScan(text, "<tool_call>", "</tool_call>")
    for block in scan:
        answer.append(block.before)          # the text since the previous block
        if block.closed:
            calls.extend(read(block.inner))
        else:
            answer.append(block.outer)       # the output was cut inside the block
    answer.append(scan.rest)                 # the text after the last block

The scan stops after a block that does not close (it runs to the end of the text). Each character is
looked at a bounded number of times: the two ``str.find`` calls per block start where the last ended.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Block:
    before: str  # the text between the previous block (or the scan's start) and the opening tag
    outer: str  # the block with its tags (to the end of the text when it does not close)
    inner: str  # between the tags
    start: int  # index of the opening tag
    end: int  # index after the closing tag (the text's length when it does not close)
    closed: bool


class BlockScan:
    """Iterate for the blocks; then :attr:`rest` is the text after the last one."""

    def __init__(self, text: str, open_tag: str, close_tag: str, start: int = 0) -> None:
        self.text, self.open_tag, self.close_tag = text, open_tag, close_tag
        self.cursor = start

    def __iter__(self) -> Iterator[Block]:
        text = self.text
        while (at := text.find(self.open_tag, self.cursor)) != -1:
            inner_at = at + len(self.open_tag)
            close = text.find(self.close_tag, inner_at)
            before = text[self.cursor : at]
            if close == -1:
                self.cursor = len(text)
                yield Block(before, text[at:], text[inner_at:], at, len(text), False)
                return
            self.cursor = close + len(self.close_tag)
            yield Block(before, text[at : self.cursor], text[inner_at:close], at, self.cursor, True)

    @property
    def rest(self) -> str:
        return self.text[self.cursor :]


def through_last(text: str, closer: str) -> str:
    """``text`` through its last ``closer`` ("" without one). A pattern ``OPEN(.*?)CLOSER`` finds the same
    matches in it as in ``text``, in linear time: the regex engine scans to the end of the text from every
    opener that no closer follows (quadratic in a text of many such openers), and those are cut off."""
    at = text.rfind(closer)
    return text[: at + len(closer)] if at != -1 else ""
