"""export_training.py as a user runs it: result files built from ResultRecord objects, every format loaded
back with pyarrow's JSON reader (what `datasets.load_dataset("json")` uses), filters, counts, split, report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.json as paj
import pytest
from result_rows import ARGS, CALC_TOOL, WEATHER_TOOL, old_row, record, tool_row, truncated_row, write_results
from specforge_validator import validate_file, validate_row

from synthgen.cli.export import main
from synthgen.export.config import val_path

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def read_arrow(path: Path) -> list[dict]:
    """The file as a trainer's loader reads it: Arrow infers one schema for all rows or fails."""
    return paj.read_json(path).to_pylist()


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- formats -----------------------------------------------------------------------------------------
def test_specforge_rows_keep_the_models_text_and_tool_arguments_byte_for_byte_and_load_in_arrow(project, capsys):
    write_results(project, "chat", [record("a"), tool_row("t1"), record("b", tools=[CALC_TOOL]), old_row("old")])
    code, _, err = run(capsys, "--dataset", "chat", "--out", "train.jsonl")
    assert code == 0, err
    rows = {r["id"]: r for r in jsonl(project / "train.jsonl")}
    assert list(rows) == ["chat/a", "chat/t1", "chat/b", "chat/old"]
    a = rows["chat/a"]
    assert a["conversations"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Question a?"},
        {"role": "assistant", "content": "Answer a.", "reasoning_content": "Let me think."},
    ]
    assert "tools" not in a
    assert set(a) == {"id", "conversations", "status", "synthgen_meta"}
    assert a["status"] == "success" and a["synthgen_meta"]["generated_turns"] == [2]
    assert a["synthgen_meta"]["finish_reason"] == "stop" and a["synthgen_meta"]["completion_tokens"] == 4
    t1 = rows["chat/t1"]
    call = t1["conversations"][-1]["tool_calls"][0]
    assert call == {"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}
    assert t1["conversations"][-1]["content"] == ""
    assert json.loads(t1["tools"]) == [WEATHER_TOOL]
    assert t1["thinking"] is True  # a chat_template_kwarg: SpecForge passes it to the template
    loaded = {r["id"]: r for r in read_arrow(project / "train.jsonl")}
    assert loaded["chat/t1"]["conversations"][-1]["tool_calls"][0]["function"]["arguments"] == ARGS
    assert loaded["chat/old"]["conversations"][-1]["reasoning_content"] == "Let me think."
    assert json.loads(loaded["chat/b"]["tools"]) == [CALC_TOOL]


def test_messages_rows_are_openai_style_with_tools_as_given(project, capsys):
    write_results(project, "chat", [record("a"), tool_row("t1")])
    code, _, err = run(capsys, "--dataset", "chat", "--format", "messages", "--out", "sft.jsonl")
    assert code == 0, err
    rows = jsonl(project / "sft.jsonl")
    assert rows[0] == {
        "id": "chat/a",
        "generated_turns": [2],
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Question a?"},
            {"role": "assistant", "content": "Answer a.", "reasoning_content": "Let me think."},
        ],
    }
    assert rows[1]["tools"] == [WEATHER_TOOL]
    assert rows[1]["messages"][-1]["tool_calls"][0]["function"]["arguments"] == ARGS
    assert len(read_arrow(project / "sft.jsonl")) == 2


def test_tokens_rows_are_prompt_plus_output_ids_with_the_mask_on_the_output_and_old_rows_are_refused(project, capsys):
    write_results(project, "chat", [record("a"), old_row("old"), truncated_row("cut")])
    code, _, err = run(capsys, "--dataset", "chat", "--format", "tokens", "--out", "tok.jsonl")
    assert code == 0, err
    assert jsonl(project / "tok.jsonl") == [
        {"id": "chat/a", "input_ids": [1, 5, 6, 7, 10, 11, 12, 2], "loss_mask": [0, 0, 0, 0, 1, 1, 1, 1]}
    ]
    assert err.splitlines()[0] == "chat: 1 of 3 rows (dropped: 1 no_ids, 1 truncated)"
    assert read_arrow(project / "tok.jsonl")[0]["loss_mask"] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_duplicates_torn_lines_and_filtered_rows_are_counted_and_the_first_copy_of_an_id_wins(project, capsys):
    write_results(
        project,
        "chat",
        [record("a"), record("a", content="second copy"), truncated_row("cut"), record("e", content="")],
        tail=b'{"id": "torn", "mess',
    )
    code, _, err = run(capsys, "--dataset", "chat", "--format", "messages", "--out", "o.jsonl")
    assert code == 0
    assert (
        err.splitlines()[0]
        == "chat: 1 of 4 rows (dropped: 1 duplicate, 1 empty, 1 truncated; 1 unreadable line skipped)"
    )
    assert jsonl(project / "o.jsonl")[0]["messages"][-1]["content"] == "Answer a."


