"""The export report on a training mix: prompts by sample count, share whose samples differ, lengths per recipe."""

from synthgen.data.rowread import Row, from_dict
from synthgen.export.samples import SampleStats

CHAT = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]


def row(pid, sample, text, recipe, tokens) -> Row:
    read = from_dict(
        {"id": pid, "sample": sample, "messages": CHAT, "content": "a", "output_text": text}
        | {"recipe": {"index": recipe}, "completion_tokens": tokens}
    )
    assert isinstance(read, Row)
    return read


def test_the_report_counts_prompts_by_samples_the_share_that_differ_and_lengths_per_recipe():
    stats = SampleStats()
    for pid, texts in {"a": ["x", "y", "x"], "b": ["z", "z", "z"], "c": ["w"]}.items():
        for k, text in enumerate(texts):
            stats.add(row(pid, k, text, recipe=k % 2, tokens=10 * (k + 1)))
    lines = stats.lines(24)
    assert lines[0] == "  prompts by samples               3   (3 samples: 2, 1 samples: 1)"
    assert lines[1] == "  samples differ               50.0%   (1 of 2 prompts with 2+ samples)"
    assert lines[2] == "  recipe 0                         5   completion tokens p10 10, p50 10, p90 30, max 30"
    assert lines[3] == "  recipe 1                         2   completion tokens p10 20, p50 20, p90 20, max 20"


def test_rows_without_samples_add_nothing():
    assert SampleStats().lines(24) == []
