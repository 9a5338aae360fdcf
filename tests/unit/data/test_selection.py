"""Capping and sampling are pure and stable across resumes, re-orderings and raised caps."""

import random

from synthgen.data.selection import order, select

IDS = [f"p{i}" for i in range(100)]


def test_first_mode_takes_file_order_up_to_the_cap():
    assert select(IDS, set(), 5).pending == ["p0", "p1", "p2", "p3", "p4"]


def test_completed_ids_count_toward_the_cap():
    sel = select(IDS, {"p0", "p1", "p2"}, 5)
    assert sel.already_done == 3 and sel.pending == ["p3", "p4"]


def test_rerun_with_the_same_cap_sends_nothing_new():
    assert select(IDS, {"p0", "p1", "p2", "p3", "p4"}, 5).pending == []


def test_raising_the_cap_continues_where_it_stopped():
    assert select(IDS, {"p0", "p1", "p2", "p3", "p4"}, 8).pending == ["p5", "p6", "p7"]


def test_no_cap_takes_everything_not_done():
    sel = select(IDS, {"p1"}, None)
    assert len(sel.pending) == 99 and sel.target == 100


def test_cap_above_availability_targets_every_prompt():
    assert select(IDS[:3], set(), 10).target == 3


def test_done_ids_from_other_datasets_do_not_count():
    assert select(IDS, {"elsewhere"}, 2).pending == ["p0", "p1"]


def test_random_pick_does_not_depend_on_file_order():
    shuffled = IDS[:]
    random.Random(1).shuffle(shuffled)
    assert select(IDS, set(), 10, "random", 7).pending == select(shuffled, set(), 10, "random", 7).pending


def test_random_pick_with_a_raised_cap_is_a_superset():
    small = set(select(IDS, set(), 10, "random", 3).pending)
    large = set(select(IDS, set(), 20, "random", 3).pending)
    assert small < large


def test_random_pick_depends_on_the_seed():
    assert order(IDS, "random", 1) != order(IDS, "random", 2)


def test_random_resume_takes_the_rest_of_the_same_pick():
    first = select(IDS, set(), 10, "random", 5).pending
    resumed = select(IDS, set(first[:4]), 10, "random", 5).pending
    assert resumed == first[4:]


def test_random_order_of_each_mode_prompts_keeps_a_conversations_turns_together_and_in_order():
    ids = [f"c{c}#{k}" for c in range(20) for k in range(3)]
    picked = order(ids, "random", seed=5, grouped=True)
    assert sorted(picked) == sorted(ids)
    conversations = [i.rpartition("#")[0] for i in picked]
    for start in range(0, len(picked), 3):
        block = picked[start : start + 3]
        assert len({c for c in conversations[start : start + 3]}) == 1
        assert [b.rpartition("#")[2] for b in block] == ["0", "1", "2"]
    assert conversations[::3] != [f"c{c}" for c in range(20)]  # the conversations themselves are shuffled