def test_keep_truncated_leaves_cut_rows_without_an_answer_out_of_specforge_so_specforges_validator_accepts_it(
    project, capsys
):
    # such rows used to be written with status "success" and an empty answer, which the validator refuses.
    write_results(project, "chat", [record("a"), truncated_row("cut"), truncated_row("mid", content="A partial")])
    code, _, err = run(capsys, "--dataset", "chat", "--keep-truncated", "--out", "train.jsonl")
    assert code == 0, err
    assert err.splitlines()[0] == "chat: 2 of 3 rows (dropped: 1 cut_empty)"
    assert (
        "note: 1 row dropped as cut_empty: kept by --keep-truncated but SpecForge's validator refuses an empty "
        "answer; --format tokens keeps them"
    ) in err.splitlines()
    assert [r["id"] for r in jsonl(project / "train.jsonl")] == ["chat/a", "chat/mid"]
    assert validate_file(project / "train.jsonl") == 2
    code, _, err = run(capsys, "--dataset", "chat", "--keep-truncated", "--format", "tokens", "--out", "tok.jsonl")
    assert code == 0 and len(jsonl(project / "tok.jsonl")) == 3, err


def test_specforges_validator_refuses_tool_turns_and_history_without_reasoning_as_docs_export_md_says(project, capsys):
    history = [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "A1"},  # the prompt file's turn: no reasoning
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "content": "A2", "reasoning_content": "Let me think."},
    ]
    write_results(project, "chat", [record("a"), tool_row("t1"), record("m", messages=history, content="A2")])
    code, _, err = run(capsys, "--dataset", "chat", "--out", "train.jsonl")
    assert code == 0, err
    plain, tool, multi = jsonl(project / "train.jsonl")
    assert validate_row(plain, expect_reasoning=True, strict_think_markers=True) == 1
    with pytest.raises(ValueError, match="message 2 content must be a non-empty string"):
        validate_row(tool)  # a tool-calling turn has no text; SpecForge's validator does not know tool calls
    assert validate_row(multi) == 2
    with pytest.raises(ValueError, match="assistant message 1 has empty reasoning_content"):
        validate_row(multi, expect_reasoning=True)


def test_a_lone_surrogate_in_tool_call_arguments_is_exported_as_the_escape_the_model_wrote_in_every_format(
    project, capsys
):
    # a parser decodes {"q": "\ud83d"} to a lone surrogate; the run writes the row with ASCII escapes,
    # which orjson refuses to read: the row used to be lost as an unreadable line, or the export crashed writing it.
    arguments = '{"q": "\ud83d"}'
    calls = [{"id": "call_0", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}]
    row = record("s", content="", tool_calls=calls, tools=[WEATHER_TOOL]).to_dict()
    path = write_results(project, "chat", [record("a")])
    with path.open("a") as fh:
        fh.write(json.dumps(row, ensure_ascii=True) + "\n")
    for fmt in ("specforge", "messages", "tokens"):
        code, _, err = run(capsys, "--dataset", "chat", "--format", fmt, "--out", f"{fmt}.jsonl")
        assert code == 0, err
        assert err.splitlines()[0] == "chat: 2 of 2 rows", err
        rows = read_arrow(project / f"{fmt}.jsonl")  # Arrow refuses a lone surrogate escape anywhere in a file
        assert [r["id"] for r in rows] == ["chat/a", "chat/s"]
        if fmt != "tokens":
            turns = rows[1]["conversations" if fmt == "specforge" else "messages"]
            written = turns[-1]["tool_calls"][0]["function"]["arguments"]
            assert written == '{"q": "\\ud83d"}' and json.loads(written) == {"q": "\ud83d"}


