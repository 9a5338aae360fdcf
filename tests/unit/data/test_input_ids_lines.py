"""Prompt lines that are already tokens: {"id", "input_ids"} is one prompt, sent as it is, --regenerate last only."""

import orjson
import pytest

from synthgen.data.prompts import DatasetSource, PromptReader, scan_dataset
from synthgen.errors import InputFileError


def dataset(tmp_path, rows):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return DatasetSource("d", "p", path)


def test_a_line_of_input_ids_is_one_prompt_carrying_its_ids_and_a_hash_of_them(tmp_path):
    source = dataset(tmp_path, [{"id": "a", "input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}])
    index = scan_dataset(source)
    assert index.ids[0] == "a" and index.ids[1].startswith("auto-")
    reader = PromptReader(index)
    first, second = reader.read("a"), reader.read(index.ids[1])
    reader.close()
    assert first.input_ids == (1, 2, 3) and first.messages == ()
    assert first.prompt_hash != second.prompt_hash


@pytest.mark.parametrize(
    "value, problem",
    [([], "'input_ids' must be a non-empty list of token ids"), ([1, -1], "'input_ids' must hold token ids")],
)
def test_bad_input_ids_name_the_line(tmp_path, value, problem):
    with pytest.raises(InputFileError, match=rf":1: {problem}"):
        scan_dataset(dataset(tmp_path, [{"id": "a", "input_ids": value}]))


def test_input_ids_lines_refuse_the_modes_that_regenerate_turns(tmp_path):
    with pytest.raises(InputFileError, match="run this dataset with --regenerate last, not each"):
        scan_dataset(dataset(tmp_path, [{"id": "a", "input_ids": [1]}]), mode="each")
