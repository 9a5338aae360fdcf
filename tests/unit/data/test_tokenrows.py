"""Files of token rows (--existing NAME=PATH): counted in one checked pass; a bad line names file, line and fix."""

import json

import pytest

from synthgen.data.tokenrows import ExistingSource, parse_existing, scan_token_rows
from synthgen.errors import InputFileError, UsageError


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_a_token_file_counts_rows_trained_tokens_and_all_tokens(tmp_path):
    path = write(
        tmp_path / "a.jsonl",
        [
            json.dumps({"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 1, 1]}),
            "",
            json.dumps({"input_ids": [5, 6], "loss_mask": [0, 1], "source": "x"}),
        ],
    )
    scan = scan_token_rows(path)
    assert (scan.rows, scan.trained_tokens, scan.total_tokens) == (2, 3, 6)


@pytest.mark.parametrize(
    "line, problem",
    [
        ("{", "not valid JSON"),
        ("[1]", "not a JSON object"),
        ('{"loss_mask": [1]}', "no input_ids list"),
        (
            '{"input_ids": [1, 2], "loss_mask": [1]}',
            "loss_mask must have one 0 or 1 per input id (got 1 entries for 2 ids)",
        ),
        ('{"input_ids": [1, -2], "loss_mask": [1, 1]}', "input_ids must be token ids"),
        ('{"input_ids": [1, 2], "loss_mask": [1, 2]}', "loss_mask must hold only 0 and 1"),
        ('{"input_ids": [1, 2], "loss_mask": [true, 1]}', "loss_mask must hold only 0 and 1"),
    ],
)
def test_a_bad_row_stops_the_scan_with_file_line_and_the_rows_shape(tmp_path, line, problem):
    path = write(tmp_path / "a.jsonl", [json.dumps({"input_ids": [1], "loss_mask": [1]}), line])
    with pytest.raises(InputFileError) as err:
        scan_token_rows(path)
    message = str(err.value)
    assert message.startswith(f"{path}:2: {problem}")
    assert message.endswith(
        'each line is {"input_ids": [ids], "loss_mask": [0 or 1 per id]}, as export_training.py --format tokens writes'
    )


def test_a_missing_or_empty_file_is_one_line(tmp_path):
    with pytest.raises(UsageError, match=r"^--existing: .*nope.jsonl: no such file; check the path \(NAME=PATH\)$"):
        scan_token_rows(tmp_path / "nope.jsonl")
    with pytest.raises(UsageError, match="holds no rows"):
        scan_token_rows(write(tmp_path / "e.jsonl", [""]))


def test_the_flag_takes_name_equals_path_each_name_once(tmp_path):
    assert parse_existing(["A1=x.jsonl", " A2 = y.jsonl"]) == (
        ExistingSource("A1", tmp_path.__class__("x.jsonl")),
        ExistingSource("A2", tmp_path.__class__("y.jsonl")),
    )
    with pytest.raises(
        UsageError, match=r"^--existing: 'A1' is not NAME=PATH; write it like --existing A1_deepswekimi=tokens.jsonl$"
    ):
        parse_existing(["A1"])
    with pytest.raises(UsageError, match="'A1' is given twice; keep one"):
        parse_existing(["A1=x", "A1=y"])
