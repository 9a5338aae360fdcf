"""Our named parsers agree with the real SGLang 0.5.23 parsers on the same outputs.

The SGLang side runs in the real-SGLang venv's Python (a subprocess: the test process never imports
sglang), fed the table of tests/test_parsers.py plus seeded random Harmony texts as JSON. It chains
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

import pytest

from synthgen.chat.parsers import OutputParser
from synthgen.server.demo import DemoPaths
from tests.test_parsers import CASES

pytestmark = pytest.mark.real_sglang

SGLANG_PYTHON = DemoPaths.default().python  # the real server's venv (honours $SYNTHGEN_CACHE)

SGLANG_SIDE = r"""
import json, sys
from sglang.srt.entrypoints.openai.protocol import Tool
from sglang.srt.function_call.function_call_parser import FunctionCallParser
from sglang.srt.function_call.parser_names import TOOL_CALL_PARSER_NAMES
from sglang.srt.parser.reasoning_parser import BaseReasoningFormatDetector, ReasoningParser
from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES

job = json.load(sys.stdin)
# Two parameterless tools besides the called ones, so a bare Kimi counter id infers no name.
tools = [Tool(type="function", function={"name": n, "parameters": {}}) for n in job["tools"] + ["_a", "_b"]]
results = []
for row in job["rows"]:
    text, reasoning = row["text"], ""
    if row["reasoning_parser"]:
        parser = ReasoningParser(row["reasoning_parser"], stream_reasoning=False, force_reasoning=row["opened"])
        reasoning, text = parser.parse_non_stream(text)
    else:  # our plain rule is SGLang's base detector with the <think> tags
        split = BaseReasoningFormatDetector("<think>", "</think>", force_reasoning=row["opened"]).detect_and_parse(text)
        reasoning, text = split.reasoning_text, split.normal_text
    calls = []
    if row["tool_parser"]:
        tool_parser = FunctionCallParser(tools, row["tool_parser"])
        if tool_parser.has_tool_call(text):  # serving_chat._process_tool_calls
            text, items = tool_parser.parse_non_stream(text)
            for item in items:
                call_id = (f"functions.{item.name}:{row['history'] + item.tool_index}"
                           if row["tool_parser"] == "kimi_k2" else "call_<uuid>")
                calls.append([call_id, item.name, item.parameters])
    results.append({"reasoning": reasoning or "", "content": text or "", "calls": calls})
print(json.dumps({"results": results, "reasoning_names": REASONING_PARSER_NAMES,
                  "tool_names": TOOL_CALL_PARSER_NAMES}))
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
            "reasoning_parser": "gpt-oss",
            "tool_parser": tool,
            "text": text,
            "opened": False,
            "history": 0,
        }
        for i, text in enumerate(texts)
        for tool in (None, "gpt-oss")
    ]


def _rows() -> list[dict]:
    rows = [
        {
            "name": c.name,
            "reasoning_parser": c.reasoning_parser,
            "tool_parser": c.tool_parser,
            "text": c.text,
            "opened": c.opened,
            "history": 0,
        }
        for c in CASES
    ]
    # Cut-offs of every table output at every position, so truncation agrees wherever it falls.
    for c in CASES:
        for cut in range(0, len(c.text), 3):
            rows.append({**rows[CASES.index(c)], "name": f"{c.name} cut at {cut}", "text": c.text[:cut]})
    return rows + _harmony_rows(400)


@pytest.fixture(scope="module")
def sglang_answers(real_setup) -> tuple[list[dict], dict]:
    # real_setup installs the real server on first use (or fails/skips as the other real tests do).
    rows = _rows()
    tools = sorted({"get_weather", "get_time", "ping", "search"})
    job = json.dumps({"rows": rows, "tools": tools})
    done = subprocess.run(
        [str(SGLANG_PYTHON), "-c", SGLANG_SIDE], input=job, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    return rows, answer


def _ours(row: dict) -> dict:
    out = OutputParser(row["reasoning_parser"], row["tool_parser"]).parse(
        row["text"], row["opened"], call_id_prefix=row["name"], history_tool_calls=row["history"]
    )
    calls = []
    for call in out.tool_calls:
        arguments = call["function"]["arguments"]
        if row["tool_parser"] != "kimi_k2":  # SGLang's json.dumps(json.loads(...)), applied to our raw text
            arguments = json.dumps(json.loads(arguments), ensure_ascii=False)
        call_id = re.sub(r"^call_[0-9a-f]{24}$", "call_<uuid>", call["id"])  # SGLang's are random
        calls.append([call_id, call["function"]["name"], arguments])
    return {"reasoning": out.reasoning, "content": out.content, "calls": calls}


def test_every_table_row_and_its_cut_offs_match_the_real_sglang_parsers(sglang_answers):
    rows, answer = sglang_answers
    mismatches = [
        (row["name"], row["text"], ours, theirs)
        for row, theirs in zip(rows, answer["results"], strict=True)
        if (ours := _ours(row)) != theirs
    ]
    assert not mismatches, f"{len(mismatches)} of {len(rows)} differ; first: {mismatches[:3]}"


def test_every_name_we_accept_is_one_sglang_accepts(sglang_answers):
    from synthgen.chat.parsers import KNOWN_REASONING, KNOWN_TOOL_CALL

    _, answer = sglang_answers
    assert set(KNOWN_REASONING) <= set(answer["reasoning_names"])
    assert set(KNOWN_TOOL_CALL) <= set(answer["tool_names"])
