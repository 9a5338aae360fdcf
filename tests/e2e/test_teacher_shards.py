"""Teacher data of a sharded run: each shard scored in its own folder (one shard, --shard I/N, or every shard of
the parent folder), then the KD exports over the parent join each shard's rows with that shard's side file,
with the shard checks still applied, a second teacher or a copied side-file row refused, and rows without
teacher data left out and counted."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import orjson
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import sim_logprobs

ROOT = Path(__file__).resolve().parents[2]
SCORE, EXPORT = ROOT / "score_teacher.py", ROOT / "export_training.py"
K = 4


def units_of(folder: Path) -> dict[str, tuple[list[int], int]]:
    out = {}
    for line in (folder / "ds" / "raw_responses.jsonl").read_bytes().splitlines():
        row = orjson.loads(line)
        out[f"ds/{row['id']}"] = (row["input_ids"] + row["output_ids"], len(row["input_ids"]))
    return out


def side_ids(folder: Path) -> list[str]:
    return pads.dataset(folder / "ds" / "teacher", format="parquet").to_table().column("id").to_pylist()


def test_each_shard_scored_where_it_ran_and_the_kd_export_joins_every_shard_once(ws, make_sim, tokenizers):
    sim = make_sim("chatml")
    vocab = json.loads((tokenizers["chatml"] / "config.json").read_text())["vocab_size"]
    ws.dataset("short", "ds", 12)
    for i in range(3):
        result = ws.run("--server-url", sim.url, "--output-dir", "sharded", "--shard", f"{i}/3", "--max-tokens", "16")
        assert result.returncode == 0, result.stderr
    sharded = ws.root / "sharded"
    shards = [sharded / f"shard-{i}-of-3" for i in range(3)]
    units = {k: v for folder in shards for k, v in units_of(folder).items()}
    assert len(units) == 12

    def score(*args: str):
        return ws.run("--server-url", sim.url, "--top-k", str(K), *args, script=SCORE)

    # One shard by its own folder, one by --shard I/N as the run was given, then the parent: the rest.
    result = score("--output-dir", "sharded/shard-0-of-3")
    assert result.returncode == 0, result.stderr
    assert sorted(side_ids(shards[0])) == sorted(units_of(shards[0]))
    result = score("--output-dir", "sharded", "--shard", "1/3")
    assert result.returncode == 0, result.stderr
    assert f"shard-1-of-3/ds: {len(units_of(shards[1]))}/" in result.stdout
    assert not (shards[2] / "ds" / "teacher").exists()
    result = score("--output-dir", "sharded")
    assert result.returncode == 0, result.stderr
    for i, folder in enumerate(shards):
        n = len(units_of(folder))
        assert f"shard-{i}-of-3/ds: {n}/{n} rows scored ({n if i == 2 else 0} now" in result.stdout, result.stdout
        assert sorted(side_ids(folder)) == sorted(units_of(folder))  # each shard's rows, beside them
    for args, words in ((("--shard", "3/3"), "I must be below N"), (("--shard", "0/4"), "no folder")):
        result = score("--output-dir", "sharded", *args)
        assert result.returncode == 2 and words in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr

    def export(fmt: str = "axolotl-kd", out: str = "kd.parquet"):
        return ws.run("--output-dir", "sharded", "--format", fmt, "--keep-truncated", "--out", out, script=EXPORT)

    result = export()
    assert result.returncode == 0, result.stderr
    assert "ds: 3 of 3 shards hold rows" in result.stderr and "12 rows with a teacher distribution" in result.stderr
    rows = pads.dataset(ws.root / "kd.parquet", format="parquet").to_table().to_pylist()
    assert sorted(r["id"] for r in rows) == sorted(units)
    for row in rows:
        ids, start = units[row["id"]]
        assert row["input_ids"] == ids
        for i in range(start - 1, len(ids) - 1):
            top = sim_logprobs.candidates(ids, i + 1, vocab)[:K]
            dist = sim_logprobs.distribution(ids, i + 1, vocab)
            assert row["target_token_ids"][i] == top and row["target_mask"][i] == [1] * K
            norm = np.logaddexp.reduce([dist[t] for t in top])
            assert np.allclose(row["target_logprobs"][i], [dist[t] - norm for t in top], atol=1e-5)
    result = export("topk-sparse", "sparse.parquet")
    assert result.returncode == 0, result.stderr
    assert len(pq.read_table(ws.root / "sparse.parquet")) == 12

    # A shard's side file gone: its rows left out and counted, the others exported.
    aside = ws.root / "teacher-aside"
    shutil.move(shards[2] / "ds" / "teacher", aside)
    result = export()
    n2 = len(units_of(shards[2]))
    assert result.returncode == 0, result.stderr
    assert f"{12 - n2} rows with a teacher distribution" in result.stderr
    assert f"{n2} left out without one" in result.stderr
    assert len(pq.read_table(ws.root / "kd.parquet")) == 12 - n2
    shutil.move(aside, shards[2] / "ds" / "teacher")

    # A side-file row copied into another shard's side file: refused, naming both.
    part = sorted((shards[0] / "ds" / "teacher").glob("part-*.parquet"))[0]
    shutil.copy(part, shards[1] / "ds" / "teacher" / "part-000999.parquet")
    result = export()
    assert result.returncode == 2 and "is scored in two side files" in result.stderr, result.stderr
    assert "shard-0-of-3" in result.stderr and "shard-1-of-3" in result.stderr
    (shards[1] / "ds" / "teacher" / "part-000999.parquet").unlink()

    # A shard scored by another teacher (another K): refused.
    meta_path = shards[2] / "ds" / "teacher.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "top_k": K + 1}))
    result = export()
    assert result.returncode == 2 and "different teachers" in result.stderr, result.stderr
    meta_path.write_text(json.dumps(meta))

    # The shard checks still hold: a missing shard is refused before anything is written or sent.
    shutil.move(shards[1], ws.root / "shard-aside")
    result = export()
    assert result.returncode != 0 and "shard shard-1-of-3 missing" in result.stderr, result.stderr
    before = sim.stats()["generate_requests"]
    result = score("--output-dir", "sharded")
    assert result.returncode == 2 and "shard shard-1-of-3 missing" in result.stderr, result.stderr
    assert "--shard I/N" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert score("--output-dir", "sharded", "--shard", "2/3").returncode == 0  # a shard there is, on its own
    assert sim.stats()["generate_requests"] == before
    shutil.move(ws.root / "shard-aside", shards[1])
    # A row copied into another shard: scoring every shard refuses it, as the export does.
    line = (shards[0] / "ds" / "raw_responses.jsonl").read_bytes().splitlines(keepends=True)[0]
    with open(shards[1] / "ds" / "raw_responses.jsonl", "ab") as fh:
        fh.write(line)
    result = score("--output-dir", "sharded")
    assert result.returncode == 2 and "is in two shards (shard-0-of-3 and shard-1-of-3)" in result.stderr
    assert sim.stats()["generate_requests"] == before
