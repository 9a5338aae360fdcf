"""export_training.py against hostile inputs, through the real CLI as a subprocess:
an export that would overwrite what it reads, a validation split that leaks a conversation, corrupt rows, and
rows of several settings sets in one file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from result_rows import record, write_results

ROOT = Path(__file__).resolve().parents[2]
EXPORT = ROOT / "export_training.py"


def export(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXPORT), *argv], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- 5: the export never writes over its input ---------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "link"),
    [
        (["--out", "outputs/chat/raw_responses.jsonl"], None),
        (["--out", "outputs/chat/train.jsonl"], None),
        (["--out", "outputs/chat"], None),
        (["--out", "train.jsonl", "--val-fraction", "0.5"], "train.val.jsonl"),  # the validation file is a link
        (["--out", "linked.jsonl"], "linked.jsonl"),
    ],
)
def test_an_export_whose_destination_is_an_input_or_inside_a_dataset_folder_is_refused_and_changes_nothing(
    tmp_path, argv, link
):
    results = write_results(tmp_path, "chat", [record(f"r{i}") for i in range(6)])
    before = results.read_bytes()
    if link:
        (tmp_path / link).symlink_to(results)
    done = export(tmp_path, "--dataset", "chat", *argv)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("export_training.py: error: --out ")
    assert "being read" in line or "input file" in line
    assert results.read_bytes() == before
    assert sorted(p.name for p in results.parent.iterdir()) == ["raw_responses.jsonl"]


def test_an_export_onto_the_budget_file_it_reads_is_refused(tmp_path):
    write_results(tmp_path, "chat", [record("a")])
    budget = tmp_path / "budget.json"
    budget.write_text(json.dumps({"datasets": {"chat": {"max_samples": 1}}}))
    done = export(tmp_path, "--budget", "budget.json", "--out", "budget.json")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "export_training.py: error: --out budget.json: is the input file budget.json; write the export to another file"
    ]
    assert json.loads(budget.read_text()) == {"datasets": {"chat": {"max_samples": 1}}}


# --- 6: validation split by conversation -----------------------------------------------------------------
def test_the_turns_of_one_each_conversation_all_go_to_the_same_side_of_the_validation_split(tmp_path):
    rows = [record(f"c{c}#{k}", regenerate="each") for c in range(60) for k in range(3)]
    write_results(tmp_path, "chat", rows)
    done = export(tmp_path, "--dataset", "chat", "--out", "train.jsonl", "--val-fraction", "0.3", "--seed", "4")
    assert done.returncode == 0, done.stderr
    train, val = jsonl(tmp_path / "train.jsonl"), jsonl(tmp_path / "train.val.jsonl")
    assert len(train) + len(val) == 180 and val

    def conversations(rows: list[dict]) -> set[str]:
        return {r["id"].rpartition("#")[0] for r in rows}

    assert not conversations(train) & conversations(val)
    assert len(val) % 3 == 0


# --- 7: corrupt rows are dropped and counted ------------------------------------------------------------
def corrupt_rows() -> list[dict]:
    good = record("good").to_dict()

    def bad(rid: str, **changes) -> dict:
        row = json.loads(json.dumps(good))
        row["id"] = rid
        for key, value in changes.items():
            row[key] = value
        return row

    messages = good["messages"]
    return [
        good,
        bad("content", messages=[messages[0], {"role": "user", "content": {"text": "hi"}}, messages[2]]),
        bad("role", messages=[messages[0], {"role": "wizard", "content": "hi"}, messages[2]]),
        bad("no-assistant", messages=messages[:2]),
        bad("last-user", messages=[*messages, {"role": "user", "content": "and?"}]),
        bad("negative", output_ids=[10, -1, 2]),
        bad("not-ids", input_ids=[1, "2", 3]),
        bad("tools", tools={"type": "function"}),
        bad("answer", content=["Answer"]),
    ]


def test_corrupt_rows_are_dropped_and_counted_with_unreadable_lines_in_the_summary(tmp_path):
    write_results(tmp_path, "chat", corrupt_rows(), tail=b'not json\n{"torn')
    for fmt in ("specforge", "messages", "tokens"):
        done = export(tmp_path, "--dataset", "chat", "--format", fmt, "--out", "o.jsonl")
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines()[0] == "chat: 1 of 9 rows (dropped: 8 malformed; 2 unreadable lines skipped)"
        assert [r["id"] for r in jsonl(tmp_path / "o.jsonl")] == ["chat/good"]
    report = export(tmp_path, "--dataset", "chat", "--report")
    assert "    malformed                            8" in report.stdout
    assert "      first: line at byte" in report.stdout and "user content is not a string" in report.stdout


def test_token_ids_outside_the_tokenizers_vocabulary_are_malformed(tmp_path, tokenizers):
    vocab = len(json.loads((tokenizers["chatml"] / "tokenizer.json").read_text())["model"]["vocab"])
    rows = [record("good"), record("big", output_ids=[10, 10**7, 2]), record("edge", input_ids=[1, vocab + 50])]
    write_results(tmp_path, "chat", rows)
    done = export(
        tmp_path,
        "--dataset",
        "chat",
        "--format",
        "messages",
        "--out",
        "o.jsonl",
        "--tokenizer",
        str(tokenizers["chatml"]),
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == "chat: 1 of 3 rows (dropped: 2 malformed)"


# --- 8: settings sets ------------------------------------------------------------------------------------
def settings_line(sid: str, max_tokens: int, temperature: float) -> bytes:
    settings = {
        "model": "tiny",
        "weight_version": None,
        "tokenizer": None,
        "chat_template_sha256": None,
        "chat_template_kwargs": {},
        "reasoning_parser": None,
        "tool_call_parser": None,
        "sampling_params": {"temperature": temperature},
        "max_tokens": max_tokens,
        "regenerate": "last",
    }
    return orjson.dumps({"id": sid, "recorded_at": "2026-11-30T00:00:00+00:00", "settings": settings}) + b"\n"


def test_rows_of_two_settings_sets_are_listed_warned_about_and_one_set_can_be_picked(tmp_path):
    rows = [record(f"a{i}", settings="aaaaaaaaaaaa") for i in range(3)]
    rows += [record(f"b{i}", settings="bbbbbbbbbbbb") for i in range(2)]
    results = write_results(tmp_path, "chat", rows)
    (results.parent / "settings.jsonl").write_bytes(
        settings_line("aaaaaaaaaaaa", 256, 0.6) + settings_line("bbbbbbbbbbbb", 4096, 1.0)
    )
    report = export(tmp_path, "--dataset", "chat", "--report")
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    start = lines.index("  settings sets                          2")
    assert lines[start + 1 : start + 4] == [
        "    aaaaaaaaaaaa                         3   model tiny, max_tokens 256, temperature 0.6, regenerate last",
        "    bbbbbbbbbbbb                         2   model tiny, max_tokens 4096, temperature 1.0, regenerate last",
        "  warning: chat: rows of 2 settings sets go into one file; export one with --settings ID "
        "(e.g. --settings aaaaaaaaaaaa)",
    ]
    mixed = export(tmp_path, "--dataset", "chat", "--out", "o.jsonl")
    assert mixed.returncode == 0
    assert "warning: chat: rows of 2 settings sets go into one file" in mixed.stderr
    picked = export(tmp_path, "--dataset", "chat", "--out", "o.jsonl", "--settings", "bbbbbbbbbbbb")
    assert picked.returncode == 0, picked.stderr
    assert [r["id"] for r in jsonl(tmp_path / "o.jsonl")] == ["chat/b0", "chat/b1"]
    assert picked.stderr.splitlines()[0] == "chat: 2 of 5 rows (dropped: 3 other_settings)"
    unknown = export(tmp_path, "--dataset", "chat", "--out", "o.jsonl", "--settings", "cccc")
    assert unknown.returncode == 2
    assert unknown.stderr.splitlines()[-1] == (
        "export_training.py: error: --settings cccc: no rows of this settings set "
        "(sets found: aaaaaaaaaaaa, bbbbbbbbbbbb); see them with --report"
    )
