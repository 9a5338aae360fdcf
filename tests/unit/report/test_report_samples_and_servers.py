"""The page's view of a training mix and of several servers: the lengths per recipe and per sample equal those
of the export's text report, a line per server that wrote rows, and a legend key for every colour drawn."""

from __future__ import annotations

import re

from report_page import make_rows, make_timeline, page_stats, with_mix

from synthgen.data.rowread import from_dict
from synthgen.export.samples import SampleStats
from synthgen.report.figures import DatasetFigures
from synthgen.report.page import PageData, build_page
from synthgen.report.timeline import parse_timeline

START = 1_764_630_000.0
SERVERS = ("http://10.0.0.1:30000", "http://10.0.0.2:30000", "smg-worker-7")


def figures(name: str, rows: list[dict], errors: list[dict] = (), budget: int | None = None) -> DatasetFigures:
    d = DatasetFigures(name, budget=budget, budget_kind="cap")
    for row in rows:
        d.add_row(row)
    d.set_errors(errors)
    return d


def test_lengths_per_recipe_and_per_sample_equal_the_text_reports():
    rows = with_mix(make_rows("mix", 240), samples=4, recipes=3)
    stats = page_stats(build_page(PageData("o", [figures("mix", rows)])))
    text = SampleStats()
    for row in rows:
        text.add(from_dict(row))
    lines = "\n".join(text.lines(30))
    for index in range(3):
        n, p10, p50, p90, top = re.search(
            rf"recipe {index}\s+([\d,]+)\s+completion tokens p10 ([\d,]+), p50 ([\d,]+), p90 ([\d,]+), max ([\d,]+)",
            lines,
        ).groups()
        key = f"mix/recipe/{index}"
        assert [stats[f"{key}/{k}"] for k in ("n", "p10", "p50", "p90", "max")] == [n, p10, p50, p90, top]
    for sample in range(4):
        tokens = sorted(r["completion_tokens"] for r in rows if r["sample"] == sample)
        assert stats[f"mix/sample/{sample}/n"] == "60" and stats[f"mix/sample/{sample}/max"] == f"{tokens[-1]:,}"
        assert stats[f"mix/sample/{sample}/p50"] == f"{tokens[len(tokens) // 2]:,}"
    share = re.search(r"samples differ\s+([\d.]+%)", lines).group(1)
    assert stats["mix/samples_differ"] == share == "50.0%"  # every other prompt's samples are all the same
    assert stats["mix/prompts_sampled"] == "60"


def test_a_dataset_without_samples_shows_no_mix_section():
    page = build_page(PageData("o", [figures("plain", make_rows("plain", 20))]))
    assert "Samples and recipes" not in page


def test_a_run_on_several_servers_gets_a_line_per_server_and_one_server_none():
    rows = with_mix(make_rows("a", 90), samples=1, workers=SERVERS)
    errors = [{"id": "gone", "status": "failed", "error_type": "timeout", "error": "t", "worker": SERVERS[1]}]
    page = build_page(PageData("o", [figures("a", rows, errors), figures("b", make_rows("b", 10))]))
    stats = page_stats(page)
    assert [stats[f"server/{s}/rows"] for s in SERVERS] == ["30", "30", "30"]
    assert stats["server/-/rows"] == "10"  # rows that name no server are a line of their own
    assert stats[f"server/{SERVERS[1]}/failed"] == "1" and stats[f"server/{SERVERS[0]}/failed"] == "0"
    tokens = sum(int(stats[f"server/{s}/output_tokens"].replace(",", "")) for s in (*SERVERS, "-"))
    assert tokens == sum(r["completion_tokens"] for r in rows) + sum(r["completion_tokens"] for r in make_rows("b", 10))
    for s in SERVERS:
        finish = sum(int(stats[f"server/{s}/{k}"]) for k in ("stop", "length", "repetition"))
        assert finish == 30
    one = build_page(PageData("o", [figures("a", with_mix(make_rows("a", 9), samples=1, workers=SERVERS[:1]))]))
    assert 'id="servers"' not in one


def test_every_colour_drawn_on_the_page_has_a_key_in_a_legend():
    rows = with_mix(make_rows("a", 60), samples=1, workers=SERVERS)
    rows[0]["finish_reason"] = "repetition"
    rows[1]["finish_reason"] = "abort"
    timeline = parse_timeline(b"\n".join(__import__("orjson").dumps(line) for line in make_timeline(START)))
    page = build_page(PageData("o", [figures("a", rows, budget=1_000), figures("b", make_rows("b", 5))], timeline))
    drawn = set(re.findall(r'<(?:rect|polyline|circle|line) class="([a-z-]+)', page)) - {"grid"}
    keys = set(re.findall(r'<span class="key ([a-z-]+)"></span>', page))
    assert {"s-repetition", "s-abort", "mark", "outage", "restart", "s-length"} <= drawn
    assert drawn <= keys, drawn - keys


def test_a_hostile_server_name_run_id_or_stop_detail_is_shown_as_text():
    import orjson

    bad = '"><img src="http://127.0.0.1:9/x.png"><script>alert(1)</script>'
    rows = with_mix(make_rows("a", 6), samples=2, recipes=2, workers=(bad, "ok"))
    lines = [
        {"t": START, "run": bad, "event": "start", "detail": bad, "rows_before": 3},
        {"t": START + 5, "run": bad, "tok_s": 1.0, "in_flight": 1, "done": 1, "tokens": 5},
        {"t": START + 9, "run": bad, "event": "end", "detail": bad},
    ]
    timeline = parse_timeline(b"\n".join(orjson.dumps(x) for x in lines))
    page = build_page(PageData("o", [figures("a", rows)], timeline, START + 10))
    body = page.split("<body>", 1)[1]
    assert "<img" not in body and "<script" not in body
    assert body.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 5  # server table, bars, runs table, marks
