"""Prompt sets as people download them: the same records as JSONL, parquet, parquet shards, a
``save_to_disk`` folder and JSONL shards make the same prompts (ids, messages, tools, hashes,
input_ids) in every regeneration mode; bad rows are named by file and row; --columns maps a dataset's
own column names; a folder is read in a stable order, and a folder whose rows would be a guess refused."""

from __future__ import annotations

import builtins
import importlib
import os

import pyarrow.parquet as pq
import pytest
from prompt_formats import table, write_all, write_jsonl, write_parquet, write_parquet_shards, write_saved

from synthgen.data.conversations import parse_record
from synthgen.data.prompts import PromptReader, discover, scan_dataset
from synthgen.data.readers.base import NO_COLUMNS, Columns
from synthgen.errors import InputFileError, UsageError

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
ROWS = [
    {"id": "plain", "messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello"}]},
    {
        "id": "agent",
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "look it up",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "P"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "18 C"},
            {"role": "user", "content": "And tomorrow?"},
        ],
    },
    {"conversations": [{"from": "human", "value": "ShareGPT question"}, {"from": "gpt", "value": "answer"}]},
    {"prompt": "A bare prompt", "system": "Be brief."},
    {"id": "alpaca", "instruction": "Translate to French", "input": "Good morning", "output": "Bonjour"},
    {"instruction": "Name a colour", "input": "", "output": "Blue"},
    {"id": "plain", "messages": [{"role": "user", "content": "a repeated id: the first row wins"}]},
]
TOKENS = [{"id": "t1", "input_ids": [1, 2, 3]}, {"input_ids": [4, 5]}]


def prompts_of(source, mode="last", columns=NO_COLUMNS):
    index = scan_dataset(source, mode=mode, columns=columns)
    reader = PromptReader(index)
    try:
        out = [reader.read(pid) for pid in index.ids]
    finally:
        reader.close()
    return index, [(p.id, list(p.messages), p.tools, p.prompt_hash, p.input_ids) for p in out]


@pytest.mark.parametrize("mode", ["last", "each", "all"])
def test_every_layout_makes_the_prompts_of_the_jsonl_file(tmp_path, mode):
    write_all(tmp_path / "p", ROWS)
    sources = {s.name: s for s in discover(tmp_path, "p")}
    assert sorted(sources) == ["as_jsonl", "as_jsonl_shards", "as_parquet", "as_parquet_shards", "as_saved"]
    expected_index, expected = prompts_of(sources["as_jsonl"], mode)
    assert len(expected) >= 6 and expected_index.duplicates == 1
    for name, source in sources.items():
        index, got = prompts_of(source, mode)
        assert got == expected, name
        assert index.ids == expected_index.ids and index.duplicates == expected_index.duplicates, name


def test_rendered_prompts_and_integer_ids_read_alike(tmp_path):
    write_jsonl(tmp_path / "p" / "a.jsonl", TOKENS)
    write_parquet(tmp_path / "p" / "b.parquet", TOKENS)
    write_parquet(tmp_path / "p" / "c.parquet", [{"id": 7, "prompt": "x"}, {"id": 8, "prompt": "y"}])
    write_jsonl(tmp_path / "p" / "d.jsonl", [{"id": 7, "prompt": "x"}, {"id": 8, "prompt": "y"}])
    a, b, c, d = discover(tmp_path, "p")
    assert prompts_of(a)[1] == prompts_of(b)[1]
    assert prompts_of(a)[1][0][4] == (1, 2, 3)
    assert prompts_of(c)[1] == prompts_of(d)[1] and prompts_of(c)[0].ids == ["7", "8"]


def test_alpaca_is_the_messages_record_of_its_turns():
    alpaca = parse_record({"instruction": "Translate", "input": "Good morning", "output": "Bonjour", "system": "S"})
    assert alpaca.messages == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Translate\nGood morning"},
        {"role": "assistant", "content": "Bonjour"},
    ]
    assert alpaca.last_prompt() == alpaca.messages[:2]  # the output is the reference answer, never sent
    assert parse_record({"instruction": "Q", "input": " "}).messages == [{"role": "user", "content": "Q"}]


