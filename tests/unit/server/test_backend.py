"""One server's client and the set of several servers are both a Backend; the run never asks which."""

from __future__ import annotations

import inspect
from pathlib import Path

import httpx

import synthgen.run
from synthgen.run.serverset import ServerSet
from synthgen.server.backend import Backend
from synthgen.server.client import SGLangClient

MEMBERS = [name for name in dir(Backend) if not name.startswith("_")] + list(Backend.__annotations__)


def client(url: str) -> SGLangClient:
    return SGLangClient(url, None, 4, 5.0, transport=httpx.MockTransport(lambda request: httpx.Response(404)))


def test_both_backends_have_every_member_of_the_protocol():
    one, other = client("http://a"), client("http://b")
    group = ServerSet([one, other])
    for backend in (one, group):
        missing = [name for name in MEMBERS if not hasattr(backend, name)]
        assert missing == [], type(backend).__name__
    assert {"generate", "abort", "loads", "model_info", "healthy"} <= set(MEMBERS)


def test_the_set_of_servers_is_no_subclass_of_one_server():
    assert not issubclass(ServerSet, SGLangClient)
    assert "SGLangClient.__init__" not in inspect.getsource(ServerSet)


def test_the_run_never_asks_which_backend_it_has():
    for path in Path(synthgen.run.__file__).parent.glob("*.py"):
        text = path.read_text()
        for name in ("ServerSet", "SGLangClient"):
            assert f", {name})" not in text, f"{path.name}: isinstance(..., {name})"
