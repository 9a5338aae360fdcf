"""The example rows a dataset's section shows: which rows are chosen (shortest, median, longest, the first cut
and looped ones), the same whatever order the file holds them in, their texts clipped to head and tail, and
every character of them escaped on the page."""

from __future__ import annotations

import json
import random
import re
from html import unescape

from synthgen.data.rowread import from_dict
from synthgen.report.examples import HEAD, TAIL, Examples, clip, examples_section
from synthgen.report.figures import DatasetFigures
from synthgen.report.page import PageData, build_page

HOSTILE = (
    '</pre></details><script>alert(1)</script><img src="http://127.0.0.1:9/x.png" onerror="alert(2)">'
    "<style>body{display:none}</style>&amp; \u202eevil\u202c \"quoted\" 'single' \ud800 <!-- -->"
)


def row(rid: str, tokens: int, finish: str = "stop", sample: int | None = None, **more) -> dict:
    out = {
        "id": rid,
        "messages": [{"role": "user", "content": f"question {rid}"}, {"role": "assistant", "content": "x"}],
        "reasoning_content": f"thinking about {rid}",
        "content": f"answer {rid}",
        "finish_reason": finish,
        "completion_tokens": tokens,
        **more,
    }
    if sample is not None:
        out["sample"] = sample
    return out


def chosen(rows: list[dict]) -> list:
    ex = Examples()
    for r in rows:
        ex.add(from_dict(r))
    lengths = sorted(r["completion_tokens"] for r in rows)
    return ex.chosen(lengths[(len(lengths) + 1) // 2 - 1])


def test_the_shortest_a_median_and_the_longest_row_then_the_first_cut_and_looped_rows_are_chosen():
    rows = [row(f"p{i:03d}", 100 + i) for i in range(1, 100)]
    rows += [row("cut1", 400, "length", reasoning_complete=False), row("cut2", 400, "length")]
    rows += [row("cut3", 400, "length"), row("loop1", 300, "repetition"), row("short", 3)]
    picks = chosen(rows)
    whys = {e.why: (e.id, e.finish) for e in picks}
    assert whys[("shortest",)] == ("short", "stop")
    assert whys[("longest", "cut at the token limit")] == ("cut1", "length")  # the first of the longest: said once
    assert whys[("cut at the token limit",)] == ("cut2", "length")  # the first two cut rows only
    assert whys[("ended by the loop guard",)] == ("loop1", "repetition")
    median = next(e for e in picks if "median length" in e.why)
    assert abs(median.output_tokens - 151) <= 25, median.output_tokens  # near the median of all 104 rows
    assert [e.why[0] for e in picks] == [
        "shortest",
        "median length",
        "longest",
        "cut at the token limit",
        "ended by the loop guard",
    ]
    assert next(e for e in picks if e.id == "cut1").reasoning_open


def test_the_rows_chosen_do_not_depend_on_the_order_the_file_holds_them_in():
    rows = [row(f"p{i:03d}", 50 + (i * 37) % 500) for i in range(300)]
    first = chosen(rows)
    random.Random(7).shuffle(rows)
    assert {(e.id, e.why) for e in chosen(rows)} == {(e.id, e.why) for e in first}


def test_samples_of_one_prompt_are_examples_of_their_own_keyed_by_id_and_sample():
    picks = chosen([row("a", 5, sample=0), row("a", 900, sample=2)])
    assert [(e.id, e.sample, e.why) for e in picks] == [("a", 0, ("shortest", "median length")), ("a", 2, ("longest",))]
    assert "sample 2" in examples_section(picks)


def test_a_long_text_keeps_its_head_and_tail_and_says_how_much_was_left_out():
    text = "H" * 5000 + "T" * 5000
    out = clip(text)
    assert out.startswith("H" * HEAD) and out.endswith("T" * TAIL)
    assert f"[… {10000 - HEAD - TAIL:,} characters left out …]" in out
    assert clip("short") == "short"
    assert clip("a\ud800b") == "a?b"  # a lone surrogate cannot break the page's encoding


def test_hostile_text_in_an_example_is_shown_as_text_never_as_markup():
    d = DatasetFigures("t")
    chat = [{"role": "user", "content": HOSTILE}, {"role": "assistant", "content": HOSTILE}]
    calls = [{"type": "function", "function": {"name": HOSTILE, "arguments": HOSTILE}}]
    d.add_row(row(HOSTILE, 7, content=HOSTILE, reasoning_content=HOSTILE, messages=chat, tool_calls=calls))
    assert d.rows == 1
    html = build_page(PageData("out", [d]))
    html.encode("utf-8")  # encodes: the lone surrogate was replaced
    body = html.split("<body>", 1)[1]
    for tag in ("<script", "<img", "<style", "</pre></details>", "<!--"):
        assert tag not in body, tag
    assert not re.search(r"onerror=[\"']", body)  # no attribute: its quotes are escaped
    shown = re.findall(r"<pre>(.*?)</pre>", body, re.S)
    assert len(shown) == 4  # prompt, reasoning, answer, tool calls
    assert all(unescape(t) == HOSTILE.replace("\ud800", "?") for t in shown[:3])
    assert json.loads(unescape(shown[3]))[0]["function"]["name"] == HOSTILE.replace("\ud800", "?")
    assert unescape(re.search(r"<code>(.*?)</code>", body).group(1)) == HOSTILE.replace("\ud800", "?")


def test_every_dataset_section_shows_its_examples_with_prompt_reasoning_and_answer():
    d = DatasetFigures("t")
    for r in (row("a", 10), row("b", 20), row("c", 30, "length", content="")):
        d.add_row(r)
    html = build_page(PageData("out", [d]))
    assert html.count('<details class="example">') == 3
    assert "question b" in html and "thinking about b" in html and "answer b" in html
    assert '<p class="none">(none)</p>' in html  # c's empty answer said, not left blank


def test_an_examples_tool_calls_are_shown_as_json_escaped():
    call = {"type": "function", "function": {"name": "search", "arguments": '{"q": "<b>x</b>"}'}}
    d = DatasetFigures("t")
    d.add_row(row("a", 10, tool_calls=[call]))
    html = build_page(PageData("out", [d]))
    shown = re.findall(r"<dt>tool calls[^<]*</dt><dd><pre>(.*?)</pre>", html, re.S)
    assert len(shown) == 1 and "<b>" not in shown[0]
    assert json.loads(unescape(shown[0])) == [call]
