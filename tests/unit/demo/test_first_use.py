"""What a new user meets first: the demo server reports its decode rate, and
`run_inference.py --help` shows a default only where there is one."""

from __future__ import annotations

import re

from synthgen.cli.run import build_parser
from synthgen.demo.commands import DemoPaths, server_command


def test_the_demo_server_fills_its_load_reports_decode_rate(tmp_path):
    # Without --enable-metrics SGLang 0.5.23 leaves /v1/loads' gen_throughput at 0: "0 tok/s" all run.
    assert "--enable-metrics" in server_command(DemoPaths(tmp_path), 30000)


def test_help_shows_an_example_for_the_token_cap_not_a_default_it_does_not_have():
    text = " ".join(build_parser().format_help().split())
    cap = re.search(r"--max-tokens-per-dataset N (.*?) --", text)
    assert cap is not None and "(10M)" not in cap[1] and "(e.g. 10M)" in cap[1], cap
