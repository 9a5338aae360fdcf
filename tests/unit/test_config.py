"""RunConfig: frozen, validated into a new config, with one source of defaults that the command line uses."""

import dataclasses
from pathlib import Path

import pytest

from synthgen.cli.run import build_parser, config_from_args
from synthgen.config import RunConfig, default_of
from synthgen.errors import UsageError


def test_the_command_line_without_flags_makes_the_default_config(monkeypatch):
    monkeypatch.delenv("SGLANG_API_KEY", raising=False)
    from_flags = config_from_args(build_parser().parse_args([]))
    assert from_flags == RunConfig().validate()
    assert from_flags.partition == default_of("partition") == "all"


def test_default_of_reads_plain_and_factory_defaults_and_refuses_unknown_names():
    assert default_of("max_tokens") == 32768
    assert default_of("budget") == {}
    assert default_of("prompts_dir") == Path("prompts")
    with pytest.raises(KeyError):
        default_of("no_such_field")


def test_a_config_cannot_change_and_validate_returns_a_new_one(tmp_path):
    cfg = RunConfig(output_dir=tmp_path, launch_server="demo", api_key="  key\n", server_wait=5.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.max_tokens = 1  # type: ignore[misc]
    checked = cfg.validate()
    assert checked is not cfg
    assert (cfg.api_key, cfg.server_log, cfg.server_wait) == ("  key\n", None, 5.0)
    assert checked.api_key == "key"
    assert checked.server_log == tmp_path / "server.log"
    assert checked.server_wait > cfg.server_start_timeout


def test_validate_still_refuses_with_a_one_line_fix():
    with pytest.raises(UsageError, match="--max-tokens must be a positive number"):
        RunConfig(max_tokens=0).validate()