def test_val_fraction_writes_a_second_file_named_with_val_before_the_extension(project, capsys):
    write_results(project, "chat", [record(f"r{i}") for i in range(40)])
    (project / "data").mkdir()
    code, _, err = run(
        capsys, "--dataset", "chat", "--out", "data/train.jsonl", "--val-fraction", "0.25", "--shuffle", "--seed", "5"
    )
    assert code == 0, err
    train, val = jsonl(project / "data/train.jsonl"), jsonl(project / "data/train.val.jsonl")
    assert len(train) + len(val) == 40 and val
    assert not {r["id"] for r in train} & {r["id"] for r in val}
    assert sorted(p.name for p in (project / "data").iterdir()) == ["train.jsonl", "train.val.jsonl"]
    assert val_path(Path("out")) == Path("out.val")


# --- selection and errors ----------------------------------------------------------------------------
def test_datasets_come_from_a_partition_a_budget_file_or_every_result_folder(project, capsys):
    for name in ("glaive", "ultrachat"):
        (project / "prompts/short").mkdir(parents=True, exist_ok=True)
        (project / f"prompts/short/{name}.jsonl").write_text('{"id": "1", "prompt": "hi"}\n')
        write_results(project, name, [record("1", name)])
    (project / "budget.json").write_text(
        json.dumps(
            {"datasets": {"ultrachat": {"max_samples": 1}, "elsewhere": {"max_samples": 0, "avg_source": "fixed"}}}
        )
    )
    for argv, ids in (
        (["--partition", "short"], ["glaive/1", "ultrachat/1"]),
        (["--budget", "budget.json"], ["ultrachat/1"]),
        ([], ["glaive/1", "ultrachat/1"]),
    ):
        code, _, err = run(capsys, *argv, "--out", "o.jsonl")
        assert code == 0, err
        assert [r["id"] for r in jsonl(project / "o.jsonl")] == ids


@pytest.mark.parametrize(
    ("setup", "argv", "message"),
    [
        (
            "partition",
            ["--partition", "short", "--dataset", "nope", "--out", "o.jsonl"],
            "unknown dataset nope in partition 'short' (known: chat)",
        ),
        (
            "none",
            ["--dataset", "chat", "--out", "o.jsonl"],
            "outputs/chat/raw_responses.jsonl: no results for dataset 'chat'; run it first "
            "(python run_inference.py --dataset chat) or check --output-dir",
        ),
        (
            "dropped",
            ["--dataset", "chat", "--out", "o.jsonl"],
            "nothing to export: 1 row read, none kept; see why with --report",
        ),
        ("rows", ["--dataset", "chat"], "--out FILE is required (or --report to only see what would be exported)"),
        (
            "rows",
            ["--budget", "missing.json", "--out", "o.jsonl"],
            "missing.json: budget file not found; create it with compute_budget.py --out missing.json",
        ),
        (
            "rows",
            ["--dataset", "chat", "--out", "o.jsonl", "--val-fraction", "1.5"],
            "--val-fraction must be at least 0 and below 1, got 1.5",
        ),
        (
            "rows",
            ["--format", "csv"],
            "argument --format: invalid choice: 'csv' "
            "(choose from 'axolotl-kd', 'messages', 'specforge', 'tokens', 'topk-sparse') "
            "(see export_training.py --help)",
        ),
    ],
)
def test_user_errors_are_one_line_with_exit_code_2_and_write_nothing(project, capsys, setup, argv, message):
    (project / "prompts/short").mkdir(parents=True)
    (project / "prompts/short/chat.jsonl").write_text('{"id": "1", "prompt": "hi"}\n')
    if setup == "dropped":
        write_results(project, "chat", [truncated_row()])
    elif setup == "rows":
        write_results(project, "chat", [record("a")])
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.splitlines()[-1] == f"export_training.py: error: {message}"
    # the dropped counts and the flag that keeps them, then the error
    assert len(err.splitlines()) == (3 if setup == "dropped" else 1)
    assert not (project / "o.jsonl").exists()


