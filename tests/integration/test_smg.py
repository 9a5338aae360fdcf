"""run_inference.py behind smg 1.13: in front of two simulators and of the real SGLang
server on CPU, runs complete and stay exact, also with a worker crashing and restarted mid-run, rows name
their worker, conversations keep to one worker under a sticky policy, and smg's admission sheds end no
prompt as failed."""

from __future__ import annotations

import httpx
import pytest
from simharness import wait_until
from workspace import Workspace, assert_model_answer

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
    # smg answers 404 on /v1/loads but lists its workers: the run reads their own loads.
    assert "router workers load" in result.stderr


def test_behind_smg_a_worker_crashing_and_restarted_mid_run_leaves_every_row_exact_and_none_failed(
    ws: Workspace, make_sim, smg_bin, gateways
):
    # Each step is an event, not a time: a holds every request it gets (paused) while b answers; b exits,
    # unanswered, as its 6th /generate arrives (a has at most 5 of the 8 in flight then, so that request
    # comes), its requests die with it and smg moves them to a; b comes back on its port and is back in
    # smg's rotation before a lets go, so b serves again in the same run.
    a, b = make_sim("chatml"), make_sim("chatml", "--exit-after", "6")
    a.pause()
    # No circuit breaker or load-based exclusion: whether b is in the rotation is smg's health check alone.
    options = ("--disable-circuit-breaker", "--disable-worker-overload-protection", "--health-check-interval-secs", "1")
    gateway = gateways(smg_bin, [a.url, b.url], "--policy", "round_robin", *options)
    ids = ws.dataset("short", "d", 30)
    proc = ws.start("--server-url", gateway.url, "--max-tokens", "64", "--concurrency", "8", log=ws.root / "run.out")
    try:
        assert b.wait_exit(60) == 1, b.log_text()
        b.restart("--fault-seed", "0")  # new options (the default seed), without --exit-after: serves for good
        wait_until(lambda: in_rotation(gateway.url, b.url), timeout=60, interval=0.1, what="b healthy in smg again")
        a.resume()
        assert proc.wait(120) == 0, (ws.root / "run.out").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    rows = ws.assert_exactly_once("d", ids)
    for row in rows:
        assert_model_answer(row)  # exact: the fake model's answer to this very prompt
        assert row["worker"] in (a.url, b.url)
    assert ws.errors("d") == []
    assert b.stats()["completed"] > 0  # the restarted b answered prompts of this run


def in_rotation(gateway_url: str, worker_url: str) -> bool:
    workers = httpx.get(gateway_url + "/workers", timeout=10.0, trust_env=False).json()["workers"]
    return any(w["url"] == worker_url and w["is_healthy"] for w in workers)


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
