"""score_teacher.py end to end against the simulator: a run, then the scoring pass over its stored rows
(single-turn, several samples, --regenerate all, --existing token files), SIGKILL mid-scoring and a rerun
(every row scored exactly once), a stored row whose ids changed (scored again, never mixed), --dry-run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pyarrow.dataset as pads
import sim_logprobs
from report_page import page_stats
from simharness import wait_until
from workspace import cli_env

ROOT = Path(__file__).resolve().parents[2]
SCORE = ROOT / "score_teacher.py"
COMMON = ("--max-tokens", "256", "--concurrency", "4", "--status-interval", "0.2")
K = 5


def score(ws, *args: str) -> subprocess.CompletedProcess:
    return ws.run(*args, script=SCORE)


def side_table(ws, dataset: str) -> list[dict]:
    return pads.dataset(ws.outputs / dataset / "teacher", format="parquet").to_table().to_pylist()


def vocab_of(tokenizers) -> int:
    return json.loads((tokenizers["chatml"] / "config.json").read_text())["vocab_size"]


def check_rows(rows: list[dict], stored: dict[str, tuple[list[int], int]], vocab: int) -> None:
    """Each stored unit exactly once, with the ids it has now and the toy model's distribution at every position."""
    counts = Counter(r["id"] for r in rows)
    assert counts == Counter(list(stored)), (counts, list(stored))
    for row in rows:
        ids, start = stored[row["id"]]
        assert row["input_ids"] == ids and row["start"] == start
        assert len(row["topk_ids"]) == len(ids) - start == len(row["token_logprob"])
        for j, (top_ids, top_lps) in enumerate(zip(row["topk_ids"], row["topk_logprobs"], strict=True)):
            position = start + j
            dist = sim_logprobs.distribution(ids, position, vocab)
            assert top_ids == sim_logprobs.candidates(ids, position, vocab)[:K]
            assert [round(v, 5) for v in top_lps] == [round(dist[t], 5) for t in top_ids]
            assert abs(row["token_logprob"][j] - sim_logprobs.logprob_of(ids, position, vocab)) < 1e-5


def stored_units(ws, dataset: str) -> dict[str, tuple[list[int], int]]:
    out = {}
    for row in ws.results(dataset):
        base = f"{dataset}/{row['id']}" + (f"@s{row['sample']}" if "sample" in row else "")
        turns = row["turns"] or [row]
        for k, turn in enumerate(turns):
            key = base if len(turns) == 1 else f"{base}#{k}"
            out[key] = (turn["input_ids"] + turn["output_ids"], len(turn["input_ids"]))
    return out


def test_every_stored_row_sample_turn_and_token_row_is_scored_once_in_every_transport(ws, make_sim, tokenizers):
    sim = make_sim("chatml")
    vocab = vocab_of(tokenizers)
    ws.dataset("short", "single", 5)
    ws.dataset(
        "multi",
        "conv",
        [
            {
                "id": "c1",
                "messages": [
                    {"role": "user", "content": "first q"},
                    {"role": "assistant", "content": "a"},
                    {"role": "user", "content": "second q"},
                ],
            }
        ],
    )
    assert ws.run("--partition", "short", "--server-url", sim.url, "--samples-per-prompt", "2", *COMMON).returncode == 0
    assert ws.run("--partition", "multi", "--server-url", sim.url, "--regenerate", "all", *COMMON).returncode == 0
    tokens = ws.root / "tokens.jsonl"
    tokens.write_text(json.dumps({"input_ids": [5, 6, 7, 8, 9], "loss_mask": [0, 0, 1, 1, 1]}) + "\n")

    for transport, dataset in (("b64", "single"), ("nested", "conv")):
        result = score(ws, "--dataset", dataset, "--server-url", sim.url, "--top-k", str(K), "--transport", transport)
        assert result.returncode == 0, result.stderr
        check_rows(side_table(ws, dataset), stored_units(ws, dataset), vocab)
    assert len(side_table(ws, "single")) == 10  # 5 prompts x 2 samples
    assert len(side_table(ws, "conv")) == 2  # two generated turns
    result = score(ws, "--existing", f"tok={tokens}", "--server-url", sim.url, "--top-k", str(K), "--transport", "flat")
    assert result.returncode == 0, result.stderr
    check_rows(side_table(ws, "tok"), {"tok/1": ([5, 6, 7, 8, 9], 2)}, vocab)

    meta = json.loads((ws.outputs / "single" / "teacher.json").read_text())
    assert meta["top_k"] == K and meta["logprob_temperature"] == 1.0 and meta["sglang_version"]
    # A rerun sends nothing: every row is scored already.
    before = sim.stats()["generate_requests"]
    result = score(ws, "--dataset", "single", "--server-url", sim.url, "--top-k", str(K))
    assert result.returncode == 0 and sim.stats()["generate_requests"] == before
    assert "10/10 rows scored (0 now" in result.stdout
    # Another K would mix two teachers' files: refused in one line.
    result = score(ws, "--dataset", "single", "--server-url", sim.url, "--top-k", "3")
    assert result.returncode == 2 and "top_k 5" in result.stderr and "Traceback" not in result.stderr


