"""Prompt files: every accepted format, and one clear file:line error for each malformed line."""

import orjson
import pytest

from synthgen.data.prompts import DatasetSource, PromptReader, discover, parse_line, scan_dataset
from synthgen.errors import InputFileError, UsageError


def parse(obj):
    """(id, the messages of the ``last`` prompt) of one line."""
    parsed = parse_line(orjson.dumps(obj))
    return None if parsed is None else (parsed[0], parsed[1].last_prompt())


def test_messages_format_is_taken_as_is():
    assert parse({"id": "a", "messages": [{"role": "user", "content": "hi"}]}) == (
        "a",
        [{"role": "user", "content": "hi"}],
    )


def test_sharegpt_roles_are_mapped_and_the_trailing_answer_is_dropped():
    rid, messages = parse(
        {
            "id": 7,
            "conversations": [
                {"from": "system", "value": "s"},
                {"from": "human", "value": "q"},
                {"from": "gpt", "value": "old answer"},
            ],
        }
    )
    assert rid == "7"
    assert messages == [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]


def test_conversations_with_role_and_content_are_accepted():
    assert parse({"id": "c", "conversations": [{"role": "user", "content": "q"}]})[1] == [
        {"role": "user", "content": "q"}
    ]


def test_prompt_format_with_optional_system():
    assert parse({"id": "p", "prompt": "q", "system": "s"})[1] == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
    ]


def test_text_parts_are_joined():
    assert (
        parse(
            {
                "id": "t",
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
                ],
            }
        )[1][0]["content"]
        == "ab"
    )


def test_missing_id_gets_a_stable_id_from_the_content():
    first = parse({"prompt": "same"})[0]
    assert first.startswith("auto-") and first == parse({"prompt": "same"})[0] != parse({"prompt": "other"})[0]


@pytest.mark.parametrize(
    "line,problem",
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        (b'{"id": "x"}', "no 'messages', 'conversations', 'prompt', 'instruction' or 'input_ids' field"),
        (b'{"id": "x", "messages": []}', "'messages' must be a non-empty list of messages"),
        (b'{"id": "x", "messages": [{"role": "user", "content": "  "}]}', "messages[0] content is empty"),
        (b'{"id": "x", "messages": [{"role": "wizard", "content": "hi"}]}', "messages[0] has unknown role 'wizard'"),
        (b'{"id": "x", "messages": [{"role": "user", "content": 5}]}', "messages[0] content is int, expected a string"),
        (b'{"id": "x", "messages": [{"role": "assistant", "content": "a"}]}', "'messages' has no user turn to answer"),
        (b'{"id": ["x"], "prompt": "hi"}', "'id' is list, expected a string or integer"),
        (b'{"id": "", "prompt": "hi"}', "'id' is empty"),
        (b'\xff\xfe{"prompt": "hi"}', "not valid JSON"),
    ],
)
def test_malformed_lines_are_named_with_file_and_line(tmp_path, line, problem):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"id": "ok", "prompt": "fine"}\n' + line + b"\n")
    with pytest.raises(InputFileError) as info:
        scan_dataset(DatasetSource("d", "p", path))
    message = str(info.value)
    assert message.startswith(f"{path}:2: ") and problem in message
    assert message.endswith("fix or remove the line, or pass --skip-bad-lines")


def test_skip_bad_lines_counts_them_instead(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"id": "a", "prompt": "x"}\n{oops\n\n{"id": "b", "prompt": "y"}\n')
    index = scan_dataset(DatasetSource("d", "p", path), skip_bad_lines=True)
    assert index.ids == ["a", "b"] and index.bad_lines == 1 and index.first_bad[0].startswith(f"{path}:2:")


def test_duplicate_ids_keep_the_first_and_are_counted(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(b'{"id": "a", "prompt": "first"}\n{"id": "a", "prompt": "second"}\n{"id": "b", "prompt": "z"}\n')
    index = scan_dataset(DatasetSource("d", "p", path))
    assert index.ids == ["a", "b"] and index.duplicates == 1
    reader = PromptReader(index)
    assert reader.read("a").messages[0]["content"] == "first"
    assert reader.read("b").line == 3
    reader.close()


def test_discover_lists_partitions_and_rejects_unknown_names(tmp_path):
    for part, name in [("short", "a"), ("short", "b"), ("long", "c")]:
        (tmp_path / part).mkdir(exist_ok=True)
        (tmp_path / part / f"{name}.jsonl").write_text("")
    assert [s.name for s in discover(tmp_path, "all")] == ["c", "a", "b"]
    assert [s.name for s in discover(tmp_path, "short", ["b"])] == ["b"]
    with pytest.raises(UsageError, match="unknown dataset zz in partition 'short' \\(known: a, b\\)"):
        discover(tmp_path, "short", ["zz"])
    with pytest.raises(UsageError, match="no such partition \\(partitions here: long, short, or 'all'\\)"):
        discover(tmp_path, "medium")


def test_the_same_dataset_name_in_two_partitions_is_refused(tmp_path):
    for part in ("short", "long"):
        (tmp_path / part).mkdir()
        (tmp_path / part / "x.jsonl").write_text("")
    with pytest.raises(UsageError, match="dataset names must be unique across partitions"):
        discover(tmp_path, "all")
