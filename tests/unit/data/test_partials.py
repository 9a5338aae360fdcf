"""partial_outputs.jsonl: what is continued, what is discarded, torn lines, and which sampling
settings a continuation would change."""

from __future__ import annotations

import orjson
import pytest

from synthgen.data.partials import Extension, Partial, PartialOutputs, continuation_blocker, merged, usable
from synthgen.data.samples import sample_key


def partial(pid: str, ids: list[int], digest: str = "h", settings: str = "s", turn: int = 0) -> Partial:
    return Partial(pid, turn, ids, [len(ids)], digest, settings)


@pytest.mark.parametrize(
    "sampling,blocked",
    [
        ({}, None),
        ({"temperature": 0.7, "top_p": 0.9, "top_k": 20, "min_p": 0.05}, None),
        ({"frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0, "min_new_tokens": 0}, None),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"presence_penalty": -0.1}, "presence_penalty"),
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
        ({"min_new_tokens": 10}, "min_new_tokens"),
        ({"sampling_seed": 0, "temperature": 0.8}, None),  # a seed is drawn by position: continued under it
    ],
)
def test_only_output_side_settings_block_a_continuation(sampling, blocked):
    reason = continuation_blocker(sampling)
    assert (reason is None) if blocked is None else reason.startswith(f"{blocked} ")


def test_the_latest_line_of_an_id_wins_and_changed_prompts_or_settings_are_discarded():
    rows = [partial("a", [1]), partial("a", [1, 2]), partial("b", [3], digest="old"), partial("c", [4], settings="x")]
    rows += [partial("d", [5])]
    keep, discard = usable(rows, done={"d"}, hashes={"a": "h", "b": "h", "c": "h", "d": "h"}, settings="s")
    assert keep == {"a": partial("a", [1, 2])}
    assert sorted(p.id for p in discard) == ["b", "c"]
    keep, _ = usable(rows, done=set(), hashes={"a": "h", "c": "h", "d": "h"}, settings=None)  # settings not known yet
    assert set(keep) == {"a", "c", "d"}


def test_each_sample_of_a_prompt_has_its_own_partial_checked_against_its_prompts_hash(tmp_path):
    first, second, third = sample_key("p", 0), sample_key("p", 1), sample_key("p", 2)
    store = PartialOutputs(tmp_path)
    store.append(Partial(first, 0, [1, 2], [2], "h", "s", seeds=[11]))
    store.append(Partial(second, 0, [7], [1], "h", "s", seeds=[12]))
    store.append(Partial(third, 0, [8, 9], [1, 1], "h", "s", seeds=[13, 13]))
    store.close()
    keep, discard = usable(store.load(), done={third}, hashes={"p": "h"}, settings="s")
    assert {key: (p.output_ids, p.seeds) for key, p in keep.items()} == {first: ([1, 2], [11]), second: ([7], [12])}
    assert not discard
    _, changed = usable(store.load(), done=set(), hashes={"p": "new"}, settings="s")
    assert sorted(p.id for p in changed) == sorted([first, second, third])  # the prompt changed: every sample's goes


def test_a_partials_segment_seeds_are_kept_only_when_one_per_segment(tmp_path):
    line = {"id": "a", "turn": 0, "start": 0, "output_ids": [1, 2], "segments": [1, 1], "prompt_hash": "h"}
    read = lambda seeds: Partial.from_dict({**line, "segment_seeds": seeds}).seeds  # noqa: E731
    assert read([5, 5]) == [5, 5] and read([None, 5]) == [None, 5]
    assert read([5]) is None and read(["5", 5]) is None and read([True, 5]) is None
    assert Partial.from_dict(line).seeds is None
    assert b"segment_seeds" not in Partial("a", 0, [1], [1], "h", "s").to_json()


def test_the_file_keeps_whole_lines_passes_a_torn_one_and_compacts_to_one_line_per_open_id(tmp_path):
    store = PartialOutputs(tmp_path)
    store.append(partial("a", [1]))
    store.append(partial("a", [1, 2]))
    store.append(partial("b", [3]))
    store.close()
    with open(store.path, "ab") as fh:
        fh.write(b'{"id": "c", "output_i')  # a kill in the middle of a write
    assert [p.id for p in store.load()] == ["a", "a", "b"]
    store.open(usable(store.load(), set(), {"a": "h", "b": "h"}, "s")[0])
    assert store.path.read_bytes().count(b"\n") == 2 and store.path.read_bytes().endswith(b"\n")
    store.compact(done={"b"})
    assert store.load() == [partial("a", [1, 2])]
    store.compact(done={"a"})
    assert not store.path.exists()


def test_a_line_whose_segments_do_not_add_up_is_not_trusted():
    row = partial("a", [1, 2]).to_json()
    assert Partial.from_dict(orjson.loads(row)) == partial("a", [1, 2])
    assert Partial.from_dict({"id": "a", "output_ids": [1, 2], "segments": [1]}) is None
    assert Partial.from_dict({"id": "a", "output_ids": [], "segments": []}) is None


def test_checkpoint_lines_extend_a_partial_where_it_ends_and_a_line_that_does_not_fit_is_passed_over(tmp_path):
    store = PartialOutputs(tmp_path)
    whole = Partial("a", 0, [1, 2, 3, 4, 5], [5], "h", "s")
    store.append(Partial("a", 0, [1, 2], [2], "h", "s"))  # the first checkpoint: the whole so far
    store.append(whole, start=2)  # the next: only the ids since
    store.append(Partial("b", 0, [7, 8, 9], [3], "h", "s"), start=1)  # its first line is lost: not trusted
    store.close()
    assert store.path.read_bytes().count(b"[1,2") == 1  # each id written once
    keep, _ = usable(store.load(), set(), {"a": "h", "b": "h"}, "s")
    assert keep == {"a": whole}
    store.compact(done=set())
    assert store.load() == [whole]


def test_the_token_report_names_loops_cut_continued_and_waiting_tokens(tmp_path):
    from synthgen.data.partials import token_report
    from synthgen.data.rowread import Row, from_dict

    def row(finish: str, tokens: int, **extra) -> Row:
        base = {"id": "x", "finish_reason": finish, "completion_tokens": tokens, "reasoning_complete": True}
        chat = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]
        read = from_dict(base | {"content": "a", "messages": chat} | extra)
        assert isinstance(read, Row)
        return read

    rows = [
        row("stop", 10, segments=[4, 6]),
        row("repetition", 800),
        row("length", 50, reasoning_complete=False, segments=[40, 10], extended_by=100),
        row("length", 30),  # an answer cut after its reasoning closed: exported
    ]
    PartialOutputs(tmp_path).append(partial("p", [1, 2, 3]))
    report = token_report(rows, tmp_path)
    assert report == {
        "tokens": 890,
        "loop_rows": 1,
        "loop_tokens": 800,
        "cut_rows": 1,
        "cut_tokens": 50,
        "continued_rows": 2,
        "continued_tokens": 44,
        "extended_rows": 1,
        "partials": 1,
        "partial_tokens": 3,
    }


def test_an_extensions_line_keeps_its_budget_through_checkpoints_and_a_bad_one_is_read_as_none(tmp_path):
    store = PartialOutputs(tmp_path)
    extension = Extension(max_new_tokens=406, extended_by=400)
    store.append(Partial("a", 0, [1] * 6, [6], "h", "s", extension=extension))  # the cut answer, to extend
    store.append(Partial("a", 0, [1] * 9, [6, 3], "h", "s", extension=extension), start=6)  # a checkpoint
    store.close()
    (kept,) = merged(store.load()).values()
    assert (kept.tokens, kept.extension, kept.extension.cut_at) == (9, extension, 6)
    line = orjson.loads(Partial("b", 0, [1], [1], "h", "s").to_json())
    assert "extended_by" not in line and Partial.from_dict(line).extension is None
    for budget, extra in ((406, 0), (406, 406), (406, None), ("406", 400), (406, True)):
        assert Partial.from_dict({**line, "max_new_tokens": budget, "extended_by": extra}).extension is None


def test_a_partials_head_cuts_its_segments_and_seeds_to_match():
    whole = Partial("a", 0, [1, 2, 3, 4, 5], [2, 3], "h", "s", seeds=[7, 8])
    assert whole.head(9) is whole and whole.head(5) is whole
    head = whole.head(3)
    assert (head.output_ids, head.segments, head.seeds) == ([1, 2, 3], [2, 1], [7, 8])
    assert (whole.head(2).segments, whole.head(2).seeds) == ([2], [7])
    assert whole.head(0).tokens == 0 and Partial("a", 0, [1, 2], [2], "h", "s").head(1).seeds is None
