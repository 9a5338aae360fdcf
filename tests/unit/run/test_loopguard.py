"""The loop guard flags degenerate repetition loops and leaves legitimate repetition alone: real
files of this machine, structured answers made of identical rows (zero matrices, default records,
identical CSV rows, base64 of zero bytes, ...), normal lists and tables. The corpus is
``tests/support/loop_corpus.py``, tokenized with a real-sized tokenizer built here (32,768 ids,
Qwen2's split) and fed as a stream would, 256 ids a chunk (``bench/bench_loopguard.py`` prints the
same measurements)."""

from __future__ import annotations

from pathlib import Path

import pytest
from loop_corpus import (
    DATA_LOOPS,
    LARGER_THAN_DATA_SPAN,
    LOOPS,
    NOT_CAUGHT,
    STRUCTURED,
    build_tokenizer,
    loop_ids,
    real_files,
)

from synthgen.run.loopguard import LoopGuard, Repetition

ROOT = Path(__file__).resolve().parents[3]
BUDGET = 32768  # --max-tokens' default
CHUNK = 256  # the default stream interval (--checkpoint-tokens)
OLD = {"min_span": 512, "text_share": 0.0, "data_share": 0.0}  # the guard before its spans scaled


@pytest.fixture(scope="module")
def real_sized():
    return build_tokenizer()


@pytest.fixture(scope="module")
def encode_real(real_sized):
    return lambda text: real_sized.encode(text, add_special_tokens=False).ids


def guard(real_sized, budget: int = BUDGET, **params) -> LoopGuard:
    return LoopGuard(budget, real_sized.decode, **params)


@pytest.mark.parametrize("name", sorted(set(STRUCTURED) - LARGER_THAN_DATA_SPAN))
def test_a_structured_answer_of_identical_rows_is_not_a_loop(real_sized, encode_real, name):
    ids = encode_real(STRUCTURED[name]())
    assert stream(guard(real_sized), ids, CHUNK) is None


def test_the_old_fixed_spans_cut_them_at_about_768_ids(real_sized, encode_real):
    cut = {name: stream(guard(real_sized, **OLD), encode_real(build()), CHUNK) for name, build in STRUCTURED.items()}
    assert sum(found is not None for found in cut.values()) >= 18
    assert all(seen <= 1024 for _, seen in filter(None, cut.values()))


@pytest.mark.parametrize("name", sorted(LARGER_THAN_DATA_SPAN))
def test_a_repetition_longer_than_the_data_span_is_cut_there_and_the_span_scales_with_the_budget(
    real_sized, encode_real, name
):
    ids = encode_real(STRUCTURED[name]())
    found, seen = stream(guard(real_sized), ids, CHUNK)
    assert 0.4 * BUDGET <= seen - found.start + found.pattern_size <= 0.4 * BUDGET + CHUNK + found.pattern_size
    assert stream(guard(real_sized, budget=2 * BUDGET), ids, CHUNK) is None


@pytest.mark.parametrize("name", sorted(set(LOOPS) - NOT_CAUGHT))
def test_a_degenerate_loop_is_cut_within_its_span_of_its_start(real_sized, encode_real, name):
    ids, start = loop_ids(encode_real, LOOPS[name], BUDGET)
    found, seen = stream(guard(real_sized), ids, CHUNK)
    share = 0.4 if name in DATA_LOOPS else 0.1
    # The text span is 10% of the budget (3,276 ids), the data span 40% (13,107): within a chunk more. The
    # repetition may begin up to one pattern before the loop's text does (the text before it ends the same way).
    low, high = share * BUDGET - found.pattern_size, share * BUDGET + CHUNK + found.pattern_size
    assert low <= seen - start <= high, (seen, start)
    assert ids[found.start :][: found.pattern_size * found.count] == list(found.pattern) * found.count
    assert found.start >= start - found.pattern_size


@pytest.mark.parametrize("name", sorted(NOT_CAUGHT))
def test_a_loop_whose_text_changes_is_not_caught(real_sized, encode_real, name):
    ids, _ = loop_ids(encode_real, LOOPS[name], BUDGET)
    assert stream(guard(real_sized), ids, CHUNK) is None


def test_real_files_of_the_machine_are_never_a_loop(real_sized, encode_real):
    files = real_files(scale=0.1)
    assert len(files) >= 5
    cut = [name for name, text in files if stream(guard(real_sized), encode_real(text), CHUNK) is not None]
    assert cut == []


def test_a_small_budget_keeps_the_text_span_at_min_span_and_a_loop_is_still_cut(real_sized, encode_real):
    ids, start = loop_ids(encode_real, LOOPS["a sentence"], 4096)
    small = guard(real_sized, budget=4096)
    assert (small.text_span, small.data_span) == (2048, 2048)
    found, seen = stream(small, ids, CHUNK)
    assert 2048 <= seen - start <= 2048 + CHUNK


