"""Parsing a raw completion into reasoning, answer and tool calls, by SGLang's parser names.

The names are those SGLang 0.5.23's ``--reasoning-parser`` and ``--tool-call-parser`` accept, and each
reproduces that parser's non-streaming result (``ReasoningParser.parse_non_stream``, then
``FunctionCallParser.parse_non_stream`` on the answer, as ``serving_chat`` chains them). The model's
characters are kept: where SGLang re-serializes tool arguments (``json.dumps(json.loads(raw))``) we
keep the raw JSON text the model wrote, which decodes to the same value.

Reasoning ("think" family, SGLang's ``BaseReasoningFormatDetector._detect_and_parse_impl``):

1. The output is in reasoning if the detector forces it (DeepSeek-R1, ``minimax``, ...), or the
   rendered prompt opened it (SGLang's ``force_reasoning``; a Kimi-K2.5-style template ends the
   generation prompt with ``<think>``), or the output contains the opening tag. Otherwise it is all
   answer. ``kimi`` (◁think▷) never honours the prompt: SGLang hard-codes ``force_reasoning=False``.
2. Leading repeats of the opening tag are dropped.
3. Reasoning is the text before the first closing tag; the answer is everything after it.
4. With no closing tag, a tool-call start tag (``<tool_call>`` for Qwen3/GLM,
   ``<|tool_calls_section_begin|>`` for Kimi-K2) ends the reasoning and starts the answer; without
   one the whole output is reasoning and the reasoning is incomplete (the generation was cut off).

``gpt-oss`` is Harmony (SGLang's ``HarmonyParser``): ``analysis`` blocks are reasoning, ``final``
blocks and ``commentary`` preambles the answer; a ``commentary``/``analysis`` block ending in
``<|call|>`` is a tool call, left in the answer verbatim for the tool-call parser.

Tool-call ids: SGLang names a Kimi-K2 call ``functions.NAME:INDEX`` (INDEX counts the calls of earlier
turns first) and every other call ``call_`` + 24 random hex digits; ours have the same shape but are
derived from ``call_id_prefix`` and the call's position, so a rerun writes the same ids.

SGLang parses tool calls only for a request that declares tools, and drops calls to undeclared
functions. We see no tool list, so every named function counts as declared (what SGLang does with
``SGLANG_FORWARD_UNKNOWN_TOOLS``); a Kimi-K2 call with a bare counter id, whose name SGLang infers from
the tool schemas, is dropped.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "KNOWN_REASONING",
    "KNOWN_TOOL_CALL",
    "OutputParser",
    "ParsedOutput",
    "Split",
    "prompt_opens_reasoning",
    "split_reasoning",
]


@dataclass(frozen=True, slots=True)
class Split:
    reasoning: str
    content: str
    reasoning_closed: bool  # False when reasoning was opened and never closed (truncated)
    had_reasoning: bool


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    reasoning: str
    content: str
    reasoning_complete: bool  # False when reasoning was opened and never closed (truncated)
    had_reasoning: bool
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # OpenAI shape; arguments are the model's text


def split_reasoning(
    text: str,
    prompt_opens_reasoning: bool,
    start: str = "<think>",
    end: str = "</think>",
    tool_start: str | None = None,
) -> Split:
    """The think-tag rule of the module docstring; ``prompt_opens_reasoning`` is SGLang's force_reasoning."""
    if not (prompt_opens_reasoning or start in text):
        return Split(reasoning="", content=text, reasoning_closed=True, had_reasoning=False)
    while text.startswith(start):
        text = text[len(start) :]
    head, found, tail = text.partition(end)
    if found:
        return Split(reasoning=head, content=tail, reasoning_closed=True, had_reasoning=True)
    tool_at = text.find(tool_start) if tool_start else -1
    if tool_at != -1:  # the model went straight from thinking to a tool call: SGLang keeps the tag in the answer
        return Split(reasoning=text[:tool_at], content=text[tool_at:], reasoning_closed=True, had_reasoning=True)
    return Split(reasoning=text, content="", reasoning_closed=False, had_reasoning=True)


# --- Harmony (gpt-oss) -----------------------------------------------------------------------------

