"""Our named parsers agree with the real SGLang 0.5.23 parsers on the same outputs.

The SGLang side runs in the real-SGLang venv's Python (a subprocess: the test process never imports
sglang), fed the table of tests/unit/chat/test_parsers.py plus seeded random Harmony texts as JSON. It chains
``ReasoningParser.parse_non_stream`` and ``FunctionCallParser`` as ``serving_chat`` does, with every
function the table calls declared as a tool. SGLang re-serializes most tool arguments with
``json.dumps(json.loads(raw), ensure_ascii=False)`` where we keep the raw text, so arguments are
compared after that same normalization (and exactly for kimi_k2, whose arguments SGLang keeps raw).
"""

from __future__ import annotations

import json
import random
import re
import subprocess
from typing import Any

import pytest
from parser_samples import (
    REASONING_TEXTS,
    SGLANG_REASONING_TEST_TEXTS,
    SGLANG_TEST_TEXTS,
    SGLANG_TEST_TOOLS,
    TOOL_TEXTS,
    TOOLS,
)

from synthgen.chat.parsers import (
    KNOWN_REASONING,
    KNOWN_TOOL_CALL,
    NOT_REPRODUCED,
    SGLANG_REASONING,
    SGLANG_TOOL_CALL,
    OutputParser,
)
from synthgen.demo.commands import DemoPaths
from tests.unit.chat.test_parsers import CASES

pytestmark = pytest.mark.real_sglang

SGLANG_PYTHON = DemoPaths.default().python  # the real server's venv (honours $SYNTHGEN_CACHE)

# One process for both jobs (this one and the iquest_q1 one below): importing sglang is most of its time.
SGLANG_SIDE = r"""
import json, sys
from sglang.srt.entrypoints.openai.protocol import Tool
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.function_call.parser_names import TOOL_CALL_PARSER_NAMES
from sglang.srt.parser.reasoning_parser import BaseReasoningFormatDetector, ReasoningParser
from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES

def parsers(job):
    toolsets = {name: [Tool(**tool) for tool in tools] for name, tools in job["toolsets"].items()}
    results = []
    for row in job["rows"]:
        text, reasoning = row["text"], ""
        if row["reasoning_parser"]:
            parser = ReasoningParser(row["reasoning_parser"], stream_reasoning=False, force_reasoning=row["opened"],
                                     tool_call_parser_active=bool(row["tool_parser"]))
            reasoning, text = parser.parse_non_stream(text)
        else:  # our plain rule is SGLang's base detector with the <think> tags
            detector = BaseReasoningFormatDetector("<think>", "</think>", force_reasoning=row["opened"])
            split = detector.detect_and_parse(text)
            reasoning, text = split.reasoning_text, split.normal_text
        text = text or ""
        calls = []
        if row["tool_parser"]:
            tool_parser = FunctionCallParser(toolsets[row["toolset"]], row["tool_parser"])
            if tool_parser.has_tool_call(text):  # serving_chat._process_tool_calls
                try:
                    parsed, items = tool_parser.parse_non_stream(text)
                except Exception:
                    parsed, items = text, []
                text = parsed
                for item in items:
                    if row["tool_parser"] == "kimi_k2":
                        call_id = f"functions.{item.name}:{row['history'] + item.tool_index}"
                    elif row["tool_parser"] == "kimi_k3":
                        call_id = f"{item.name}:{row['history'] + item.tool_index}"
                    else:
                        call_id = "call_<uuid>"
                    calls.append([call_id, item.name, item.parameters])
        results.append({"reasoning": reasoning or "", "content": text or "", "calls": calls})
    return {"results": results, "reasoning_names": REASONING_PARSER_NAMES, "tool_names": TOOL_CALL_PARSER_NAMES}
"""

HARMONY_PIECES = [
    "<|start|>assistant",
    "<|channel|>",
    "analysis",
    "final",
    "commentary",
    " to=functions.get_weather ",
    "<|constrain|>json",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
    '{"location":"Tokyo"}',
    "Thinking it over. ",
    "The answer.",
    " ",
    "\n",
    "<|weird|>",
    "<|",
    "commentary",
    "assistantfinal",
]
OSS_ROUND = (
    "<|channel|>analysis<|message|>{r}<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
    '<|constrain|>json<|message|>{{"location": "{c}"}}<|call|>commentary'
    "<|start|>assistant<|channel|>final<|message|>{a}"
)


def _harmony_rows(count: int) -> list[dict]:
    rng = random.Random(20240523)
    texts = ["".join(rng.choice(HARMONY_PIECES) for _ in range(rng.randint(1, 14))) for _ in range(count)]
    texts += [OSS_ROUND.format(r="Hmm " * i, c="Paris", a="Done."[:i]) for i in range(6)]
    texts += [OSS_ROUND.format(r="x", c="Rome", a="ok")[:cut] for cut in range(0, 260, 7)]
    return [
        {
            "name": f"harmony {i}",
            "toolset": "samples",
            "reasoning_parser": "gpt-oss",
            "tool_parser": tool,
            "text": text,
            "opened": False,
            "history": 0,
        }
        for i, text in enumerate(texts)
        for tool in (None, "gpt-oss")
    ]