def test_sigkill_mid_scoring_then_a_rerun_scores_every_row_exactly_once(ws, make_sim, tokenizers):
    fast, stuck = make_sim("chatml"), make_sim("chatml")
    ws.dataset("short", "d", 24)
    assert ws.run("--server-url", fast.url, *COMMON).returncode == 0
    # Requests to `stuck` hang: once every slot waits on it, parts written from `fast` are on disk and
    # the rest is in flight. That is the state the kill hits, whatever the timing.
    stuck.configure(rate_slow=1.0, slow_seconds=600.0)
    args = ("--dataset", "d", "--top-k", str(K), "--part-rows", "1", "--concurrency", "3")
    proc = subprocess.Popen(
        [sys.executable, str(SCORE), *args, "--server-url", fast.url, "--server-url", stuck.url],
        cwd=ws.root,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: stuck.stats()["http_in_flight"] == 3, timeout=60, what="every slot on the stuck server")
        written = len(side_table(ws, "d"))
        assert 0 < written < 24
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    result = score(ws, *args, "--server-url", fast.url)
    assert result.returncode == 0, result.stderr
    assert f"24/24 rows scored ({24 - written} now" in result.stdout
    check_rows(side_table(ws, "d"), stored_units(ws, "d"), vocab_of(tokenizers))


def test_a_stored_row_whose_ids_changed_is_scored_again_and_only_its_new_row_stays(ws, make_sim, tokenizers):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 4)
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    assert score(ws, "--dataset", "d", "--server-url", sim.url, "--top-k", str(K)).returncode == 0
    path = ws.outputs / "d" / "raw_responses.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    rows[1]["output_ids"] = rows[1]["output_ids"][:-2] + [7, rows[1]["output_ids"][-1]]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    result = score(ws, "--dataset", "d", "--server-url", sim.url, "--top-k", str(K))
    assert result.returncode == 0, result.stderr
    assert "4/4 rows scored (1 now, 1 rescored" in result.stdout
    check_rows(side_table(ws, "d"), stored_units(ws, "d"), vocab_of(tokenizers))


def test_dry_run_prints_prefill_tokens_and_side_file_size_and_sends_nothing(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 3)
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    before = sim.stats()["generate_requests"]
    result = score(ws, "--dataset", "d", "--top-k", "20", "--dry-run")
    assert result.returncode == 0, result.stderr
    units = stored_units(ws, "d")
    positions = sum(len(ids) - start for ids, start in units.values())
    prefill = sum(len(ids) for ids, _ in units.values())
    line = next(line for line in result.stdout.splitlines() if line.startswith("d "))
    assert line.split()[1:4] == ["3", str(positions), str(prefill)]
    assert sim.stats()["generate_requests"] == before