_HARMONY_MARKERS = {
    "<|start|>": "START",
    "<|channel|>": "CHANNEL",
    "<|message|>": "MESSAGE",
    "<|constrain|>": "CONSTRAIN",
    "<|end|>": "END",
    "<|call|>": "CALL",
    "<|return|>": "RETURN",
}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # a _HARMONY_MARKERS value, or TEXT
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Event:
    kind: str  # reasoning, normal, tool_call
    content: str
    raw: str = ""  # a tool call's whole block, markers included
    partial: bool = False  # an analysis block the output ended inside


def _held_suffix(text: str, markers: list[str]) -> int:
    """Length of the longest end of ``text`` that could begin one of ``markers`` (kept back, then dropped)."""
    hold = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), 0, -1):
            if marker.startswith(text[-k:]):
                hold = max(hold, k)
                break
    return hold


def _harmony_tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos, saw_unknown = 0, False
    while pos < len(text):
        at = text.find("<|", pos)
        if at == -1:
            break
        if at > pos:
            tokens.append(_Token("TEXT", pos, at))
        marker = next((m for m in _HARMONY_MARKERS if text.startswith(m, at)), None)
        if marker:
            tokens.append(_Token(_HARMONY_MARKERS[marker], at, at + len(marker)))
            pos = at + len(marker)
            continue
        if any(m.startswith(text[at:]) for m in _HARMONY_MARKERS):  # the output ends inside a marker
            tokens.append(_Token("TEXT", at, len(text)))
            pos = len(text)
            break
        # An unknown <|name|> is text: "<|" on its own, then the rest up to the next marker.
        saw_unknown = True
        tokens.append(_Token("TEXT", at, at + 2))
        close = text.find("|>", at + 2)
        if close == -1:
            pos = at + 2
            continue
        following = text.find("<|", close + 2)
        stop = following if following != -1 else len(text)
        tokens.append(_Token("TEXT", at + 2, stop))
        pos = stop
    if pos < len(text):
        tokens.append(_Token("TEXT", pos, len(text)))
    elif saw_unknown and any(text.endswith(m) for m in _HARMONY_MARKERS):
        tokens.append(_Token("TEXT", pos, pos))  # SGLang's tokenizer emits this empty text; it changes filler checks
    return tokens


def _channel_of(header: str) -> str | None:
    head = header.strip().lower()
    return next((c for c in ("analysis", "commentary", "final") if head.startswith(c)), None)


def _harmony_header(text: str, tokens: list[_Token], at: int) -> tuple[int, int] | None:
    """(channel token index or -1, message token index) of the block starting at token ``at``."""
    i = at + 1 if tokens[at].kind == "START" else at
    channel = -1
    for j in range(i, len(tokens)):
        if tokens[j].kind == "CHANNEL" and channel == -1:
            channel = j
        elif tokens[j].kind == "MESSAGE":
            return channel, j
    return None


def _harmony_block(text: str, tokens: list[_Token], at: int) -> tuple[_Event, int] | None:
    """The block starting at token ``at`` and the index after it; None if the output ends inside it."""
    found = _harmony_header(text, tokens, at)
    if found is None:
        return None
    channel_at, message_at = found
    body = tokens[message_at].end
    if channel_at == -1:  # a tool's response, addressed with no channel: its body is answer text
        end = next((j for j in range(message_at + 1, len(tokens)) if tokens[j].kind in ("END", "CALL", "RETURN")), None)
        if end is None:
            return None
        return _Event("normal", text[body : tokens[end].start]), end + 1
    header_start = tokens[channel_at + 1].start if channel_at + 1 < len(tokens) else tokens[channel_at].end
    channel = _channel_of(text[header_start : tokens[message_at].start])
    if channel is None:
        return None
    enders = ("RETURN",) if channel == "final" else ("END", "CALL")
    end = next((j for j in range(message_at + 1, len(tokens)) if tokens[j].kind in enders), None)
    if end is None:
        if channel == "final":  # the final answer may run to the end of the output
            return _Event("normal", text[body:]), len(tokens)
        return None
    content = text[body : tokens[end].start]
    ender = tokens[end].kind
    if ender == "CALL":  # analysis + <|call|> is a built-in tool (browser, python); commentary a function
        return _Event("tool_call", content.strip(), text[tokens[at].start : tokens[end].end]), end + 1
    if channel == "analysis":
        return _Event("reasoning", content), end + 1
    if channel == "final" and end + 1 < len(tokens) and tokens[end + 1].kind == "TEXT":
        after = tokens[end + 1]
        return _Event("normal", content + text[after.start : after.end]), end + 2
    return _Event("normal", content), end + 1


