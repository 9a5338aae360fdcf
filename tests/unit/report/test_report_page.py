"""The report's pure parts: figures tallied from rows, histogram bins, the timeline's outages and
restarts, and the page: every number it shows equals the same number counted here from the rows,
it loads nothing from anywhere, and what it quotes from the rows is escaped."""

from __future__ import annotations

import re

import pytest
from report_page import expected_stats, make_rows, make_timeline, page_stats

from synthgen.report import svg
from synthgen.report.figures import DatasetFigures, bins, split_tokens
from synthgen.report.overtime import outages, restarts, run_rate
from synthgen.report.page import PageData, build_page
from synthgen.report.timeline import Timeline, parse_timeline

START = 1_764_630_000.0
CHAT = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "x"}]


def figures(name: str, rows: list[dict], errors: list[dict] = (), budget: int | None = None) -> DatasetFigures:
    d = DatasetFigures(name, budget=budget, budget_kind="cap")
    for row in rows:
        d.add_row({"messages": CHAT, "content": "x", **row})  # without a conversation or content: malformed
    d.set_errors(errors)
    return d


def timeline() -> Timeline:
    import orjson

    return parse_timeline(b"\n".join(orjson.dumps(line) for line in make_timeline(START)))


@pytest.mark.parametrize(
    ("tokens", "reasoning", "answer", "split"),
    [
        (100, "rrr", "a", (75, 25)),
        (7, "", "answer", (0, 7)),
        (7, "only reasoning", "", (7, 0)),
        (5, "", "", (0, 5)),  # nothing to split by: all of it counts as answer
        (3, "rr", "aa", (2, 1)),  # rounded, and the two parts add up to the whole
    ],
)
def test_a_turns_output_tokens_are_split_by_the_characters_of_its_reasoning_and_answer(
    tokens, reasoning, answer, split
):
    assert split_tokens(tokens, reasoning, answer) == split
    assert sum(split) == tokens


def test_a_row_is_counted_once_per_id_and_sample_and_cut_or_empty_when_any_turn_is():
    rows = [
        {"id": "a", "finish_reason": "stop", "completion_tokens": 10, "content": "x", "reasoning_content": "r"},
        {"id": "a", "finish_reason": "stop", "completion_tokens": 10, "content": "x"},  # duplicate: not counted
        {"id": "b", "finish_reason": "length", "completion_tokens": 8, "reasoning_complete": False, "content": ""},
        {"id": "c", "finish_reason": "stop", "completion_tokens": 4, "content": " "},  # empty answer
        {"id": "d", "finish_reason": "stop", "completion_tokens": 4, "content": "", "tool_calls": [{}, {}]},
        {
            "id": "e",
            "finish_reason": "stop",
            "completion_tokens": 9,
            "turns": [
                {"finish_reason": "length", "completion_tokens": 5, "content": "", "reasoning_complete": False},
                {"finish_reason": "stop", "completion_tokens": 4, "content": "ok", "tool_calls": [{}]},
            ],
        },
        # another sample of a prompt is a row of its own; its repeat is a duplicate
        {"id": "a", "sample": 1, "finish_reason": "stop", "completion_tokens": 10, "content": "x"},
        {"id": "a", "sample": 1, "finish_reason": "stop", "completion_tokens": 10, "content": "x"},
        {"id": "a", "sample": 0, "finish_reason": "stop", "completion_tokens": 10, "content": "x"},  # sample 0 is "a"
    ]
    d = figures("t", rows + [{"id": "m", "content": "no conversation", "messages": "?"}])
    assert (d.rows, d.duplicates, d.malformed, d.output_tokens) == (6, 3, 1, 45)
    assert (d.cut, d.empty) == (2, 1)  # b and e are cut; only c is empty (b never closed, d called tools)
    assert (d.tool_calls, d.rows_with_tool_calls) == (3, 2)
    assert (d.turns, dict(d.turns_per_row)) == (7, {1: 5, 2: 1})
    assert dict(d.finish) == {"stop": 5, "length": 1}


