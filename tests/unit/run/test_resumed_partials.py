"""Where an earlier run's partial output is continued to: the turn's max_new_tokens, or for a cut answer's
--continue-cut extension the end that extension was given (the server's context allowing); ids at or past
that end are dropped (counted as discarded), the last kept one sampled again."""

from __future__ import annotations

import asyncio

from synthgen.config import RunConfig
from synthgen.data.partials import Extension, Partial
from synthgen.data.prompts import Prompt
from synthgen.run.continuation import Continuation
from synthgen.run.job import Job
from synthgen.server.discovery import ServerContext

PROMPT_IDS = list(range(10))


def resumed(partial: Partial, context_len: int | None = None, continue_cut: int = 0, max_new_tokens: int = 6):
    cfg = RunConfig(continue_cut=continue_cut).validate()
    ctx = ServerContext(context_len=context_len)
    partials = Continuation(None, cfg, asyncio.Event(), {}, ctx, lambda ids: "")  # type: ignore[arg-type]
    job = Job("d", Prompt("p", "d", (), 1), PROMPT_IDS, True, max_new_tokens)
    return partials.resume(job, partial)


def extension_partial(ids: int) -> Partial:
    return Partial("p", 0, [7] * ids, [6, ids - 6], "h", "s", extension=Extension(406, 400))


def test_an_extensions_partial_goes_on_to_the_end_it_was_given_with_or_without_continue_cut():
    for continue_cut in (0, 400, 50):
        carry, dropped = resumed(extension_partial(40), continue_cut=continue_cut)
        assert dropped is None
        assert (carry.max_new_tokens, carry.extended_by, carry.left, carry.before) == (406, 400, 366, 40)
        assert carry.segments == [6, 34]


def test_a_shrunk_context_shortens_the_extension_and_past_its_end_the_cut_answer_is_continued_alone():
    carry, dropped = resumed(extension_partial(40), context_len=10 + 100 + 1)  # room for 100 new tokens
    assert (carry.max_new_tokens, carry.extended_by, dropped) == (100, 94, None)
    # No room past the cut answer: it is continued as a plain answer of max_new_tokens (6), from 5 ids.
    carry, dropped = resumed(extension_partial(40), context_len=10 + 6 + 1)
    assert (carry.max_new_tokens, carry.extended_by, carry.output_ids, carry.segments) == (6, None, [7] * 5, [5])
    assert dropped is not None and dropped.tokens == 35


def test_a_plain_partial_at_its_turns_max_tokens_is_continued_from_one_id_less():
    carry, dropped = resumed(Partial("p", 0, [1, 2, 3, 4, 5, 6], [4, 2], "h", "s"))
    assert (carry.output_ids, carry.segments, carry.left, carry.seeds) == ([1, 2, 3, 4, 5], [4, 1], 1, [None, None])
    assert dropped is not None and dropped.tokens == 1
    carry, dropped = resumed(Partial("p", 0, [1, 2], [2], "h", "s"))
    assert (carry.output_ids, carry.left, dropped) == ([1, 2], 4, None)
