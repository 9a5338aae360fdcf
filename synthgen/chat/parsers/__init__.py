"""Parsing a raw completion into reasoning, answer and tool calls, by SGLang's parser names.

The names are those SGLang 0.5.23's ``--reasoning-parser`` and ``--tool-call-parser`` accept; each
reproduces that parser's non-streaming result as ``serving_chat`` chains them: the reasoning parser's
``parse_non_stream`` (:mod:`.reasoning`), then, for a request that declares tools, the tool-call
detector on the answer (:mod:`.toolcalls`) when its ``has_tool_call`` fires.

Tool calls carry what SGLang's response carries: the name and SGLang's argument string (its
``json.dumps(..., ensure_ascii=False)`` of the parsed value; the model's own text for Kimi-K2, which
SGLang passes through; XML-style arguments converted through the declared schemas). The model's own
characters stay in the row's ``output_text``/``output_ids``. Ids: SGLang names a Kimi-K2 call
``functions.NAME:INDEX``, a Kimi-K3 call ``NAME:INDEX`` (INDEX counts the calls of earlier turns first),
and every other call ``call_`` + 24 random hex digits; ours have that shape but are derived from
``call_id_prefix`` and the call's position, so a rerun writes the same ids.

With the request's tools given (``parse(..., tools=...)``), undeclared functions are dropped where
SGLang drops them; with none given, every named function counts as declared (SGLang's
``SGLANG_FORWARD_UNKNOWN_TOOLS``) and no schema converts values.

:data:`NOT_REPRODUCED` names the SGLang parsers this package deliberately leaves out, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from synthgen.chat.parsers import calls as _calls
from synthgen.chat.parsers import muse as _muse
from synthgen.chat.parsers import reasoning as _reasoning
from synthgen.chat.parsers import toolcalls as _tc
from synthgen.chat.parsers.calls import Tools
from synthgen.chat.parsers.reasoning import Split, split_reasoning

__all__ = [
    "KNOWN_REASONING",
    "KNOWN_TOOL_CALL",
    "NOT_REPRODUCED",
    "SGLANG_REASONING",
    "SGLANG_TOOL_CALL",
    "OutputParser",
    "ParsedOutput",
    "Split",
    "Tools",
    "parser_table",
    "prompt_opens_reasoning",
    "split_reasoning",
    "unsupported_note",
]

# SGLang 0.5.23's lists (sglang/srt/parser/reasoning_parser_names.py, function_call/parser_names.py).
SGLANG_REASONING: tuple[str, ...] = (
    "apertus2509", "beam", "deepseek-r1", "deepseek-v3", "deepseek-v4", "deepseek-v41", "dots", "glm45",
    "ling3", "hunyuan", "gpt-oss", "k2_horizon", "kimi", "kimi_k2", "kimi_k3", "mimo", "muse", "poolside_v1",
    "qwen3", "qwen3-thinking", "minimax", "minimax-append-think", "minimax-m3", "nanbeige", "step3", "step3p5",
    "mistral", "nemotron_3", "granite_thinking_parser", "interns1", "gemma4", "inkling", "iquest_q1",
    "cohere_command4", "gigachat35", "response_template",
)  # fmt: skip
SGLANG_TOOL_CALL: tuple[str, ...] = (
    "apertus2509", "beam", "cohere_command4", "deepseekv3", "deepseekv31", "deepseekv32", "deepseekv4",
    "deepseekv41", "dots", "glm", "glm45", "glm47", "gpt-oss", "k2_horizon", "kimi_k2", "kimi_k3", "lfm2",
    "ling3", "llama3", "mimo", "minicpm5", "mistral", "muse", "poolside_v1", "pythonic", "qwen", "qwen25",
    "qwen3_coder", "spark25", "step3", "step3p5", "minimax-m2", "minimax-m3", "nanbeige", "trinity",
    "interns1", "hermes", "hunyuan", "gigachat3", "gigachat35", "gemma4", "inkling", "iquest_q1",
    "response_template",
)  # fmt: skip


@dataclass(frozen=True)
class _ToolEntry:
    parse: _calls.ToolParser
    family: str
    splits: str


_TOOL_FAMILIES: dict[str, _ToolEntry] = {}


def _tool(names: str, parse: _calls.ToolParser, family: str, splits: str) -> None:
    for name in names.split():
        _TOOL_FAMILIES[name] = _ToolEntry(parse, family, splits)


_tool("qwen qwen25", _tc.qwen25, "JSON in tags", "`<tool_call>\\n{json}\\n</tool_call>`")
_tool("hermes", _tc.hermes, "JSON in tags", "`<tool_call>{json}</tool_call>`")
_tool("interns1", _tc.internlm, "JSON in tags", "`<|action_start|> <|plugin|>{json}<|action_end|>`")
_tool("llama3", _tc.llama3, "JSON", "`<|python_tag|>` or a leading `{`, `;`-separated objects")
_tool("mistral", _tc.mistral, "JSON", "`[TOOL_CALLS] [...]` or `[TOOL_CALLS]name[ARGS]{...}`")
_tool("pythonic", _tc.pythonic, "Python calls", "`[func(a=1), other()]`")
_tool(
    "qwen3_coder nanbeige step3p5",
    _tc.qwen3_coder,
    "XML arguments (schema-converted)",
    "`<tool_call><function=NAME><parameter=KEY>…`",
)
_tool("glm glm45", _tc.glm45, "XML arguments (schema-converted)", "`<tool_call>NAME\\n<arg_key>…<arg_value>…`")
_tool("glm47", _tc.glm47, "XML arguments (schema-converted)", "`<tool_call>NAME<arg_key>…<arg_value>…`")
_tool(
    "minimax-m2",
    _tc.minimax_m2,
    "XML arguments (schema-converted)",
    '`<minimax:tool_call><invoke name="F"><parameter name="K">…`',
)
_tool("deepseekv3", _tc.deepseekv3, "DeepSeek", "`<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` + fenced JSON")
_tool("deepseekv31", _tc.deepseekv31, "DeepSeek", "`<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}`")
_tool("deepseekv32", _tc.deepseekv32, "DeepSeek", '`<｜DSML｜function_calls>` `<｜DSML｜invoke name="F">`')
_tool("deepseekv4", _tc.deepseekv4, "DeepSeek", '`<｜DSML｜tool_calls>` `<｜DSML｜invoke name="F">`')
_tool("deepseekv41", _tc.deepseekv41, "DeepSeek", '`<｜DSML｜ calls>` `<｜DSML｜ invoke name="F">`')
_tool("ling3", _tc.ling3, "XML arguments (schema-converted)", "GLM-4.5's, the newline after the name optional")
_tool("trinity", _tc.trinity, "JSON in tags", "Qwen 2.5's, `<think>` tags removed first")
_tool("mimo", _tc.mimo, "XML arguments (schema-converted)", "`<tool_call><function=NAME><parameter=K>…`")
_tool("dots", _tc.dots, "XML arguments (schema-converted)", "`<dots_function_call>` JSON or `<invoke>`")
_tool("step3", _tc.step3, "XML arguments (schema-converted)", '`<｜tool_calls_begin｜>` `<steptml:invoke name="F">`')
_tool("gigachat3", _tc.gigachat3, "JSON", "`function call<|role_sep|>\\n{json}` or `<|function_call|>{json}`")
_tool("gigachat35", _tc.gigachat35, "XML arguments", '`<｜GCML｜tool_calls>` `<｜GCML｜invoke name="F">`')
_tool("hunyuan", _tc.hunyuan, "XML arguments (schema-converted)", "`<tool_calls><tool_call>NAME<tool_sep><arg_key>…`")
_tool("kimi_k3", _tc.kimi_k3, "Kimi", "XTML `<|open|>tools<|sep|>` `<|open|>call tool=…`, ids `NAME:N`")
_tool("apertus2509", _tc.apertus2509, "JSON", '`<|tools_prefix|>[{"NAME": {…}}]<|tools_suffix|>`')
_tool("poolside_v1", _tc.poolside_v1, "XML arguments (schema-converted)", "`<tool_call>NAME<arg_key>…<arg_value>…`")
_tool("gemma4", _tc.gemma4, "Gemma-4 calls", '`<|tool_call>call:NAME{key:<|"|>v<|"|>}<tool_call|>`')
_tool(
    "spark25", _tc.spark25, "XML arguments (schema-converted)", "`<tool_call>NAME<arg_key>…<arg_value>…`, compact JSON"
)
_tool("iquest_q1", _tc.iquest_q1, "XML arguments (schema-converted)", "GLM-4.7's inside `<iquest_tool_call>`")
_tool("inkling", _tc.inkling, "JSON", '`<|content_invoke_tool_json|>{"name", "args"}<|end_message|>`')
_tool("cohere_command4", _tc.cohere_command4, "JSON", "`<|START_ACTION|>[{tool_name, parameters}]<|END_ACTION|>`")
_tool(
    "k2_horizon",
    _tc.k2_horizon,
    "XML arguments (schema-converted)",
    "`<ifm|tool_call>NAME<ifm|arg_key>…<ifm|arg_value>…`",
)
_tool(
    "minimax-m3",
    _tc.minimax_m3,
    "XML arguments (schema-converted)",
    '`]<]minimax[>[<tool_call>` `<invoke name="F">`, nested elements',
)
_tool(
    "minicpm5",
    _tc.minicpm5,
    "XML arguments (schema-converted)",
    '`<function name="F"><param name="K">…</param></function>`',
)
_tool("muse", _muse.tool_calls, "Muse channels", '`to=functions.F<|message|><atem:invoke name="F">…<|eom|>`')
_tool("kimi_k2", _tc.kimi_k2, "Kimi", "`<|tool_calls_section_begin|>`, ids `functions.NAME:N`")
_tool("gpt-oss", _tc.gpt_oss, "Harmony", "`commentary to=functions.NAME` blocks")

# SGLang names left out on purpose, and why (a server started with one gets this in its note).
NOT_REPRODUCED: dict[tuple[str, str], str] = {
    ("reasoning", "response_template"): "SGLang derives it from the chat template's response grammar at start-up",
    ("reasoning", "beam"): "a response-template profile (SGLang's template grammar engine)",
    ("tool-call", "response_template"): "SGLang derives it from the chat template's response grammar at start-up",
    ("tool-call", "beam"): "a response-template profile (SGLang's template grammar engine)",
    ("tool-call", "lfm2"): "LFM2's Python-call reader repairs malformed calls with ~900 lines of heuristics; "
    "not reproduced yet",
}
for _name in SGLANG_TOOL_CALL:
    if _name not in _TOOL_FAMILIES and ("tool-call", _name) not in NOT_REPRODUCED:
        NOT_REPRODUCED[("tool-call", _name)] = "its detector is not reproduced yet"

_MUSE = "muse"
_REASONING_NAMES = {*_reasoning.THINK_RULES, *_reasoning.SPECIAL, _MUSE}
KNOWN_REASONING: tuple[str, ...] = tuple(sorted(n for n in SGLANG_REASONING if n in _REASONING_NAMES))
KNOWN_TOOL_CALL: tuple[str, ...] = tuple(sorted(n for n in SGLANG_TOOL_CALL if n in _TOOL_FAMILIES))


def unsupported_note(kind: str, name: str) -> str:
    """Why a parser name is not one this tool applies ("reasoning" or "tool-call")."""
    reason = NOT_REPRODUCED.get((kind, name))
    if reason is not None:
        return f"SGLang 0.5.23 knows the {kind} parser '{name}', but this tool does not reproduce it: {reason}"
    return f"'{name}' is not a {kind} parser of SGLang 0.5.23 (newer than this tool, or misspelt)"


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    reasoning: str
    content: str
    reasoning_complete: bool  # False when reasoning was opened and never closed (truncated)
    had_reasoning: bool
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI shape, arguments as SGLang's


def _known(kind: str, name: str, known: tuple[str, ...]) -> str:
    if name not in known:
        raise ValueError(f"unknown {kind} parser {name!r}; known: {', '.join(known)}")
    return name


def _opening_tag(reasoning: str) -> str | None:
    if reasoning in _reasoning.THINK_RULES:
        return _reasoning.THINK_RULES[reasoning].start
    return _reasoning.SPECIAL_OPENING.get(reasoning)


def prompt_opens_reasoning(prompt: str, reasoning: str | None = None, think_start: str = "<think>") -> bool:
    """Whether a rendered generation prompt already opened the reasoning (it ends with the opening tag)."""
    if reasoning is None:
        return prompt.rstrip().endswith(think_start)
    tag = _opening_tag(_known("reasoning", reasoning, KNOWN_REASONING))
    return tag is not None and prompt.rstrip().endswith(tag)


def _call_id(parser: str, item: _calls.Item, ordinal: int, call_id_prefix: str, history: int) -> str:
    """serving_chat._process_tool_call_id."""
    if parser == "kimi_k2":
        return f"functions.{item.name}:{history + item.tool_index}"
    if parser == "kimi_k3":
        return f"{item.name}:{history + item.tool_index}"
    return _calls.random_style_id(call_id_prefix, ordinal)


class OutputParser:
    """Reasoning split then tool calls, as SGLang's chat serving chains them.

    ``reasoning=None`` is the plain think-tag rule with ``think_start``/``think_end``;
    ``tool_call=None`` leaves the answer as it is. Unknown names raise ValueError listing the known ones.

        parser = OutputParser("kimi_k2", "kimi_k2")
        out = parser.parse(text, parser.opens_reasoning(prompt), call_id_prefix=prompt_id, tools=tools)
    """

    def __init__(
        self,
        reasoning: str | None,
        tool_call: str | None,
        think_start: str = "<think>",
        think_end: str = "</think>",
    ) -> None:
        self.reasoning = reasoning if reasoning is None else _known("reasoning", reasoning, KNOWN_REASONING)
        self.tool_call = tool_call if tool_call is None else _known("tool-call", tool_call, KNOWN_TOOL_CALL)
        self.think_start = think_start
        self.think_end = think_end

    def opens_reasoning(self, prompt: str) -> bool:
        return prompt_opens_reasoning(prompt, self.reasoning, self.think_start)

    def split(self, text: str, prompt_opens_reasoning: bool, tool_parsing: bool = False) -> Split:
        """``tool_parsing``: a tool-call parser reads the answer next (Muse then keeps channel framing)."""
        if self.reasoning == _MUSE:
            return _muse.split(text, prompt_opens_reasoning, tool_parsing)
        if self.reasoning is None:
            return split_reasoning(text, prompt_opens_reasoning, self.think_start, self.think_end)
        if self.reasoning in _reasoning.SPECIAL:
            return _reasoning.SPECIAL[self.reasoning][0](text, prompt_opens_reasoning)
        return _reasoning.THINK_RULES[self.reasoning].split(text, prompt_opens_reasoning)

    def parse(
        self,
        text: str,
        prompt_opens_reasoning: bool,
        call_id_prefix: str = "",
        history_tool_calls: int = 0,
        tools: list[Any] | None = None,
    ) -> ParsedOutput:
        """``history_tool_calls``: tool calls in the conversation before this turn (Kimi ids count on);
        ``tools``: the request's OpenAI tool list (None: every function counts as declared)."""
        split = self.split(text, prompt_opens_reasoning, self.tool_call is not None)
        content, calls = split.content, list[dict[str, Any]]()
        if self.tool_call is not None:
            try:
                found = _TOOL_FAMILIES[self.tool_call].parse(content, Tools.from_openai(tools))
            except Exception:  # serving_chat._process_tool_calls: a failing parser leaves the answer whole
                found = None
            if found is not None:
                content = found[0]
                calls = [
                    {
                        "id": _call_id(self.tool_call, item, i, call_id_prefix, history_tool_calls),
                        "type": "function",
                        "function": {"name": item.name, "arguments": item.arguments},
                    }
                    for i, item in enumerate(found[1])
                ]
        return ParsedOutput(
            reasoning=split.reasoning,
            content=content,
            reasoning_complete=split.reasoning_closed,
            had_reasoning=split.had_reasoning,
            tool_calls=calls,
        )


