"""--shard I/N: the shards' selections add up to the unsharded selection exactly, whatever the cap, mode,
seed, samples per prompt and what each shard already holds; the argument and the folders' checks."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from synthgen.data.samples import sample_key, sample_work, touched_prompts
from synthgen.data.selection import select
from synthgen.data.shards import (
    RECORD,
    Shard,
    check_shards,
    env_hint,
    in_shard,
    parse_shard,
    prepare_folder,
    shard_selection,
    token_share,
)
from synthgen.errors import UsageError


def whole(ids, done, cap, mode, seed, grouped, per_prompt):
    """What run.dataset_run.select_samples selects without a shard: (pending keys, target)."""
    if per_prompt == 1:
        sel = select(ids, done, cap, mode, seed, grouped)
        return sel, sel.target
    touched = touched_prompts(done)
    sel = select(ids, touched, cap, mode, seed, grouped)
    started = [pid for pid in ids if pid in touched]
    work = [sample_key(p, k) for p, k in sample_work([*started, *sel.pending], done, per_prompt)]
    return type(sel)(sel.available, sel.cap, sel.already_done, work), sel.target * per_prompt


ids_st = st.lists(st.text("abc12", min_size=1, max_size=4), max_size=30, unique=True)


@settings(max_examples=300, deadline=None)
@given(
    ids=ids_st,
    cap=st.one_of(st.none(), st.integers(0, 50)),
    mode=st.sampled_from(["first", "random"]),
    seed=st.integers(0, 3),
    count=st.integers(1, 5),
    per_prompt=st.integers(1, 3),
    grouped=st.booleans(),
    done_share=st.floats(0, 1),
)
def test_the_shards_selections_add_up_to_the_unsharded_selection(
    ids, cap, mode, seed, count, per_prompt, grouped, done_share
):
    if grouped:  # --regenerate each: the turns of a conversation, <conversation>#<k>
        ids = [f"{c}#{k}" for c in ids for k in range(1 + len(c) % 3)]
    how = (mode, seed, grouped, per_prompt)
    full, full_target = whole(ids, frozenset(), cap, mode, seed, grouped, per_prompt)
    union: list[str] = []
    targets = 0
    for index in range(count):
        shard = Shard(index, count)
        # A shard that already made some of its samples (an earlier run, killed) is owed the rest of them only.
        mine = [k for k in full.pending if in_shard(shard, seed, "ds", k, grouped)]
        done = frozenset(mine[: int(len(mine) * done_share)])
        sel, target = whole(ids, done, cap, mode, seed, grouped, per_prompt)
        part, target = shard_selection(sel, ids, cap, how, shard, "ds")
        assert part.pending == [k for k in mine if k not in done]
        union += [*done, *part.pending]
        targets += target
    assert sorted(union) == sorted(full.pending)  # each selected sample in exactly one shard
    assert len(union) == len(set(union))
    assert targets == full_target


@given(ids=ids_st, seed=st.integers(0, 3), count=st.integers(2, 4))
def test_the_turns_of_a_conversation_stay_in_one_shard(ids, seed, count):
    for i in ids:
        homes = {s for s in range(count) for k in range(3) if in_shard(Shard(s, count), seed, "ds", f"{i}#{k}", True)}
        assert len(homes) == 1


def test_the_shard_of_a_prompt_does_not_move_when_other_prompts_or_the_cap_change():
    shard = Shard(1, 3)
    small = shard_selection(
        select(["a", "b", "c"], set(), None), ["a", "b", "c"], None, ("first", 0, False, 1), shard, "d"
    )
    ids = ["z", *[f"x{i}" for i in range(50)], "c", "b", "a"]
    big = shard_selection(select(ids, set(), None), ids, None, ("first", 0, False, 1), shard, "d")
    assert set(small[0].pending) <= set(big[0].pending)


@pytest.mark.parametrize(
    ("text", "words"),
    [("3/3", "I must be below N"), ("1", "expected I/N"), ("-1/3", "expected I/N"), ("0/0", "N must be between")],
)
def test_a_bad_shard_is_one_line_naming_the_fix(text, words):
    with pytest.raises(UsageError, match=words):
        parse_shard(text)


def test_a_shard_parses_zero_based():
    assert parse_shard("0/4") == Shard(0, 4) and parse_shard(" 3/4 ").folder == "shard-3-of-4"


@given(total=st.integers(0, 10**12), count=st.integers(1, 1000))
def test_a_token_budget_divides_exactly(total, count):
    parts = [token_share(total, Shard(i, count)) for i in range(count)]
    assert sum(p or 0 for p in parts) == total and max(parts) - min(parts) <= 1  # type: ignore[operator]


def test_array_variables_are_named_never_used():
    hint = env_hint({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "8"})
    assert hint is not None and "--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT" in hint
    assert "JOB_COMPLETION_INDEX=2" in (env_hint({"JOB_COMPLETION_INDEX": "2"}) or "")
    assert env_hint({"SLURM_JOB_ID": "5"}) is None


def test_the_folder_checks(tmp_path: Path):
    record = {"seed": 1, "sample": "first"}
    folder = prepare_folder(tmp_path, Shard(0, 2), record, write=True)
    assert folder == tmp_path / "shard-0-of-2"
    assert orjson.loads((folder / RECORD).read_bytes())["shards"] == 2
    with pytest.raises(UsageError, match="2-way split"):
        prepare_folder(tmp_path, Shard(0, 3), record, write=True)
    with pytest.raises(UsageError, match="--seed 1"):
        prepare_folder(tmp_path, Shard(1, 2), {**record, "seed": 2}, write=True)
    with pytest.raises(UsageError, match="shard-1-of-2 missing"):
        check_shards(tmp_path)
    prepare_folder(tmp_path, Shard(1, 2), {**record, "sample": "random"}, write=True)
    with pytest.raises(UsageError, match="another selection"):
        check_shards(tmp_path)
    prepare_folder(tmp_path, Shard(0, 2), {**record, "sample": "random"}, write=True)
    assert set(check_shards(tmp_path) or {}) == {Shard(0, 2), Shard(1, 2)}
    assert check_shards(tmp_path / "elsewhere") is None
