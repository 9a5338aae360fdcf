"""--shard behind real smg over two real SGLang CPU servers: three client processes, one SIGKILLed mid-run and
rerun, then the merge: every selected (id, sample) once, with the rows one process makes (greedy, so exact)."""

from __future__ import annotations

import os
import signal
from collections import Counter
from pathlib import Path

import orjson
import pytest
from simharness import wait_until
from workspace import REPO, Workspace

from tests.integration import smg

pytestmark = [pytest.mark.router, pytest.mark.real_sglang]
EXPORT = REPO / "export_training.py"
GREEDY = ("--temperature", "0", "--top-k", "1", "--max-tokens", "12", "--max-samples", "18", "--sample", "random")


@pytest.fixture(scope="module")
def smg_bin():
    path, why = smg.ensure_smg()
    if path is None:
        pytest.skip(why)
    return path


def rows_in(folder: Path) -> dict[str, list[int]]:
    path = folder / "d" / "raw_responses.jsonl"
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []
    counts = Counter(r["id"] for r in rows)
    assert not [k for k, n in counts.items() if n > 1]
    return {r["id"]: r["output_ids"] for r in rows}


def test_three_shards_behind_smg_over_two_real_servers_merge_to_one_process_run(
    ws: Workspace, real_procs, smg_bin, tmp_path
):
    servers = real_procs.servers(2)
    gateway = smg.Gateway(smg_bin, [s.url for s in servers])
    try:
        ws.dataset("short", "d", 24)
        single = ws.run("--server-url", gateway.url, "--output-dir", "single", *GREEDY)
        assert single.returncode == 0, single.stderr
        expected = rows_in(ws.root / "single")
        assert len(expected) == 18

        def args(i: int) -> tuple[str, ...]:
            return ("--server-url", gateway.url, "--output-dir", "sharded", "--shard", f"{i}/3", *GREEDY)

        procs = [ws.start(*args(i), "--concurrency", "1", log=tmp_path / f"s{i}.log") for i in range(3)]
        first = ws.root / "sharded" / "shard-1-of-3" / "d" / "raw_responses.jsonl"
        wait_until(lambda: first.exists() or procs[1].poll() is not None, timeout=600, what="shard 1's first row")
        if procs[1].poll() is None:
            os.kill(procs[1].pid, signal.SIGKILL)
        for proc in procs:
            proc.wait(timeout=900)
        assert procs[0].returncode == 0 and procs[2].returncode == 0, (tmp_path / "s0.log").read_text()
        again = ws.run(*args(1))
        assert again.returncode == 0, again.stderr

        merged: dict[str, list[int]] = {}
        for i in range(3):
            part = rows_in(ws.root / "sharded" / f"shard-{i}-of-3")
            assert not set(part) & set(merged)
            merged.update(part)
        assert merged == expected
        out = ws.run(
            "--output-dir", "sharded", "--keep-truncated", "--format", "tokens", "--out", "m.jsonl", script=EXPORT
        )
        assert out.returncode == 0, out.stderr
        assert "d: 3 of 3 shards hold rows" in out.stderr or "shards hold rows" in out.stderr, out.stderr
    finally:
        gateway.close()