def _row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def parser_table() -> str:
    """The docs' parser table (docs/parsers.md), generated from the registries above."""
    rows = ["| kind | name | family | what it splits |", "| --- | --- | --- | --- |"]
    for name in SGLANG_REASONING:
        if name == _MUSE:
            rows.append(_row("reasoning", f"`{name}`", "own rule", "recipient channels: `to=self` is reasoning"))
        elif name in _reasoning.SPECIAL:
            rows.append(_row("reasoning", f"`{name}`", "own rule", _reasoning.SPECIAL[name][1]))
        elif name in _reasoning.THINK_RULES:
            rows.append(_row("reasoning", f"`{name}`", "think tags", _reasoning.describe(_reasoning.THINK_RULES[name])))
        else:
            rows.append(_row("reasoning", f"`{name}`", "not reproduced", NOT_REPRODUCED[("reasoning", name)]))
    for name in SGLANG_TOOL_CALL:
        if name in _TOOL_FAMILIES:
            entry = _TOOL_FAMILIES[name]
            rows.append(_row("tool-call", f"`{name}`", entry.family, entry.splits))
        else:
            rows.append(_row("tool-call", f"`{name}`", "not reproduced", NOT_REPRODUCED[("tool-call", name)]))
    return "\n".join(rows) + "\n"