def test_without_decode_every_pattern_is_data():
    loop = list(range(1000)) + [7, 8, 9] * 12000
    assert stream(LoopGuard(BUDGET), loop, CHUNK)[1] - 1000 >= 0.4 * BUDGET


def stream(guard: LoopGuard, ids: list[int], chunk: int = 16) -> tuple[Repetition, int] | None:
    """Feed ``ids`` as growing chunks; the first repetition found and how many ids it had seen."""
    for end in range(chunk, len(ids) + chunk, chunk):
        found = guard.check(ids[: min(end, len(ids))])
        if found is not None:
            return found, min(end, len(ids))
    return None


def table(rows: int) -> str:
    lines = ["| id | name | score | passed |", "|---:|------|------:|:------:|"]
    lines += [f"| {i} | item-{i % 7} | {i * 37 % 101} | {'yes' if i % 3 else 'no'} |" for i in range(rows)]
    return "\n".join(lines) + "\n"


NORMAL = {
    "markdown table": table(300),
    "numbered list": "".join(f"{i}. Step {i}: check the value and move on.\n" for i in range(1, 301)),
    "checklist": "".join(f"- [ ] review section {i}\n" for i in range(200)),
    "repeated short lines": "".join("x = 0\n" * 12 + f"y{i} = compute(x)\n" for i in range(20)),
    "zero matrix": "\n".join("[" + ", ".join(["0"] * 10) + "]," for _ in range(10)) + "\n",
    "separator lines": "".join("-" * 80 + f"\nSection {i}\n" for i in range(100)),
    "csv": "".join(f"2026-12-{1 + i % 28:02d},{i},{i * 3 % 17},ok\n" for i in range(400)),
    "json records": "[" + ",".join(f'{{"id": {i}, "tags": ["a", "b"], "ok": true}}' for i in range(200)) + "]",
}
# An answer explains before its list or table: the guard looks only past min_tokens (768) ids.
INTRO = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")[:4000]


@pytest.mark.parametrize("name", sorted(NORMAL))
def test_normal_structured_text_is_never_a_loop(real_sized, encode_real, name):
    ids = encode_real(INTRO + "\n\n" + NORMAL[name])
    assert len(ids) > 768 + 200, "the sample must reach past min_tokens"
    assert stream(guard(real_sized), ids) is None
    assert stream(guard(real_sized, budget=4096), ids) is None  # spans at min_span (2,048)


@pytest.mark.parametrize(
    "source",
    ["README.md", "docs/architecture.md", "synthgen/server/client.py", "tests/support/sglang_sim.py"],
)
def test_real_docs_and_code_are_never_a_loop(real_sized, encode_real, source):
    text = (ROOT / source).read_text(encoding="utf-8")
    ids = encode_real(text)
    assert stream(guard(real_sized, budget=4096), ids, chunk=64) is None


def test_a_paragraph_loop_needs_min_count_repetitions_not_just_the_span():
    paragraph = list(range(9000, 9300))  # 300 ids, so min_count (4) decides: 1,200 ids
    found, seen = stream(LoopGuard(**OLD), list(range(5000, 5800)) + paragraph * 6)
    assert found.pattern_size == 300 and found.count >= 4
    assert seen >= 800 + 4 * 300


def test_no_look_before_min_tokens_and_none_for_patterns_above_max_size():
    assert stream(LoopGuard(min_tokens=768, **OLD), [3] * 700) is None
    assert stream(LoopGuard(min_tokens=768, **OLD), [3] * 900) is not None
    long_pattern = list(range(600))
    assert stream(LoopGuard(max_pattern_size=512, **OLD), long_pattern * 5) is None
    assert stream(LoopGuard(max_pattern_size=600, **OLD), long_pattern * 5)[0].pattern_size == 600


def test_checks_wait_for_check_every_new_ids_and_start_over_on_a_shorter_list():
    watch = LoopGuard(min_tokens=0, check_every=64, **OLD)
    loop = [1, 2] * 400
    assert watch.check(loop[:700]) is not None
    assert watch.check(loop[:720]) is None  # 20 new ids: not looked at
    assert watch.check(loop[:770]) is not None
    assert watch.check(loop[:600]) is not None  # a new attempt from fewer ids is looked at again


def test_the_repetition_describes_itself_for_the_row():
    found = LoopGuard(min_tokens=0, **OLD).check([9] * 10 + [1, 2, 3] * 200)
    assert found is not None
    assert found.as_dict() == {"pattern_size": 3, "count": 200, "start": 10, "pattern": [1, 2, 3]}


def test_nonsense_parameters_are_refused():
    with pytest.raises(ValueError, match="min_pattern_size"):
        LoopGuard(min_pattern_size=5, max_pattern_size=4)
    with pytest.raises(ValueError, match="min_count"):
        LoopGuard(min_count=1)
