"""Who a sample is: seeds, request ids and export ids derive from (--seed, id, sample) alone."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synthgen.data.samples import (
    MAX_SAMPLES_PER_PROMPT,
    draw_key,
    export_id,
    missing_samples,
    row_sample,
    sample_rid,
    sample_seed,
)


def test_a_sample_seed_is_the_same_on_every_call_and_fits_sglangs_signed_64_bit_range():
    seeds = [sample_seed(0, "p1", k) for k in range(4)]
    assert seeds == [sample_seed(0, "p1", k) for k in range(4)]
    assert all(0 <= s < 2**63 for s in seeds)
    assert len(set(seeds)) == 4


def test_a_sample_seed_depends_on_the_seed_flag_the_id_and_the_sample_only():
    base = sample_seed(7, "q", 2)
    assert sample_seed(8, "q", 2) != base
    assert sample_seed(7, "r", 2) != base
    assert sample_seed(7, "q", 3) != base
    # A known value: changing the derivation would change the draws of every earlier run.
    assert base == 6294818966416595323


def test_seeds_do_not_depend_on_the_order_prompts_are_visited_in():
    pairs = [(i, k) for i in ("a", "b", "c") for k in range(3)]
    forward = {p: sample_seed(1, *p) for p in pairs}
    backward = {p: sample_seed(1, *p) for p in reversed(pairs)}
    assert forward == backward


def test_the_recipe_key_is_not_the_sampling_seed():
    assert draw_key(0, "a", 0) >> 1 != sample_seed(0, "a", 0)


@given(st.text(max_size=20), st.integers(0, MAX_SAMPLES_PER_PROMPT - 1), st.integers(0, MAX_SAMPLES_PER_PROMPT - 1))
def test_no_two_samples_of_one_prompt_have_request_ids_that_prefix_match(base, a, b):
    ra, rb = sample_rid(base, a), sample_rid(base, b)
    if a != b:
        assert not ra.startswith(rb) and not rb.startswith(ra)


def test_sample_one_does_not_abort_sample_ten():
    rids = [sample_rid("synthgen-abc", k) for k in (1, 10, 100, 11)]
    for one, other in itertools.permutations(rids, 2):
        assert not other.startswith(one)
    assert rids[0] == "synthgen-abc-s00001."


@pytest.mark.parametrize("bad", [-1, MAX_SAMPLES_PER_PROMPT, True, 1.0])
def test_a_sample_number_out_of_range_is_refused(bad):
    with pytest.raises(ValueError):
        sample_rid("x", bad)


def test_export_ids_add_a_sample_suffix_that_does_not_clash_with_an_each_conversations_turns():
    assert export_id("ds/p1", None) == "ds/p1"
    assert export_id("ds/p1", 0) == "ds/p1@s0"
    assert export_id("ds/conv#2", 3) == "ds/conv#2@s3"
    assert len({export_id("ds/p", k) for k in range(50)}) == 50


@pytest.mark.parametrize(
    "row, sample", [({}, 0), ({"sample": 3}, 3), ({"sample": True}, 0), ({"sample": -2}, 0), ({"sample": "1"}, 0)]
)
def test_a_row_without_a_sample_key_is_sample_zero(row, sample):
    assert row_sample(row) == sample


def test_raising_n_adds_only_the_missing_samples_and_lowering_it_adds_none():
    assert missing_samples({0}, 4) == [1, 2, 3]
    assert missing_samples({0, 2}, 4) == [1, 3]
    assert missing_samples({0, 1, 2, 3}, 2) == []
    assert missing_samples(set(), 1) == [0]
