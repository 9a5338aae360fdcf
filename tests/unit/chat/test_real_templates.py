"""Real chat templates render our conversations exactly as the model's own template does, losing nothing.

Each model's tokenizer is a tiny BPE carrying that model's special tokens and its real chat template
(tests/support/templates/, sources in SOURCES.md). The expected ids come from ``apply_chat_template`` on the
conversation written the way the model card passes it (tool-call arguments as objects; DeepSeek-R1's
template concatenates them, so it gets the OpenAI JSON string), then encoded without special tokens.
"""

from __future__ import annotations

import json

import pytest
from model_tokenizers import MODELS, build_model_tokenizer

from synthgen.chat.templating import ChatRenderer, load_tokenizer
from synthgen.data.conversations import parse_record

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Look up the current weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "description": "City name"}},
                "required": ["city"],
            },
        },
    }
]

AGENT_RECORD = {
    "id": "agent",
    "tools": TOOLS,
    "messages": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "I should look it up with the tool.",
            "tool_calls": [
                {
                    "id": "call_7",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_7", "name": "get_weather", "content": '{"temp_c": 21}'},
        {"role": "assistant", "content": "It is 21 degrees in Paris.", "reasoning_content": "The tool said 21."},
    ],
}

CHAT_RECORD = {
    "id": "chat",
    "messages": [
        {"role": "user", "content": "Name a prime number."},
        {"role": "assistant", "content": "Seven.", "reasoning_content": "Seven is prime."},
        {"role": "user", "content": "And one larger than it?"},
        {"role": "assistant", "content": "Eleven.", "reasoning_content": "Eleven is the next prime."},
    ],
}

# Templates that render an earlier turn's reasoning_content when it precedes a tool result.
KEEPS_TOOL_TURN_REASONING = {"kimi-k2-thinking", "qwen3", "glm-4.6", "minimax-m2", "gpt-oss"}
# DeepSeek-R1(-Distill)'s template has no tools variable: the schema never reaches that model.
RENDERS_TOOL_SCHEMA = set(MODELS) - {"deepseek-r1-distill"}


@pytest.fixture(scope="module", params=sorted(MODELS))
def model(request, tmp_path_factory):
    name = request.param
    folder = build_model_tokenizer(tmp_path_factory.getbasetemp() / "model-tokenizers" / name, name)
    tokenizer = load_tokenizer(str(folder))
    return name, tokenizer, ChatRenderer(tokenizer, think_start=MODELS[name].think_start)


def card_form(name: str, messages: list[dict]) -> list[dict]:
    """The conversation as a model card passes it to apply_chat_template."""
    shaped = []
    for message in messages:
        message = json.loads(json.dumps(message))
        if message.get("tool_calls"):
            message["content"] = message["content"] or ""
            if name != "deepseek-r1-distill":
                for call in message["tool_calls"]:
                    call["function"]["arguments"] = json.loads(call["function"]["arguments"])
        shaped.append(message)
    return shaped


def expected_ids(name, tokenizer, messages, tools=None) -> list[int]:
    kwargs = {"tools": tools} if tools is not None else {}
    text = tokenizer.apply_chat_template(
        card_form(name, messages), tokenize=False, add_generation_prompt=True, **kwargs
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def check(model, messages, tools=None) -> str:
    name, tokenizer, renderer = model
    rendered = renderer.render(messages, tools)
    assert rendered.input_ids == expected_ids(name, tokenizer, messages, tools)
    assert tokenizer.decode(rendered.input_ids) == rendered.text
    return rendered.text


def test_a_single_turn_renders_as_the_template_does(model):
    conversation = parse_record({"prompt": "Say hello.", "system": "Be kind."})
    text = check(model, conversation.last_prompt())
    assert "Say hello." in text


def test_a_multi_turn_chat_with_history_reasoning_renders_as_the_template_does(model):
    conversation = parse_record(CHAT_RECORD)
    text = check(model, conversation.last_prompt())
    assert "Seven." in text and "And one larger than it?" in text


def test_a_tool_call_and_its_result_render_as_the_template_does_with_nothing_lost(model):
    name = model[0]
    conversation = parse_record(AGENT_RECORD)
    text = check(model, conversation.last_prompt(), conversation.tools)
    assert "get_weather" in text and "Paris" in text, "the tool call"
    assert "21" in text, "the tool result"
    if name in RENDERS_TOOL_SCHEMA:
        assert "Look up the current weather" in text and "City name" in text, "the tool schema"
    if name in KEEPS_TOOL_TURN_REASONING:
        assert "I should look it up with the tool." in text, "the tool-calling turn's reasoning"


def test_each_prompt_of_an_agent_conversation_renders_as_the_template_does(model):
    conversation = parse_record(AGENT_RECORD)
    prompts = conversation.each_prompts()
    assert [k for k, _ in prompts] == [0, 1]
    for _, messages in prompts:
        check(model, messages, conversation.tools)


def test_the_second_turn_of_an_all_regeneration_renders_with_the_models_own_first_reply(model):
    conversation = parse_record(CHAT_RECORD)
    first, second = conversation.all_positions()
    reply = {"role": "assistant", "content": "Thirteen.", "reasoning_content": "Pick a prime."}
    messages = conversation.all_prompt(second, [reply])
    text = check(model, messages)
    assert "Thirteen." in text and "Seven." not in text