def test_message_columns_may_be_json_strings(tmp_path):
    import orjson

    as_strings = [{**r, "messages": orjson.dumps(r["messages"]).decode()} for r in ROWS[:2]]
    as_strings[1]["tools"] = orjson.dumps(TOOLS).decode()
    write_parquet(tmp_path / "p" / "a.parquet", as_strings)
    write_jsonl(tmp_path / "p" / "b.jsonl", ROWS[:2])
    a, b = discover(tmp_path, "p")
    assert prompts_of(a, "each")[1] == prompts_of(b, "each")[1]


def test_a_bad_row_is_named_by_its_shard_and_row(tmp_path):
    rows = [{"id": str(i), "prompt": f"q{i}"} for i in range(5)] + [{"id": "bad", "prompt": ""}]
    write_parquet_shards(tmp_path / "p" / "d", rows, shards=2)
    (source,) = discover(tmp_path, "p")
    shard = tmp_path / "p" / "d" / "data" / "train-00001-of-00002.parquet"
    with pytest.raises(InputFileError) as err:
        scan_dataset(source)
    assert str(err.value) == (
        f"{shard}: row 2 (from 0): 'prompt' is empty; fix or remove the row, or pass --skip-bad-lines"
    )
    index = scan_dataset(source, skip_bad_lines=True)
    assert index.ids == [str(i) for i in range(5)] and index.bad_lines == 1
    assert index.first_bad == [f"{shard}: row 2 (from 0): 'prompt' is empty"]
    write_jsonl(tmp_path / "q" / "j" / "a.jsonl", rows[:3])
    write_jsonl(tmp_path / "q" / "j" / "b.jsonl", rows[3:])
    with pytest.raises(InputFileError, match=rf"^{tmp_path / 'q' / 'j' / 'b.jsonl'}:3: 'prompt' is empty; fix or"):
        scan_dataset(discover(tmp_path, "q")[0])


def test_columns_name_a_datasets_own_fields(tmp_path):
    write_parquet(tmp_path / "p" / "d.parquet", [{"uid": "u1", "question": "Why?", "meta": "x"}])
    (source,) = discover(tmp_path, "p")
    with pytest.raises(UsageError) as err:
        scan_dataset(source)
    assert str(err.value) == (
        f"{source.path}: no column holds a prompt: expected one of messages, conversations, prompt, instruction, "
        "input_ids (columns: uid, question, meta); name the prompt's column with --columns, "
        "e.g. --columns prompt=question"
    )
    index, got = prompts_of(source, columns=Columns.parse("prompt=question,id=uid"))
    assert index.ids == ["u1"] and got[0][1] == [{"role": "user", "content": "Why?"}]
    write_jsonl(tmp_path / "q" / "d.jsonl", [{"uid": "u1", "question": "Why?", "meta": "x"}])
    assert prompts_of(discover(tmp_path, "q")[0], columns=Columns.parse("prompt=question,id=uid"))[1] == got


@pytest.mark.parametrize(
    "text, message",
    [
        ("prompt", "--columns: 'prompt' is not FIELD=COLUMN; e.g. --columns prompt=question,id=uid"),
        ("promt=q", "--columns: unknown field 'promt' in 'promt=q' (fields: id, messages, conversations,"),
        ("prompt=a,prompt=b", "--columns: field 'prompt' is mapped twice; give each field one column"),
        ("prompt=a,id=a", "--columns: column 'a' is mapped to two fields; give each its own column"),
    ],
)
def test_a_wrong_column_mapping_is_one_line(text, message):
    with pytest.raises(UsageError) as err:
        Columns.parse(text)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_saved_folder_is_read_in_its_state_json_order(tmp_path):
    rows = [{"id": str(i), "prompt": f"q{i}"} for i in range(7)]
    write_saved(tmp_path / "p" / "d", rows, shards=3)
    assert sorted(os.listdir(tmp_path / "p" / "d"))[0] == "data-00000-of-00003.arrow"  # the last shard by state.json
    (source,) = discover(tmp_path, "p")
    assert source.format == "arrow" and source.label == "p/d/"
    assert prompts_of(source)[0].ids == [str(i) for i in range(7)]


