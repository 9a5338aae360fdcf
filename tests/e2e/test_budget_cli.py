"""compute_budget.py as a user runs it: main(argv) in-process, and once as a real subprocess."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from synthgen.cli.budget import main
from synthgen.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
USE = "use K, M or B (e.g. 10M, 2.5B, 500K or 10000000)"


def write_jsonl(path: Path, rows, tail: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + tail)
    return path


@pytest.fixture
def project(tmp_path, monkeypatch):
    """prompts/long/math.jsonl (14,714 unique ids plus one repeat), prompts/short/chat.jsonl (3 + 1 repeat)."""
    math = [{"id": f"m{i}", "prompt": f"What is {i} squared?"} for i in range(14_714)]
    write_jsonl(tmp_path / "prompts/long/math.jsonl", math + [{"id": "m7", "prompt": "again"}])
    chat = [{"id": f"c{i}", "prompt": f"Say hello #{i}"} for i in range(3)]
    write_jsonl(tmp_path / "prompts/short/chat.jsonl", chat + [{"id": "c0", "prompt": "Say hello #0"}])
    (tmp_path / "outputs").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


def result(i, tokens, finish="stop", dataset="chat"):
    return {"id": f"c{i}", "dataset": dataset, "completion_tokens": tokens, "finish_reason": finish}


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def table_row(out: str, name: str) -> list[str]:
    """The cells of one table row, split on the two-space column gap."""
    line = next(line for line in out.splitlines() if line.startswith(name + " "))
    return [cell.strip() for cell in line.split("  ") if cell.strip()]


def test_the_documented_example_gives_2636_samples_and_9998348_tokens(project, capsys):
    code, out, err = run(capsys, "--dataset", "math", "--avg-tokens", "math=3793")
    assert code == 0
    assert out == "\n".join(
        [
            "Budget: 10,000,000 output tokens per dataset",
            "",
            "dataset  avg tokens  source        available  samples  expected tokens",
            "-------  ----------  ------------  ---------  -------  ---------------",
            "math          3,793  --avg-tokens     14,714    2,636        9,998,348",
            "-------  ----------  ------------  ---------  -------  ---------------",
            "total                                 14,714    2,636        9,998,348",
            "",
            "To generate: 9,998,348 tokens -> 2.8 h at 1,000 tok/s, 1.9 h at 1,500 tok/s",
            "",
        ]
    )
    assert err == "note: math: 1 repeated id(s) counted once, as the runner does\n"


def test_available_prompts_are_counted_after_de_duplication_across_every_partition(project, capsys):
    code, out, _ = run(capsys, "--default-avg", "100")
    assert code == 0
    assert table_row(out, "math")[3] == "14,714"
    assert table_row(out, "chat") == ["chat", "100", "--default-avg", "3", "3", "300"]


def test_partition_and_dataset_select_what_is_planned(project, capsys):
    code, out, _ = run(capsys, "--partition", "short", "--default-avg", "100")
    assert code == 0
    assert "chat " in out and "math " not in out


def test_the_average_is_measured_from_completed_rows_ignoring_a_torn_last_line(project, capsys):
    rows = [result(0, 100), result(1, 200), result(2, 300, "length"), result(3, 400)]
    rows.append(result(0, 9_999))  # a repeated id: the first row counts, as the resume scan does
    rows.append({"id": "c9", "dataset": "chat", "finish_reason": "stop"})  # no completion_tokens
    write_jsonl(project / "outputs/chat/raw_responses.jsonl", rows, tail='{"id": "c5", "completion_tok')
    code, out, err = run(capsys, "--dataset", "chat", "--tokens-per-dataset", "500")
    assert code == 0
    # mean 250 -> floor(500 / 250) = 2 samples
    assert table_row(out, "chat") == ["chat", "250", "measured: 4 rows, p50 200, p90 400", "3", "2", "500"]
    assert err.splitlines()[-1] == (
        "note: chat: 1 of 4 measured rows stopped at max_tokens (finish_reason 'length'); "
        "the average counts them at their capped length"
    )


@pytest.mark.parametrize(
    "argv, measured, source, avg",
    [
        (["--avg-tokens", "chat=50", "--default-avg", "70"], True, "avg-tokens", 50),
        (["--default-avg", "70"], True, "measured", 60),
        (["--default-avg", "70"], False, "default-avg", 70),
        (["--avg-tokens", "chat=50.5"], False, "avg-tokens", 50.5),
    ],
)
def test_avg_tokens_wins_over_the_measurement_which_wins_over_default_avg(project, capsys, argv, measured, source, avg):
    if measured:
        write_jsonl(project / "outputs/chat/raw_responses.jsonl", [result(0, 40), result(1, 80)])
    code, _, _ = run(capsys, "--dataset", "chat", "--out", "b.json", *argv)
    assert code == 0
    entry = json.loads((project / "b.json").read_text())["datasets"]["chat"]
    assert (entry["avg_source"], entry["avg_completion_tokens"]) == (source, avg)


def test_fixed_datasets_count_in_the_token_total_but_not_in_the_generation_time(project, capsys):
    code, out, _ = run(
        capsys, "--dataset", "chat", "--avg-tokens", "chat=1000", "--fixed", "wiki=7.2M", "--throughput", "1000"
    )
    assert code == 0
    assert table_row(out, "wiki") == ["wiki", "-", "fixed (generated elsewhere)", "-", "-", "7,200,000"]
    assert table_row(out, "total") == ["total", "3", "3", "7,203,000"]
    assert "To generate:     3,000 tokens -> 3 s at 1,000 tok/s" in out
    assert "Fixed:       7,200,000 tokens (generated elsewhere: in the total, not in the generation time)" in out


def test_a_fixed_dataset_that_also_has_prompts_is_not_planned_for_generation(project, capsys):
    code, out, _ = run(capsys, "--dataset", "chat", "--fixed", "chat=5K", "--out", "b.json")
    assert code == 0
    assert table_row(out, "chat")[2] == "fixed (generated elsewhere)"
    assert json.loads((project / "b.json").read_text())["datasets"] == {
        "chat": {
            "max_samples": 0,
            "available": None,
            "avg_completion_tokens": None,
            "avg_source": "fixed",
            "expected_tokens": 5000,
        },
    }


def test_a_fixed_dataset_need_not_exist_under_prompts(project, capsys):
    code, out, err = run(capsys, "--dataset", "wiki", "--fixed", "wiki=500K")
    assert (code, err) == (0, "")
    assert table_row(out, "total") == ["total", "0", "0", "500,000"]


def test_a_dataset_without_an_estimate_is_reported_with_how_to_measure_it(project, capsys):
    code, out, err = run(capsys, "--avg-tokens", "chat=10")
    assert code == 0
    assert table_row(out, "math") == ["math", "-", "no estimate", "14,714", "-", "-"]
    assert table_row(out, "total") == ["total", "14,717", "3", "30"]
    assert "No estimate: math (no sample count, not in the totals; see the notes on stderr)" in out
    assert (
        "note: math: no average completion length, so no sample count; run a small measurement first: "
        "python run_inference.py --partition long --dataset math --max-samples 50, "
        "or pass --avg-tokens math=N / --default-avg N"
    ) in err.splitlines()


def test_the_measurement_hint_carries_non_default_folders(project, capsys):
    (project / "prompts").rename(project / "p")
    code, _, err = run(capsys, "--prompts-dir", "p", "--output-dir", "o", "--dataset", "chat")
    assert code == 0
    assert (
        "python run_inference.py --partition short --dataset chat --prompts-dir p --output-dir o "
        "--max-samples 50" in err
    )


def test_the_budget_file_holds_the_plan_fixed_rows_and_the_no_estimate_list(project, capsys):
    write_jsonl(project / "outputs/chat/raw_responses.jsonl", [result(0, 3), result(1, 4)])
    code, _, err = run(capsys, "--tokens-per-dataset", "10", "--fixed", "wiki=2B", "--out", "budget.json")
    assert code == 0
    assert json.loads((project / "budget.json").read_text()) == {
        "tokens_per_dataset": 10,
        "datasets": {
            "chat": {
                "max_samples": 2,
                "available": 3,
                "avg_completion_tokens": 3.5,
                "avg_source": "measured",
                "expected_tokens": 7,
            },
            "wiki": {
                "max_samples": 0,
                "available": None,
                "avg_completion_tokens": None,
                "avg_source": "fixed",
                "expected_tokens": 2_000_000_000,
            },
        },
        "no_estimate": ["math"],
    }
    assert err.splitlines()[-1] == (
        "wrote budget.json; use it with: python run_inference.py --partition all --dataset chat --budget budget.json"
    )


def test_the_budget_file_is_replaced_whole_and_no_temporary_file_is_left(project, capsys):
    (project / "budget.json").write_text("old")
    code, _, _ = run(capsys, "--default-avg", "1K", "--out", "budget.json")
    assert code == 0
    assert json.loads((project / "budget.json").read_text())["datasets"]["chat"]["max_samples"] == 3
    assert sorted(p.name for p in project.iterdir()) == ["budget.json", "outputs", "prompts"]


def test_a_budget_file_that_cannot_be_written_exits_5_with_the_fix(project, capsys):
    code, out, err = run(capsys, "--default-avg", "1K", "--out", "missing/budget.json")
    assert (code, out) == (5, "")
    assert err.splitlines()[-1] == (
        "compute_budget.py: error: missing/budget.json: cannot write the budget file (No such file or directory); "
        "check that its folder exists and is writable"
    )
    assert not (project / "missing").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--dataset", "nope"], "unknown dataset nope in partition 'all' (known: math, chat)"),
        (["--partition", "medium"], "prompts/medium: no such partition (partitions here: long, short, or 'all')"),
        (["--prompts-dir", "nowhere"], "nowhere: prompts directory not found; pass --prompts-dir DIR"),
        (["--avg-tokens", "chat"], "--avg-tokens: 'chat' is not NAME=N; write it like --avg-tokens math=3793"),
        (["--avg-tokens", "chat=0"], "--avg-tokens chat must be positive, got '0'"),
        (["--avg-tokens", "chat=-5"], "--avg-tokens chat must be positive, got '-5'"),
        (["--avg-tokens", "chat=1", "--avg-tokens", "chat=2"], "--avg-tokens: 'chat' is given twice; keep one"),
        (
            ["--avg-tokens", "chta=5"],
            "--avg-tokens: unknown dataset 'chta' (datasets in this plan: math, chat); "
            "check the name, --partition and --dataset",
        ),
        (["--fixed", "wiki"], "--fixed: 'wiki' is not NAME=N; write it like --fixed math=3793"),
        (["--fixed", "wiki=0"], "--fixed wiki must be positive, got '0'"),
        (["--fixed", "wiki=1.5"], "--fixed wiki: '1.5' is not a whole number of tokens"),
        (
            ["--fixed", "chat=1M", "--avg-tokens", "chat=5"],
            "'chat' has both --fixed and --avg-tokens; a fixed dataset needs no average, drop one",
        ),
        (["--default-avg", "0"], "--default-avg must be positive, got '0'"),
        (["--default-avg", "lots"], "--default-avg: 'lots' is not a number; use e.g. 10M, 2.5B, 500K or 10000000"),
        (["--tokens-per-dataset", "0"], "--tokens-per-dataset must be positive, got '0'"),
        (["--tokens-per-dataset", "-5"], "--tokens-per-dataset must be positive, got '-5'"),
        (["--tokens-per-dataset=-5M"], "--tokens-per-dataset must be positive, got '-5M'"),
        (["--tokens-per-dataset", "10G"], f"--tokens-per-dataset: unknown suffix 'G' in '10G'; {USE}"),
        (["--tokens-per-dataset", "2.5"], "--tokens-per-dataset: '2.5' is not a whole number of tokens"),
        (
            ["--throughput", "1500-1000"],
            "--throughput: range '1500-1000' goes down; put the lower figure first (1000-1500)",
        ),
        (["--throughput", "0"], "--throughput must be positive, got '0'"),
        (["--throughput", "1000-"], "--throughput: '1000-' is not a figure or a range; use e.g. 1200 or 1000-1500"),
        (
            ["--tokens"],
            "unrecognized arguments: --tokens; did you mean --tokens-per-dataset? (see compute_budget.py --help)",
        ),
        (
            ["--tokens-per-dataset"],
            "argument --tokens-per-dataset: expected one argument (see compute_budget.py --help)",
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_line_naming_the_fix(project, capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert (code, out, err) == (2, "", f"compute_budget.py: error: {message}\n")


def test_a_malformed_prompt_line_stops_with_file_and_line_unless_skipped(project, capsys):
    bad = project / "prompts/short/chat.jsonl"
    bad.write_text(bad.read_text() + "{not json\n")
    code, out, err = run(capsys, "--dataset", "chat", "--default-avg", "10")
    assert code == 2 and out == ""
    assert err.startswith("compute_budget.py: error: prompts/short/chat.jsonl:5: not valid JSON (")
    assert err.endswith("; fix or remove the line, or pass --skip-bad-lines\n")

    code, out, err = run(capsys, "--dataset", "chat", "--default-avg", "10", "--skip-bad-lines")
    assert code == 0
    assert table_row(out, "chat")[3] == "3"
    assert err.startswith(
        "warning: prompts/short/chat.jsonl: skipped 1 bad line(s); first: prompts/short/chat.jsonl:5: not valid JSON ("
    )


def test_debug_shows_the_traceback_instead_of_one_line(project):
    with pytest.raises(UsageError, match="--default-avg must be positive"):
        main(["--default-avg", "0", "--debug"])


def test_help_ends_with_examples_and_exits_0(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    examples = out[out.index("\nExamples:\n") :]
    assert "python compute_budget.py --fixed wiki_rewrites=120M --throughput 1200" in examples
    assert examples.rstrip().endswith(
        "python compute_budget.py --samples-per-prompt 4 --existing A1_deepswekimi=deepswe_tokens.jsonl"
    )
    assert "python compute_budget.py --tokens-per-dataset 5M --out budget.json" in examples


def test_the_entry_script_runs_as_a_subprocess_with_the_default_folders(project):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the script finds its package itself
    ok = subprocess.run(
        [
            sys.executable,
            str(ROOT / "compute_budget.py"),
            "--avg-tokens",
            "math=3793",
            "--avg-tokens",
            "chat=2K",
            "--out",
            "budget.json",
        ],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert table_row(ok.stdout, "math") == ["math", "3,793", "--avg-tokens", "14,714", "2,636", "9,998,348"]
    assert json.loads((project / "budget.json").read_text())["datasets"]["math"]["max_samples"] == 2636

    bad = subprocess.run(
        [sys.executable, str(ROOT / "compute_budget.py"), "--throughput", "1500-1000"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (bad.returncode, bad.stdout) == (2, "")
    assert bad.stderr == (
        "compute_budget.py: error: --throughput: range '1500-1000' goes down; put the lower figure first (1000-1500)\n"
    )


def test_four_samples_per_prompt_select_a_quarter_of_the_prompts_and_the_plan_says_so(project, capsys):
    code, out, err = run(
        capsys, "--dataset", "math", "--avg-tokens", "math=1000", "--samples-per-prompt", "4", "--out", "b.json"
    )
    assert code == 0
    assert out.splitlines()[0].endswith("4 samples per prompt (each counts: prompts = budget / (4 x avg tokens))")
    assert table_row(out, "math") == ["math", "1,000", "--avg-tokens", "14,714", "2,500", "10,000", "10,000,000"]
    plan = json.loads((project / "b.json").read_text())
    assert plan["samples_per_prompt"] == 4
    assert err.rstrip().endswith("--dataset math --budget b.json --samples-per-prompt 4")
    assert plan["datasets"]["math"]["max_samples"] == 2_500


def test_an_existing_token_file_is_in_the_table_and_the_totals_without_inference(project, capsys):
    rows = [{"input_ids": list(range(10)), "loss_mask": [0] * 4 + [1] * 6} for _ in range(3)]
    write_jsonl(project / "pretok.jsonl", rows)
    code, out, err = run(
        capsys,
        "--dataset",
        "math",
        "--avg-tokens",
        "math=3793",
        "--existing",
        "A1_deepswekimi=pretok.jsonl",
        "--out",
        "b.json",
    )
    assert code == 0, err
    assert table_row(out, "A1_deepswekimi") == ["A1_deepswekimi", "6", "existing pre-tok, 30 in all", "-", "3", "18"]
    assert table_row(out, "total")[-2:] == ["2,639", "9,998,366"]
    assert "Existing:           18 tokens in 3 rows (already tokens: in the totals, not in the generation time)" in out
    assert "To generate: 9,998,348 tokens" in out
    plan = json.loads((project / "b.json").read_text())
    assert plan["datasets"]["A1_deepswekimi"]["max_samples"] == 0
    assert plan["datasets"]["A1_deepswekimi"]["avg_source"] == "existing"
    assert plan["datasets"]["A1_deepswekimi"]["path"] == "pretok.jsonl"
    assert "--dataset math --budget b.json" in err


def test_an_existing_file_named_like_a_dataset_of_prompts_is_one_line_not_a_silent_stand_in(project, capsys):
    write_jsonl(project / "pretok.jsonl", [{"input_ids": [1, 2, 3], "loss_mask": [0, 1, 1]}])
    code, out, err = run(capsys, "--avg-tokens", "chat=100", "--existing", "math=pretok.jsonl")
    assert (code, out) == (2, "")
    assert err == (
        "compute_budget.py: error: --existing math=pretok.jsonl: 'math' is also the dataset "
        "prompts/long/math.jsonl; name the file apart, e.g. --existing math_tokens=pretok.jsonl\n"
    )


def test_the_export_of_a_plan_merges_its_existing_files_and_names_them_when_the_format_leaves_them_out(project, capsys):
    from result_rows import record, write_results

    from synthgen.cli.export import main as export_main

    write_jsonl(project / "pretok.jsonl", [{"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 1, 1]}] * 2)
    code, _, err = run(
        capsys, "--dataset", "chat", "--avg-tokens", "chat=5", "--existing", "A1=pretok.jsonl", "--out", "b.json"
    )
    assert code == 0, err
    write_results(project, "chat", [record("c0")])
    code = export_main(["--budget", "b.json", "--format", "tokens", "--out", "t.jsonl", "--no-render-check"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "A1: 2 existing token rows (4 trained tokens) merged" in err
    rows = [json.loads(line) for line in (project / "t.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == ["A1/1", "A1/2", "chat/c0"]

    code = export_main(["--budget", "b.json", "--format", "messages", "--out", "m.jsonl", "--no-render-check"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert (
        "note: A1: left out: the plan's token file pretok.jsonl joins a --format tokens export only "
        "(this one is --format messages)"
    ) in err.splitlines()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--existing", "A1"], "compute_budget.py: error: --existing: 'A1' is not NAME=PATH"),
        (["--existing", "A1=nope.jsonl"], "compute_budget.py: error: --existing: nope.jsonl: no such file"),
        (
            ["--samples-per-prompt", "0"],
            "compute_budget.py: error: --samples-per-prompt must be between 1 and 100,000, got 0",
        ),
        (["--existing", "A1=x", "--fixed", "A1=3M"], "compute_budget.py: error: 'A1' has both --existing and --fixed"),
    ],
)
def test_bad_mix_flags_are_one_line_errors(project, capsys, argv, message):
    code, out, err = run(capsys, "--avg-tokens", "math=3793", "--dataset", "math", *argv)
    assert code == 2
    assert err.startswith(message), err
    assert err.count("\n") == 1