def test_kd_exports_put_the_distribution_of_token_i_plus_1_at_position_i_and_leave_out_rows_without_one(
    ws, make_sim, tokenizers
):
    sim = make_sim("chatml")
    vocab = vocab_of(tokenizers)
    ws.dataset("short", "d", 3)
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    assert score(ws, "--dataset", "d", "--server-url", sim.url, "--top-k", str(K)).returncode == 0
    # A row whose ids changed after scoring has no teacher row for its ids: left out and counted.
    path = ws.outputs / "d" / "raw_responses.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    rows[2]["output_ids"] = [9, *rows[2]["output_ids"][1:]]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    units = stored_units(ws, "d")

    result = ws.run(
        "--dataset", "d", "--format", "axolotl-kd", "--out", "kd.parquet", script=ROOT / "export_training.py"
    )
    assert result.returncode == 0, result.stderr
    assert "2 rows with a teacher distribution" in result.stderr and "1 left out" in result.stderr
    exported = pads.dataset(ws.root / "kd.parquet", format="parquet").to_table().to_pylist()
    assert len(exported) == 2
    for row in exported:
        ids, start = units[row["id"]]
        assert row["input_ids"] == ids and row["attention_mask"] == [1] * len(ids)
        assert row["labels"] == [-100] * start + ids[start:]
        for i in range(len(ids)):
            trained_next = i + 1 < len(ids) and i + 1 >= start
            assert row["target_mask"][i] == [int(trained_next)] * K
            if trained_next:
                dist = sim_logprobs.distribution(ids, i + 1, vocab)
                top = sim_logprobs.candidates(ids, i + 1, vocab)[:K]
                assert row["target_token_ids"][i] == top
                norm = np.logaddexp.reduce([dist[t] for t in top])
                assert np.allclose(row["target_logprobs"][i], [dist[t] - norm for t in top], atol=1e-5)

    result = ws.run(
        "--dataset", "d", "--format", "topk-sparse", "--out", "sparse.parquet", script=ROOT / "export_training.py"
    )
    assert result.returncode == 0, result.stderr
    sparse = pads.dataset(ws.root / "sparse.parquet", format="parquet").to_table().to_pylist()
    assert [r["id"] for r in sparse] == [r["id"] for r in exported]
    for row in sparse:
        ids, start = units[row["id"]]
        assert row["loss_mask"] == [int(i + 1 >= start and i + 1 < len(ids)) for i in range(len(ids))]
        i = start - 1
        dist = sim_logprobs.distribution(ids, i + 1, vocab)
        assert row["top_indices"][i] == sim_logprobs.candidates(ids, i + 1, vocab)[:K]
        assert np.allclose(row["top_values"][i], [dist[t] for t in row["top_indices"][i]], atol=1e-5)


def test_compute_budget_with_teacher_topk_adds_prefill_and_side_file_size_per_dataset(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 4)
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    budget = ROOT / "compute_budget.py"
    result = ws.run("--tokens-per-dataset", "1000", "--teacher-topk", "20", "--out", "budget.json", script=budget)
    assert result.returncode == 0, result.stderr
    assert "teacher scoring (--teacher-topk 20)" in result.stdout
    plan = json.loads((ws.root / "budget.json").read_text())
    entry = plan["teacher"]["datasets"]["d"]
    rows = ws.results("d")
    avg_prompt = sum(r["prompt_tokens"] for r in rows) / len(rows)
    assert entry["positions"] > 0 and entry["prefill_tokens"] > entry["positions"]
    samples = (entry["prefill_tokens"] - entry["positions"]) / avg_prompt
    assert abs(samples - round(samples)) < 0.5
    assert entry["side_file_bytes"] == entry["positions"] * (20 * 8 + 4) + entry["prefill_tokens"] * 4
    # The plan file still drives a run.
    assert plan["teacher"]["top_k"] == 20 and "datasets" in plan


def test_sigterm_mid_scoring_writes_what_was_answered_exits_143_and_a_rerun_finishes_once(ws, make_sim, tokenizers):
    fast, stuck = make_sim("chatml"), make_sim("chatml")
    ws.dataset("short", "d", 24)
    assert ws.run("--server-url", fast.url, *COMMON).returncode == 0
    stuck.configure(rate_slow=1.0, slow_seconds=600.0)  # its requests hang: the stop must not wait for them
    args = ("--dataset", "d", "--top-k", str(K), "--part-rows", "1000", "--concurrency", "3")
    proc = subprocess.Popen(
        [sys.executable, str(SCORE), *args, "--server-url", fast.url, "--server-url", stuck.url],
        cwd=ws.root,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: stuck.stats()["http_in_flight"] == 3, timeout=60, what="every slot on the stuck server")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, err
    written = len(side_table(ws, "d"))  # one part, written at the stop: every answered row
    assert 0 < written < 24 and f"{written}/24 rows scored" in out
    result = score(ws, *args, "--server-url", fast.url)
    assert result.returncode == 0, result.stderr
    assert f"24/24 rows scored ({24 - written} now" in result.stdout
    check_rows(side_table(ws, "d"), stored_units(ws, "d"), vocab_of(tokenizers))


