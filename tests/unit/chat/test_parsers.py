"""Named output parsers reproduce SGLang 0.5.23's non-streaming results, table-driven.

Each row says why SGLang gives that result. The same table is fed to the real SGLang parsers by
tests/integration/test_parsers_vs_sglang.py, which asserts we agree with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from parser_samples import TOOLS

from synthgen.chat.parsers import (
    KNOWN_REASONING,
    KNOWN_TOOL_CALL,
    NOT_REPRODUCED,
    SGLANG_REASONING,
    SGLANG_TOOL_CALL,
    OutputParser,
    parser_table,
    prompt_opens_reasoning,
)
from synthgen.run.model import choose_parser


@dataclass(frozen=True)
class Case:
    name: str
    reasoning_parser: str | None
    tool_parser: str | None
    text: str
    opened: bool  # the rendered prompt ended with the opening tag (SGLang's force_reasoning)
    reasoning: str
    content: str
    complete: bool = True
    calls: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments as SGLang serializes them)


WEATHER_QWEN = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
K2_CALL = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
    '{"city": "Beijing"}<|tool_call_end|><|tool_calls_section_end|>'
)
OSS_ANALYSIS = "<|channel|>analysis<|message|>User wants the weather. Call the tool.<|end|>"
OSS_CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"location":"Tokyo","unit":"c"}<|call|>'
)

CASES = [
    # DeepSeekR1Detector: force_reasoning is hard-coded True, so R1's output without <think> is reasoning.
    Case(
        "r1 without opening tag",
        "deepseek-r1",
        None,
        "Let me add.\n</think>\n\n2 + 2 = 4.",
        False,
        "Let me add.\n",
        "\n\n2 + 2 = 4.",
    ),
    Case(
        "r1-0528 with opening tag",
        "deepseek-r1",
        None,
        "<think>\nAdd them.\n</think>\n\n4",
        False,
        "\nAdd them.\n",
        "\n\n4",
    ),
    Case("r1 cut off at max tokens", "deepseek-r1", None, "Let me add 2 and", False, "Let me add 2 and", "", False),
    Case("step3 is the r1 detector", "step3", None, "plan</think>go", False, "plan", "go"),
    # Qwen3Detector: reasoning only if <think> is in the output or the prompt opened it.
    Case(
        "qwen3 thinking",
        "qwen3",
        None,
        "<think>\nSimple greeting.\n</think>\n\nHello!",
        False,
        "\nSimple greeting.\n",
        "\n\nHello!",
    ),
    Case("qwen3 no-think answer", "qwen3", None, "Hello!", False, "", "Hello!"),
    Case("qwen3 thinking-2507 prompt opens", "qwen3", None, "Plan.\n</think>\n\nDone.", True, "Plan.\n", "\n\nDone."),
    Case("qwen3 cut off", "qwen3", None, "<think>\nFirst, consider", False, "\nFirst, consider", "", False),
    Case("qwen3-thinking is forced", "qwen3-thinking", None, "Plan.</think>Done.", False, "Plan.", "Done."),
    # Qwen3Detector's tool_start_token: <tool_call> ends reasoning that never closed; Qwen25Detector answers
    # with the text before the first call, stripped, and drops text after the calls.
    Case(
        "qwen3 tool call after thinking",
        "qwen3",
        "qwen25",
        "<think>\nNeed the weather.\n</think>\n\n" + WEATHER_QWEN,
        False,
        "\nNeed the weather.\n",
        "",
        calls=[("get_weather", '{"city": "Paris"}')],
    ),
    Case(
        "qwen3 tool call without closing think",
        "qwen3",
        "qwen25",
        "<think>\nCall it.\n" + WEATHER_QWEN,
        False,
        "\nCall it.\n",
        "",
        calls=[("get_weather", '{"city": "Paris"}')],
    ),
    Case(
        "qwen25 two calls, prose around",
        None,
        "qwen25",
        "Sure, checking both.\n\n"
        + WEATHER_QWEN
        + "\n"
        + '<tool_call>\n{"name":"get_time","arguments":{"tz":"Europe/Paris","fmt":[24,"h"]}}\n</tool_call>\nDone.',
        False,
        "",
        "Sure, checking both.",
        calls=[("get_weather", '{"city": "Paris"}'), ("get_time", '{"tz": "Europe/Paris", "fmt": [24, "h"]}')],
    ),
    Case(
        "qwen25 parameters key and no arguments",
        "qwen3",
        "qwen",
        '<tool_call>\n{"name": "ping"}\n</tool_call>',
        False,
        "",
        "",
        calls=[("ping", "{}")],
    ),
    Case(
        "qwen25 malformed json drops the call",
        None,
        "qwen25",
        'Trying.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</tool_call>',
        False,
        "",
        "Trying.",
    ),
    Case("qwen25 no call leaves text as is", None, "qwen25", "  Just text.  ", False, "", "  Just text.  "),
    # KimiDetector: ◁think▷ tags and force_reasoning hard-coded False, so the prompt cannot open it.
    Case("kimi-vl thinking", "kimi", None, "◁think▷Look at it.◁/think▷A cat.", False, "Look at it.", "A cat."),
    Case("kimi ignores an opened prompt", "kimi", None, "Look.◁/think▷A cat.", True, "", "Look.◁/think▷A cat."),
    # KimiK2Detector: Kimi-K2.5 prompts end with <think>; <|tool_calls_section_begin|> ends reasoning.
    Case(
        "kimi-k2.5 prompt opens, tool call",
        "kimi_k2",
        "kimi_k2",
        "The user wants the weather.</think>Let me check." + K2_CALL,
        True,
        "The user wants the weather.",
        "Let me check.",
        calls=[("get_weather", '{"city": "Beijing"}')],
    ),
    Case(
        "k2-thinking tool call inside reasoning",
        "kimi_k2",
        "kimi_k2",
        "<think>Need to search." + K2_CALL.replace("get_weather:0", "search:3").replace("city", "q"),
        False,
        "Need to search.",
        "",
        calls=[("search", '{"q": "Beijing"}')],
    ),
    Case("kimi-k2.5 cut off", "kimi_k2", None, "The user wants", True, "The user wants", "", False),
    Case("kimi-k2.5 answer", "kimi_k2", "kimi_k2", "Short.</think>Paris.", True, "Short.", "Paris."),
    # Glm45Detector: <think> from the output or the prompt; <tool_call> ends unclosed reasoning.
    Case(
        "glm-4.5 thinking",
        "glm45",
        None,
        "<think>Compute.</think>\nThe result is 6.",
        False,
        "Compute.",
        "\nThe result is 6.",
    ),
    Case("glm-4.6 cut off", "glm45", None, "<think>Compute 2*3 and", False, "Compute 2*3 and", "", False),
    Case("glm-4.5 no thinking", "glm45", None, "\nThe result is 6.", False, "", "\nThe result is 6."),
    # `minimax` is Qwen3Detector with force_reasoning=True: MiniMax-M2's template consumes <think>.
    Case(
        "minimax-m2 thinking",
        "minimax",
        None,
        "The user greets.\n</think>\n\nHi!",
        False,
        "The user greets.\n",
        "\n\nHi!",
    ),
    Case("minimax-m2 cut off", "minimax", None, "The user greets and", False, "The user greets and", "", False),
    # MiniMaxAppendThinkDetector keeps everything as content and puts the consumed <think> back.
    Case(
        "minimax-append-think",
        "minimax-append-think",
        None,
        "The user greets.\n</think>\n\nHi!",
        False,
        "",
        "<think>The user greets.\n</think>\n\nHi!",
    ),
    # GptOssDetector (HarmonyParser): analysis is reasoning, final is the answer, markers removed.
    Case(
        "gpt-oss analysis then final",
        "gpt-oss",
        None,
        "<|channel|>analysis<|message|>2+2 is 4.<|end|><|start|>assistant<|channel|>final<|message|>4",
        False,
        "2+2 is 4.",
        "4",
    ),
    Case(
        "gpt-oss final with return",
        "gpt-oss",
        None,
        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>4.<|return|>",
        False,
        "Easy.",
        "4.",
    ),
    Case(
        "gpt-oss cut off in analysis",
        "gpt-oss",
        None,
        "<|channel|>analysis<|message|>The user asks about",
        False,
        "The user asks about",
        "",
        False,
    ),
    Case(
        "gpt-oss cut off in final",
        "gpt-oss",
        None,
        "<|channel|>analysis<|message|>Easy.<|end|><|start|>assistant<|channel|>final<|message|>The ans",
        False,
        "Easy.",
        "The ans",
    ),
    # Without a tool-call parser the call block stays in the content, verbatim, as SGLang leaves it.
    Case(
        "gpt-oss tool call, no tool parser",
        "gpt-oss",
        None,
        OSS_ANALYSIS + OSS_CALL,
        False,
        "User wants the weather. Call the tool.",
        OSS_CALL,
    ),
    Case(
        "gpt-oss tool call",
        "gpt-oss",
        "gpt-oss",
        OSS_ANALYSIS + OSS_CALL,
        False,
        "User wants the weather. Call the tool.",
        "",
        calls=[("get_weather", '{"location": "Tokyo", "unit": "c"}')],
    ),
    Case(
        "gpt-oss preamble then tool call",
        "gpt-oss",
        "gpt-oss",
        OSS_ANALYSIS + "<|start|>assistant<|channel|>commentary<|message|>Checking the weather.<|end|>" + OSS_CALL,
        False,
        "User wants the weather. Call the tool.",
        "Checking the weather.",
        calls=[("get_weather", '{"location": "Tokyo", "unit": "c"}')],
    ),
    # HarmonyParser holds an unfinished commentary block waiting for <|call|>, so a cut-off call is dropped.
    Case(
        "gpt-oss cut off inside a tool call",
        "gpt-oss",
        "gpt-oss",
        OSS_ANALYSIS + OSS_CALL[:-20],
        False,
        "User wants the weather. Call the tool.",
        "",
    ),
    # HarmonyParser picks no strategy for text without markers or channel words, and emits nothing.
    Case("gpt-oss text without markers is dropped", "gpt-oss", None, "Hello there", False, "", ""),
    # No parser named: the plain <think> rule (synthgen.chat.parsers), honouring the prompt.
    Case("default think rule", None, None, "plan</think>answer", True, "plan", "answer"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_parser_reproduces_sglangs_non_streaming_result(case: Case):
    out = OutputParser(case.reasoning_parser, case.tool_parser).parse(case.text, case.opened, call_id_prefix="p1")
    assert (out.reasoning, out.content, out.reasoning_complete) == (case.reasoning, case.content, case.complete)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in out.tool_calls] == case.calls
    assert all(c["type"] == "function" for c in out.tool_calls)


def test_kimi_k2_ids_count_from_earlier_turns_and_ignore_the_models_own_number():
    text = K2_CALL.replace("get_weather:0", "search:7") + K2_CALL
    calls = OutputParser("kimi_k2", "kimi_k2").parse("</think>" + text, True, history_tool_calls=2).tool_calls
    assert [c["id"] for c in calls] == ["functions.search:2", "functions.get_weather:3"]


def test_other_ids_have_sglangs_shape_and_are_reproducible_per_prompt():
    parser = OutputParser(None, "qwen25")
    text = WEATHER_QWEN + "\n" + WEATHER_QWEN
    ids = [c["id"] for c in parser.parse(text, False, call_id_prefix="prompt-1").tool_calls]
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in ids) and len(set(ids)) == 2
    assert ids == [c["id"] for c in parser.parse(text, False, call_id_prefix="prompt-1").tool_calls]
    assert ids != [c["id"] for c in parser.parse(text, False, call_id_prefix="prompt-2").tool_calls]


def test_reasoning_opened_by_the_output_counts_as_had_reasoning():
    assert OutputParser("qwen3", None).parse("<think></think>x", False).had_reasoning
    assert not OutputParser("qwen3", None).parse("x", False).had_reasoning
    assert OutputParser("gpt-oss", None).parse(OSS_ANALYSIS, False).had_reasoning


@pytest.mark.parametrize(
    "prompt,parser,opens",
    [
        ("<|im_start|>assistant\n<think>\n", "qwen3", True),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", "qwen3", False),  # enable_thinking=False
        ("<|im_assistant|>assistant<|im_middle|><think>", "kimi_k2", True),
        ("<|im_assistant|>assistant<|im_middle|>◁think▷", "kimi", True),
        ("<|start|>assistant", "gpt-oss", False),
        ("]~b]ai\n<think>\n", "minimax-append-think", False),
        ("<|im_start|>assistant\n<seed:think>", None, False),
    ],
)
def test_a_prompt_opens_reasoning_when_it_ends_with_the_parsers_opening_tag(prompt, parser, opens):
    assert prompt_opens_reasoning(prompt, parser) is opens
    assert OutputParser(parser, None).opens_reasoning(prompt) is opens


def test_custom_think_tags_apply_when_no_parser_is_named():
    parser = OutputParser(None, None, "<seed:think>", "</seed:think>")
    assert parser.opens_reasoning("x<seed:think>")
    assert parser.parse("r</seed:think>c", True).reasoning == "r"


@pytest.mark.parametrize("kind", ["reasoning", "tool_call"])
def test_an_unknown_name_is_refused_with_the_known_names(kind):
    with pytest.raises(ValueError, match="unknown .* parser 'nope'; known: ") as info:
        OutputParser(**{"reasoning": None, "tool_call": None, kind: "nope"})
    known = KNOWN_REASONING if kind == "reasoning" else KNOWN_TOOL_CALL
    assert ", ".join(known) in str(info.value)


def test_known_names_are_sglangs():
    assert {"deepseek-r1", "deepseek-v3", "qwen3", "kimi", "kimi_k2", "glm45", "minimax", "gpt-oss"} <= set(
        KNOWN_REASONING
    )
    assert {"kimi_k2", "qwen25", "gpt-oss"} <= set(KNOWN_TOOL_CALL)


def test_the_docs_parser_table_is_the_one_the_code_generates():
    doc = (Path(__file__).resolve().parents[3] / "docs" / "parsers.md").read_text(encoding="utf-8")
    table = doc.split("<!-- parser-table:start -->\n", 1)[1].split("<!-- parser-table:end -->", 1)[0]
    assert table == parser_table(), (
        "regenerate: python -c 'from synthgen.chat.parsers import parser_table as t; print(t())'"
    )


def test_every_sglang_name_is_reproduced_or_left_out_with_a_reason():
    for kind, names, known in (
        ("reasoning", SGLANG_REASONING, KNOWN_REASONING),
        ("tool-call", SGLANG_TOOL_CALL, KNOWN_TOOL_CALL),
    ):
        assert set(known) <= set(names)
        assert all((kind, n) in NOT_REPRODUCED for n in names if n not in known)
        assert all(f"`{n}`" in parser_table() for n in names)


def test_a_server_parser_this_tool_does_not_know_gets_a_note_saying_why():
    notes: list[str] = []
    assert choose_parser("tool-call", None, "response_template", notes) is None
    assert choose_parser("reasoning", None, "qwen9-future", notes) is None
    assert "does not reproduce it: SGLang derives it from the chat template" in notes[0]
    assert "content" in notes[0] and "--tool-call-parser" in notes[0]
    assert "'qwen9-future' is not a reasoning parser of SGLang 0.5.23" in notes[1]
    assert choose_parser("tool-call", None, "qwen3_coder", notes) == "qwen3_coder" and len(notes) == 2


@pytest.mark.parametrize(
    "parser,text,content,calls",
    [
        (
            "qwen3_coder",
            "Ok.\n<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n<parameter=metric>\n"
            "true\n</parameter>\n<parameter=city>\n7\n</parameter>\n</function>\n</tool_call>",
            "Ok.\n",
            [("get_weather", '{"days": 3, "metric": true, "city": "7"}')],  # typed by the schema
        ),
        (
            "glm47",
            "A <tool_call>get_weather<arg_key>days</arg_key><arg_value>4</arg_value></tool_call> B",
            "A  B",
            [("get_weather", '{"days": 4}')],
        ),
        (
            "glm45",
            "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Rome</arg_value>\n</tool_call>",
            "",
            [("get_weather", '{"city": "Rome"}')],
        ),
        (
            "minimax-m2",
            'Hi<minimax:tool_call><invoke name="get_weather"><parameter name="days">2</parameter></invoke>'
            "</minimax:tool_call>",
            "Hi",
            [("get_weather", '{"days": 2}')],
        ),
        ("mistral", '[TOOL_CALLS]ping[ARGS]{"x": 1}', "", [("ping", '{"x": 1}')]),
        ("pythonic", '[search(q="a", n=2)]', "", [("search", '{"q": "a", "n": 2}')]),
        ("llama3", '<|python_tag|>{"name": "ping", "parameters": {}}', "", [("ping", "{}")]),
        (
            "deepseekv31",
            'x<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>ping<｜tool▁sep｜>{"a": 1}'
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
            "x",
            [("ping", '{"a": 1}')],
        ),
        ("hermes", '<tool_call>{"name": "undeclared", "arguments": {}}</tool_call>', "", []),  # SGLang drops it
    ],
)
def test_tool_calls_with_the_prompts_tools_follow_sglangs_detectors(parser, text, content, calls):
    out = OutputParser(None, parser).parse(text, False, call_id_prefix="p", tools=TOOLS)
    assert out.content == content
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in out.tool_calls] == calls


def test_kimi_k3_ids_are_name_and_index_counting_earlier_turns():
    text = (
        '<|open|>tools<|sep|><|open|>call tool="ping"<|sep|><|close|>call<|sep|><|open|>call tool="search"<|sep|>'
        '<|open|>argument key="n" type="integer"<|sep|>2<|close|>argument<|sep|><|close|>call<|sep|>'
    )
    calls = OutputParser(None, "kimi_k3").parse(text, False, history_tool_calls=3, tools=TOOLS).tool_calls
    assert [(c["id"], c["function"]["arguments"]) for c in calls] == [("ping:3", "{}"), ("search:4", '{"n": 2}')]


def test_a_failing_detector_leaves_the_whole_answer_and_no_calls():
    # MiniMax-M3 raises on a mismatched closing tag; SGLang's serving layer then keeps the text as it was.
    text = ']<]minimax[>[<tool_call>]<]minimax[>[<invoke name="search">]<]minimax[>[<q>x]<]minimax[>[</n>'
    text += "]<]minimax[>[</invoke>]<]minimax[>[</tool_call>"
    out = OutputParser(None, "minimax-m3").parse(text, False, tools=TOOLS)
    assert (out.content, out.tool_calls) == (text, [])
