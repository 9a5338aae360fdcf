"""Shared fixtures: tokenizers built at test time, simulator processes, scratch workspaces; and the
tier marker (``unit``, ``e2e``, ``integration``) of every test, from the folder it lives in."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from model_tokenizers import build_model_tokenizer
from simharness import start_sim
from tiny_tokenizers import build_all
from workspace import Workspace

# A suite started in the background (`bash .ci/run &`) inherits SIGINT ignored, and the CLI keeps a signal it
# inherited ignored (nohup's rule): the processes the tests start would never see their SIGINT. A handler here
# is not inherited across exec, so they start with the default, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

TIERS = ("unit", "e2e", "integration")
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        tier = Path(item.path).resolve().relative_to(HERE).parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


def pytest_xdist_make_scheduler(config, log):
    """Under xdist (pyproject's `-n 2`): every test is its own unit of work but the integration tier, which
    one worker runs whole, so that one real SGLang server, router and smg serve it (each worker would start
    its own). xdist's `--dist loadgroup` did not hold here (pytest 9: both workers started real servers)."""
    from xdist.scheduler import LoadScopeScheduling

    class TierScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "integration" if nodeid.startswith("tests/integration/") else nodeid

    return TierScheduling(config, log)


@pytest.fixture(scope="session")
def tokenizers(tmp_path_factory) -> dict:
    return build_all(tmp_path_factory.mktemp("tokenizers"))


@pytest.fixture(scope="session")
def qwen3(tmp_path_factory) -> Path:
    """Qwen3's real chat template on a tiny tokenizer with its special tokens (model_tokenizers.py)."""
    return build_model_tokenizer(tmp_path_factory.getbasetemp() / "model-tokenizers" / "qwen3", "qwen3")


@pytest.fixture
def make_sim(tokenizers):
    """make_sim(style="chatml", *sim_args) starts a simulator; all are stopped after the test."""
    sims = []

    def make(style: str = "chatml", *args: str):
        sim = start_sim(tokenizers[style], *args)
        sims.append(sim)
        return sim

    yield make
    for sim in sims:
        sim.close()


@pytest.fixture
def ws(tmp_path) -> Workspace:
    return Workspace(tmp_path)
