"""The run report in a real browser: headless Chromium (Debian's ``chromium`` package, which ``.ci/run``
installs) opens a page built from a made-up night's output folder. It logs no console message (the page has no
script, and its Content-Security-Policy turns any load from elsewhere into one), every figure is in the
rendered DOM with its text alternative, every dataset shows its example rows (a hostile one among them stays
text), and its screenshot is not blank: the charts' colours are on it. Skipped, saying why, only where no
Chromium is installed."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest
from browser import browse, console
from png import colours
from report_page import make_folder, make_rows, with_mix, write_jsonl

from synthgen.report.folder import FolderReport, write_page

SIZES = {"glaive": 400, "ultrachat": 250, "swe-agent": 120}
BLUE, ORANGE = (43, 108, 176), (221, 107, 32)  # stop bars and lines; length bars and the queue line
SERVERS = ("http://10.0.0.1:30000", "http://10.0.0.2:30000", "smg-worker-7")
HOSTILE = '<script>document.title="owned"</script><img src="http://127.0.0.1:9/x.png"></pre></details>&amp;'


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("browser") / "outputs"
    make_folder(out, SIZES, start=1_764_630_000.0)
    hostile = make_rows("hostile", 1)[0] | {"id": HOSTILE, "reasoning_content": HOSTILE, "content": HOSTILE}
    hostile["completion_tokens"] = 1  # the shortest row of its dataset: one of its examples
    rows = out / "swe-agent" / "raw_responses.jsonl"
    write_jsonl(rows, [*(orjson.loads(line) for line in rows.read_bytes().splitlines()), hostile])
    # ultrachat: 5 samples of each prompt, a mix of 3 recipes, answered by three servers in turn
    write_jsonl(out / "ultrachat" / "raw_responses.jsonl", with_mix(make_rows("ultrachat", 250), 5, 3, SERVERS))
    path = out / "report.html"
    write_page(path, FolderReport(out, None, {"glaive": (1_500_000, "cap")}).page(None, "run_inference.py"))
    return path


@pytest.fixture(scope="module")
def dom(page, tmp_path_factory) -> tuple[str, list[str]]:
    result = browse(page, tmp_path_factory.mktemp("dom"), "--dump-dom")
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout, console(result)


def test_the_page_logs_no_console_message(dom):
    assert dom[1] == []


def test_a_page_loading_anything_from_elsewhere_is_caught_by_the_console_check(page, tmp_path):
    leaky = tmp_path / "leaky.html"
    leaky.write_text(page.read_text().replace("<body>", '<body><img src="http://127.0.0.1:9/x.png" alt="">', 1))
    messages = console(browse(leaky, tmp_path, "--dump-dom"))
    assert any("Content Security Policy" in m for m in messages), messages


def test_every_figure_is_in_the_rendered_dom_with_its_text_alternative(dom):
    html = dom[0]
    charts = re.findall(
        r'<svg class="chart"[^>]*>\s*<title id="[^"]+">([^<]+)</title>\s*<desc id="[^"]+">([^<]+)</desc>', html
    )
    # Two over time, one of each server's and one of every dataset's output tokens, four histograms per dataset.
    assert len(charts) == 2 + 1 + 1 + 4 * len(SIZES), len(charts)
    assert all(title and desc for title, desc in charts)
    assert html.count('role="img"') == len(charts)
    assert html.count('<rect class="outage"') == 2 and html.count('<line class="restart"') == 2
    for name in SIZES:
        assert f'id="ds-{name}"' in html


def test_the_screenshot_is_not_blank_and_shows_the_charts(page, tmp_path):
    shot = tmp_path / "report.png"
    result = browse(page, tmp_path, "--window-size=1000,1500", f"--screenshot={shot}")
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    seen = colours(shot.read_bytes())
    assert len(seen) > 50, f"{len(seen)} colours: a blank page?"
    assert seen[BLUE] > 2000 and seen[ORANGE] > 200, (seen[BLUE], seen[ORANGE])


def test_every_dataset_shows_example_rows_and_hostile_text_in_them_stays_text(dom):
    html = dom[0]
    for name in SIZES:
        section = html.split(f'id="ds-{name}"', 1)[1].split('<section class="dataset"', 1)[0]
        examples = re.findall(r'<details class="example">.*?</details>', section, re.S)
        assert len(examples) >= 3, name  # shortest, median, longest (and the first cut rows)
        assert all(all(f"<dt>{part}" in x for part in ("prompt", "reasoning", "answer")) for x in examples)
        assert "cut at the token limit" in section
    assert "<script" not in html and "owned" not in html.split("<body", 1)[0]  # the title is the page's own
    assert html.count("&lt;script&gt;document.title") == 3  # the hostile row's id, reasoning and answer, as text


def test_a_mix_shows_its_lengths_per_recipe_and_sample_and_several_servers_a_line_each(dom):
    html = dom[0]
    servers = html.split('<section id="servers">', 1)[1].split("</section>", 1)[0]
    for server in SERVERS:
        assert f'data-stat="server/{server}/rows">' in servers
    mix = html.split('id="ds-ultrachat"', 1)[1].split('<div class="examples">', 1)[0]
    assert "Samples and recipes" in mix and 'data-stat="ultrachat/prompts_sampled">50<' in mix
    for key in ("recipe/0", "recipe/2", "sample/0", "sample/4"):
        assert f'data-stat="ultrachat/{key}/n">' in mix, key
    legends = re.findall(r'<p class="legend">(.*?)</p>', html)
    assert any(re.search(r"the dataset(&#x27;|')s budget", legend) for legend in legends)  # the budget tick is keyed
