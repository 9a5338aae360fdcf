"""Malformed and hostile prompt files: a clear ``file:line`` error every time, never a traceback.

Every file, generated or hand-made, goes through ``check_file``: the scan either succeeds and
every prompt it indexed reads back as a well-formed conversation, or it raises one
``InputFileError`` of one line naming the first bad line; with ``skip_bad_lines`` it never
raises, and counts that same line as bad. tests/e2e/test_hostile_prompt_files.py runs both scripts
as a user does, on files no scan should accept.
"""

from __future__ import annotations

import copy
import io
import json
import re
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from synthgen.data.prompts import DatasetSource, PromptReader, scan_dataset
from synthgen.errors import InputFileError

FIX = "; fix or remove the line, or pass --skip-bad-lines"
ROLES = {"system", "user", "assistant", "tool"}
PROPERTY = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
MB20 = 20 * 1024 * 1024


# --- the property every file must satisfy ------------------------------------------------------------
def file_lines(data: bytes) -> list[bytes]:
    """The lines as the scan sees them (a binary file splits on b"\\n" only)."""
    return list(io.BytesIO(data))


def scan_both(path: Path) -> tuple[InputFileError | None, object, object]:
    """(error of the strict scan or None, its index or None, the skip_bad_lines index)."""
    source = DatasetSource(path.stem, "short", path)
    lenient = scan_dataset(source, skip_bad_lines=True)
    try:
        return None, scan_dataset(source), lenient
    except InputFileError as exc:
        return exc, None, lenient


def check_prompts(index) -> None:
    assert all(isinstance(i, str) and i.strip() for i in index.ids), index.ids
    assert len(set(index.ids)) == len(index.ids) == len(index.offsets)
    reader = PromptReader(index)
    try:
        for prompt_id in reversed(index.ids):  # out of file order: every read seeks
            prompt = reader.read(prompt_id)
            assert prompt.id == prompt_id and prompt.line == index.offsets[prompt_id][1]
            assert prompt.messages, prompt
            for message in prompt.messages:
                assert isinstance(message, dict) and set(message) == {"role", "content"}, message
                assert message["role"] in ROLES, message
                assert isinstance(message["content"], str) and message["content"].strip(), message
            assert prompt.messages[-1]["role"] != "assistant", prompt
            assert any(m["role"] == "user" for m in prompt.messages), prompt
    finally:
        reader.close()


def check_error(exc: InputFileError, path: Path, lines: list[bytes]) -> int:
    message = str(exc)
    assert message.splitlines() == [message], f"not one line: {message[:300]!r}"
    match = re.fullmatch(rf"{re.escape(str(path))}:(\d+): (.+){re.escape(FIX)}", message, re.DOTALL)
    assert match, message[:300]
    lineno = int(match.group(1))
    assert exc.line == lineno and 1 <= lineno <= len(lines), (lineno, len(lines))
    assert lines[lineno - 1].strip(), "a blank line was called bad"
    return lineno


