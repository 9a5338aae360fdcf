"""Progress: a tqdm bar that advances on completion on a TTY; plain status lines otherwise."""

import io
from pathlib import Path

from tallies import answered, watched

from synthgen.fmt import fmt_duration, plural
from synthgen.run.ledger import TokenLedger
from synthgen.run.progress import DatasetStats, Progress, end_of_run, startup_line, summary_table


def test_status_lines_are_newline_terminated_and_carry_every_figure():
    out = io.StringIO()
    progress = Progress(0, out, tty=False)
    tally = watched(progress)
    progress.start(10)
    tally.in_flight = 3
    answered(progress, tally, 120)
    tally.failed += 1
    progress.failed_one()
    progress.tick()
    line = out.getvalue()
    assert line.endswith("\n") and "\r" not in line
    # The share is of the done count it follows (a failure is counted apart, not as 10% more done).
    assert "done 1/10 (10.0%)" in line and "in-flight 3" in line and "failed 1" in line and "ETA " in line


def test_the_bar_does_not_move_when_a_request_is_sent_only_when_it_finishes():
    out = io.StringIO()
    progress = Progress(0, out, tty=True)
    tally = watched(progress)
    progress.start(4)
    tally.in_flight = 4
    assert progress._bar.n == 0
    answered(progress, tally, 10)
    assert progress._bar.n == 1
    progress.close()


def test_summary_reports_the_token_budget_overshoot():
    s = DatasetStats(
        "d",
        target=10,
        done=4,
        completion_tokens=450,
        token_budget=400,
        budget_stopped=True,
        first_start=0.0,
        last_finish=10.0,
    )
    table = summary_table([s], 10.0)
    assert "d: token budget 400 reached; 450 output tokens in total (overshot by 50)" in table


def test_durations_are_human_readable():
    assert [fmt_duration(x) for x in (5, 125, 7325, None)] == ["5s", "2m05s", "2h02m", "?"]


def test_the_eta_says_estimating_until_answers_come_then_counts_from_the_first_answer(monkeypatch):
    from synthgen.run import progress as progress_module

    clock = [1000.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: clock[0])
    out = io.StringIO()
    progress = Progress(0, out, tty=False)
    tally = watched(progress)
    progress.start(630)
    tally.in_flight = 500
    clock[0] += 50
    assert progress.eta() is None and "ETA estimating" in progress.status_line()
    answered(progress, tally, 40)  # the first answer after 50 s of a full server: no rate yet
    clock[0] += 5
    assert progress.eta() is None and "ETA estimating" in progress.status_line()
    for _ in range(19):
        clock[0] += 0.5
        answered(progress, tally, 40)
    # 20 answers in the 14.5 s since the first: 610 left at that rate, not at 20 answers a minute (30m30s)
    assert progress.eta() == 610 / (20 / 14.5)
    assert "ETA 7m22s" in progress.status_line()


def test_the_summary_has_each_datasets_finish_reasons_and_tokens_generated_and_kept():
    d = DatasetStats("d", target=5, done=4, failed=1, finishes={"stop": 2, "length": 1, "repetition": 1})
    d.tokens = TokenLedger(generated=1_500, rows=1_000, loops=400, cut=300, partials=100)
    e = DatasetStats("e", target=1, done=1, finishes={"stop": 1})
    e.tokens = TokenLedger(generated=20, rows=20)
    lines = summary_table([d, e], 10.0).splitlines()
    assert lines[0].split() == [
        *("dataset", "done", "total", "this", "run", "stop", "length", "repetition", "failed", "skipped"),
        *("generated", "kept", "tok/s", "wall"),
    ]
    rows = {line.split()[0]: line.split()[1:12] for line in lines[2:5] if not line.startswith("-")}
    assert rows == {
        "d": ["4", "5", "4", "2", "1", "1", "1", "0", "1,500", "800", "0"],
        "e": ["1", "1", "1", "1", "0", "0", "0", "0", "20", "20", "0"],
    }
    assert lines[5].split()[:11] == ["TOTAL", "5", "6", "5", "3", "1", "1", "1", "0", "1,520", "820"]


def test_the_last_lines_say_one_prompt_and_many_prompts_as_a_sentence_does():
    one = DatasetStats("d", done=3, failed=1, skipped=1, skip_kinds={"prompt_too_long": 1})
    text, left = end_of_run([one], Path("outputs"), "RERUN", "EXPORT")
    assert left and "d: 1 prompt skipped (prompt_too_long), a rerun will not change that: " in text
    assert "WARNING: 1 prompt failed (see outputs/d/errors.jsonl); rerun to retry them: RERUN" in text
    many = DatasetStats("d", done=3, failed=2, skipped=3, skip_kinds={"prompt_too_long": 2})
    text, _ = end_of_run([many], Path("outputs"), "RERUN", "EXPORT")
    assert "d: 2 prompts skipped (prompt_too_long)" in text
    assert "WARNING: 2 prompts failed and 1 prompt was skipped (see " in text


def test_counts_take_their_nouns_plural_but_for_one():
    assert [plural(n, "prompt") for n in (0, 1, 2, 1024)] == ["0 prompts", "1 prompt", "2 prompts", "1,024 prompts"]
    assert plural(1, "turn", "turns of it") == "1 turn" and plural(3, "turn", "turns of it") == "3 turns of it"


def test_the_time_before_the_first_request_is_called_server_start_up_only_when_a_server_was_launched():
    assert startup_line(2.4, None) == (
        "not in these figures: 2s before the first request (asking the server and loading the tokenizer)"
    )
    assert startup_line(45.0, 42.0) == (
        "not in these figures: 45s before the first request (server start-up 42s, then asking the server and "
        "loading the tokenizer 3s)"
    )
