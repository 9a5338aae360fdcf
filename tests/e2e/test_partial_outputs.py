"""Partial outputs through the command line: a stop ends the requests in flight through
/abort_request and keeps their output so far; the next run continues each one, and its rows are
the same tokens an uninterrupted run writes. Waits are on the simulator's decode steps, not on time."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import orjson
import pytest
from simharness import sigterm_in_flight, wait_until
from tokenizers import Tokenizer
from workspace import assert_model_answer

from synthgen.data.partials import PartialOutputs, merged

# Scheduler mode: one decode step gives every running request one token.
SIM = ("--max-total-tokens", "60000", "--step-time", "0.002", "--output-len-dist", "fixed:120")
COMMON = ("--max-tokens", "400", "--concurrency", "4", "--status-interval", "0.5")


def stop_with_tokens_in_flight(ws, sim, *args: str) -> str:
    """Start a run, let its first four requests make a few tokens each, SIGTERM it; its output."""
    sigterm_in_flight(sim, ws.start("--server-url", sim.url, *COMMON, *args))
    return (ws.root / "nohup.out").read_text()


def test_a_stop_keeps_the_output_in_flight_and_the_rerun_continues_it_token_exact(ws, make_sim):
    sim = make_sim("chatml", *SIM)
    ids = ws.dataset("short", "d", 6)
    out = stop_with_tokens_in_flight(ws, sim, "--drain-timeout", "600")
    assert "SIGTERM: no new requests; ending the 4 in flight through /abort_request" in out
    kept = [orjson.loads(line) for line in ws.raw_lines("d", "partial_outputs.jsonl")]
    assert len(kept) == 4 and all(0 < len(p["output_ids"]) < 120 for p in kept), kept
    assert "kept as partial outputs to continue" in out
    generated = sim.stats()["tokens_generated"]

    rerun = ws.run("--server-url", sim.url, *COMMON)
    assert rerun.returncode == 0, rerun.stderr
    assert "continuing 4 partial outputs" in rerun.stderr
    rows = {r["id"]: r for r in ws.assert_exactly_once("d", ids)}
    assert not ws.raw_lines("d", "partial_outputs.jsonl")
    assert sim.stats()["tokens_generated"] - generated + sum(len(p["output_ids"]) for p in kept) == 6 * 120

    for partial in kept:
        row = rows[partial["id"]]
        assert row["segments"] == [len(partial["output_ids"]), 120 - len(partial["output_ids"])]
        # The same tokens and text as one uninterrupted request for the row's prompt.
        params = {"max_new_tokens": 400, "skip_special_tokens": False}
        whole = sim.client.post("/generate", json={"input_ids": row["input_ids"], "sampling_params": params}).json()
        assert (row["output_ids"], row["output_text"]) == (whole["output_ids"], whole["text"])
        assert row["reasoning_content"] == whole["text"].split("</think>")[0].removeprefix("<think>")


def test_with_a_penalty_a_stop_drains_and_restarts_saying_why_once(ws, make_sim):
    sim = make_sim("chatml", *SIM)
    ids = ws.dataset("short", "d", 6)
    penalty = ("--sampling-params", '{"frequency_penalty": 0.5}')
    out = stop_with_tokens_in_flight(ws, sim, "--drain-timeout", "0", *penalty)
    assert out.count("restart instead of continuing (frequency_penalty 0.5: it counts output tokens") == 1
    assert "stopping now (drain timeout): ending 4 requests in flight" in out
    assert not ws.raw_lines("d", "partial_outputs.jsonl")
    assert "lost (" in out and " stop)" in out
    assert all(r["segments"] is None for r in ws.results("d")) and len(ws.results("d")) < len(ids)


def test_a_server_sent_abort_is_continued_not_restarted(ws, make_sim):
    sim = make_sim("chatml", "--rate-abort", "0.3", "--fault-seed", "3")
    ids = ws.dataset("short", "d", 12)
    result = ws.run("--server-url", sim.url, "--max-tokens", "400", "--concurrency", "4")
    assert result.returncode == 0, result.stderr
    rows = ws.assert_exactly_once("d", ids)
    continued = [r for r in rows if r["segments"]]
    assert continued, "the fault aborted no request"
    for row in rows:
        assert row["reasoning_content"].startswith("Reasoning about: ") and row["content"].startswith("Answer: ")
        assert len(row["output_ids"]) == row["completion_tokens"] == sum(row["segments"] or [row["completion_tokens"]])


def test_continue_cut_gives_a_cut_reasoning_more_tokens_as_the_same_generation(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 3)
    result = ws.run("--server-url", sim.url, "--max-tokens", "6", "--continue-cut", "200")
    assert result.returncode == 0, result.stderr
    assert "3 cut answers continued by --continue-cut" in result.stderr
    for row in ws.assert_exactly_once("d", ids):
        assert_model_answer(row)  # the reasoning closed and the answer came, parsed on the whole output
        assert row["extended_by"] == 200 and row["segments"][0] == 6 and sum(row["segments"]) == len(row["output_ids"])
        assert row["sampling_params"]["max_new_tokens"] == 200  # what the last request sent


def test_a_kill_9_loses_at_most_the_tokens_since_the_last_checkpoint(ws, make_sim):
    sim = make_sim("chatml", *SIM)
    ids = ws.dataset("short", "d", 4)
    proc = ws.start("--server-url", sim.url, *COMMON, "--checkpoint-tokens", "16")
    try:
        wait_until(lambda: sim.stats()["running"] >= 4, timeout=120, what="4 running")
        steps = sim.stats()["decode_steps"]
        wait_until(lambda: sim.stats()["decode_steps"] >= steps + 40, timeout=120, what="40 more steps")
        proc.kill()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = [orjson.loads(line) for line in ws.raw_lines("d", "partial_outputs.jsonl")]
    assert {line["id"] for line in lines} == set(ids)
    assert all(len(line["output_ids"]) >= 16 for line in lines), lines  # chunks of 1, 17, 33, ... ids
    rerun = ws.run("--server-url", sim.url, *COMMON, "--checkpoint-tokens", "16")
    assert rerun.returncode == 0, rerun.stderr
    for row in ws.assert_exactly_once("d", ids):
        assert len(row["segments"]) == 2 and row["segments"][0] >= 32 and len(row["output_ids"]) == 120


def test_the_loop_guard_ends_a_looping_answer_and_keeps_it_as_a_repetition_row(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", [{"id": "ok", "prompt": "a question"}, {"id": "loop", "prompt": "go [sim:loop]"}])
    result = ws.run("--server-url", sim.url, "--max-tokens", "6000")
    assert result.returncode == 0, result.stderr
    rows = {r["id"]: r for r in ws.rows("d")}
    assert_model_answer(rows["ok"])
    looped = rows["loop"]
    assert looped["finish_reason"] == "repetition" and looped["attempts"] == 1
    detail = looped["finish_detail"]
    assert detail["type"] == "repetition" and detail["count"] >= 4 and len(detail["pattern"]) == detail["pattern_size"]
    assert 2048 <= looped["completion_tokens"] < 3000  # ended well before --max-tokens (the text span: 2,048)
    assert looped["output_ids"][detail["start"] :][: detail["pattern_size"]] == detail["pattern"]
    assert f"{looped['completion_tokens']:,} loops" in result.stderr


def test_redo_repetition_generates_the_guards_rows_again_and_each_id_keeps_one_row(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", [{"id": "ok", "prompt": "a question"}, {"id": "loop", "prompt": "go [sim:loop]"}])
    assert ws.run("--server-url", sim.url, "--max-tokens", "6000").returncode == 0
    cut = {r["id"]: r for r in ws.rows("d")}["loop"]
    assert cut["finish_reason"] == "repetition"
    # A plain rerun leaves the row alone (a greedy loop loops again).
    again = ws.run("--server-url", sim.url, "--max-tokens", "6000")
    assert again.returncode == 0 and {r["id"]: r for r in ws.rows("d")}["loop"] == cut
    # --redo repetition with the guard off: the row moves aside and is generated whole, to the end.
    redo = ws.run("--server-url", sim.url, "--max-tokens", "6000", "--redo", "repetition", "--loop-guard", "off")
    assert redo.returncode == 0, redo.stderr
    assert "1 row the loop guard ended to generate again (old rows to looped_rows.jsonl)" in redo.stderr
    rows = {r["id"]: r for r in ws.assert_exactly_once("d", ["ok", "loop"])}
    assert rows["loop"]["finish_reason"] == "length" and rows["loop"]["completion_tokens"] > len(cut["output_ids"])
    assert rows["loop"]["output_ids"][: len(cut["output_ids"])] == cut["output_ids"]
    assert ws.rows("d", "looped_rows.jsonl") == [cut]
    # Nothing is left to redo; the export reads the one row per id.
    last = ws.run("--server-url", sim.url, "--max-tokens", "6000", "--redo", "repetition")
    assert last.returncode == 0 and "to generate again" not in last.stderr
    assert ws.assert_exactly_once("d", ["ok", "loop"])[0]["id"] in {"ok", "loop"}


def test_where_abort_request_is_refused_a_stop_ends_each_stream_after_its_next_chunk(ws, make_sim):
    # smg 1.13 answers /abort_request 404; the simulator does too with --no-abort-request.
    sim = make_sim("chatml", *SIM[:-1], "fixed:600", "--no-abort-request")
    ids = ws.dataset("short", "d", 6)
    args = ("--max-tokens", "1000", "--concurrency", "4", "--status-interval", "0.5", "--checkpoint-tokens", "16")
    proc = ws.start("--server-url", sim.url, *args, "--drain-timeout", "600")
    try:
        wait_until(lambda: len(checkpointed(ws)) == 4, timeout=120, what="4 requests checkpointed")
        sim.pause()  # no chunk comes until the stop is under way
        proc.send_signal(signal.SIGTERM)
        log = ws.root / "nohup.out"
        wait_until(lambda: "note: the server refused /abort_request" in log.read_text(), timeout=120, what="the note")
        sim.resume()
        assert proc.wait(timeout=120) == 143  # not the 600 s drain: each stream ended at its next chunk
    finally:
        if proc.poll() is None:
            proc.kill()
    # The server saw its clients go and ended the requests: the slots are free.
    wait_until(lambda: sim.stats()["running"] == 0, timeout=60, what="the closed requests ended")
    kept = checkpointed(ws)
    # Each ended right after a chunk (1, 17, 33, ... ids), its last id to be sampled again.
    assert len(kept) == 4 and all(len(p) % 16 == 0 and 16 <= len(p) < 600 for p in kept.values()), kept
    rerun = ws.run("--server-url", sim.url, *args)
    assert rerun.returncode == 0, rerun.stderr
    rows = {r["id"]: r for r in ws.assert_exactly_once("d", ids)}
    for key, partial in kept.items():
        assert rows[key]["segments"] == [len(partial), 600 - len(partial)]
        params = {"max_new_tokens": 1000, "skip_special_tokens": False}
        whole = sim.client.post("/generate", json={"input_ids": rows[key]["input_ids"], "sampling_params": params})
        assert rows[key]["output_ids"] == whole.json()["output_ids"]


def checkpointed(ws) -> dict[str, list[int]]:
    """The partial outputs on disk by id, as a run reads them (a checkpoint line extends, a stop's replaces)."""
    return {key: p.output_ids for key, p in merged(PartialOutputs(ws.outputs / "d").load()).items()}


# Answers in CJK and emoji: a byte-level tokenizer spells such characters in several ids, so a partial
# output can end inside one. Varied ASCII prefixes move the cut across the characters' bytes.
MULTIBYTE = "我们先仔细分析这个问题 🙂 答案是四"


@pytest.mark.parametrize(
    "how",
    [("--max-tokens", "14", "--continue-cut", "400"), ("--max-tokens", "400", "--rate-abort-run")],
    ids=["continue-cut", "server-abort"],
)
def test_a_continued_answer_that_split_a_character_has_the_uninterrupted_text(ws, make_sim, tokenizers, how):
    abort = how[-1] == "--rate-abort-run"
    sim = make_sim("chatml", *(("--rate-abort", "0.5", "--fault-seed", "3") if abort else ()))
    rows_in = [{"id": f"m{i}", "prompt": "x" * i + MULTIBYTE} for i in range(8)]
    ids = ws.dataset("short", "d", rows_in)
    result = ws.run("--server-url", sim.url, *(how[:2] if abort else how), "--concurrency", "4")
    assert result.returncode == 0, result.stderr
    decode = Tokenizer.from_file(str(tokenizers["chatml"] / "tokenizer.json")).decode
    sim.configure(rate_abort=0.0)  # the uninterrupted requests below run to their end
    split_inside = 0
    for row in ws.assert_exactly_once("d", ids):
        params = {"max_new_tokens": 400, "skip_special_tokens": False}
        whole = sim.client.post("/generate", json={"input_ids": row["input_ids"], "sampling_params": params}).json()
        assert row["output_ids"] == whole["output_ids"]
        assert row["output_text"] == whole["text"] and "\ufffd" not in row["output_text"]
        assert MULTIBYTE in row["reasoning_content"] and MULTIBYTE in row["content"]
        if row["segments"]:
            split_inside += "\ufffd" in decode(row["output_ids"][: row["segments"][0]], skip_special_tokens=False)
    assert split_inside > 0  # some partial did end inside a character: the case is exercised


def test_a_run_killed_where_a_checkpoint_split_a_character_is_continued_with_the_uninterrupted_text(
    ws, make_sim, tokenizers
):
    sim = make_sim("chatml", "--max-total-tokens", "60000", "--step-time", "0.01")
    rows_in = [{"id": f"m{i}", "prompt": "x" * i + MULTIBYTE * 4} for i in range(8)]
    ids = ws.dataset("short", "d", rows_in)
    args = ("--max-tokens", "1000", "--concurrency", "8", "--checkpoint-tokens", "16")

    def all_checkpointed_twice() -> bool:  # checkpoints at 1, 17, 33, ... ids: inside the CJK text
        kept = checkpointed(ws)
        return len(kept) == 8 and min(len(p) for p in kept.values()) >= 33

    proc = ws.start("--server-url", sim.url, *args)
    try:
        wait_until(all_checkpointed_twice, timeout=120, what="8 requests checkpointed twice")
        sim.pause()  # no request ends before the kill
        proc.kill()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    sim.resume()
    kept = checkpointed(ws)
    decode = Tokenizer.from_file(str(tokenizers["chatml"] / "tokenizer.json")).decode
    assert any("\ufffd" in decode(p, skip_special_tokens=False) for p in kept.values())  # the case is exercised
    rerun = ws.run("--server-url", sim.url, *args)
    assert rerun.returncode == 0, rerun.stderr
    rows = {r["id"]: r for r in ws.assert_exactly_once("d", ids)}
    for key, partial in kept.items():
        row = rows[key]
        assert row["segments"][0] == len(partial) and row["output_ids"][: len(partial)] == partial
        params = {"max_new_tokens": 1000, "skip_special_tokens": False}
        whole = sim.client.post("/generate", json={"input_ids": row["input_ids"], "sampling_params": params}).json()
        assert (row["output_ids"], row["output_text"]) == (whole["output_ids"], whole["text"])
        assert "\ufffd" not in row["output_text"] and MULTIBYTE * 4 in row["reasoning_content"]


def test_a_stop_during_a_continue_cut_extension_is_continued_by_the_rerun_not_restarted(ws, make_sim):
    sim = make_sim("chatml", "--max-total-tokens", "60000", "--step-time", "0.01", "--output-len-dist", "fixed:200")
    ids = ws.dataset("short", "d", 4)
    args = ("--max-tokens", "6", "--continue-cut", "400", "--concurrency", "4", "--status-interval", "0.5")
    proc = ws.start("--server-url", sim.url, *args, "--drain-timeout", "600")
    # Each cut answer's line is written before its extension is sent; then all four extensions run.
    sigterm_in_flight(sim, proc, first=lambda: len(checkpointed(ws)) == 4)
    kept = checkpointed(ws)
    assert len(kept) == 4 and all(6 < len(p) < 200 for p in kept.values()), kept
    generated = sim.stats()["tokens_generated"]

    rerun = ws.run("--server-url", sim.url, *args)
    assert rerun.returncode == 0, rerun.stderr
    assert "discarded" not in rerun.stderr and "continuing 4 partial outputs" in rerun.stderr
    # Only what the extensions had left: no answer generated again from its first token.
    assert sim.stats()["tokens_generated"] - generated == 4 * 200 - sum(len(p) for p in kept.values())
    rows = {r["id"]: r for r in ws.assert_exactly_once("d", ids)}
    for key, partial in kept.items():
        row = rows[key]
        assert row["extended_by"] == 400 and row["segments"] == [6, len(partial) - 6, 200 - len(partial)]
        params = {"max_new_tokens": 406, "skip_special_tokens": False}
        whole = sim.client.post("/generate", json={"input_ids": row["input_ids"], "sampling_params": params}).json()
        assert (row["output_ids"], row["output_text"]) == (whole["output_ids"], whole["text"])
    assert not ws.raw_lines("d", "partial_outputs.jsonl")


def logged_answers(log: Path) -> list[dict]:
    """The answers the simulator's --request-log holds, in order (prompt_tokens and cached_tokens as sent)."""
    return [a for line in log.read_bytes().splitlines() for a in orjson.loads(line).get("answers") or []]


def prefix_share(stderr: str) -> int:
    found = re.search(r"^prompt tokens served from the server's prefix cache: (\d+)%", stderr, re.M)
    assert found is not None, stderr
    return int(found[1])


def test_the_prefix_cache_share_counts_each_request_once_as_the_server_reported_it_when_answers_are_continued(
    ws, make_sim, tmp_path
):
    # A continued request sends the prompt and the output so far, and the server's cache serves both: the share
    # is of the prompt tokens the requests sent, never of the prompt alone (that made 139% here).
    log = tmp_path / "requests.jsonl"
    sim = make_sim("chatml", *SIM[:-1], "fixed:600", "--prefix-cache", "--request-log", str(log))
    ws.dataset("short", "d", 4)
    cut = ws.run("--server-url", sim.url, "--max-tokens", "6", "--continue-cut", "400", "--concurrency", "4")
    assert cut.returncode == 0, cut.stderr
    answers = logged_answers(log)
    assert len(answers) == 8 and all(a["cached_tokens"] > 0 for a in answers[4:])  # the extensions found theirs
    share = sum(a["cached_tokens"] for a in answers) / sum(a["prompt_tokens"] for a in answers)
    assert prefix_share(cut.stderr) == round(100 * share) <= 100

    # An earlier run's partial outputs, continued by the rerun (1120% was seen here).
    ws.dataset("short", "e", 4)
    proc = ws.start("--server-url", sim.url, *COMMON, "--checkpoint-tokens", "16", "--dataset", "e")
    try:
        kept = lambda: merged(PartialOutputs(ws.outputs / "e").load())  # noqa: E731
        wait_until(lambda: len(kept()) == 4, timeout=120, what="4 requests checkpointed")
        sim.pause()  # none ends before the kill
        proc.kill()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    sim.resume()
    wait_until(lambda: sim.stats()["in_flight"] == 0, timeout=120, what="the killed run's requests ended")
    before = len(logged_answers(log))
    rerun = ws.run("--server-url", sim.url, *COMMON, "--checkpoint-tokens", "16", "--dataset", "e")
    assert rerun.returncode == 0 and "continuing 4 partial outputs" in rerun.stderr, rerun.stderr
    answers = logged_answers(log)[before:]
    share = sum(a["cached_tokens"] for a in answers) / sum(a["prompt_tokens"] for a in answers)
    assert prefix_share(rerun.stderr) == round(100 * share) <= 100
