"""Prompt sets in the layouts people download them, through run_inference.py against the simulator: the
same prompts as a JSONL file and as parquet shards give the same requests and the same rows (ids, prompt
hashes, input_ids, messages, answers), with caps, --sample random, samples per prompt and --regenerate;
a rerun resumes exactly once, an edited row is found, and the same dataset moved from JSONL to parquet
resumes. The example parquet dataset shipped in prompts/short runs as it is."""

from __future__ import annotations

import shutil

import orjson
import pyarrow.parquet as pq
import pytest
from prompt_formats import table, write_jsonl, write_parquet_shards, write_saved
from workspace import REPO, Workspace

COMMON = ("--max-tokens", "64", "--concurrency", "4", "--status-interval", "0.2")
# What differs between two runs of the same prompts: the request ids, clocks, and where the prompt file was.
VOLATILE = {"request_id", "created_at", "latency_s", "server_latency_s", "source"}

ROWS = [
    {"id": "chat", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello?"}]},
    {
        "id": "agent",
        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}],
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "Paris"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "user", "content": "And tomorrow?"},
        ],
    },
    {"conversations": [{"from": "human", "value": "A ShareGPT question"}, {"from": "gpt", "value": "its answer"}]},
    {"prompt": "A bare prompt"},
    {"id": "alpaca-1", "instruction": "Translate to French", "input": "Good morning", "output": "Bonjour"},
    {"id": "alpaca-2", "instruction": "Name a colour", "output": "Blue"},
] + [{"id": f"q{i:02d}", "prompt": f"question {i}"} for i in range(10)]


def comparable(rows: list[dict]) -> dict[tuple, dict]:
    return {(r["id"], r.get("sample")): {k: v for k, v in r.items() if k not in VOLATILE} for r in rows}


def two_workspaces(tmp_path, rows, parquet=write_parquet_shards):
    """The rows as prompts/short/d.jsonl in one workspace and as a parquet dataset named d in another."""
    as_jsonl, as_parquet = Workspace(tmp_path / "jsonl"), Workspace(tmp_path / "parquet")
    write_jsonl(as_jsonl.prompts / "short" / "d.jsonl", rows)
    parquet(as_parquet.prompts / "short" / "d", rows)
    return as_jsonl, as_parquet


@pytest.mark.parametrize(
    "flags",
    [
        (),
        ("--max-samples", "9", "--sample", "random", "--seed", "3", "--samples-per-prompt", "2"),
        ("--regenerate", "each", "--max-tokens-per-dataset", "100000"),
    ],
    ids=["last", "cap-random-samples", "each-budget"],
)
def test_the_same_prompts_as_jsonl_and_as_parquet_give_the_same_rows(tmp_path, make_sim, flags):
    sim = make_sim("chatml")
    as_jsonl, as_parquet = two_workspaces(tmp_path, ROWS)
    for ws in (as_jsonl, as_parquet):
        result = ws.run("--partition", "short", "--server-url", sim.url, *COMMON, *flags)
        assert result.returncode == 0, result.stderr
    jsonl_rows, parquet_rows = as_jsonl.results("d"), as_parquet.results("d")
    assert len(jsonl_rows) >= 9
    assert len(parquet_rows) == len(jsonl_rows) and comparable(parquet_rows) == comparable(jsonl_rows)
    assert {r["source"] for r in parquet_rows} == {"short/d/"}
    assert {r["source"] for r in jsonl_rows} == {"short/d.jsonl"}
    strip = [[{k: v for k, v in e.items() if k not in VOLATILE} for e in w.errors("d")] for w in (as_jsonl, as_parquet)]
    assert strip[0] == strip[1]


def test_a_parquet_dataset_resumes_exactly_once_and_finds_an_edited_row(tmp_path, make_sim):
    sim = make_sim("chatml")
    ws = Workspace(tmp_path)
    write_parquet_shards(ws.prompts / "short" / "d", ROWS)
    first = ws.run("--partition", "short", "--server-url", sim.url, "--max-samples", "5", *COMMON)
    assert first.returncode == 0, first.stderr
    assert len(ws.results("d")) == 5
    again = ws.run("--partition", "short", "--server-url", sim.url, *COMMON)
    assert again.returncode == 0, again.stderr
    rows = ws.results("d")
    assert len(rows) == len({r["id"] for r in rows}) == 16
    assert sim.stats()["generate_requests"] == 16

    edited = [dict(r) for r in ROWS]
    edited[3] = {"prompt": "A bare prompt"}  # the same: no change
    edited[6] = {"id": "q00", "prompt": "question 0, reworded"}
    shutil.rmtree(ws.prompts / "short" / "d")
    write_parquet_shards(ws.prompts / "short" / "d", edited)
    refused = ws.run("--partition", "short", "--server-url", sim.url, *COMMON)
    assert refused.returncode == 2
    assert "1 done prompts of " in refused.stderr and "changed since their rows were written (first: q00)" in (
        refused.stderr
    )