def _harmony_partial_analysis(text: str, tokens: list[_Token], at: int) -> tuple[_Event, str] | None:
    """An analysis block the output ends inside: its text so far is reasoning; the header is kept back."""
    found = _harmony_header(text, tokens, at)
    if found is None or found[0] == -1:
        return None
    channel_at, message_at = found
    header_start = tokens[channel_at + 1].start if channel_at + 1 < len(tokens) else tokens[channel_at].end
    if _channel_of(text[header_start : tokens[message_at].start]) != "analysis":
        return None
    body = tokens[message_at].end
    return _Event("reasoning", text[body:], partial=True), text[tokens[at].start : body]


def _is_filler(text: str, tokens: list[_Token], i: int) -> bool:
    """Stray "commentary" or <|message|> right after a <|call|>: noise SGLang skips."""
    if i == 0 or tokens[i - 1].kind != "CALL":
        return False
    word = text[tokens[i].start : tokens[i].end].strip().lower()
    return tokens[i].kind == "MESSAGE" or (tokens[i].kind == "TEXT" and word == "commentary")


def _harmony_canonical(text: str) -> tuple[list[_Event], str]:
    """Events of the marked-up format, and the tail kept back (SGLang parses it once more, then drops it)."""
    events: list[_Event] = []
    tokens = _harmony_tokens(text)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token.kind in ("START", "CHANNEL"):
            block = _harmony_block(text, tokens, i)
            if block is None:
                partial = _harmony_partial_analysis(text, tokens, i)
                if partial is None:
                    return events, text[token.start :]
                events.append(partial[0])
                return events, partial[1]
            events.append(block[0])
            i = block[1]
            continue
        piece = text[token.start : token.end]
        if token.kind == "TEXT" and i == len(tokens) - 1:
            hold = _held_suffix(piece, list(_HARMONY_MARKERS))
            if piece[: len(piece) - hold]:
                events.append(_Event("normal", piece[: len(piece) - hold]))
            return events, piece[len(piece) - hold :]
        if not _is_filler(text, tokens, i) and piece.strip() not in _HARMONY_MARKERS:
            events.append(_Event("normal", piece))
        i += 1
    return events, ""


_TEXT_ANALYSIS_THEN_FINAL = re.compile(
    r"^\s*(?:assistant)?\s*(analysis|commentary)(.*?)\s*assistantfinal\s*(.*)\s*$", re.IGNORECASE | re.DOTALL
)
_TEXT_FINAL_ONLY = re.compile(r"^\s*assistantfinal\s*(.*)\s*$", re.IGNORECASE | re.DOTALL)
_TEXT_ANALYSIS_ONLY = re.compile(r"^\s*(?:assistant)?\s*(analysis|commentary)(.*)\s*$", re.IGNORECASE | re.DOTALL)
_TEXT_CHANNEL_WORD = re.compile(r"(?:^|\s)(?:assistant)?\s*(analysis|commentary)", re.IGNORECASE)
_TEXT_STRATEGY = re.compile(r"(?:^|\s)(?:assistant)?\s*(analysis|commentary|assistantfinal)", re.IGNORECASE)


def _harmony_plain(text: str) -> list[_Event]:
    """SGLang's fallback for Harmony decoded without its special tokens ("analysis...assistantfinal...")."""
    m = _TEXT_ANALYSIS_THEN_FINAL.match(text)
    if m:
        channel, thought, final = m.groups()
        events = []
        if thought.strip():
            events.append(_Event("reasoning" if channel.lower() == "analysis" else "normal", thought.strip()))
        if final.strip():
            events.append(_Event("normal", final.strip()))
        return events
    low = text.lower()
    if _TEXT_CHANNEL_WORD.search(text) and "assistantfin" in low and "assistantfinal" not in low:
        return []  # held for an "assistantfinal" that never came
    m = _TEXT_FINAL_ONLY.match(text)
    if m:
        return [_Event("normal", m.group(1).strip())] if m.group(1).strip() else []
    m = _TEXT_ANALYSIS_ONLY.match(text)
    if m:
        channel, body = m.groups()
        hold = _held_suffix(body, ["assistantfinal"])
        emit = body[: len(body) - hold]
        if not emit:
            return []
        if channel.lower() == "analysis":
            return [_Event("reasoning", emit, partial=True)]
        return [_Event("normal", emit if hold else emit.strip())]
    hold = _held_suffix(text, ["analysis", "commentary", "assistantfinal"])
    return [_Event("normal", text[: len(text) - hold])] if text[: len(text) - hold] else []


