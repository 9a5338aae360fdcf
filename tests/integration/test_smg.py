"""run_inference.py behind smg 1.13 (issue 28, point 1): in front of two simulators and of the real SGLang
server on CPU, runs complete and stay exact, rows name their worker, conversations keep to one worker
under a sticky policy, and smg's admission sheds end no prompt as failed."""

from __future__ import annotations

import pytest
from workspace import Workspace

from tests.integration import smg

pytestmark = [pytest.mark.router]


@pytest.fixture(scope="module")
def smg_bin():
    path, why = smg.ensure_smg()
    if path is None:
        pytest.skip(why)
    return path


@pytest.fixture
def gateways():
    started: list[smg.Gateway] = []

    def start(path, urls, *args):
        gateway = smg.Gateway(path, urls, *args)
        started.append(gateway)
        return gateway

    yield start
    for gateway in started:
        gateway.close()


def conversations(n: int, turns: int) -> list[dict]:
    return [
        {
            "id": f"c{c}",
            "messages": [
                m
                for k in range(turns)
                for m in ({"role": "user", "content": f"conv {c} turn {k}"}, {"role": "assistant", "content": "ok"})
            ],
        }
        for c in range(n)
    ]


def test_behind_smg_each_conversation_stays_on_one_worker_and_rows_name_it(ws: Workspace, make_sim, smg_bin, gateways):
    a, b = make_sim("chatml"), make_sim("chatml")
    gateway = gateways(smg_bin, [a.url, b.url], "--policy", "consistent_hashing")
    ws.dataset("short", "d", conversations(8, 3))
    result = ws.run("--server-url", gateway.url, "--regenerate", "all", "--max-tokens", "32", "--concurrency", "4")
    assert result.returncode == 0, result.stderr
    rows = ws.assert_exactly_once("d", [f"c{c}" for c in range(8)])
    for row in rows:
        assert row["worker"] in (a.url, b.url)
        assert {turn["worker"] for turn in row["turns"]} == {row["worker"]}, row["id"]  # one worker's cache
    assert a.stats()["generate_requests"] + b.stats()["generate_requests"] == 24
    # smg answers 404 on /v1/loads but lists its workers: the run reads their own loads (issue 28, point 7).
    assert "router workers load" in result.stderr


def test_smgs_admission_sheds_end_no_prompt_as_failed(ws: Workspace, make_sim, smg_bin, gateways):
    a, b = make_sim("chatml", "--token-delay", "0.005"), make_sim("chatml", "--token-delay", "0.005")
    gateway = gateways(smg_bin, [a.url, b.url], "--max-concurrent-requests", "2", "--queue-size", "0")
    ids = ws.dataset("short", "d", 24)
    result = ws.run("--server-url", gateway.url, "--concurrency", "8", "--max-attempts", "1", "--max-tokens", "32")
    assert result.returncode == 0, result.stderr
    rows = ws.assert_exactly_once("d", ids)
    assert ws.errors("d") == [] and all(row["attempts"] == 1 for row in rows)
    assert {row["worker"] for row in rows} <= {a.url, b.url}


@pytest.mark.real_sglang
def test_behind_smg_the_real_server_gives_the_same_exact_rows_as_asked_directly(
    ws: Workspace, real_server, smg_bin, gateways
):
    gateway = gateways(smg_bin, [real_server.url])
    ids = ws.dataset("short", "d", 4)
    sent = ("--temperature", "0", "--top-k", "1", "--max-tokens", "16")
    result = ws.run("--server-url", gateway.url, *sent)
    assert result.returncode == 0, result.stderr
    for row in ws.assert_exactly_once("d", ids):
        assert row["worker"] == real_server.url
        body = {"input_ids": row["input_ids"], "sampling_params": row["sampling_params"]}
        direct = real_server.post("/generate", body)
        assert direct.status_code == 200, direct.text
        assert row["output_ids"] == direct.json()["output_ids"]
