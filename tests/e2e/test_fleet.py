"""A fleet through the CLI: behind a gateway (the simulator answering as smg 1.13 does, docs/sglang_api.md
§11) every row names its worker, sheds are waited out, a worker answering garbage is caught."""

from __future__ import annotations

from tiny_tokenizers import chat_ids

COMMON = ("--max-tokens", "32", "--status-interval", "0.5")


def test_sheds_are_waited_out_without_using_attempts_and_rows_name_their_workers(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 12)
    # 30 sheds, 2 attempts each: if sheds used up attempts, most prompts would end as http_429.
    sim.configure(shed_first_n=30, shed_retry_after=0.01, worker_ids="http://w1,http://w2")
    result = ws.run("--server-url", sim.url, "--concurrency", "4", "--max-attempts", "2", *COMMON)
    assert result.returncode == 0, result.stderr
    assert ws.errors("d") == []
    rows = ws.results("d")
    assert len(rows) == 12 and all(row["attempts"] == 1 for row in rows)
    assert {row["worker"] for row in rows} == {"http://w1", "http://w2"}
    assert "the gateway is shedding load" in result.stderr
    assert "the gateway shed 30 requests" in result.stderr
    assert "by worker:" in result.stderr and "  http://w1: answers" in result.stderr
    page = (ws.root / "outputs" / "report.html").read_text()
    assert 'class="workers"' in page and "http://w2" in page


def test_a_worker_answering_garbage_is_retried_named_and_stops_the_run(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 40)
    # w2 turns sick after its first 3 answers; w1 stays good. Concurrency 1: the order is fixed.
    sim.configure(worker_ids="http://w1,http://w2", garbage_after=3)
    result = ws.run("--server-url", sim.url, "--concurrency", "1", "--max-attempts", "5", *COMMON)
    assert result.returncode == 3, result.stderr
    assert "worker http://w2 answered garbage" in result.stderr
    assert "it is sick" in result.stderr.strip().splitlines()[-1] or "it is sick" in result.stderr
    rows = ws.results("d")
    assert rows and all(set(row["output_text"]) != {"!"} for row in rows)
    assert {row["worker"] for row in rows} <= {"http://w1", "http://w2"}


def test_a_sick_workers_short_garbage_is_not_written_and_errors_jsonl_names_it(ws, make_sim, tokenizers):
    # The room a prompt leaves under the context is what a sick worker fills with "!": the first prompt is
    # short (32 tokens of room), the rest so long that 8 are left, under garbage_reason's 16 for a stranger.
    short, long = "q", " ".join(f"word{i}" for i in range(60))
    room = len(chat_ids(tokenizers["chatml"], long)) + 1 + 8
    assert room - len(chat_ids(tokenizers["chatml"], short)) - 1 >= 32
    sim = make_sim("chatml", "--context-length", str(room))
    ws.dataset("short", "d", [{"id": "s0", "prompt": short}] + [{"id": f"l{i}", "prompt": long} for i in range(20)])
    # Arrivals alternate w2, w1, ...: w2 answers garbage from its first answer (32 "!" on s0, then 8).
    sim.configure(worker_ids="http://w1,http://w2", garbage_after=0)
    result = ws.run("--server-url", sim.url, "--concurrency", "1", "--max-attempts", "5", *COMMON)
    assert result.returncode == 3, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert "worker http://w2 answered garbage 5 times" in last and "it is sick" in last, last
    rows = ws.results("d")
    assert rows and {row["worker"] for row in rows} == {"http://w1"}
    assert all("!!!!" not in row["output_text"] for row in rows)
    errors = ws.errors("d")
    assert [(e["error_type"], e["worker"]) for e in errors] == [("garbage", "http://w2")], errors
    assert "it is sick" in errors[0]["error"]