def _harmony_events(text: str) -> list[_Event]:
    """``HarmonyParser.parse(text) + parse("")``: one-shot events, commentary filler after a call removed."""
    if "<|channel|>" in text or "<|start|>" in text:
        first, rest = _harmony_canonical(text)
        second, _ = _harmony_canonical(rest) if rest else ([], "")
        passes = [(first, text), (second, rest)]
    elif _TEXT_STRATEGY.search(text):
        passes = [(_harmony_plain(text), text)]
    else:
        return []  # SGLang waits for a marker that never comes: nothing is emitted
    kept: list[_Event] = []
    after_call, partial_word = False, ""
    for events, buffer in passes:
        buffer_ends_in_call = buffer.rstrip().endswith("<|call|>")
        for event in events:
            if event.kind == "normal" and (after_call or partial_word):
                # After a tool call the model may write the word "commentary", possibly split across events.
                word = partial_word + event.content.strip().lower()
                if "commentary".startswith(word):
                    partial_word = "" if word == "commentary" else word
                    after_call = after_call and word != "commentary"
                    continue
                after_call, partial_word = False, ""
            elif event.kind != "normal":
                partial_word = "" if event.kind == "tool_call" else partial_word
            if event.kind == "tool_call" or buffer_ends_in_call:
                after_call = True
            kept.append(event)
    return kept


def _split_harmony(text: str) -> Split:
    events = _harmony_events(text)
    thoughts = [e for e in events if e.kind == "reasoning"]
    # Tool calls stay in the answer with their markers: SGLang's gpt-oss tool-call parser reads them there.
    answer = "".join(e.raw or e.content for e in events if e.kind != "reasoning")
    return Split(
        reasoning="".join(e.content for e in thoughts),
        content=answer,
        reasoning_closed=not any(e.partial for e in thoughts),
        had_reasoning=bool(thoughts),
    )


# --- Reasoning parsers by SGLang name --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ThinkRule:
    start: str = "<think>"
    end: str = "</think>"
    forced: bool | None = None  # True/False: SGLang ignores the prompt; None: the prompt decides
    tool_start: str | None = None


_QWEN3 = _ThinkRule(tool_start="<tool_call>")
_R1 = _ThinkRule(forced=True)
_APPEND_THINK = "minimax-append-think"
_HARMONY = "gpt-oss"

# SGLang's ReasoningParser.DetectorMap and its force_reasoning overrides (qwen3-thinking, minimax).
_THINK_RULES: dict[str, _ThinkRule] = {
    "deepseek-r1": _R1,
    "deepseek-v3": _QWEN3,
    "dots": _QWEN3,
    "gigachat35": _R1,
    "glm45": _ThinkRule(tool_start="<tool_call>"),
    "interns1": _QWEN3,
    "kimi": _ThinkRule(start="◁think▷", end="◁/think▷", forced=False),
    "kimi_k2": _ThinkRule(tool_start="<|tool_calls_section_begin|>"),
    "minimax": _ThinkRule(forced=True, tool_start="<tool_call>"),
    "nanbeige": _QWEN3,
    "qwen3": _QWEN3,
    "qwen3-thinking": _ThinkRule(forced=True, tool_start="<tool_call>"),
    "step3": _R1,
    "step3p5": _R1,
}

KNOWN_REASONING: tuple[str, ...] = tuple(sorted([*_THINK_RULES, _APPEND_THINK, _HARMONY]))


# --- Tool-call parsers by SGLang name --------------------------------------------------------------


def _random_style_id(call_id_prefix: str, index: int) -> str:
    # SGLang: f"call_{uuid.uuid4().hex[:24]}"; same shape, but reproducible.
    return "call_" + hashlib.sha256(f"{call_id_prefix}\x00{index}".encode()).hexdigest()[:24]


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _skip(text: str, i: int, chars: str = " \t\n\r") -> int:
    while i < len(text) and text[i] in chars:
        i += 1
    return i