def test_errors_count_the_latest_line_of_each_prompt_that_has_no_row():
    errors = [
        {"id": "x", "status": "failed", "error_type": "timeout", "error": "slow"},
        {"id": "x", "status": "skipped", "error_type": "prompt_too_long", "error": "long"},  # the latest wins
        {"id": "y", "status": "failed", "error_type": "http_400", "error": "bad"},
        {"id": "done", "status": "failed", "error_type": "timeout", "error": "then it worked"},
    ]
    d = figures("t", [{"id": "done", "finish_reason": "stop", "completion_tokens": 1}], errors)
    assert dict(d.errors) == {("skipped", "prompt_too_long"): 1, ("failed", "http_400"): 1}
    assert (d.failed, d.skipped) == (1, 1)


def test_histogram_bins_are_round_and_hold_every_value_once():
    b = bins({"stop": [0, 5, 99, 1000, 4096], "length": [4096, 4096]})
    assert sum(map(sum, b.counts.values())) == 7
    widths = {hi - lo + 1 for lo, hi in b.edges}
    assert len(widths) == 1 and re.fullmatch(r"[125]0*", str(widths.pop()))
    assert b.counts["length"][-1] == 2


def test_outages_and_restarts_come_from_the_timelines_events_and_restart_counts():
    tl = timeline()
    (band,) = outages(tl)
    assert band[1] - band[0] == 300
    assert restarts(tl) == [band[1]]
    samples = tl.samples
    assert run_rate(samples) == (samples[-1]["tokens"] - samples[0]["tokens"]) / (samples[-1]["t"] - samples[0]["t"])
    assert run_rate(samples[:1]) is None


def test_every_number_on_the_page_equals_the_rows_counted_independently():
    rows = {"glaive": make_rows("glaive", 300), "agent": make_rows("agent", 80)}
    errors = {"glaive": [{"id": "z", "status": "failed", "error_type": "timeout", "error": "slow"}], "agent": []}
    data = [figures(name, rows[name], errors[name]) for name in rows]
    stats = page_stats(build_page(PageData("outputs", data, timeline(), START)))
    expected: dict[str, str] = {}
    for name in rows:
        expected |= expected_stats(name, rows[name], errors[name])
    assert {k: stats.get(k) for k in expected} == expected
    every = [r for name in rows for r in rows[name]]
    assert stats["total/rows"] == f"{len(every):,}"
    assert stats["total/output_tokens"] == f"{sum(r['completion_tokens'] for r in every):,}"
    cut = sum(
        r["finish_reason"] == "length" or any(t["finish_reason"] == "length" for t in r.get("turns", [])) for r in every
    )
    assert (stats["total/cut"], stats["total/failed"]) == (f"{cut:,}", "1")
    tl = timeline()
    rate = (tl.samples[-1]["tokens"] - tl.samples[0]["tokens"]) / (tl.samples[-1]["t"] - tl.samples[0]["t"])
    assert (stats["run/tok_s"], stats["run/outages"], stats["run/restarts"]) == (f"{rate:,.0f}", "1", "1")


def test_a_dataset_over_its_budget_is_marked_and_its_share_shown():
    d = figures("d", [{"id": "a", "finish_reason": "stop", "completion_tokens": 150, "content": "x"}], budget=100)
    page = build_page(PageData("outputs", [d], Timeline(), START))
    assert page_stats(page)["d/budget_share"] == "150.0%"
    assert "over budget: d" in page and 'class="s-length"' in page


def test_the_page_loads_nothing_from_elsewhere_and_has_no_script():
    page = build_page(PageData("outputs", [figures("d", make_rows("d", 50))], timeline(), START))
    assert "<script" not in page and "<link" not in page and "@import" not in page and "url(" not in page
    assert re.findall(r'(?:src|href)="([^"]*)"', page) == ["#ds-d"]
    assert "default-src 'none'" in page  # the browser refuses any load the page might still make
    assert set(re.findall(r"https?://[^\"' ]+", page)) == {"http://www.w3.org/2000/svg"}  # a namespace, not a load


def test_what_the_page_quotes_from_the_rows_is_escaped():
    hostile = "<script>alert(1)</script>"
    d = figures(hostile, [{"id": "a", "finish_reason": hostile, "completion_tokens": 1}])
    d.set_errors([{"id": "b", "status": "failed", "error_type": hostile, "error": hostile}])
    page = build_page(PageData(hostile, [d], Timeline(), START))
    assert "<script" not in page
    assert "&lt;script&gt;" in page