# SGLang's serving layer forces these (k2_horizon refuses anything else; iquest_q1 thinks unless told not to).
TOOLSETS = {"samples": TOOLS, "sglang_tests": SGLANG_TEST_TOOLS}
SERVING_FORCED = {"k2_horizon", "iquest_q1"}


def _row(name, reasoning_parser, tool_parser, text, opened=False, history=0, toolset="samples") -> dict:
    return {
        "toolset": toolset,
        "name": name,
        "reasoning_parser": reasoning_parser,
        "tool_parser": tool_parser,
        "text": text,
        "opened": opened or reasoning_parser in SERVING_FORCED,
        "history": history,
    }


def _rows() -> list[dict]:
    rows = [_row(c.name, c.reasoning_parser, c.tool_parser, c.text, c.opened) for c in CASES]
    # Cut-offs of every table output at every position, so truncation agrees wherever it falls.
    for c in CASES:
        for cut in range(0, len(c.text), 3):
            rows.append(_row(f"{c.name} cut at {cut}", c.reasoning_parser, c.tool_parser, c.text[:cut], c.opened))
    # Every sample in every format through every tool-call parser, whole and cut off.
    for i, text in enumerate(TOOL_TEXTS):
        for tool in KNOWN_TOOL_CALL:
            rows.append(_row(f"tool text {i} / {tool}", None, tool, text, history=i % 3))
            for cut in range(len(text) // 3, len(text), max(len(text) // 3, 1)):
                rows.append(_row(f"tool text {i} / {tool} cut at {cut}", None, tool, text[:cut]))
    # The inputs of SGLang's own parser tests, with the tools those tests declare, through every name.
    for i, text in enumerate(SGLANG_TEST_TEXTS):
        for tool in KNOWN_TOOL_CALL:
            rows.append(_row(f"sglang test text {i} / {tool}", None, tool, text, toolset="sglang_tests"))
    # SGLang's reasoning-parser test inputs, as the Kimi-K2 pipeline test chains them, with its tools.
    for i, text in enumerate(SGLANG_REASONING_TEST_TEXTS):
        for opened in (False, True):
            rows.append(
                _row(f"sglang reasoning test {i} k2 / {opened}", "kimi_k2", "kimi_k2", text, opened, 0, "sglang_tests")
            )
    # Every reasoning sample through every reasoning parser, the prompt opening it or not.
    for i, text in enumerate(REASONING_TEXTS + TOOL_TEXTS[:12] + SGLANG_REASONING_TEST_TEXTS):
        for reasoning in KNOWN_REASONING:
            for opened in (False, True):
                rows.append(_row(f"reasoning text {i} / {reasoning} / {opened}", reasoning, None, text, opened))
    # Reasoning and tool calls chained, as a thinking model calling tools writes them.
    pairs = [
        ("qwen3", "qwen3_coder"),
        ("glm45", "glm47"),
        ("glm45", "glm45"),
        ("minimax", "minimax-m2"),
        ("deepseek-v3", "deepseekv31"),
        ("kimi_k2", "kimi_k2"),
        ("qwen3", "hermes"),
        ("mistral", "mistral"),
        ("inkling", "inkling"),
        ("kimi_k3", "kimi_k3"),
        ("apertus2509", "apertus2509"),
        ("hunyuan", "hunyuan"),
        ("gemma4", "gemma4"),
        ("deepseek-v4", "deepseekv4"),
        ("iquest_q1", "iquest_q1"),
        ("step3", "step3"),
        ("cohere_command4", "cohere_command4"),
        ("k2_horizon", "k2_horizon"),
        ("muse", "muse"),
    ]
    for i, text in enumerate(REASONING_TEXTS):  # reasoning texts with a tool parser behind (Muse keeps framing)
        rows.append(_row(f"reasoning text {i} / muse+muse", "muse", "muse", text))
    for i, text in enumerate(TOOL_TEXTS):
        for reasoning, tool in pairs:
            rows.append(_row(f"chain {i} / {reasoning}+{tool}", reasoning, tool, "<think>hm</think>" + text))
            rows.append(_row(f"chain {i} / {reasoning}+{tool} opened", reasoning, tool, "hm\n" + text, True))
            rows.append(_row(f"chain {i} / {reasoning}+{tool} bare", reasoning, tool, text))
    return rows + _harmony_rows(400)


@pytest.fixture(scope="module")
def sglang_side(real_setup) -> dict[str, tuple[list[dict], Any]]:
    """Both jobs' rows and SGLang's answers to them, by job: {"parsers": (rows, answer), "iquest": ...}."""
    # real_setup installs the real server on first use (or fails/skips as the other real tests do).
    rows = {"parsers": _rows(), "iquest": _iquest_rows()}
    job = json.dumps(
        {"parsers": {"rows": rows["parsers"], "toolsets": TOOLSETS}, "iquest": {"rows": rows["iquest"], "tools": TOOLS}}
    )
    done = subprocess.run(
        [str(SGLANG_PYTHON), "-c", BOTH_SIDES], input=job, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    return {name: (rows[name], answers[name]) for name in rows}


@pytest.fixture(scope="module")
def sglang_answers(sglang_side) -> tuple[list[dict], dict]:
    return sglang_side["parsers"]


def _ours(row: dict) -> dict:
    out = OutputParser(row["reasoning_parser"], row["tool_parser"]).parse(
        row["text"],
        row["opened"],
        call_id_prefix=row["name"],
        history_tool_calls=row["history"],
        tools=TOOLSETS[row["toolset"]],
    )
    calls = []
    for call in out.tool_calls:
        call_id = re.sub(r"^call_[0-9a-f]{24}$", "call_<uuid>", call["id"])  # SGLang's are random
        calls.append([call_id, call["function"]["name"], call["function"]["arguments"]])
    return {"reasoning": out.reasoning, "content": out.content, "calls": calls}


def test_every_sample_through_every_name_matches_the_real_sglang_parsers(sglang_answers):
    rows, answer = sglang_answers
    mismatches = [
        (row["name"], row["text"], ours, theirs)
        for row, theirs in zip(rows, answer["results"], strict=True)
        if (ours := _ours(row)) != theirs
    ]
    names = {r["reasoning_parser"] for r in rows} | {r["tool_parser"] for r in rows}
    print(f"{len(rows)} cases over {len(names - {None})} parser names")
    assert not mismatches, f"{len(mismatches)} of {len(rows)} differ; first: {mismatches[:3]}"


def test_every_name_sglang_accepts_is_reproduced_or_listed_as_left_out(sglang_answers):
    _, answer = sglang_answers
    assert set(SGLANG_REASONING) == set(answer["reasoning_names"])
    assert set(SGLANG_TOOL_CALL) == set(answer["tool_names"])
    assert set(KNOWN_REASONING) <= set(answer["reasoning_names"])
    assert set(KNOWN_TOOL_CALL) <= set(answer["tool_names"])
    for kind, names, known in (
        ("reasoning", answer["reasoning_names"], KNOWN_REASONING),
        ("tool-call", answer["tool_names"], KNOWN_TOOL_CALL),
    ):
        assert all(n in known or (kind, n) in NOT_REPRODUCED for n in names)


# serving_chat passes the request to ReasoningParser, whose chat_template_kwargs decide for iquest_q1 whether
# the output starts in reasoning (IQuestQ1ReasoningDetector.thinking_enabled), whatever force_reasoning says.
KWARGS_SIDE = r"""
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest

def iquest(job):
    tools = [Tool(**tool) for tool in job["tools"]]
    results = []
    for row in job["rows"]:
        request = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}],
                                        chat_template_kwargs=row["kwargs"])
        parser = ReasoningParser("iquest_q1", stream_reasoning=False, force_reasoning=row["opened"], request=request,
                                 tool_call_parser_active=row["tools"])
        reasoning, text = parser.parse_non_stream(row["text"])
        text, calls = text or "", []
        if row["tools"]:
            tool_parser = FunctionCallParser(tools, "iquest_q1")
            if tool_parser.has_tool_call(text):
                try:
                    text, items = tool_parser.parse_non_stream(text)
                except Exception:
                    items = []
                calls = [[item.name, item.parameters] for item in items]
        results.append({"reasoning": reasoning or "", "content": text or "", "calls": calls})
    return results
"""
# The one process: {"parsers": job, "iquest": job} on stdin, {"parsers": answer, "iquest": answer} on stdout.
BOTH_SIDES = (
    SGLANG_SIDE
    + KWARGS_SIDE
    + r"""
jobs = json.load(sys.stdin)
print(json.dumps({"parsers": parsers(jobs["parsers"]), "iquest": iquest(jobs["iquest"])}))
"""
)
THINKING_FLAGS = [
    None,
    {},
    {"enable_thinking": False},
    {"thinking": False},
    {"enable_thinking": True},
    {"thinking": False, "enable_thinking": True},
    {"thinking": 0},
]


def _iquest_rows() -> list[dict]:
    texts = [*REASONING_TEXTS, *TOOL_TEXTS[:12], "The user asks for 17 × 23.</think>\n\n391."]
    return [
        {"text": text, "kwargs": kwargs, "opened": opened, "tools": tools}
        for text in texts
        for kwargs in THINKING_FLAGS
        for opened in (False, True)
        for tools in (False, True)
    ]


def test_iquest_q1_follows_the_requests_thinking_flags_as_sglangs_serving_does(sglang_side):
    rows, theirs = sglang_side["iquest"]
    mismatches = []
    for row, their in zip(rows, theirs, strict=True):
        parser = OutputParser("iquest_q1", "iquest_q1" if row["tools"] else None, chat_template_kwargs=row["kwargs"])
        out = parser.parse(row["text"], row["opened"], tools=TOOLS)
        calls = [[c["function"]["name"], c["function"]["arguments"]] for c in out.tool_calls]
        ours = {"reasoning": out.reasoning, "content": out.content, "calls": calls}
        if ours != their:
            mismatches.append((row, ours, their))
    assert not mismatches, f"{len(mismatches)} of {len(rows)} differ; first: {mismatches[:3]}"
