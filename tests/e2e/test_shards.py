"""Many hosts as one job: ``--shard I/N`` runs, one of them SIGKILLed and rerun, then the export reads every
shard as one and proves each selected (id, sample) is there once, with the rows a one-process run makes."""

from __future__ import annotations

import os
import shutil
import signal
from collections import Counter
from pathlib import Path

import orjson
from workspace import REPO, cli_env

EXPORT = REPO / "export_training.py"
PROMPTS, CAP, SAMPLES, SEED = 60, 45, 2, 7
SELECT = (
    "--max-samples",
    str(CAP),
    "--sample",
    "random",
    "--samples-per-prompt",
    str(SAMPLES),
    "--seed",
    str(SEED),
    "--max-tokens",
    "24",
    "--status-interval",
    "0.2",
)


def rows_of(folder: Path) -> list[dict]:
    return [orjson.loads(line) for line in (folder / "ds" / "raw_responses.jsonl").read_bytes().splitlines()]


def by_sample(rows: list[dict]) -> dict[tuple[str, int], list[int]]:
    counts = Counter((r["id"], r.get("sample", 0)) for r in rows)
    assert max(counts.values()) == 1, [k for k, n in counts.items() if n > 1]
    return {(r["id"], r.get("sample", 0)): r["output_ids"] for r in rows}


def test_three_shards_one_killed_and_rerun_merge_to_the_one_process_run(ws, make_sim, tmp_path):
    # Shard 1's server dies, unanswered, when its 5th request arrives: its client has written some rows and is
    # waiting the outage out (--server-wait) when it is SIGKILLed, whatever the machine's speed.
    sims = [make_sim("chatml"), make_sim("chatml", "--exit-after", "5"), make_sim("chatml")]
    ws.dataset("short", "ds", PROMPTS)
    single = ws.run("--server-url", sims[0].url, "--output-dir", "single", *SELECT)
    assert single.returncode == 0, single.stderr
    expected = by_sample(rows_of(ws.root / "single"))
    assert len(expected) == CAP * SAMPLES

    def shard_args(i: int) -> tuple[str, ...]:
        return ("--server-url", sims[i].url, "--output-dir", "sharded", "--shard", f"{i}/3", "--concurrency", "2")

    procs = [ws.start(*shard_args(i), *SELECT, log=tmp_path / f"shard{i}.log") for i in range(3)]
    sims[1].wait_exit(timeout=120)
    assert procs[1].poll() is None, (tmp_path / "shard1.log").read_text()  # mid-run: waiting for its server
    os.kill(procs[1].pid, signal.SIGKILL)
    for proc in procs:
        proc.wait(timeout=300)
    assert procs[0].returncode == 0 and procs[2].returncode == 0, (tmp_path / "shard0.log").read_text()
    assert procs[1].returncode == -signal.SIGKILL
    slow = ws.root / "sharded" / "shard-1-of-3" / "ds" / "raw_responses.jsonl"
    assert slow.exists() and 1 <= len(slow.read_bytes().splitlines()) <= 4  # some rows before the kill
    sims[1].restart("--fault-seed", "0")  # back on the same URL, without the exit

    rerun = ws.run(*shard_args(1), *SELECT)
    assert rerun.returncode == 0, rerun.stderr
    assert "shard 1/3 into sharded/shard-1-of-3" in rerun.stderr
    assert "--output-dir sharded --format tokens" in rerun.stderr  # every shard's rows, not this one's

    sharded = ws.root / "sharded"
    parts = [by_sample(rows_of(sharded / f"shard-{i}-of-3")) for i in range(3)]
    assert all(parts), [len(p) for p in parts]
    merged: dict[tuple[str, int], list[int]] = {}
    for part in parts:
        assert not set(part) & set(merged)
        merged.update(part)
    assert merged == expected  # every selected (id, sample) once, with the one-process run's output ids
    record = orjson.loads((sharded / "shard-2-of-3" / "shard.json").read_bytes())
    assert (record["shard"], record["shards"], record["seed"], record["max_samples"]) == (2, 3, SEED, CAP)

    out = ws.run(
        "--output-dir", "sharded", "--format", "messages", "--keep-truncated", "--out", "merged.jsonl", script=EXPORT
    )
    assert out.returncode == 0, out.stderr
    assert "ds: 3 of 3 shards hold rows" in out.stderr, out.stderr
    one = ws.run(
        "--output-dir", "single", "--format", "messages", "--keep-truncated", "--out", "one.jsonl", script=EXPORT
    )
    assert one.returncode == 0, one.stderr

    def exported(name: str) -> list[bytes]:
        return sorted((ws.root / name).read_bytes().splitlines())

    assert exported("merged.jsonl") == exported("one.jsonl")

    report = ws.run("--output-dir", "sharded", "--report", script=EXPORT)
    assert report.returncode == 0, report.stderr
    for i in range(3):
        assert f"shard-{i}-of-3/ds/raw_responses.jsonl" in report.stdout + report.stderr
    page = ws.run("--output-dir", "sharded", "--report", "--html", "page.html", script=EXPORT)
    assert page.returncode == 0, page.stderr
    html = (ws.root / "page.html").read_text()
    assert all(f"shard-{i}-of-3/ds" in html for i in range(3))


def test_a_broken_set_of_shards_is_refused_naming_the_shard(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "ds", 12)
    for i in range(2):
        result = ws.run("--server-url", sim.url, "--output-dir", "sharded", "--shard", f"{i}/2", "--max-tokens", "8")
        assert result.returncode == 0, result.stderr
    sharded = ws.root / "sharded"

    def export_error() -> str:
        result = ws.run("--output-dir", "sharded", "--report", script=EXPORT)
        assert result.returncode != 0, result.stderr
        return result.stderr.strip().splitlines()[-1]

    # Another N, another seed, an unsharded run over the shards: refused before anything is sent.
    for args, words in (
        (("--shard", "0/3"), "holds shards of a 2-way split"),
        (("--shard", "0/2", "--seed", "5"), "were made with --seed 0"),
        ((), "holds the shard folders of a sharded run"),
        (("--shard", "2/2"), "I must be below N"),
        (("--shard", "a/2"), "expected I/N"),
    ):
        result = ws.run("--server-url", sim.url, "--output-dir", "sharded", "--max-tokens", "8", *args)
        assert result.returncode != 0 and words in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr

    # A row copied into the other shard: in two shards, and in one its hash does not name.
    line = (sharded / "shard-0-of-2" / "ds" / "raw_responses.jsonl").read_bytes().splitlines(keepends=True)[0]
    with open(sharded / "shard-1-of-2" / "ds" / "raw_responses.jsonl", "ab") as fh:
        fh.write(line)
    assert "is in two shards (shard-0-of-2 and shard-1-of-2)" in export_error()
    with open(sharded / "shard-1-of-2" / "ds" / "raw_responses.jsonl", "rb+") as fh:
        fh.truncate(fh.seek(0, 2) - len(line))
    # A missing shard.
    shutil.move(sharded / "shard-1-of-2", ws.root / "aside")
    assert "shard shard-1-of-2 missing (1 of 2 present)" in export_error()


def test_array_variables_without_shard_are_named_not_used(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "ds", 3)
    env = cli_env(SLURM_ARRAY_TASK_ID="1", SLURM_ARRAY_TASK_COUNT="4")
    result = ws.run("--server-url", sim.url, "--max-tokens", "8", "--dry-run", env=env)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if "SLURM_ARRAY_TASK_ID=1" in line]
    assert len(lines) == 1 and "--shard $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT" in lines[0], result.stderr
    assert "3 to run" in result.stderr