def test_a_live_page_refreshes_itself_and_a_final_one_does_not():
    live = build_page(PageData("o", [], Timeline(), START, live_every=300))
    final = build_page(PageData("o", [], Timeline(), START))
    assert '<meta http-equiv="refresh" content="300">' in live and "Run in progress" in live
    assert "refresh" not in final and "Final." in final


def test_an_empty_folder_still_makes_a_page_that_says_so():
    page = build_page(PageData("o", [DatasetFigures("d")], Timeline(), START))
    assert "no rows" in page and "No timeline yet" in page
    assert page_stats(page)["total/rows"] == "0" and page_stats(page)["total/cut_share"] == "-"


def test_every_chart_has_a_title_and_a_description_for_screen_readers():
    page = build_page(PageData("o", [figures("d", make_rows("d", 40))], timeline(), START))
    charts = re.findall(r"<svg [^>]*aria-labelledby=\"([^ ]+) ([^\"]+)\"", page)
    assert len(charts) == 2 + 1 + 4
    for title, desc in charts:
        assert f'<title id="{title}">' in page and f'<desc id="{desc}">' in page


@pytest.mark.parametrize(
    ("t0", "t1", "step"),
    [(0, 3600, 900), (0, 8 * 3600, 7200), (30, 200, 60), (0, 40 * 3600, 43200), (1_000, 1_012, 5), (7, 70, 15)],
)
def test_time_ticks_fall_on_round_times(t0, t1, step):
    ticks = svg.time_ticks(t0, t1)
    assert 1 <= len(ticks) <= 6 and all(t % step == 0 and t0 <= t <= t1 for t in ticks)


def test_a_run_of_seconds_gets_time_ticks_with_seconds():
    t0 = 1_764_858_389.0  # 14:26:29 UTC
    chart = svg.lines("x", [svg.Series("s", "s-rate", [(t0, 1.0), (t0 + 12, 2.0)])], (t0, t0 + 12), "t", "d")
    labels = re.findall(r'text-anchor="middle">([0-9:]+)</text>', chart)
    assert labels == ["14:26:30", "14:26:35", "14:26:40"]


def test_a_folder_of_many_datasets_charts_those_with_the_most_tokens_and_tables_every_one():
    data = [figures(f"d{i:02d}", [{"id": "a", "finish_reason": "stop", "completion_tokens": i}]) for i in range(30)]
    page = build_page(PageData("o", data, Timeline(), START))
    sections = re.findall(r'<section class="dataset" id="ds-([^"]+)"', page)
    assert sections == [f"d{i:02d}" for i in range(6, 30)]  # the 24 with the most output tokens, in folder order
    assert all(page_stats(page)[f"d{i:02d}/rows"] == "1" for i in range(30))
    assert "the 24 of 30 datasets with the most output tokens" in page


def test_count_axes_tick_at_round_whole_numbers():
    from synthgen.report.svg import nice_max

    for value, top in [(0, 4), (1, 4), (3, 4), (5, 8), (9, 20), (21, 40), (130, 200), (2_600, 4_000), (0.5, 4)]:
        assert nice_max(value) == top, value
    for value in range(1, 3_000, 7):
        top = nice_max(value)
        assert top >= value and all(float(top * i / 4).is_integer() for i in range(5)), value


def test_every_finish_reason_drawn_has_a_key_and_loops_and_length_have_cards():
    rows = make_rows("d", 12)
    rows[0]["finish_reason"] = "repetition"
    rows[1]["finish_reason"] = "length"
    page = build_page(PageData("o", [figures("d", rows)], timeline(), START))
    legend = re.search(r'<p class="legend">finish reason:(.*?)</p>', page).group(1)
    keys = re.findall(r'class="key (s-[a-z]+)"', legend)
    drawn = set(re.findall(r'<rect class="(s-[a-z]+)"', page))
    assert drawn <= set(keys) and "s-repetition" in drawn
    assert "repetition (ended by the loop guard)" in legend
    assert ".s-repetition{fill:" in page  # a colour of its own, not the default black
    stats = page_stats(page)
    assert (stats["total/repetition"], stats["total/length"]) == ("1", "1")
    captions = re.findall(r"<figcaption>([^<]+)</figcaption>", page)
    assert "Output tokens per row (every generated turn)" in captions