def test_an_unwritable_output_folder_is_exit_code_5_and_leaves_no_temp_file(project, capsys):
    write_results(project, "chat", [record("a")])
    code, _, err = run(capsys, "--dataset", "chat", "--out", "missing/o.jsonl")
    assert code == 5
    assert err.splitlines()[-1].startswith("export_training.py: error: ")
    assert "cannot write the export" in err


def test_a_failed_export_leaves_the_previous_file_untouched(project, capsys):
    write_results(project, "chat", [truncated_row()])
    (project / "o.jsonl").write_text("previous\n")
    assert run(capsys, "--dataset", "chat", "--out", "o.jsonl")[0] == 2
    assert (project / "o.jsonl").read_text() == "previous\n"


# --- report ------------------------------------------------------------------------------------------
def test_the_report_shows_counts_shares_and_histograms_and_writes_nothing(project, capsys):
    rows = [
        record("a", completion_tokens=100),
        record("b", completion_tokens=300),
        tool_row("t1"),
        truncated_row("cut"),
        record("a"),
    ]
    write_results(project, "chat", rows, tail=b'{"torn')
    code, out, err = run(capsys, "--dataset", "chat", "--report")
    assert (code, err) == (0, "")
    assert out == "\n".join(
        [
            "chat  (outputs/chat/raw_responses.jsonl)",
            "  rows read                              5",
            "  exported                               3   (--format specforge)",
            "  dropped                                2",
            "    duplicate id (first kept)            1",
            "    cut at max tokens                    1   (finish_reason length; --keep-truncated keeps them)",
            "  unreadable lines                       1   (torn or not JSON; skipped)",
            "  share cut at max tokens            25.0%   (1 of 4)",
            "  share with empty answer             0.0%   (0 of 4)",
            "  tool calls per row             0: 3   1: 1",
            "  output tokens in rows                408",
            "  cut, reasoning open                    1   rows, 4 tokens"
            " (--max-tokens; --continue-cut N continues them)",
            "  settings sets                          1",
            "    unrecorded                           4   (rows written before settings ids)",
            "",
            "  completion tokens  n=4  min 4  p50 4  p90 300  p99 300  max 300",
            "      0 -  49  ######################################## 2  p50",
            "     50 -  99                                           0",
            "    100 - 149  ####################                     1",
            "    150 - 199                                           0",
            "    200 - 249                                           0",
            "    250 - 299                                           0",
            "    300 - 349  ####################                     1  p90 p99",
            "",
            "  prompt tokens  n=4  min 4  p50 4  p90 4  p99 4  max 4",
            "    4 - 4  ######################################## 4  p50 p90 p99",
            "",
            "  reasoning chars  n=4  min 13  p50 13  p90 16  p99 16  max 16",
            "    13 - 13  ######################################## 3  p50",
            "    14 - 14                                           0",
            "    15 - 15                                           0",
            "    16 - 16  #############                            1  p90 p99",
            "",
            "total: 3 of 5 rows would be exported as specforge",
            "specforge rows end at the one turn the model generated: train with data.train_only_last_turn: true "
            "(SpecForge's config), or earlier assistant turns are trained too",
            "render check skipped: no tokenizer; pass --tokenizer PATH (the model's tokenizer folder)",
            "",
        ]
    )
    assert not list(project.glob("*.jsonl"))
    assert out.isascii() and "\r" not in out and "\x1b" not in out


def test_the_report_says_where_generated_tokens_went_loops_cut_continued_and_partials_waiting(project, capsys):
    rows = [
        record("loop", completion_tokens=900, finish_reason="repetition"),
        record("open", completion_tokens=500, finish_reason="length", reasoning_complete=False, content=""),
        record("cont", completion_tokens=30, segments=[20, 10]),
        record("ok", completion_tokens=70),
    ]
    write_results(project, "chat", rows)
    partial = {"id": "p", "turn": 0, "output_ids": [1, 2, 3], "segments": [3], "prompt_hash": None, "settings": None}
    (project / "outputs" / "chat" / "partial_outputs.jsonl").write_text(json.dumps(partial) + "\n")
    code, out, err = run(capsys, "--dataset", "chat", "--report")
    assert code == 0, err
    assert "  output tokens in rows              1,500" in out
    assert "  ended in a loop                        1   rows, 900 tokens (the loop guard; never exported)" in out
    assert "  cut, reasoning open                    1   rows, 500 tokens" in out
    assert "  continued                              1   rows, 20 tokens (tokens of earlier attempts kept" in out
    assert "  partial outputs waiting                1   rows, 3 tokens (a rerun continues them)" in out
    assert "    ended by the loop guard              1" in out  # and dropped from the export, counted


