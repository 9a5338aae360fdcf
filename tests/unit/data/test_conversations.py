"""Input records become conversations with nothing dropped; the three regeneration modes cut them right."""

from __future__ import annotations

import pytest

from synthgen.data.conversations import (
    Conversation,
    ConversationError,
    conversation_id,
    each_id,
    parse_record,
    prompt_hash,
    stable_id,
    template_messages,
)

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def agent(*extra: dict) -> dict:
    return {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_content": "think"},
            {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "r"},
            *extra,
        ],
    }


@pytest.mark.parametrize(
    "record, messages",
    [
        ({"messages": [{"role": "user", "content": "hi"}]}, [{"role": "user", "content": "hi"}]),
        (
            {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a", "weight": 0}]},
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "weight": 0}],
        ),
        ({"conversations": [{"role": "user", "content": "q"}]}, [{"role": "user", "content": "q"}]),
        ({"prompt": "q", "system": "s"}, [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]),
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]},
            [{"role": "user", "content": "ab"}],
        ),
    ],
    ids=["messages", "sharegpt", "conversations-role", "prompt", "text-parts"],
)
def test_each_format_becomes_the_whole_conversation_with_every_field_kept(record, messages):
    assert parse_record(record) == Conversation(messages, None, 0)


def test_agent_data_keeps_tool_calls_results_reasoning_and_tools_as_given():
    conversation = parse_record(agent({"role": "assistant", "content": "done"}))
    assert conversation.tools == TOOLS
    assert conversation.messages[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [CALL],
        "reasoning_content": "think",
    }
    assert conversation.messages[2] == {"role": "tool", "content": "r", "tool_call_id": "c1", "name": "f"}


def test_tools_may_be_a_json_string_and_arguments_an_object():
    record = agent()
    record["tools"] = '[{"type": "function", "function": {"name": "f"}}]'
    record["messages"][1]["tool_calls"] = [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    ]
    conversation = parse_record(record)
    assert conversation.tools == [{"type": "function", "function": {"name": "f"}}]
    assert conversation.messages[1]["tool_calls"][0]["function"]["arguments"] == {"x": 1}


def test_empty_system_turns_are_dropped_and_counted():
    conversation = parse_record(
        {
            "messages": [
                {"role": "system", "content": " "},
                {"role": "user", "content": "q"},
                {"role": "system", "content": ""},
            ]
        }
    )
    assert conversation.messages == [{"role": "user", "content": "q"}] and conversation.dropped_empty_system == 2
    assert parse_record({"prompt": "q", "system": ""}).dropped_empty_system == 1


@pytest.mark.parametrize(
    "record, problem",
    [
        (
            {"messages": [{"role": "tool", "content": "r"}, {"role": "user", "content": "q"}]},
            "messages[0] is a tool result with no tool call before it",
        ),
        (agent() | {"tools": {"name": "f"}}, "'tools' must be a list of objects"),
        (agent() | {"tools": ["f"]}, "'tools' must be a list of objects"),
        (agent() | {"tools": "[oops"}, "'tools' is a string that is not valid JSON"),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{x"}}],
                    },
                ]
            },
            "messages[1] tool_calls[0] arguments are not valid JSON",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}],
                    },
                ]
            },
            "messages[1] tool_calls[0] arguments must be a JSON object",
        ),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": []}]},
            "messages[1] tool_calls must be a non-empty list of calls",
        ),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [{}]}]},
            "messages[1] tool_calls[0] has no 'function' object",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": "", "tool_calls": [{"function": {"arguments": "{}"}}]},
                ]
            },
            "messages[1] tool_calls[0] has no function name",
        ),
        (
            {"messages": [*agent()["messages"], {"role": "tool", "tool_call_id": "c9", "content": "r"}]},
            "messages[3] answers unknown tool_call_id 'c9'",
        ),
        (
            {"messages": [*agent()["messages"], {"role": "tool", "tool_call_id": ["c1"], "content": "r"}]},
            "messages[3] tool_call_id is list, expected a string",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "[" * 100_000}}],
                    },
                ]
            },
            "messages[1] tool_calls[0] arguments are not valid JSON",
        ),
        (
            {"messages": [{"role": "user", "content": "q", "tool_calls": [CALL]}]},
            "messages[0] is a user turn with tool_calls",
        ),
        ({"messages": [{"role": "user", "content": ""}]}, "messages[0] content is empty"),
        (
            {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": None}]},
            "messages[1] content is NoneType, expected a string",
        ),
        (
            {"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]},
            "'messages' has no user turn to answer",
        ),
    ],
)
def test_malformed_records_raise_a_conversation_error_naming_the_problem(record, problem):
    with pytest.raises(ConversationError) as caught:
        parse_record(record)
    assert str(caught.value).startswith(problem) and isinstance(caught.value, ValueError)