def test_a_dataset_moved_from_jsonl_to_parquet_resumes_its_rows(tmp_path, make_sim):
    sim = make_sim("chatml")
    ws = Workspace(tmp_path)
    write_jsonl(ws.prompts / "short" / "d.jsonl", ROWS)
    assert ws.run("--partition", "short", "--server-url", sim.url, "--max-samples", "4", *COMMON).returncode == 0
    (ws.prompts / "short" / "d.jsonl").unlink()
    write_saved(ws.prompts / "short" / "d", ROWS, shards=3)  # a save_to_disk folder
    result = ws.run("--partition", "short", "--server-url", sim.url, *COMMON)
    assert result.returncode == 0, result.stderr
    assert "4 already done, 12 to run" in result.stderr
    ws.assert_exactly_once("d", {r["id"] for r in ws.rows("d")})
    assert len(ws.rows("d")) == 16 and sim.stats()["generate_requests"] == 16


def test_a_bad_parquet_row_stops_the_run_before_any_request_with_its_file_and_row(tmp_path, make_sim):
    sim = make_sim("chatml")
    ws = Workspace(tmp_path)
    write_parquet_shards(ws.prompts / "short" / "d", [*ROWS[:-1], {"id": "bad", "prompt": " "}], shards=2)
    result = ws.run("--partition", "short", "--server-url", sim.url, *COMMON)
    assert result.returncode == 2
    shard = "prompts/short/d/data/train-00001-of-00002.parquet"
    assert result.stderr.strip().splitlines()[-1] == (
        f"run_inference.py: error: {shard}: row 7 (from 0): 'prompt' is empty; fix or remove the row, "
        "or pass --skip-bad-lines"
    )
    assert sim.stats()["generate_requests"] == 0
    skipped = ws.run("--partition", "short", "--server-url", sim.url, "--skip-bad-lines", *COMMON)
    assert skipped.returncode == 0, skipped.stderr
    assert "1 bad row skipped" in skipped.stderr and len(ws.results("d")) == 15


def test_columns_map_a_parquet_datasets_own_names(tmp_path, make_sim):
    sim = make_sim("chatml")
    ws = Workspace(tmp_path)
    (ws.prompts / "short").mkdir(parents=True)
    rows = [{"uid": f"u{i}", "question": f"Why {i}?", "answer": "Because."} for i in range(3)]
    pq.write_table(table(rows), ws.prompts / "short" / "d.parquet")
    refused = ws.run("--partition", "short", "--server-url", sim.url, *COMMON)
    assert refused.returncode == 2 and "--columns prompt=question" in refused.stderr.splitlines()[-1]
    bad = ws.run("--partition", "short", "--server-url", sim.url, "--columns", "prompt", *COMMON)
    assert bad.returncode == 2 and bad.stderr.splitlines()[-1] == (
        "run_inference.py: error: --columns: 'prompt' is not FIELD=COLUMN; e.g. --columns prompt=question,id=uid"
    )
    mapped = ws.run("--partition", "short", "--server-url", sim.url, "--columns", "prompt=question,id=uid", *COMMON)
    assert mapped.returncode == 0, mapped.stderr
    rows_out = {r["id"]: r for r in ws.results("d")}
    assert sorted(rows_out) == ["u0", "u1", "u2"]
    assert rows_out["u1"]["messages"][0] == {"role": "user", "content": "Why 1?"}


def test_the_example_parquet_dataset_runs_as_shipped(tmp_path, make_sim):
    sim = make_sim("chatml")
    ws = Workspace(tmp_path)
    (ws.prompts / "short").mkdir(parents=True)
    shutil.copy(REPO / "prompts" / "short" / "alpaca.parquet", ws.prompts / "short")
    result = ws.run("--partition", "short", "--server-url", sim.url, *COMMON)
    assert result.returncode == 0, result.stderr
    shipped = pq.read_table(REPO / "prompts" / "short" / "alpaca.parquet").to_pylist()
    rows = ws.assert_exactly_once("alpaca", [r["id"] for r in shipped])
    for row, record in zip(sorted(rows, key=lambda r: r["id"]), sorted(shipped, key=lambda r: r["id"]), strict=True):
        user = record["instruction"] + (f"\n{record['input']}" if record.get("input") else "")
        assert row["messages"][-2] == {"role": "user", "content": user}
        assert record["output"] not in orjson.dumps(row["messages"][:-1]).decode()


def test_compute_budget_counts_a_parquet_dataset_with_the_same_columns(tmp_path, monkeypatch, capsys):
    from synthgen.cli.budget import main as budget_main

    rows = [{"uid": f"u{i}", "question": f"Why {i}?"} for i in range(5)] + [{"uid": "u0", "question": "again"}]
    (tmp_path / "prompts" / "short").mkdir(parents=True)
    pq.write_table(table(rows), tmp_path / "prompts" / "short" / "qa.parquet")
    monkeypatch.chdir(tmp_path)
    code = budget_main(["--columns", "prompt=question,id=uid", "--avg-tokens", "qa=100", "--tokens-per-dataset", "1K"])
    out = capsys.readouterr().out
    assert code == 0
    assert next(line for line in out.splitlines() if line.startswith("qa ")).split()[3] == "5"  # available