def _json_members(text: str, start: int) -> tuple[dict[str, tuple[object, str]], int]:
    """The members of the JSON object at ``start``: key -> (value, the value's raw text); and its end."""
    decoder = json.JSONDecoder()
    members: dict[str, tuple[object, str]] = {}
    i = start + 1
    i = _skip(text, i)
    if text.startswith("}", i):
        return members, i + 1
    while True:
        key, i = decoder.raw_decode(text, i)
        i = _skip(text, _skip(text, i) + 1)  # past the ':'
        value, end = decoder.raw_decode(text, i)
        members[key] = (value, text[i:end])  # a repeated key: the last wins, as in json.loads
        i = _skip(text, end)
        if text.startswith("}", i):
            return members, i + 1
        i = _skip(text, i + 1)  # past the ','


def _json_calls(text: str) -> list[dict[str, tuple[object, str]]] | None:
    """The call objects of ``{...}`` or ``[{...}, ...]`` with raw member text; None if one is not an object."""
    value = json.loads(text)
    if isinstance(value, dict):
        return [_json_members(text, 0)[0]]
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        return None
    decoder, calls, i = json.JSONDecoder(), [], 1
    for _ in value:  # walk the array with the decoder to find each object's span
        i = _skip(text, i, " \t\n\r,")
        calls.append(_json_members(text, i)[0])
        i = decoder.raw_decode(text, i)[1]
    return calls


def _arguments(call: dict[str, tuple[object, str]]) -> str:
    # SGLang: json.dumps(act.get("parameters") or act.get("arguments", {})); we keep the model's text.
    if "parameters" in call and call["parameters"][0]:
        return call["parameters"][1]
    if "arguments" in call:
        return call["arguments"][1]
    return "{}"


def _qwen25_calls(text: str, call_id_prefix: str, history: int) -> tuple[str, list[dict[str, Any]]] | None:
    """Hermes-style ``<tool_call>\\n{json}\\n</tool_call>`` (SGLang's Qwen25Detector)."""
    at = text.find("<tool_call>\n")
    if at == -1:
        return None
    calls: list[dict[str, Any]] = []
    for body in re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.DOTALL):
        try:
            objects = _json_calls(body.strip())
        except json.JSONDecodeError:
            continue  # SGLang skips a call whose JSON does not parse
        if objects is None:  # SGLang's call.get() raises, and the serving layer keeps the text untouched
            return text, []
        for obj in objects:
            name = obj.get("name", (None, ""))[0]
            if isinstance(name, str) and name:
                calls.append(_call(_random_style_id(call_id_prefix, len(calls)), str(name), _arguments(obj)))
    # SGLang's answer is the text before the first call, stripped; text after the calls is dropped.
    return text[:at].strip(), calls


_KIMI_CALL = re.compile(
    r"<\|tool_call_begin\|>\s*(?P<tool_call_id>[^\s<|]+)\s*<\|tool_call_argument_begin\|>\s*"
    r"(?P<function_arguments>\{.*?\})\s*<\|tool_call_end\|>",
    re.DOTALL,
)
_KIMI_ID = re.compile(r"^(?:functions\.)?(?P<name>[\w.\-]+):(?P<index>\d+)$")


def _kimi_k2_calls(text: str, call_id_prefix: str, history: int) -> tuple[str, list[dict[str, Any]]] | None:
    at = text.find("<|tool_calls_section_begin|>")
    if at == -1:
        return None
    calls: list[dict[str, Any]] = []
    for model_id, arguments in _KIMI_CALL.findall(text):
        m = _KIMI_ID.match(model_id)
        if m:  # the model's own ":N" is ignored: SGLang numbers the calls of this response from `history`
            calls.append(_call(f"functions.{m['name']}:{history + len(calls)}", m["name"], arguments))
    return text[:at], calls


_GPT_OSS_CALL = re.compile(
    r"to=([a-zA-Z_][a-zA-Z0-9_.-]*)\s*<\|constrain\|>json<\|message\|>(.*?)(?:<\|call\|>|$)", re.DOTALL
)


