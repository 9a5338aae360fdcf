"""What a change of mind between runs (an edited prompt file, another
--regenerate, --changed-prompts regenerate) did to the rows, and refusals that changed files.
Through the real CLI against the simulator, whose answers name the question they answer
("Answer: <last user turn>"), so a row shows which prompt each of its turns was made for."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import httpx
import orjson
import pytest
from workspace import Workspace, chat, last_line

from synthgen.config import RunConfig
from synthgen.data.conversations import parse_record, prompt_hash
from synthgen.data.records import ErrorRecord
from synthgen.data.store import DatasetStore
from synthgen.run.progress import Progress
from synthgen.run.runner import Runner
from synthgen.server.client import SGLangClient
from tests.unit.run.test_runner_scripted_server import URL, ScriptedServer, answer

COMMON = ("--max-tokens", "32", "--concurrency", "4", "--status-interval", "0.5")
ALL = ("--regenerate", "all", *COMMON)
REFUSAL = (
    "rerun with the same flags, use another --output-dir, or pass --allow-mixed-settings to record the new "
    "settings for the rows this run writes"
)


def answers(row: dict) -> list[str]:
    return [m["content"] for m in row["messages"] if m["role"] == "assistant"]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under an output folder, by path, with its bytes; the .lock files hold the pid of the
    last run that took the lock (any run, also one that refuses) and are left out."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


# --- 1: partial turns carry what they were made for ------------------------------------------------------
LONG = " ".join(["word"] * 200)


def left_with_partial_turns(ws: Workspace, url: str, n: int = 4) -> list[dict]:
    """An `all` run whose conversations' second turns do not fit --max-seq-len: each conversation's
    first turn waits in partial_turns.jsonl for the next run."""
    ws.dataset("short", "mt", [chat(f"c{i}", f"old first {i}", "orig", f"second {i} {LONG}") for i in range(n)])
    first = ws.run("--server-url", url, "--max-seq-len", "150", *ALL)
    assert first.returncode == 1, first.stderr  # the second turns are skipped: prompt_too_long
    partial = ws.rows("mt", "partial_turns.jsonl")
    assert sorted((p["id"], p["turn"]) for p in partial) == [(f"c{i}", 0) for i in range(n)]
    assert all(p["data"]["content"].startswith("Answer: old first") for p in partial)
    assert not ws.raw_lines("mt")
    return partial


def test_partial_turns_of_a_conversation_whose_text_changed_are_not_continued(ws, make_sim):
    sim = make_sim("chatml")
    left_with_partial_turns(ws, sim.url)
    ws.dataset("short", "mt", [chat(f"c{i}", f"new first {i}", "orig", f"second {i}") for i in range(4)])
    again = ws.run("--server-url", sim.url, *ALL)
    assert again.returncode == 0, again.stderr
    rows = ws.assert_exactly_once("mt", [f"c{i}" for i in range(4)])
    for row in rows:
        i = row["id"][1:]
        assert answers(row) == [f"Answer: new first {i}", f"Answer: second {i}"], row["id"]
        assert len(row["turns"]) == 2
    assert not (ws.outputs / "mt" / "partial_turns.jsonl").exists()


def test_changed_prompts_regenerate_starts_conversations_again_instead_of_from_their_old_turns(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "mt", [chat(f"c{i}", f"old {i}", "x", f"then {i}") for i in range(4)])
    assert ws.run("--server-url", sim.url, *ALL).returncode == 0
    old = {r["id"]: r for r in ws.results("mt")}
    ws.dataset("short", "mt", [chat(f"c{i}", f"new {i}", "x", f"then {i}") for i in range(4)])
    again = ws.run("--server-url", sim.url, "--changed-prompts", "regenerate", *ALL)
    assert again.returncode == 0, again.stderr
    for row in ws.assert_exactly_once("mt", ids):
        i = row["id"][1:]
        assert answers(row) == [f"Answer: new {i}", f"Answer: then {i}"], row["id"]
    assert {r["id"]: r for r in ws.rows("mt", "changed_rows.jsonl")} == old
    assert sim.stats()["generate_requests"] == 2 * 8


@pytest.mark.parametrize("how", ["settings changed", "written before they carried their prompt and settings"])
def test_partial_turns_made_under_other_settings_or_unmarked_are_not_continued(ws, make_sim, how):
    sim = make_sim("chatml")
    partial = left_with_partial_turns(ws, sim.url)
    args: tuple[str, ...] = ALL
    if how == "settings changed":
        args = ("--temperature", "0.5", "--allow-mixed-settings", *ALL)
    else:
        path = ws.outputs / "mt" / "partial_turns.jsonl"
        path.write_bytes(b"".join(orjson.dumps({k: p[k] for k in ("id", "turn", "data")}) + b"\n" for p in partial))
    before = sim.stats()["generate_requests"]
    again = ws.run("--server-url", sim.url, *args)
    assert again.returncode == 0, again.stderr  # the long second turns fit now (their answers are cut at 32 tokens)
    rows = ws.assert_exactly_once("mt", [f"c{i}" for i in range(4)])
    old_requests = {p["data"]["request_id"] for p in partial}
    for row in rows:
        assert row["turns"][0]["request_id"] not in old_requests, row["id"]
    assert sim.stats()["generate_requests"] - before == 2 * 4


# --- 2: a change of --regenerate is a change of settings, named first --------------------------------------
def test_rows_written_with_last_rerun_with_all_refuse_naming_the_flag_though_nothing_is_pending(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "mt", [chat(f"c{i}", f"q {i}", "source answer", f"r {i}") for i in range(3)])
    assert ws.run("--server-url", sim.url, *COMMON).returncode == 0
    before = snapshot(ws.outputs)
    refused = ws.run("--server-url", sim.url, *ALL)
    assert refused.returncode == 2, refused.stderr
    assert last_line(refused.stderr) == (
        f"run_inference.py: error: settings differ from the rows already written (mt: --regenerate last -> all); "
        f"{REFUSAL}"
    )
    assert snapshot(ws.outputs) == before
    assert sim.stats()["generate_requests"] == 3


def test_rows_written_with_all_rerun_with_last_refuse_on_the_flag_not_as_changed_prompts(ws, make_sim):
    sim = make_sim("chatml")
    # Ending on an assistant turn: `last` cuts it, so the old mode-dependent hash differed.
    ws.dataset("short", "mt", [chat(f"c{i}", f"q {i}", "a", f"r {i}", "source answer") for i in range(3)])
    assert ws.run("--server-url", sim.url, *ALL).returncode == 0
    before = snapshot(ws.outputs)
    for extra in ((), ("--changed-prompts", "regenerate")):
        refused = ws.run("--server-url", sim.url, *extra, *COMMON)
        assert refused.returncode == 2, refused.stderr
        assert last_line(refused.stderr) == (
            f"run_inference.py: error: settings differ from the rows already written (mt: --regenerate all -> "
            f"last); {REFUSAL}"
        )
        assert "changed since" not in refused.stderr
        assert snapshot(ws.outputs) == before  # no row moved to changed_rows.jsonl


@pytest.mark.parametrize(("written", "rerun"), [("last", "all"), ("all", "last")])
def test_the_prompt_hash_does_not_depend_on_the_mode(ws, make_sim, written, rerun):
    sim = make_sim("chatml")
    ws.dataset("short", "mt", [chat(f"c{i}", f"q {i}", "a", f"r {i}", "source answer") for i in range(3)])
    assert ws.run("--server-url", sim.url, "--regenerate", written, *COMMON).returncode == 0
    mixed = ws.run("--server-url", sim.url, "--regenerate", rerun, "--allow-mixed-settings", *COMMON)
    assert mixed.returncode == 0, mixed.stderr
    assert "nothing to do" in mixed.stderr and "changed" not in mixed.stderr


def test_all_rows_of_an_earlier_version_hashed_by_their_whole_conversation_still_count_as_done(ws, make_sim):
    sim = make_sim("chatml")
    records = [chat(f"c{i}", f"q {i}", "a", f"r {i}", "source answer") for i in range(3)]
    ids = ws.dataset("short", "mt", records)
    assert ws.run("--server-url", sim.url, *ALL).returncode == 0
    # Rows of --regenerate all used to carry the hash of the whole conversation, trailing answer included.
    path = ws.outputs / "mt" / "raw_responses.jsonl"
    legacy = {r["id"]: prompt_hash(parse_record(r).messages) for r in records}
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert all(row["prompt_hash"] != legacy[row["id"]] for row in rows)
    path.write_bytes(b"".join(orjson.dumps(row | {"prompt_hash": legacy[row["id"]]}) + b"\n" for row in rows))

    again = ws.run("--server-url", sim.url, *ALL)
    assert again.returncode == 0, again.stderr
    assert "nothing to do" in again.stderr
    # A real edit is still seen.
    ws.dataset("short", "mt", [*records[:2], chat("c2", "q 2 edited", "a", "r 2", "source answer")])
    edited = ws.run("--server-url", sim.url, *ALL)
    assert edited.returncode == 2
    assert "1 done prompts of prompts/short/mt.jsonl changed since their rows were written (first: c2)" in (
        edited.stderr
    )
    assert len(ws.assert_exactly_once("mt", ids)) == 3


# --- 3: a run that refuses changes nothing ----------------------------------------------------------------
def lived_in(ws: Workspace, url: str) -> dict[str, bytes]:
    """Datasets a (conversations, --regenerate all) and b, done, then left with what a run tidies before
    its first append: a torn last line, an error row of a done prompt, a partial turn of a finished
    conversation, and an edited prompt (whose row --changed-prompts regenerate moves). Returns the snapshot."""
    ws.dataset("short", "a", [chat(f"c{i}", f"q {i}", "x", f"r {i}") for i in range(4)])
    ws.dataset("short", "b", 2)
    assert ws.run("--server-url", url, *ALL).returncode == 0
    folder = ws.outputs / "a"
    done = {r["id"]: r for r in ws.results("a")}
    with open(folder / "raw_responses.jsonl", "ab") as fh:
        fh.write(b'{"id": "c9", "mess')
    error = ErrorRecord("c0", "a", "failed", "http_500", "an earlier failure", 1, 500, "2026-12-01T00:00:00+00:00")
    (folder / "errors.jsonl").write_bytes(error.to_json())
    turn = {"id": "c0", "turn": 0, "data": done["c0"]["turns"][0]}
    turn |= {"prompt_hash": done["c0"]["prompt_hash"], "settings": done["c0"]["settings"]}
    (folder / "partial_turns.jsonl").write_bytes(orjson.dumps(turn) + b"\n")
    ws.dataset("short", "a", [chat(f"c{i}", f"q {i}" if i != 1 else "q 1 edited", "x", f"r {i}") for i in range(4)])
    before = snapshot(ws.outputs)
    assert set(before) >= {"a/raw_responses.jsonl", "a/errors.jsonl", "a/partial_turns.jsonl", "a/settings.jsonl"}
    return before


REGENERATE = ("--changed-prompts", "regenerate", *ALL)


@pytest.mark.parametrize(
    "kind", ["settings from a flag", "settings from the server", "changed prompts", "server down", "lock", "bad line"]
)
def test_a_run_that_refuses_leaves_every_file_as_it_was(ws, make_sim, kind):
    sim = make_sim("chatml")
    before = lived_in(ws, sim.url)
    holder = None
    args: tuple[str, ...] = ("--server-url", sim.url, *REGENERATE)
    code, says = 2, ""
    if kind == "settings from a flag":
        args, says = ("--server-url", sim.url, "--changed-prompts", "regenerate", *COMMON), "--regenerate all -> last"
    elif kind == "settings from the server":
        args, says = (*args, "--reasoning-parser", "qwen3"), "--reasoning-parser (unset) -> qwen3"
    elif kind == "changed prompts":
        args, says = ("--server-url", sim.url, *ALL), "1 done prompts"
    elif kind == "server down":
        args, code = ("--server-url", "http://127.0.0.1:9", "--server-wait", "0", *REGENERATE), 3
    elif kind == "lock":  # b is locked (by this process), a comes first
        holder = DatasetStore(ws.outputs, "b")
        holder.lock()
        code, says = 4, "another run"
    else:
        with open(ws.prompts / "short" / "b.jsonl", "ab") as fh:
            fh.write(b"not json\n")
        says = "not valid JSON"
    try:
        result = ws.run(*args)
    finally:
        if holder is not None:
            holder.close()
    assert result.returncode == code, result.stderr
    assert snapshot(ws.outputs) == before
    assert says in last_line(result.stderr)


def test_the_run_that_goes_ahead_makes_every_repair_the_refused_ones_left(ws, make_sim):
    sim = make_sim("chatml")
    lived_in(ws, sim.url)
    folder = ws.outputs / "a"
    requests = sim.stats()["generate_requests"]
    result = ws.run("--server-url", sim.url, *REGENERATE)
    assert result.returncode == 0, result.stderr
    assert "a: moved a torn last line (18 bytes) to raw_responses.jsonl.torn" in result.stderr
    assert "a: moved 1 row of changed prompts to changed_rows.jsonl" in result.stderr
    assert sim.stats()["generate_requests"] - requests == 2  # the two turns of c1
    rows = {r["id"]: r for r in ws.assert_exactly_once("a", [f"c{i}" for i in range(4)])}
    assert answers(rows["c1"]) == ["Answer: q 1 edited", "Answer: r 1"]
    assert (folder / "raw_responses.jsonl.torn").read_bytes() == b'{"id": "c9", "mess\n'
    assert [r["id"] for r in ws.rows("a", "changed_rows.jsonl")] == ["c1"]
    assert not ws.errors("a") and not (folder / "partial_turns.jsonl").exists()


# --- 4: duplicates are found by the record id ---------------------------------------------------------------
def greeting(rid: str, question: str) -> dict:
    """A ShareGPT-style conversation that opens with the assistant's greeting."""
    return {
        "id": rid,
        "conversations": [
            {"from": "gpt", "value": "Hello! How can I help?"},
            {"from": "human", "value": question},
            {"from": "gpt", "value": "source answer"},
            {"from": "human", "value": f"{question}, again"},
            {"from": "gpt", "value": "source answer"},
        ],
    }