def test_folders_whose_rows_would_be_a_guess_are_refused(tmp_path):
    rows = [{"prompt": "q"}]
    write_parquet_shards(tmp_path / "p" / "two", rows, shards=1)
    write_parquet_shards(tmp_path / "p" / "two", rows, shards=1, split="test")
    with pytest.raises(UsageError, match="holds the splits test, train; a dataset is one split: .* keep train-"):
        discover(tmp_path, "p")
    write_parquet(tmp_path / "t" / "conv" / "default" / "train" / "0000.parquet", rows)  # the hub's conversion
    write_parquet(tmp_path / "t" / "conv" / "default" / "validation" / "0000.parquet", rows)
    with pytest.raises(UsageError, match="holds the splits train, validation; a dataset is one split"):
        discover(tmp_path, "t")
    write_jsonl(tmp_path / "q" / "mixed" / "a.jsonl", rows)
    write_parquet(tmp_path / "q" / "mixed" / "b.parquet", rows)
    with pytest.raises(UsageError, match="holds shards of jsonl and parquet; a dataset is shards of one format"):
        discover(tmp_path, "q")
    (tmp_path / "r" / "dd").mkdir(parents=True)
    (tmp_path / "r" / "dd" / "dataset_dict.json").write_text('{"splits": ["train", "test"]}')
    with pytest.raises(UsageError, match="is a saved DatasetDict \\(splits: train, test\\); a dataset is one split"):
        discover(tmp_path, "r")
    (tmp_path / "s" / "notes").mkdir(parents=True)  # a folder without data files is not a dataset
    write_parquet(tmp_path / "s" / "d.parquet", rows)
    assert [s.name for s in discover(tmp_path, "s")] == ["d"]


def test_a_fifo_or_a_broken_parquet_file_is_refused_in_one_line(tmp_path):
    (tmp_path / "p").mkdir()
    os.mkfifo(tmp_path / "p" / "pipe.parquet")
    (source,) = discover(tmp_path, "p")
    with pytest.raises(UsageError, match="is a FIFO \\(named pipe\\), not a regular file; a prompt file must be"):
        scan_dataset(source)
    os.unlink(tmp_path / "p" / "pipe.parquet")
    (tmp_path / "p" / "junk.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(InputFileError, match="junk.parquet: is not a readable parquet file .*; replace or remove it"):
        scan_dataset(discover(tmp_path, "p")[0])


def test_without_pyarrow_a_parquet_dataset_is_one_line_with_the_install_command(tmp_path, monkeypatch):
    write_parquet(tmp_path / "p" / "d.parquet", [{"prompt": "q"}])
    real = importlib.import_module

    def no_pyarrow(name, *args):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_pyarrow)
    with pytest.raises(UsageError) as err:
        scan_dataset(discover(tmp_path, "p")[0])
    assert str(err.value) == f"{tmp_path / 'p' / 'd.parquet'}: reading parquet and arrow files needs pyarrow: " + (
        "pip install 'pyarrow>=15'"
    )
    assert builtins  # the import machinery itself is untouched


def test_parquet_reads_only_the_columns_a_prompt_is_read_from(tmp_path):
    rows = [{"id": str(i), "prompt": f"q{i}", "blob": "x" * 1000} for i in range(10)]
    path = write_parquet(tmp_path / "p" / "d.parquet", rows, row_group_size=4)
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    index, got = prompts_of(discover(tmp_path, "p")[0])
    assert index.ids == [str(i) for i in range(10)]
    assert table(rows).num_rows == 10 and index.reader.shards[0].path == path
    assert got[9][1] == [{"role": "user", "content": "q9"}]


@pytest.mark.parametrize("fmt", ["parquet", "saved"])
def test_the_scan_of_a_columnar_dataset_runs_no_garbage_collection(tmp_path, fmt):
    """A columnar scan makes a dict a row (freed by reference counting, no cycles): the cyclic collector,
    triggered by those allocations, only walked every object of the process again and again (about a
    second of a 1,000,000-row parquet scan), so the scan holds it off."""
    import gc

    rows = [{"id": f"r{i}", "messages": [{"role": "user", "content": f"question {i}"}]} for i in range(5000)]
    if fmt == "parquet":
        write_parquet(tmp_path / "p" / "big.parquet", rows, row_group_size=1000)
    else:
        write_saved(tmp_path / "p" / "big", rows)
    (source,) = discover(tmp_path, "p")
    started = []

    def seen(phase, info):
        if phase == "start":
            started.append(info["generation"])

    gc.collect()
    gc.callbacks.append(seen)
    try:
        index = scan_dataset(source)
    finally:
        gc.callbacks.remove(seen)
    assert len(index.ids) == 5000
    # At most the one young collection the scan's allocations call for once the collector is back on (with
    # it running throughout, a collection every ~700 new objects).
    assert len(started) <= 1 and 2 not in started
    assert gc.isenabled()