def test_the_pass_reports_what_it_left_out_and_why_and_teacher_json_records_the_last_pass(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 4)
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    path = ws.outputs / "d" / "raw_responses.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    del rows[0]["input_ids"]  # a row written before ids were stored
    rows[1]["output_ids"] = []  # a turn with no generated token
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))

    result = score(ws, "--dataset", "d", "--server-url", sim.url, "--top-k", str(K))
    assert result.returncode == 0, result.stderr
    assert "d: 2/2 rows scored (2 now" in result.stdout
    assert (
        "d: left out: 1 row stored without token ids (written before ids were stored: run them again to score them), "
        "1 turn with no generated token (nothing to score)" in result.stdout
    )
    last = json.loads((ws.outputs / "d" / "teacher.json").read_text())["last_pass"]
    assert last["scored"] == 2 and last["units"] == 2 and last["scored_before"] == 0 and last["failed"] == 0
    assert last["left_out"] == {"no_ids": 1, "empty": 1} and last["stopped_by"] is None
    assert last["server"] == [sim.url] and last["ended"].endswith("Z") and last["positions"] > 0
    # The folder's report page has the teacher section, from teacher.json.
    assert f"report: {Path('outputs') / 'report.html'}" in result.stdout
    page = page_stats((ws.outputs / "report.html").read_text())
    assert page["teacher/d/scored"] == "2 of 2 (100.0%)" and page["teacher/d/failed"] == "0"
    assert page["teacher/d/left_out"].startswith("1 row stored without token ids (")

    # A rerun sends nothing and says so in the record: the last pass scored none.
    result = score(ws, "--dataset", "d", "--server-url", sim.url, "--top-k", str(K))
    assert result.returncode == 0, result.stderr
    last = json.loads((ws.outputs / "d" / "teacher.json").read_text())["last_pass"]
    assert last["scored"] == 0 and last["scored_before"] == 2 and last["server"] is None


def test_a_pass_waiting_on_its_server_keeps_a_live_progress_line_and_records_its_stop(ws, make_sim):
    sim, stuck = make_sim("chatml"), make_sim("chatml")
    ws.dataset("short", "d", 3)
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    stuck.configure(rate_slow=1.0, slow_seconds=600.0)  # every request hangs: nothing is sent after the first 3
    log = ws.root / "score.err"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, str(SCORE), "--dataset", "d", "--server-url", stuck.url, "--concurrency", "3"]
            + ["--top-k", str(K), "--status-interval", "0.2"],
            cwd=ws.root,
            env=cli_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_until(lambda: stuck.stats()["http_in_flight"] == 3, timeout=60, what="every row sent")
        wait_until(
            lambda: "d: 0/3 rows scored" in log.read_text() and "3 in flight" in log.read_text(),
            timeout=60,
            what="a progress line while every request waits",
        )
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, log.read_text()
    last = json.loads((ws.outputs / "d" / "teacher.json").read_text())["last_pass"]
    assert last["stopped_by"] == "SIGTERM" and last["scored"] == 0 and last["units"] == 3


def test_each_turn_rows_are_scored_once_through_503s_a_gateways_sheds_and_dropped_connections(ws, make_sim, tokenizers):
    sim = make_sim("chatml")
    conversation = [
        {"role": "user", "content": "first q"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "second q"},
        {"role": "assistant", "content": "b"},
    ]
    ws.dataset("multi", "conv", [{"id": "c1", "messages": conversation}, {"id": "c2", "messages": conversation[:2]}])
    assert ws.run("--partition", "multi", "--server-url", sim.url, "--regenerate", "each", *COMMON).returncode == 0
    sim.configure(fail_first_n=2, shed_first_n=2, shed_retry_after=0.1, rate_drop=0.3)
    result = score(ws, "--dataset", "conv", "--server-url", sim.url, "--top-k", str(K), "--concurrency", "2")
    assert result.returncode == 0, result.stderr
    assert "conv: 3/3 rows scored (3 now" in result.stdout
    stored = stored_units(ws, "conv")
    assert sorted(stored) == ["conv/c1#0", "conv/c1#1", "conv/c2#0"]  # one row a generated turn
    check_rows(side_table(ws, "conv"), stored, vocab_of(tokenizers))
    outcomes = sim.stats()["by_outcome"]
    assert outcomes["http_503"] == 2 and outcomes["http_429"] == 2  # drops: as the ids' seeded dice fall


def test_with_concurrency_auto_the_pass_sends_more_while_the_server_has_room(ws, make_sim):
    """The run's controller steers the pass: it starts at 16 requests and, while the server runs every one
    and queues none (its requests here never finish), raises the in-flight target from /v1/loads."""
    sim, stuck = make_sim("chatml"), make_sim("chatml")
    ws.dataset("short", "d", 40)
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    stuck.configure(rate_slow=1.0, slow_seconds=600.0)
    proc = subprocess.Popen(
        [sys.executable, str(SCORE), "--dataset", "d", "--server-url", stuck.url, "--top-k", str(K)],
        cwd=ws.root,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: stuck.stats()["http_in_flight"] > 16, timeout=90, what="more than the 16 it starts with")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143
