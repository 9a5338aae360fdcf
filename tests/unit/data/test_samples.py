"""Who a sample is: seeds, request ids and export ids derive from (--seed, id, sample) alone."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synthgen.data.samples import (
    MAX_SAMPLES_PER_PROMPT,
    draw_key,
    export_id,
    row_sample,
    sample_key,
    sample_rid,
    sample_seed,
    sample_work,
    split_key,
    touched_prompts,
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


def test_sample_zero_is_filed_under_the_prompt_id_so_old_folders_resume_as_they_were():
    assert sample_key("p1", 0) == "p1"
    assert split_key("p1") == ("p1", 0)
    assert split_key(sample_key("p1", 7)) == ("p1", 7)
    assert split_key(sample_key("a\x1fsb", 2)) == ("a\x1fsb", 2)


def test_the_work_owed_is_every_missing_sample_of_every_prompt_exactly_once():
    done = {"a", sample_key("a", 2), sample_key("b", 1)}
    assert sample_work(["a", "b", "c"], done, 3) == [("a", 1), ("b", 0), ("b", 2), ("c", 0), ("c", 1), ("c", 2)]
    assert touched_prompts(done) == {"a", "b"}


def test_lowering_n_sends_nothing_for_prompts_whose_first_samples_exist():
    done = {sample_key("a", k) for k in range(4)}
    assert sample_work(["a"], done, 2) == []
    assert sample_work(["a"], done, 5) == [("a", 4)]


def test_one_sample_per_prompt_is_the_run_of_before():
    assert sample_work(["a", "b"], {"a"}, 1) == [("b", 0)]