def _gpt_oss_calls(text: str, call_id_prefix: str, history: int) -> tuple[str, list[dict[str, Any]]] | None:
    if "<|start|>assistant<|channel|>commentary" not in text:
        return None
    calls: list[dict[str, Any]] = []
    answer: list[str] = []
    for event in _harmony_events(text):
        if event.kind == "normal":
            answer.append(event.content)
        elif event.kind == "tool_call":
            m = _GPT_OSS_CALL.search(event.raw or event.content)
            if not m:
                continue
            arguments = m.group(2) if m.group(2).strip() else "{}"
            try:
                json.loads(arguments)
            except json.JSONDecodeError:
                continue  # SGLang drops a call whose arguments do not parse
            name = m.group(1).split(".")[-1]  # "functions.get_weather" -> "get_weather"
            calls.append(_call(_random_style_id(call_id_prefix, len(calls)), name, arguments))
    return " ".join(answer).strip(), calls


_ToolParser = Callable[[str, str, int], "tuple[str, list[dict[str, Any]]] | None"]

# SGLang's FunctionCallParser.ToolCallParserEnum, the entries we reproduce.
_TOOL_PARSERS: dict[str, _ToolParser] = {
    "gpt-oss": _gpt_oss_calls,
    "kimi_k2": _kimi_k2_calls,
    "qwen": _qwen25_calls,
    "qwen25": _qwen25_calls,
}

KNOWN_TOOL_CALL: tuple[str, ...] = tuple(sorted(_TOOL_PARSERS))


# --- The entry point -------------------------------------------------------------------------------


def _known(kind: str, name: str, known: tuple[str, ...]) -> str:
    if name not in known:
        raise ValueError(f"unknown {kind} parser {name!r}; known: {', '.join(known)}")
    return name


def prompt_opens_reasoning(prompt: str, reasoning: str | None = None, think_start: str = "<think>") -> bool:
    """Whether a rendered generation prompt already opened the reasoning (it ends with the opening tag)."""
    if reasoning is None:
        return prompt.rstrip().endswith(think_start)
    if reasoning in (_HARMONY, _APPEND_THINK):
        return False  # neither has an opening tag a prompt could end with
    return prompt.rstrip().endswith(_THINK_RULES[_known("reasoning", reasoning, KNOWN_REASONING)].start)


class OutputParser:
    """Reasoning split then tool calls, as SGLang's chat serving chains them.

    ``reasoning=None`` is the plain think-tag rule with ``think_start``/``think_end``;
    ``tool_call=None`` leaves the answer as it is. Unknown names raise ValueError listing the known ones.

        parser = OutputParser("kimi_k2", "kimi_k2")
        out = parser.parse(text, parser.opens_reasoning(prompt), call_id_prefix=prompt_id)
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

    def split(self, text: str, prompt_opens_reasoning: bool) -> Split:
        if self.reasoning is None:
            return split_reasoning(text, prompt_opens_reasoning, self.think_start, self.think_end)
        if self.reasoning == _HARMONY:
            return _split_harmony(text)
        if self.reasoning == _APPEND_THINK:
            # SGLang leaves MiniMax's reasoning in the answer and restores the <think> the prompt consumed.
            return Split(reasoning="", content="<think>" + text, reasoning_closed=True, had_reasoning=False)
        rule = _THINK_RULES[self.reasoning]
        opened = rule.forced if rule.forced is not None else prompt_opens_reasoning
        return split_reasoning(text, opened, rule.start, rule.end, rule.tool_start)

    def parse(
        self, text: str, prompt_opens_reasoning: bool, call_id_prefix: str = "", history_tool_calls: int = 0
    ) -> ParsedOutput:
        """``history_tool_calls``: tool calls in the conversation before this turn (Kimi-K2 ids count on)."""
        split = self.split(text, prompt_opens_reasoning)
        content, calls = split.content, list[dict[str, Any]]()
        if self.tool_call is not None:
            found = _TOOL_PARSERS[self.tool_call](content, call_id_prefix, history_tool_calls)
            if found is not None:
                content, calls = found
        return ParsedOutput(
            reasoning=split.reasoning,
            content=content,
            reasoning_complete=split.reasoning_closed,
            had_reasoning=split.had_reasoning,
            tool_calls=calls,
        )
