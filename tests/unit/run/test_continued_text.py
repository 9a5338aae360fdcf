"""A continued output's text is the text of all its ids decoded at once, as one uninterrupted request
gives it, even where a token boundary splits a UTF-8 character (CJK, emoji), with the matched stop left
out as SGLang's detokenizer leaves it out."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from synthgen.run.continuation import whole_text

TEXT = "<think>我们先仔细分析 🙂 the café</think>答案是四"


@pytest.fixture
def bpe(tokenizers) -> Tokenizer:
    return Tokenizer.from_file(str(tokenizers["chatml"] / "tokenizer.json"))


def decode_with(tok: Tokenizer):
    return lambda ids: tok.decode(ids, skip_special_tokens=False)


def test_every_split_of_a_multibyte_output_gives_the_uninterrupted_text(bpe):
    ids = bpe.encode(TEXT, add_special_tokens=False).ids
    decode = decode_with(bpe)
    splits_inside_a_character = 0
    for cut in range(1, len(ids)):
        head, rest = ids[:cut], ids[cut:]
        joined = decode(head) + decode(rest)  # the head's text + the server's text of the rest
        splits_inside_a_character += joined != TEXT
        assert whole_text(decode, head + rest, {"type": "length"}) == TEXT
    assert splits_inside_a_character > 0  # the tokenizer does split characters: the case is exercised


def test_a_matched_stop_id_is_left_out_and_a_stop_string_ends_the_text(bpe):
    ids = bpe.encode(TEXT, add_special_tokens=False).ids
    eos = bpe.token_to_id("<|im_end|>")
    decode = decode_with(bpe)
    assert whole_text(decode, [*ids, eos], {"type": "stop", "matched": eos}) == TEXT
    # A stop id that is not the last id (cannot happen on SGLang) is not trimmed blindly.
    assert whole_text(decode, ids, {"type": "stop", "matched": eos}) == TEXT
    assert whole_text(decode, ids, {"type": "stop", "matched": "答案"}) == "<think>我们先仔细分析 🙂 the café</think>"
    assert whole_text(decode, [*ids, eos], {"type": "length"}) == TEXT + "<|im_end|>"
