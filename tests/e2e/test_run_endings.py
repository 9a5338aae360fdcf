"""How a run ends when prompts are left that it cannot finish, through the CLI: skips no rerun changes make
a rerun that has nothing else to do say so and start nothing; answers cut by --max-tokens are counted in
the summary and the last lines, with what to do about them."""

from __future__ import annotations

import shlex
import subprocess
import sys

from simharness import free_port, port_is_free, sim_command
from workspace import REPO, cli_env

DEADLINE = 120.0


def tool_conversation(rid: str) -> dict:
    """A conversation --regenerate all cannot rebuild: a tool call and its result."""
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "Paris"}'}}
    return {
        "id": rid,
        "messages": [
            {"role": "user", "content": "weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "name": "lookup", "content": "sunny"},
            {"role": "user", "content": "and tomorrow?"},
        ],
    }


def test_a_rerun_left_with_only_skips_no_rerun_changes_has_nothing_to_do_and_starts_no_server(ws, tokenizers):
    port = free_port()
    launch = sim_command(tokenizers["chatml"], port, "--context-length", "256")
    ws.dataset("short", "d", [{"id": "ok", "prompt": "short"}, {"id": "long", "prompt": "word " * 400}])
    ws.dataset("short", "mt", [{"id": "fine", "prompt": "hello"}, tool_conversation("tools")])
    args = ("--server-url", f"http://127.0.0.1:{port}", "--launch-server", launch, "--regenerate", "all")
    args += ("--max-tokens", "16", "--partition", "short")
    first = ws.run(*args, timeout=DEADLINE)
    assert first.returncode == 0, first.stderr
    assert "started server" in first.stderr
    assert sorted(e["error_type"] for e in ws.errors("d") + ws.errors("mt")) == ["cannot_regenerate", "prompt_too_long"]

    second = ws.run(*args, timeout=DEADLINE)
    assert second.returncode == 0, second.stderr
    assert "d (short): 2 prompts, no cap, 1 already done, 0 to run [1 skipped for good by an earlier run" in (
        second.stderr
    )
    assert "nothing to do: every selected prompt is done, or skipped for good by an earlier run" in second.stderr
    assert "started server" not in second.stderr and port_is_free(port)
    # Still listed, with the fix, so the user knows what would change them.
    assert "d: 1 prompt skipped (prompt_too_long), a rerun will not change that: " in second.stderr
    assert "mt: 1 prompt skipped (cannot_regenerate), a rerun will not change that: " in second.stderr
    assert len(ws.errors("d")) == len(ws.errors("mt")) == 1  # kept as they were


def test_a_run_whose_answers_all_hit_max_tokens_says_how_many_were_cut_and_what_to_do(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 3)
    result = ws.run("--server-url", sim.url, "--partition", "short", "--max-tokens", "3", "--concurrency", "2")
    assert result.returncode == 0, result.stderr
    assert "cut at --max-tokens: 3 of the 3 answers of this run (d 3); the export leaves them out unless " in (
        result.stderr
    )
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "rows: outputs/d/raw_responses.jsonl (3 of this run's 3 answers cut at --max-tokens: raise --max-tokens "
        "for whole answers, or export the cut ones too with --keep-truncated)"
    ), last
    # The export left to itself keeps none of them, and says which flag brings them back.
    command = last.split("export them with: ")[1]
    argv = shlex.split(command)
    exported = subprocess.run(
        [sys.executable, str(REPO / argv[1]), *argv[2:]], cwd=ws.root, env=cli_env(), capture_output=True, text=True
    )
    assert exported.returncode == 2 and "--keep-truncated keeps them" in exported.stderr


SUMMARY = ("dataset", "done", "total", "this run", "stop", "length", "repetition", "failed", "skipped")
SUMMARY += ("generated", "kept", "tok/s", "wall")


def summary(stderr: str) -> dict[str, dict[str, str]]:
    """The end-of-run table by dataset (TOTAL too): each column's text, read under its header."""
    lines = stderr.splitlines()
    head = next(i for i, line in enumerate(lines) if line.split() == [*SUMMARY[:3], "this", "run", *SUMMARY[4:]])
    table = {}
    for line in lines[head + 2 :]:
        if line.startswith("-"):
            continue
        cells = line.split()
        if len(cells) != len(SUMMARY):
            break
        table[cells[0]] = dict(zip(SUMMARY, cells, strict=True))
        if cells[0] == "TOTAL":
            break
    return table


def test_the_summary_says_per_dataset_how_answers_ended_and_tokens_generated_and_kept_and_the_last_line_the_loops(
    ws, make_sim
):
    sim = make_sim("chatml")
    rows = [{"id": "ok", "prompt": "a question"}, {"id": "loop", "prompt": "go [sim:loop]"}]
    ws.dataset("short", "d", [*rows, {"id": "cut", "prompt": "long [sim:long=5000]"}])
    ws.dataset("short", "e", [{"id": "x", "prompt": "another question"}])
    result = ws.run("--server-url", sim.url, "--partition", "short", "--max-tokens", "3000")
    assert result.returncode == 0, result.stderr
    shown = summary(result.stderr)
    d, e = ({r["id"]: r for r in ws.rows(name)} for name in ("d", "e"))
    assert [d[i]["finish_reason"] for i in ("ok", "loop", "cut")] == ["stop", "repetition", "length"]
    tokens = {i: row["completion_tokens"] for i, row in {**d, **e}.items()}
    figures = {
        "d": ("1", "1", "1", "0", f"{sum(tokens[i] for i in ('ok', 'loop', 'cut')):,}", f"{tokens['ok']:,}"),
        "e": ("1", "0", "0", "0", f"{tokens['x']:,}", f"{tokens['x']:,}"),
        "TOTAL": ("2", "1", "1", "0", f"{sum(tokens.values()):,}", f"{tokens['ok'] + tokens['x']:,}"),
    }
    columns = ("stop", "length", "repetition", "failed", "generated", "kept")
    assert {name: tuple(row[c] for c in columns) for name, row in shown.items()} == figures
    # One server: no answer is put down to another worker (the loop guard's answer names its server too).
    assert "by worker:" not in result.stderr
    # The last line says that the looping answer is in no export, and what brings a whole one.
    last = result.stderr.strip().splitlines()[-1]
    assert "1 of this run's 4 answers ended in a loop by the loop guard: left out of every export; --redo " in last
