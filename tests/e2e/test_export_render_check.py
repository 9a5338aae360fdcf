"""The render check of export_training.py on rows of real runs against the simulator with real chat
templates: it tells exact rows from drifting ones by kind, names the first example, and --fail-on-drift stops
the export; specforge rows are one per generated turn, history renders back to the prompt the model saw."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import orjson
import pyarrow.json as paj
from model_tokenizers import build_model_tokenizer
from workspace import chat

from tests.e2e.test_export_trainer_rows import COMMON, EXPORT, LOOKUP_TOOL, agent, answers


def qwen3_run(ws, qwen3, log: Path, dataset: str, rows: list[dict], *args: str, style: str = "think") -> None:
    from simharness import start_sim

    ws.dataset("short", dataset, rows)
    with start_sim(
        qwen3,
        "--request-log",
        str(log),
        "--output-style",
        style,
        "--tool-call-parser",
        "qwen25",
        "--reasoning-parser",
        "qwen3",
    ) as sim:
        done = ws.run("--server-url", sim.url, "--dataset", dataset, *COMMON, *args)
        assert done.returncode == 0, done.stderr


def test_specforge_rows_are_one_per_generated_turn_each_ending_at_it_with_the_history_the_model_saw(
    ws, tmp_path, qwen3
):
    log = tmp_path / "requests.jsonl"
    thinking_off = ("--chat-template-kwargs", '{"enable_thinking": false}')
    conversation = chat("c", "Name a prime.", "old one", "Another?", "old two", "And a third?")
    qwen3_run(ws, qwen3, log, "d", [conversation], "--regenerate", "all", *thinking_off)
    [record] = ws.results("d")
    done = ws.run("--dataset", "d", "--out", "sf.jsonl", "--tokenizer", str(qwen3), script=EXPORT)
    assert done.returncode == 0, done.stderr
    rows = paj.read_json(ws.root / "sf.jsonl").to_pylist()
    assert [r["id"] for r in rows] == ["d/c#0", "d/c#1", "d/c#2"]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(qwen3))
    sent = answers(log)
    for k, (row, turn) in enumerate(zip(rows, record["turns"], strict=True)):
        assert row["status"] == "success" and row["enable_thinking"] is False
        assert row["conversations"][-1]["role"] == "assistant"
        assert row["conversations"][-1]["content"] == turn["content"]
        assert len([m for m in row["conversations"] if m["role"] == "user"]) == k + 1
        assert row["synthgen_meta"]["generated_turns"] == [2 * i + 1 for i in range(k + 1)]
        # the history renders back to the prompt of this turn, exactly as it was sent
        history = [{key: v for key, v in m.items() if v is not None} for m in row["conversations"][:-1]]
        prompt = tokenizer.apply_chat_template(
            history, tokenize=False, add_generation_prompt=True, enable_thinking=False
        )
        assert tokenizer(prompt, add_special_tokens=False)["input_ids"] == sent[turn["request_id"]]["input_ids"]
    assert (
        "note: specforge rows end at the one turn the model generated: train with data.train_only_last_turn: true"
        in (done.stderr)
    )


def render_lines(stdout: str) -> list[str]:
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("  render check"))
    end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith("    "))
    return lines[start:end]


def test_the_render_check_is_on_by_default_and_counts_drifting_rows_by_kind_with_the_first_example(ws, tmp_path, qwen3):
    # Thinking off: the template pre-fills "<think>\n\n</think>\n\n", the model writes "Answer: ...", and the
    # text re-tokenized whole merges the newlines with the answer's first letters. A tool turn re-tokenizes
    # exactly, but the newline Qwen3's template writes after <|im_end|> is trained by a completion-only trainer.
    log = tmp_path / "requests.jsonl"
    off = ("--chat-template-kwargs", '{"enable_thinking": false}')
    qwen3_run(ws, qwen3, log, "d", [chat("a", "Name a prime."), chat("b", "Name a colour.")], *off)
    qwen3_run(ws, qwen3, log, "agents", [agent("t")], *off, style="qwen_tool")
    # No --tokenizer: the one each dataset's settings.jsonl records is used.
    report = ws.run("--dataset", "d", "--dataset", "agents", "--report", script=EXPORT)
    assert report.returncode == 0, report.stderr
    d, agents = report.stdout.split("\nagents  (")
    assert render_lines(d)[:3] == [
        "  render check                           0 of 2 rows exact   (the model's chat template)",
        "    boundary re-tokenization             2   (the same text tokenizes differently when re-tokenized whole)",
        "      first: d/a: token 21: '\\n\\nAns' stored, '\\n\\nA' re-tokenized",
    ]
    assert render_lines(agents) == [
        "  render check                           0 of 1 row exact   (the model's chat template)",
        "    extra-trained tokens                 1   (tokens after the generated turn are trained (e.g. a newline "
        "after the end-of-turn token))",
        "      first: agents/t: 1 trained after the turn: '\\n'",
    ]
    assert report.stdout.endswith(
        "some rows do not render to the ids the model saw and wrote: export --format tokens to train on "
        "exactly those ids\n"
    )


def test_fail_on_drift_writes_nothing_and_exits_1_and_an_exact_export_passes_it(ws, tmp_path, tokenizers):
    from simharness import start_sim

    # The tiny ChatML template without the newline after <|im_end|>: the model's answer renders back exactly.
    exact = tmp_path / "exact-chatml"
    shutil.copytree(tokenizers["chatml"], exact)
    template = (exact / "chat_template.jinja").read_text()
    (exact / "chat_template.jinja").write_text(template.replace("'<|im_end|>\\n'", "'<|im_end|>'"))
    assert (exact / "chat_template.jinja").read_text() != template
    ws.dataset("short", "d", [chat("a", "Name a prime."), chat("b", "Name a colour.")])
    with start_sim(exact, "--no-reasoning") as sim:
        assert ws.run("--server-url", sim.url, "--dataset", "d", "--max-tokens", "64").returncode == 0
    done = ws.run("--dataset", "d", "--out", "sf.jsonl", "--fail-on-drift", script=EXPORT)
    assert done.returncode == 0, done.stderr
    assert "d: render check (the model's chat template): 2 of 2 rows exact" in done.stderr.splitlines()
    # The same rows checked with the stock template (a newline after each <|im_end|>, so another history than
    # the prompts had) drift, and the check says the template is not the run's: nothing is written.
    (ws.root / "sf.jsonl").write_text("previous\n")
    done = ws.run(
        "--dataset",
        "d",
        "--out",
        "sf.jsonl",
        "--fail-on-drift",
        "--tokenizer",
        str(tokenizers["chatml"]),
        script=EXPORT,
    )
    assert done.returncode == 1
    assert "d: render check (the model's chat template): 0 of 2 rows exact; drifting: 2 text differs" in done.stderr
    assert "note: d: the tokenizer's chat template is not the one the run rendered with" in done.stderr
    assert done.stderr.splitlines()[-1] == (
        "export_training.py: error: 2 of 2 exported rows do not render to the stored ids (kinds above); nothing "
        "written: export --format tokens for the exact ids, or drop --fail-on-drift"
    )
    assert (ws.root / "sf.jsonl").read_text() == "previous\n"
    assert not [p for p in ws.root.iterdir() if p.name.endswith(".tmp")]


def test_exported_files_follow_the_umask_and_report_with_out_writes_the_file(ws, tmp_path, qwen3):
    log = tmp_path / "requests.jsonl"
    qwen3_run(ws, qwen3, log, "d", [chat("a", "Name a prime.")])
    done = ws.run("--dataset", "d", "--format", "tokens", "--out", "t.jsonl", "--report", script=EXPORT)
    assert done.returncode == 0, done.stderr
    assert "total: 1 of 1 row" in done.stdout
    mode = stat.S_IMODE(os.stat(ws.root / "t.jsonl").st_mode)
    assert mode == 0o666 & ~_umask()
    assert len(paj.read_json(ws.root / "t.jsonl").to_pylist()) == 1


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_history_tool_call_arguments_keep_the_prompt_files_form(ws, tmp_path, qwen3):
    log = tmp_path / "requests.jsonl"
    row = agent("tool")
    row["messages"][2]["tool_calls"][0]["function"]["arguments"] = {"query": "Paris weather"}  # an object
    qwen3_run(
        ws, qwen3, log, "agents", [row], "--chat-template-kwargs", '{"enable_thinking": false}', style="qwen_tool"
    )
    done = ws.run("--dataset", "agents", "--format", "messages", "--out", "m.jsonl", script=EXPORT)
    assert done.returncode == 0, done.stderr
    [out] = [orjson.loads(line) for line in (ws.root / "m.jsonl").read_bytes().splitlines()]
    assert out["messages"][2]["tool_calls"][0]["function"]["arguments"] == {"query": "Paris weather"}
    assert out["generated_turns"] == [6]
    # The history renders back to the prompt's ids: the only drift left is the newline after <|im_end|>.
    assert "agents: render check (the model's chat template): 0 of 1 row exact; drifting: 1 extra-trained tokens" in (
        done.stderr.splitlines()
    )
    done = ws.run("--dataset", "agents", "--out", "sf.jsonl", script=EXPORT)
    [sf] = paj.read_json(ws.root / "sf.jsonl").to_pylist()
    assert sf["conversations"][2]["tool_calls"][0]["function"]["arguments"] == json.dumps({"query": "Paris weather"})
    assert json.loads(sf["tools"]) == [LOOKUP_TOOL]


def test_a_template_that_drops_the_final_turns_reasoning_is_reported_as_reasoning_dropped(tmp_path, monkeypatch):
    # Kimi-K2-Thinking's template keeps reasoning only after the last plain assistant turn: a finished
    # conversation renders its answer with an empty <think></think>, so the row trains on other text.
    from result_rows import record, write_results

    from synthgen.chat.templating import load_tokenizer

    monkeypatch.chdir(tmp_path)
    folder = build_model_tokenizer(tmp_path / "tok", "kimi-k2-thinking")
    tokenizer = load_tokenizer(str(folder))
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime."}]
    seen = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    written = "<think>Primes have two divisors.</think>Seven."
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assistant = {"role": "assistant", "content": "Seven.", "reasoning_content": "Primes have two divisors."}
    row = record(
        "k",
        messages=[*prompt, assistant],
        content="Seven.",
        reasoning_content="Primes have two divisors.",
        output_text=written,
        input_ids=tokenizer(seen, add_special_tokens=False)["input_ids"],
        output_ids=[*tokenizer(written, add_special_tokens=False)["input_ids"], end],
    )
    write_results(tmp_path, "chat", [row])
    from tests.e2e.test_export_hostile_inputs import export as run_export

    done = run_export(tmp_path, "--dataset", "chat", "--report", "--tokenizer", str(folder))
    assert done.returncode == 0, done.stderr
    assert render_lines(done.stdout) == [
        "  render check                           0 of 1 row exact   (the model's chat template)",
        "    reasoning dropped                    1   (the template drops this turn's reasoning)",
        "      first: chat/k: 'Primes have two divisors.' not in the rendered text",
    ]