def test_a_duplicated_id_whose_conversation_opens_with_the_assistant_is_generated_once(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "mt", [greeting("g", "first"), greeting("h", "other"), greeting("g", "second copy")])
    args = ("--server-url", sim.url, "--regenerate", "each", *COMMON)
    first = ws.run(*args)
    assert first.returncode == 0, first.stderr
    assert "1 duplicate id ignored (first wins)" in first.stderr
    rows = {r["id"]: r for r in ws.assert_exactly_once("mt", ["g#1", "g#2", "h#1", "h#2"])}
    assert rows["g#2"]["content"] == "Answer: first, again"
    assert sim.stats()["generate_requests"] == 4
    again = ws.run(*args)
    assert again.returncode == 0 and "nothing to do" in again.stderr, again.stderr


def run_inprocess(tmp_path: Path, server: ScriptedServer, **overrides: str) -> tuple[int, str]:
    """One run over tmp_path/prompts/p, in this process, against a scripted server."""
    cfg = RunConfig(
        partition="p",
        prompts_dir=tmp_path / "prompts",
        output_dir=tmp_path / "out",
        server_url=URL,
        concurrency=1,
        **overrides,  # type: ignore[arg-type]
    ).validate()
    out = io.StringIO()
    client = SGLangClient(URL, None, 1, 30.0, transport=httpx.MockTransport(server))

    async def main() -> int:
        try:
            return await Runner(cfg, Progress.of_run(cfg, out, tty=False), client=client).run()
        finally:
            await client.aclose()

    return asyncio.run(main()), out.getvalue()