def test_an_assistant_turn_that_only_calls_tools_may_have_empty_content():
    for content in ("", None, "  "):
        record = agent()
        record["messages"][1]["content"] = content
        assert parse_record(record).messages[1]["content"] == content


def test_a_tool_result_may_be_empty():
    record = agent()
    record["messages"][2]["content"] = ""
    assert parse_record(record).messages[2]["content"] == ""


def test_last_cuts_the_trailing_assistant_turns():
    conversation = parse_record(
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a"},
                {"role": "assistant", "content": "b"},
            ]
        }
    )
    assert conversation.last_prompt() == [{"role": "user", "content": "q"}]
    assert len(conversation.messages) == 3


def test_each_gives_one_prompt_per_assistant_turn_with_the_original_history():
    conversation = parse_record(agent({"role": "assistant", "content": "done"}))
    prompts = conversation.each_prompts()
    assert [k for k, _ in prompts] == [0, 1]
    assert prompts[0][1] == conversation.messages[:1] and prompts[1][1] == conversation.messages[:3]
    assert each_id("r7", 1) == "r7#1"


def test_each_skips_an_assistant_turn_with_no_user_turn_before_it():
    conversation = parse_record(
        {
            "messages": [
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a"},
            ]
        }
    )
    assert [k for k, _ in conversation.each_prompts()] == [1]


def test_all_regenerates_each_turn_on_the_models_own_earlier_replies():
    conversation = parse_record(
        {
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "q1"},
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": "q2"},
                {"role": "assistant", "content": "a2"},
            ]
        }
    )
    assert conversation.all_blocker() is None and conversation.all_positions() == [2, 4]
    assert conversation.all_prompt(2, []) == conversation.messages[:2]
    mine = {"role": "assistant", "content": "m1", "reasoning_content": "r"}
    assert conversation.all_prompt(4, [mine]) == [*conversation.messages[:2], mine, conversation.messages[3]]
    with pytest.raises(ValueError):
        conversation.all_prompt(4, [])


def test_all_refuses_a_conversation_with_tool_results_and_says_why():
    conversation = parse_record(agent({"role": "assistant", "content": "done"}))
    assert "tool calls and results" in conversation.all_blocker()
    with pytest.raises(ConversationError):
        conversation.all_prompt(1, [])


def test_ids_of_plain_chats_are_the_ones_earlier_releases_gave():
    # Pinned from prompts.parse_line before agent data was accepted.
    sharegpt = parse_record(
        {"conversations": [{"from": "human", "value": "q", "weight": 1}, {"from": "gpt", "value": "a"}]}
    )
    assert conversation_id(sharegpt) == "auto-49b16c132664bd367aba"
    assert conversation_id(parse_record({"prompt": "same", "system": "s"})) == "auto-05fc88be1b4f1b8f4af0"
    assert stable_id([{"role": "user", "content": "q"}]) == "auto-49b16c132664bd367aba"


def test_ids_and_prompt_hashes_change_with_tool_data():
    plain = parse_record({"messages": [{"role": "user", "content": "q"}]})
    with_tools = parse_record({"messages": [{"role": "user", "content": "q"}], "tools": TOOLS})
    assert conversation_id(plain) != conversation_id(with_tools)
    messages = plain.messages
    assert prompt_hash(messages) == prompt_hash(list(messages)) != prompt_hash(messages, TOOLS)
    assert prompt_hash(messages, None, {"thinking": False}) != prompt_hash(messages)


def test_template_messages_shape_tool_turns_without_touching_the_row():
    conversation = parse_record(agent())
    shaped = template_messages(conversation.messages, "object", "")
    assert shaped[1]["tool_calls"][0]["function"]["arguments"] == {"x": 1} and shaped[1]["content"] == ""
    assert conversation.messages[1]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'
    assert conversation.messages[1]["content"] is None
    as_strings = template_messages(shaped, "string", None)
    assert as_strings[1]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'
    assert shaped[0] is conversation.messages[0], "turns without tool calls are passed through"
