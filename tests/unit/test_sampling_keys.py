"""The sampling-key table, row by row: each flag parses into the config and is sent under its SGLang key, its
check refuses a value out of range in one line naming the flag (on the command line and in a recipe), a
key that counts output tokens stops a continuation, the gateway's forwarded keys and docs/command-line.md
are the table's; every RunConfig field names its flag, and the flag exists."""

from __future__ import annotations

import math
import re
from pathlib import Path

import orjson
import pytest

from synthgen.cli.run import build_parser, config_from_args
from synthgen.config import RunConfig, flag_of
from synthgen.data.mix import parse_mix
from synthgen.data.partials import continuation_blocker
from synthgen.data.provenance import differences
from synthgen.data.sampling_keys import FLAGGED, SAMPLING_KEYS, SamplingKey, docs_table
from synthgen.errors import UsageError
from synthgen.server import gateway
from synthgen.server.client import build_payload
from synthgen.server.gateways import smg

REPO = Path(__file__).resolve().parents[2]
CANDIDATES = (-2, -1, 0, 0.5, 1, 2, 7, 1.5, 1e9, math.inf, math.nan)


def values(row: SamplingKey) -> tuple[list[float], list[float]]:
    """Values of the row's kind that its check accepts and refuses."""
    typed = [v for v in CANDIDATES if row.kind is float or (isinstance(v, int) and not isinstance(v, bool))]
    return [v for v in typed if row.problem(v) is None], [v for v in typed if row.problem(v) is not None]


def parsed(*argv: str) -> RunConfig:
    return config_from_args(build_parser().parse_args(list(argv)))


def test_the_table_has_the_flags_and_each_row_has_values_it_takes_and_refuses():
    assert [row.flag for row in FLAGGED] == ["--temperature", "--top-p", "--top-k", "--max-tokens"]
    for row in FLAGGED:
        ok, bad = values(row)
        assert ok and bad, row.key
    assert len({row.key for row in SAMPLING_KEYS}) == len(SAMPLING_KEYS)


@pytest.mark.parametrize("row", FLAGGED, ids=lambda row: row.flag)
def test_a_flag_parses_into_the_config_and_is_sent_under_its_sglang_key(row):
    value = values(row)[0][-1] if row.kind is int else 0.5
    cfg = parsed(row.flag, str(value))
    payload = build_payload([1, 2, 3], cfg.max_tokens, cfg.sampling_params())
    assert payload["sampling_params"][row.key] == value
    assert parsed().sampling_params().get(row.key) is None or row.key == "max_new_tokens"  # unset: not sent


@pytest.mark.parametrize("row", FLAGGED, ids=lambda row: row.flag)
def test_a_value_out_of_range_is_one_line_naming_the_flag(row):
    for value in values(row)[1]:
        with pytest.raises(UsageError) as caught:
            parsed(row.flag, str(value))
        message = str(caught.value)
        assert message == f"{row.flag} must be {row.must}, got {row.kind(value)}", message
        assert "\n" not in message


@pytest.mark.parametrize("row", FLAGGED, ids=lambda row: row.flag)
def test_a_recipe_takes_the_option_by_name_with_the_flags_check(row):
    ok, bad = values(row)
    good = [v for v in ok if math.isfinite(v)][-1]
    mix = parse_mix(orjson.dumps([{row.name: good}]).decode(), "--sampling-mix")
    assert mix.recipes[0].params == {row.name: good}
    wrong = next(v for v in bad if math.isfinite(v))
    with pytest.raises(UsageError, match=re.escape(f"{row.name} must be {row.must} (as {row.flag}), got")):
        parse_mix(orjson.dumps([{row.name: wrong}]).decode(), "--sampling-mix")
    kind = "a number" if row.kind is float else "a whole number"
    with pytest.raises(UsageError, match=re.escape(f"{row.name} must be {kind} (as {row.flag})")):
        parse_mix(orjson.dumps([{row.name: "1"}]).decode(), "--sampling-mix")


@pytest.mark.parametrize("row", [row for row in SAMPLING_KEYS if row.continuation], ids=lambda row: row.key)
def test_a_key_that_counts_output_tokens_or_fixes_the_seed_stops_a_continuation(row):
    assert continuation_blocker({row.key: row.neutral}) is None
    changed = 7 if row.neutral is None else row.neutral + 1
    assert continuation_blocker({row.key: changed}) == (
        f"{row.key} {changed}: {row.continuation}, so a continuation is not the same distribution"
    )


def test_plain_sampling_keys_leave_a_continuation_alone():
    plain = {row.key: 0.5 for row in FLAGGED} | {"min_p": 0.05, "stop": ["x"]}
    assert continuation_blocker(plain) is None


def test_the_run_refuses_in_sampling_params_the_keys_it_sets():
    for key in ("max_new_tokens", "skip_special_tokens", "stream", "n"):
        with pytest.raises(UsageError, match=f"--sampling-params: {key} is set by the run; leave it out"):
            RunConfig(extra_sampling={key: 1}).validate()
    assert RunConfig(extra_sampling={"sampling_seed": 3}).validate().sampling_params() == {"sampling_seed": 3}


def test_a_changed_flag_is_named_by_its_flag_in_a_settings_refusal():
    for row in FLAGGED:
        said = differences({"sampling_params": {row.key: 1}}, {"sampling_params": {row.key: 2}})
        assert said == [f"{row.flag} 1 -> 2"]


def test_the_gateways_forwarded_keys_are_the_tables():
    assert frozenset(row.key for row in SAMPLING_KEYS if row.smg) == smg.FORWARDED_KEYS
    dropped = dict(gateway.dropped_keys(["temperature", "logit_bias", "stream_interval"]))[smg.PROFILE]
    assert dropped == ["logit_bias", "stream_interval"]


def test_the_docs_table_is_the_generated_one():
    text = (REPO / "docs" / "command-line.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- sampling keys:[^\n]*-->\n(.*?)\n<!-- end of sampling keys -->", text, re.S)
    assert found, "docs/command-line.md lost its sampling-keys markers"
    assert found.group(1) == docs_table(), "regenerate it: python -m synthgen.data.sampling_keys"


def test_every_config_field_names_a_flag_the_command_line_has():
    options = set(build_parser()._option_string_actions)
    fields = [name for name in RunConfig.__dataclass_fields__ if flag_of(name) is not None]
    assert len(fields) > 40
    assert [name for name in fields if flag_of(name) not in options] == []
    assert flag_of("backoff_base") == "--retry-backoff" and flag_of("connect_timeout") is None