def rows_of(tmp_path: Path, name: str = "raw_responses.jsonl") -> list[dict]:
    path = tmp_path / "out" / "d" / name
    return [orjson.loads(line) for line in path.read_bytes().splitlines()] if path.exists() else []


def test_partial_turns_beyond_the_turns_a_conversation_now_has_are_generated_again_not_a_crash(tmp_path, tokenizers):
    """Cutting a trailing reply of [user, assistant, assistant] keeps the conversation's hash (its trailing
    replies are regenerated in any mode) but leaves one turn to generate, where one is already kept."""
    server = ScriptedServer(tokenizers["chatml"], [answer, lambda: httpx.Response(400, json={"error": "no"})])
    path = tmp_path / "prompts" / "p" / "d.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(orjson.dumps(chat("c0", "q", "a1")) + b"\n")
    record = orjson.loads(path.read_bytes())
    record["messages"].append({"role": "assistant", "content": "a2"})
    path.write_bytes(orjson.dumps(record) + b"\n")
    code, _ = run_inprocess(tmp_path, server, regenerate="all")
    assert code == 1  # the second turn was refused
    assert [p["turn"] for p in rows_of(tmp_path, "partial_turns.jsonl")] == [0]

    path.write_bytes(orjson.dumps(chat("c0", "q", "a1")) + b"\n")
    code, out = run_inprocess(tmp_path, server, regenerate="all")
    assert code == 0, out
    [row] = rows_of(tmp_path)
    assert len(row["turns"]) == 1 and server.generate_calls == 3