def test_export_training_py_runs_as_a_script(project):
    write_results(project, "chat", [record("a")])
    done = subprocess.run(
        [sys.executable, str(ROOT / "export_training.py"), "--out", "o.jsonl"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "chat: 1 of 1 row",
        "wrote o.jsonl (1 row, specforge)",
        "note: specforge rows end at the one turn the model generated: train with data.train_only_last_turn: true "
        "(SpecForge's config), or earlier assistant turns are trained too",
        "note: render check skipped: no tokenizer; pass --tokenizer PATH (the model's tokenizer folder)",
    ]


# --- rendering with real chat templates --------------------------------------------------------------
SPECFORGE_MESSAGE_KEYS = {"role", "content", "tool_calls", "reasoning_content", "name", "tool_call_id"}
# What each model writes after its generation prompt, and what its template puts after the answer.
WRITTEN = {
    "qwen3": ("<think>\nPrimes have two divisors.\n</think>\n\nSeven.", "<|im_end|>\n"),
    "minimax-m2": ("Primes have two divisors.\n</think>\n\nSeven.", "[e~[\n"),  # the prompt opened <think>
    # Kimi-K2-Thinking's template drops the reasoning of the last answered turn: see the test below.
    "kimi-k2-thinking": ("<think>Primes have two divisors.</think>Seven.", "<|im_end|>"),
}


def specforge_render(tokenizer, row: dict) -> str:
    """What SpecForge's ThinkingParser renders for a row as Arrow loaded it (build_eagle3_dataset pops id,
    conversations and tools and passes every other column to the template)."""
    messages = []
    for raw in row["conversations"]:
        message = {k: v for k, v in raw.items() if k in SPECFORGE_MESSAGE_KEYS}
        for call in message.get("tool_calls") or []:
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        messages.append(message)
    extra = {k: v for k, v in row.items() if k not in ("id", "conversations", "tools")}
    tools = json.loads(row["tools"]) if row.get("tools") else None
    return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=False, **extra)


@pytest.mark.parametrize("model", sorted(WRITTEN))
def test_a_specforge_row_renders_back_to_the_prompt_the_model_saw_and_the_text_it_wrote(project, model):
    from model_tokenizers import build_model_tokenizer

    from synthgen.chat.parsers import split_reasoning
    from synthgen.chat.templating import load_tokenizer

    tokenizer = load_tokenizer(str(build_model_tokenizer(project / "tok", model)))
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime."}]
    seen = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    written, end_of_turn = WRITTEN[model]
    split = split_reasoning(written, seen.rstrip().endswith("<think>"))
    assistant = {"role": "assistant", "content": split.content, "reasoning_content": split.reasoning}
    row = record(
        "p",
        messages=[*prompt, assistant],
        content=split.content,
        reasoning_content=split.reasoning,
        output_text=written,
    )
    write_results(project, "chat", [row, record("q")])
    assert main(["--dataset", "chat", "--out", "sf.jsonl"]) == 0
    loaded = read_arrow(project / "sf.jsonl")[0]
    rendered = specforge_render(tokenizer, loaded)
    if model == "minimax-m2":
        # Given reasoning_content, MiniMax-M2's template adds its own newlines around it without stripping
        # the model's: the text differs in whitespace, so train MiniMax drafters on --format tokens.
        assert rendered != seen + written + end_of_turn and "Primes have two divisors." in rendered
    elif model == "kimi-k2-thinking":
        # The template keeps reasoning only after the last plain assistant turn: a finished conversation
        # renders with empty <think></think>, so train Kimi-K2-Thinking drafters on --format tokens.
        assert rendered == seen + "<think></think>Seven." + end_of_turn
    else:
        assert rendered == seen + written + end_of_turn
