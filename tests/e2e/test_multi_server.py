"""Several servers through the CLI: ``--server-url`` given twice, two simulators and no gateway. Requests
spread over both, a conversation stays on one, a server killed mid-run is taken out and put back, a server
answering garbage is named, servers serving different models are refused at start."""

from __future__ import annotations

from simharness import wait_until
from workspace import chat

from synthgen.run.servers import weight
from synthgen.server.gateway import routing_key

COMMON = ("--max-tokens", "32", "--status-interval", "0.2")


def servers(*sims) -> list[str]:
    return [arg for sim in sims for arg in ("--server-url", sim.url)]


def home(conversation: str, *urls: str, dataset: str = "mt") -> str:
    """The server a conversation's turns go to while every server is in (rendezvous hashing)."""
    key = routing_key(dataset, conversation)
    return max(urls, key=lambda url: weight(key, url))


def test_requests_spread_over_both_servers_and_each_conversation_stays_on_one(ws, make_sim):
    a, b = make_sim("chatml"), make_sim("chatml")
    # 16 conversations of 2 turns. A conversation's server is its rendezvous hash with the URLs (whose ports
    # differ from run to run): when all 16 would land on one, the last is swapped for one that lands on
    # the other, so "both servers get some" holds for any ports.
    ids = [f"c{i}" for i in range(16)]
    if len({home(rid, a.url, b.url) for rid in ids}) == 1:
        ids[-1] = next(f"c{i}" for i in range(16, 10_000) if home(f"c{i}", a.url, b.url) != home(ids[0], a.url, b.url))
    ws.dataset("short", "mt", [chat(rid, f"q{rid}", "old", f"r{rid}") for rid in ids])
    result = ws.run(*servers(a, b), "--regenerate", "all", "--concurrency", "4", *COMMON)
    assert result.returncode == 0, result.stderr
    rows = ws.assert_exactly_once("mt", ids)
    assert {row["id"]: row["worker"] for row in rows} == {rid: home(rid, a.url, b.url) for rid in ids}
    for row in rows:
        assert {turn["worker"] for turn in row["turns"]} == {row["worker"]}, row["id"]
    assert {row["worker"] for row in rows} == {a.url, b.url}
    # Every turn went where its conversation is: the servers' own counts add up to the turns.
    assert a.stats()["generate_requests"] + b.stats()["generate_requests"] == 32
    assert f"synthgen: {a.url}, {b.url}, partition all" in result.stderr
    assert "by server:" in result.stderr and f"  {b.url}: " in result.stderr
    assert "servers 2/2 in" in result.stderr
    # The URLs are where rows are made, not what makes them: a rerun on one of the servers goes on.
    more = [*ids, "d16", "d17"]
    ws.dataset("short", "mt", [chat(rid, f"q{rid}", "old", f"r{rid}") for rid in more])
    again = ws.run("--server-url", b.url, "--regenerate", "all", *COMMON)
    assert again.returncode == 0, again.stderr
    assert len(ws.assert_exactly_once("mt", more)) == 18


def test_a_server_killed_mid_run_is_taken_out_and_back_in_and_every_row_is_written_once(ws, make_sim):
    a, b = make_sim("chatml"), make_sim("chatml", "--exit-after", "5")
    ids = ws.dataset("short", "d", 30)
    # a holds what it gets until b has died and come back: b takes requests while a is busier, so its 5th
    # arrives (it dies on it) before a holds all 4; the order of events is fixed, no timing decides it.
    a.pause()
    log = ws.root / "run.log"
    proc = ws.start(*servers(a, b), "--concurrency", "4", "--max-attempts", "1", *COMMON, log=log)
    try:
        assert b.wait_exit(60) == 1
        b.restart("--fault-seed", "1")  # the same server again, without --exit-after
        wait_until(lambda: "is back after" in log.read_text(), timeout=60, what="b back in")
        a.resume()
        assert proc.wait(120) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert f"server {b.url} is out" in text and f"server {b.url} is back after" in text
    rows = ws.assert_exactly_once("d", ids)
    assert ws.errors("d") == []
    assert all(row["attempts"] == 1 for row in rows)  # the move to a is no attempt (--max-attempts 1)
    assert {row["worker"] for row in rows} == {a.url, b.url}
    assert b.stats()["generate_requests"] >= 1  # the restarted b took requests again
    assert "requests in flight on it sent again elsewhere" in text


def test_a_server_answering_garbage_is_named_and_stops_the_run_with_exit_3(ws, make_sim):
    a, b = make_sim("chatml"), make_sim("chatml")
    ws.dataset("short", "d", 40)
    b.configure(garbage_after=0)
    result = ws.run(*servers(a, b), "--concurrency", "1", "--max-attempts", "5", "--retry-backoff", "0.01", *COMMON)
    assert result.returncode == 3, result.stderr
    assert f"worker {b.url} answered garbage" in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert b.url in last and "it is sick" in last, last
    rows = ws.results("d")
    assert rows and {row["worker"] for row in rows} == {a.url}


def test_servers_serving_different_models_are_refused_at_start_naming_both(ws, make_sim):
    a, b = make_sim("chatml"), make_sim("chatml", "--served-model-name", "other-model")
    ws.dataset("short", "d", 2)
    result = ws.run(*servers(a, b), *COMMON)
    assert result.returncode == 3, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "the servers differ in the model they serve" in last and a.url in last and b.url in last, last
    assert a.stats()["generate_requests"] == b.stats()["generate_requests"] == 0


def test_a_server_back_with_a_smaller_context_length_stays_out_and_every_prompt_is_answered(ws, make_sim):
    a, b = make_sim("chatml"), make_sim("chatml", "--exit-after", "5")
    ids = ws.dataset("short", "d", 40)
    a.pause()  # as above: b dies on its 5th request while a holds its share, then comes back smaller
    log = ws.root / "run.log"
    proc = ws.start(*servers(a, b), "--concurrency", "4", "--max-attempts", "1", *COMMON, log=log)
    try:
        assert b.wait_exit(60) == 1
        b.restart("--context-length", "40")
        back = (f"server {b.url} answers again", f"server {b.url} is back after")
        wait_until(lambda: any(line in log.read_text() for line in back), timeout=60, what="b probed")
        a.resume()
        assert proc.wait(120) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    refused = [line for line in text.splitlines() if f"server {b.url} answers again" in line]
    assert len(refused) == 1 and "context length" in refused[0] and "4096" in refused[0], refused
    assert "stays out" in refused[0]
    assert f"server {b.url} is back after" not in text
    ws.assert_exactly_once("d", ids)
    assert ws.errors("d") == []
    assert b.stats()["generate_requests"] == 0  # the smaller b was never sent a prompt


def test_a_server_rejecting_every_request_at_once_does_not_draw_the_prompts_to_it(ws, make_sim):
    a, b = make_sim("chatml"), make_sim("chatml")
    ws.dataset("short", "d", 40)
    b.configure(reject_all=True)  # a 400 at once: always idle, it would win every least-load choice
    result = ws.run(*servers(a, b), "--concurrency", "4", "--max-attempts", "1", *COMMON)
    assert result.returncode == 1, result.stderr
    sent_to_b = b.stats()["generate_requests"]
    # b is sent another request only while its failures in a row are fewer than a's load (at most what
    # this run has in flight, 4, and a's last reported 4): a few prompts fail, not most of them.
    assert 1 <= sent_to_b <= 9, sent_to_b
    assert len(ws.errors("d")) == sent_to_b and len(ws.results("d")) == 40 - sent_to_b