def check_file(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hostile.jsonl"
        path.write_bytes(data)
        lines = file_lines(data)
        error, strict, lenient = scan_both(path)

        blanks = sum(1 for line in lines if not line.strip())
        assert lenient.lines == len(lines)
        assert lenient.lines == len(lenient.ids) + lenient.duplicates + lenient.bad_lines + blanks
        check_prompts(lenient)

        if error is None:
            assert lenient.bad_lines == 0 and strict.ids == lenient.ids
            check_prompts(strict)
        else:
            lineno = check_error(error, path, lines)
            # The strict scan stops at the first line the lenient one skips.
            assert lenient.bad_lines >= 1
            assert lenient.first_bad[0] == f"{path}:{lineno}: {error.problem.removesuffix(FIX)}"


def check_rejected(data: bytes, line: int) -> str:
    """The file fails at ``line``; returns the problem as the user reads it."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "hostile.jsonl"
        path.write_bytes(data)
        with pytest.raises(InputFileError) as caught:
            scan_dataset(DatasetSource("hostile", "short", path))
        assert check_error(caught.value, path, file_lines(data)) == line
    check_file(data)
    return caught.value.problem


# --- strategies ----------------------------------------------------------------------------------------
# Lone surrogates reach the file either as \ud800 escapes or, unescaped, as invalid UTF-8.
text = st.text(alphabet=st.one_of(st.characters(), st.sampled_from(["\ud800", "\udfff", "\n", "\x00"])), max_size=12)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**80), 2**80), st.floats(), text)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)),
    max_leaves=20,
)

good_text = st.text(min_size=1, max_size=12).filter(str.strip)
good_content = st.one_of(
    good_text, st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": good_text}), min_size=1, max_size=2)
)


def conversation(role_key: str, content_key: str, names: list[str]):
    turn = st.fixed_dictionaries({role_key: st.sampled_from(names), content_key: good_content})
    user = st.fixed_dictionaries({role_key: st.just(names[1]), content_key: good_content})
    return st.tuples(st.lists(turn, max_size=2), user, st.lists(turn, max_size=2)).map(lambda t: [*t[0], t[1], *t[2]])


ROLE_NAMES = ["system", "user", "assistant", "tool", "USER", "Assistant"]
SHAREGPT_NAMES = ["system", "human", "gpt", "tool", "Human", "GPT"]
good_bodies = st.one_of(
    st.fixed_dictionaries({"messages": conversation("role", "content", ROLE_NAMES)}),
    st.fixed_dictionaries({"conversations": conversation("from", "value", SHAREGPT_NAMES)}),
    st.fixed_dictionaries({"conversations": conversation("role", "content", ROLE_NAMES)}),
    st.fixed_dictionaries({"prompt": good_content}, optional={"system": good_content}),
)
good_records = st.builds(
    lambda body, rid: body if rid is None else {"id": rid, **body},
    good_bodies,
    st.one_of(st.none(), good_text, st.integers(-(2**63), 2**63 - 1)),
)
wrong_values = st.one_of(
    st.sampled_from(
        [
            "",
            " ",
            "\n\t",
            "\u3000",
            "bot",
            "function",
            "user ",
            "ｕｓｅｒ",
            [],
            {},
            [{}],
            [{"type": "image_url"}],
            [{"type": "text"}],
            [{"type": "text", "text": 1}],
        ]
    ),
    json_values,
)


def slots(value) -> list[tuple]:
    """Every (container, key) of a record, nested ones included."""
    found = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in items:
        found.append((value, key))
        found.extend(slots(child))
    return found


@st.composite
def wrong_records(draw) -> dict:
    """A good record with one to three of its fields, at any depth, replaced by a wrong value or dropped."""
    record = copy.deepcopy(draw(good_records))  # drawn values may be shared between examples
    for _ in range(draw(st.integers(1, 3))):
        places = slots(record)
        if not places:
            break
        container, key = draw(st.sampled_from(places))
        if isinstance(container, dict) and draw(st.booleans()):
            del container[key]
        else:
            container[key] = copy.deepcopy(draw(wrong_values))
    return record


records = st.one_of(
    good_records,
    wrong_records(),
    st.dictionaries(
        st.sampled_from(["id", "messages", "conversations", "prompt", "system", "from"]), json_values, max_size=4
    ),
)


def dump(value, ascii_only: bool) -> bytes:
    # The standard library writes what orjson would refuse to: NaN, huge integers, lone surrogates.
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")


@st.composite
def jsonl_files(draw, lines, max_lines: int = 6) -> bytes:
    body = draw(st.lists(lines, max_size=max_lines))
    sep = draw(st.sampled_from([b"\n", b"\r\n"]))
    tail = draw(st.sampled_from([b"", sep]))
    return sep.join(body) + (tail if body else b"")


@st.composite
def torn(draw, values) -> bytes:
    """A line cut short, as a killed writer leaves it."""
    whole = dump(draw(values), draw(st.booleans()))
    return whole[: draw(st.integers(0, len(whole)))]


json_lines = st.builds(dump, json_values, st.booleans())
record_lines = st.builds(dump, records, st.booleans())
any_line = st.one_of(
    record_lines,
    json_lines,
    torn(records),
    st.binary(max_size=40),
    st.sampled_from([b"", b"   ", b"\x00", b"\xef\xbb\xbf{}", b"\xff"]),
)


# --- properties ------------------------------------------------------------------------------------
@PROPERTY
@given(st.binary(max_size=400))
def test_a_file_of_arbitrary_bytes_is_indexed_or_rejected_with_a_file_line_error(data):
    check_file(data)


@PROPERTY
@given(st.binary(max_size=60).map(lambda b: b"\x00\xff\xc3(" + b))
def test_invalid_utf8_and_nul_bytes_get_a_file_line_error(data):
    check_file(data)


@PROPERTY
@given(jsonl_files(json_lines))
def test_any_json_value_on_a_line_is_indexed_or_rejected_with_a_file_line_error(data):
    check_file(data)


@settings(PROPERTY, max_examples=500)
@given(jsonl_files(record_lines, max_lines=3))
def test_records_shaped_like_the_formats_with_wrong_types_anywhere_get_a_file_line_error(data):
    check_file(data)


@PROPERTY
@given(jsonl_files(any_line))
def test_good_bad_torn_and_blank_lines_mixed_in_one_file_keep_the_same_promise(data):
    check_file(data)


# --- hand-made hostile files -----------------------------------------------------------------------
GOOD = b'{"id": "ok", "prompt": "a fine question"}\n'


def nested(depth: int, open_: bytes = b"[", close: bytes = b"]", core: bytes = b"") -> bytes:
    return open_ * depth + core + close * depth


@pytest.mark.parametrize(
    "line",
    [
        nested(10_000),
        nested(10_000, b'{"a":', b"}", b"1"),
        b'{"id": "x", "messages": ' + nested(10_000) + b"}",
        b'{"id": ' + nested(5_000, b'{"a":', b"}", b"1") + b', "prompt": "q"}',
    ],
    ids=["lists", "objects", "inside-messages", "inside-id"],
)
def test_nesting_past_the_json_depth_limit_is_a_file_line_error(line):
    assert "not valid JSON" in check_rejected(GOOD + line + b"\n" + GOOD, 2)


@pytest.mark.parametrize(
    "line, problem",
    [
        (
            b'{"id": "x", "messages": [{"role": "user", "content": ' + nested(1000) + b"}]}",
            "messages[0] content has a content part that is not text",
        ),
        (b'{"id": ' + nested(1000) + b', "prompt": "q"}', "'id' is list"),
        (b'{"prompt": ' + nested(1000, b'{"a":', b"}", b"1") + b"}", "'prompt' is dict"),
    ],
    ids=["content", "id", "prompt"],
)
def test_nesting_just_under_the_depth_limit_is_named_by_its_field(line, problem):
    assert check_rejected(line + b"\n", 1).startswith(problem)


def test_a_20_mb_prompt_on_one_line_is_indexed_and_read_back_whole():
    question = "why? " * (MB20 // 5)
    data = GOOD + orjson.dumps({"id": "huge", "prompt": question}) + b"\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "huge.jsonl"
        path.write_bytes(data)
        index = scan_dataset(DatasetSource("huge", "short", path))
        assert index.ids == ["ok", "huge"]
        assert PromptReader(index).read("huge").messages == ({"role": "user", "content": question},)


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": "x", "prompt": "' + b"a" * MB20,
        b'{"id": "x", "prompt": "' + b"\xff" * MB20 + b'"}',
        b"[" * MB20,
        b"1" * MB20,
    ],
    ids=["unterminated-string", "invalid-utf8", "open-brackets", "huge-number"],
)
def test_a_20_mb_invalid_line_is_a_short_file_line_error(line):
    problem = check_rejected(GOOD + line + b"\n", 2)
    assert len(problem) < 300, problem[:300]


def test_a_huge_wrong_value_is_not_copied_whole_into_the_error():
    line = orjson.dumps({"id": "x", "messages": [{"role": "u" * 1_000_000, "content": "q"}]})
    problem = check_rejected(line + b"\n", 1)
    assert len(problem) < 500, f"{len(problem):,} characters"


@pytest.mark.parametrize(
    "line, problem",
    [
        ({"id": ["a"], "prompt": "q"}, "'id' is list, expected a string or integer"),
        ({"id": 1.5, "prompt": "q"}, "'id' is a number that is not a 64-bit integer; write it as a string"),
        ({"id": True, "prompt": "q"}, "'id' is bool, expected a string or integer"),
        ({"id": {}, "prompt": "q"}, "'id' is dict, expected a string or integer"),
        ({"id": " ", "prompt": "q"}, "'id' is empty"),
        ({"id": "x", "messages": "hi"}, "'messages' must be a non-empty list of messages"),
        ({"id": "x", "messages": {"role": "user"}}, "'messages' must be a non-empty list of messages"),
        ({"id": "x", "messages": ["hi"]}, "messages[0] is str, expected an object"),
        ({"id": "x", "messages": [{"role": 1, "content": "q"}]}, "messages[0] has unknown role 1"),
        ({"id": "x", "messages": [{"role": None, "content": "q"}]}, "messages[0] has unknown role None"),
        ({"id": "x", "messages": [{"role": "bot", "content": "q"}]}, "messages[0] has unknown role 'bot'"),
        ({"id": "x", "messages": [{"role": "user", "content": 3}]}, "messages[0] content is int, expected a string"),
        ({"id": "x", "messages": [{"role": "user", "content": "  "}]}, "messages[0] content is empty"),
        (
            {"id": "x", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0] content has a content part that is not text",
        ),
        (
            {"id": "x", "messages": [{"role": "user", "content": ["q"]}]},
            "messages[0] content has a content part that is not text",
        ),
        ({"id": "x", "messages": [{"role": "assistant", "content": "a"}]}, "'messages' has no user turn to answer"),
        ({"id": "x", "conversations": [{"from": 0, "value": "q"}]}, "conversations[0] has unknown role 0"),
        (
            {"id": "x", "conversations": [{"from": "human", "value": None}]},
            "conversations[0] content is NoneType, expected a string",
        ),
        ({"id": "x", "prompt": ["q"]}, "'prompt' has a content part that is not text"),
        ({"id": "x", "prompt": 7}, "'prompt' is int, expected a string"),
        ({"id": "x", "prompt": "q", "system": 0}, "'system' is int, expected a string"),
        ({"id": "x"}, "no 'messages', 'conversations', 'prompt', 'instruction' or 'input_ids' field"),
    ],
)
def test_each_wrong_type_is_named_in_the_error(line, problem):
    said = check_rejected(GOOD + orjson.dumps(line) + b"\n", 2)
    assert said.startswith(problem) and said.endswith(FIX), said
