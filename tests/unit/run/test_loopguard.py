"""The loop guard flags real repetition loops and never normal text or code (lists, tables,
repeated short lines), tokenized with a real model's test tokenizer and fed as a stream would."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_tokenizers import build_model_tokenizer
from tokenizers import Tokenizer

from synthgen.run.loopguard import LoopGuard, Repetition

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def encode(tmp_path_factory):
    folder = build_model_tokenizer(tmp_path_factory.getbasetemp() / "model-tokenizers" / "qwen3", "qwen3")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    return lambda text: tokenizer.encode(text, add_special_tokens=False).ids


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
def test_normal_structured_text_is_never_a_loop(encode, name):
    ids = encode(INTRO + "\n\n" + NORMAL[name])
    assert len(ids) > 768 + 200, "the sample must reach past min_tokens"
    assert stream(LoopGuard(), ids) is None


@pytest.mark.parametrize(
    "source",
    ["README.md", "docs/architecture.md", "synthgen/server/client.py", "tests/support/sglang_sim.py"],
)
def test_real_docs_and_code_are_never_a_loop(encode, source):
    text = (ROOT / source).read_text(encoding="utf-8")
    ids = encode(text)
    assert stream(LoopGuard(), ids, chunk=64) is None


def test_a_sentence_repeated_over_and_over_is_found_soon_after_it_starts(encode):
    intro = encode(NORMAL["numbered list"])[:1000]
    sentence = encode(" Wait, let me check that step again.")
    ids = intro + sentence * 400
    found, seen = stream(LoopGuard(), ids)
    assert found.pattern_size == len(sentence) and found.count * found.pattern_size >= 512
    assert seen - len(intro) <= 512 + 64 + len(sentence)  # min_span, check_every, a partial pattern
    assert list(found.pattern) == ids[found.start : found.start + found.pattern_size]
    assert ids[found.start :][: len(found.pattern) * found.count] == list(found.pattern) * found.count


def test_one_token_repeated_is_a_loop_of_size_one():
    found, _ = stream(LoopGuard(), list(range(1000)) + [7] * 600)
    assert (found.pattern_size, found.pattern) == (1, (7,)) and found.start >= 1000


def test_a_paragraph_loop_needs_min_count_repetitions_not_just_min_span(encode):
    paragraph = encode(NORMAL["csv"])[:300]  # 300 ids, so min_count (4) decides: 1,200 ids
    ids = list(range(5000, 5800)) + paragraph * 6
    found, seen = stream(LoopGuard(), ids)
    assert found.pattern_size == 300 and found.count >= 4
    assert seen >= 800 + 4 * 300


def test_no_look_before_min_tokens_and_none_for_patterns_above_max_size():
    assert stream(LoopGuard(min_tokens=768), [3] * 700) is None
    assert stream(LoopGuard(min_tokens=768), [3] * 900) is not None
    long_pattern = list(range(600))
    assert stream(LoopGuard(max_pattern_size=512), long_pattern * 5) is None
    assert stream(LoopGuard(max_pattern_size=600), long_pattern * 5)[0].pattern_size == 600


def test_checks_wait_for_check_every_new_ids_and_start_over_on_a_shorter_list():
    guard = LoopGuard(min_tokens=0, check_every=64)
    loop = [1, 2] * 400
    assert guard.check(loop[:700]) is not None
    assert guard.check(loop[:720]) is None  # 20 new ids: not looked at
    assert guard.check(loop[:770]) is not None
    assert guard.check(loop[:600]) is not None  # a new attempt from fewer ids is looked at again


def test_the_repetition_describes_itself_for_the_row():
    found = LoopGuard(min_tokens=0).check([9] * 10 + [1, 2, 3] * 200)
    assert found is not None
    assert found.as_dict() == {"pattern_size": 3, "count": 200, "start": 10, "pattern": [1, 2, 3]}


def test_nonsense_parameters_are_refused():
    with pytest.raises(ValueError, match="min_pattern_size"):
        LoopGuard(min_pattern_size=5, max_pattern_size=4)
    with pytest.raises(ValueError, match="min_count"):
        LoopGuard(min_count=1)
