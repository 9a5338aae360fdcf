"""SGLang 0.5.23's reasoning parsers (``--reasoning-parser``), one-shot (``parse_non_stream``).

Most are SGLang's ``BaseReasoningFormatDetector._detect_and_parse_impl`` with their own tags
(:class:`ThinkRule`):

1. The output is in reasoning if the detector forces it (DeepSeek-R1, ``minimax``, ...), or the rendered
   prompt opened it (SGLang's ``force_reasoning``; a Kimi-K2.5-style template ends the generation prompt
   with ``<think>``), or the output contains the opening tag. Otherwise it is all answer.
2. Leading repeats of the opening tag (with the detector's self-label, Gemma-4's ``thought\\n``) go.
3. Reasoning is the text before the first closing tag; the answer is everything after it.
4. With no closing tag, the detector's tool-call start tag (``<tool_call>`` for Qwen3/GLM,
   ``<|tool_calls_section_begin|>`` for Kimi-K2, ...) ends the reasoning and starts the answer; without one
   the whole output is reasoning, and the reasoning is incomplete (the generation was cut off).

The rest have their own one-shot rule, each a function below named after SGLang's detector.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from synthgen.chat.parsers import harmony


@dataclass(frozen=True, slots=True)
class Split:
    reasoning: str
    content: str
    reasoning_closed: bool  # False when reasoning was opened and never closed (truncated)
    had_reasoning: bool


def split_reasoning(
    text: str,
    prompt_opens_reasoning: bool,
    start: str = "<think>",
    end: str = "</think>",
    tool_start: str | None = None,
    self_label: str = "",
) -> Split:
    """The think-tag rule of the module docstring; ``prompt_opens_reasoning`` is SGLang's force_reasoning."""
    if not (prompt_opens_reasoning or start in text):
        return Split(reasoning="", content=text, reasoning_closed=True, had_reasoning=False)
    opening = start + self_label
    while text.startswith(opening):
        text = text[len(opening) :]
    head, found, tail = text.partition(end)
    if found:
        return Split(reasoning=head, content=tail, reasoning_closed=True, had_reasoning=True)
    tool_at = text.find(tool_start) if tool_start else -1
    if tool_at != -1:  # the model went straight from thinking to a tool call: SGLang keeps the tag in the answer
        return Split(reasoning=text[:tool_at], content=text[tool_at:], reasoning_closed=True, had_reasoning=True)
    return Split(reasoning=text, content="", reasoning_closed=False, had_reasoning=True)


@dataclass(frozen=True, slots=True)
class ThinkRule:
    start: str = "<think>"
    end: str = "</think>"
    forced: bool | None = None  # True/False: SGLang ignores the prompt; None: the prompt decides
    tool_start: str | None = None
    self_label: str = ""  # text the model writes after the opening tag (Gemma-4: "thought\n")
    nonempty: bool = False  # Ling3: reasoning with no answer and no tool call becomes the answer
    strip_answer_newlines: bool = False  # Granite: the answer after </think> loses its leading newlines
    drop_leading_close: bool = False  # MiniMax-M3: a reply may open with a stray closing tag

    def split(self, text: str, opened: bool) -> Split:
        forced = self.forced if self.forced is not None else opened
        if self.drop_leading_close and not forced and text.lstrip().startswith(self.end):
            text = text.lstrip()[len(self.end) :]
        out = split_reasoning(text, forced, self.start, self.end, self.tool_start, self.self_label)
        if self.strip_answer_newlines and self.end in text and out.content:
            out = Split(out.reasoning, out.content.lstrip("\n"), out.reasoning_closed, out.had_reasoning)
        if self.nonempty and out.reasoning and not out.content and (self.tool_start or "") not in text:
            return Split("", out.reasoning, True, False)
        return out


_QWEN3 = ThinkRule(tool_start="<tool_call>")
_R1 = ThinkRule(forced=True)
_PLAIN = ThinkRule()

# ReasoningParser.DetectorMap entries that are the base detector with their own tags, and the
# force_reasoning overrides of ReasoningParser.__init__ (qwen3-thinking, minimax) and the detectors.
THINK_RULES: dict[str, ThinkRule] = {
    "deepseek-r1": _R1,  # DeepSeekR1Detector: force_reasoning hard-coded True
    "deepseek-v3": _QWEN3,
    "deepseek-v4": _PLAIN,
    "deepseek-v41": _PLAIN,
    "dots": _QWEN3,
    "gemma4": ThinkRule(start="<|channel>", end="<channel|>", self_label="thought\n"),
    "gigachat35": _R1,
    "glm45": _QWEN3,
    "granite_thinking_parser": ThinkRule(tool_start="<tool_call>", strip_answer_newlines=True),
    "hunyuan": ThinkRule(tool_start="<tool_calls>"),  # resolve_hunyuan_tokens without a tokenizer: bare tags
    "interns1": _QWEN3,
    "iquest_q1": ThinkRule(forced=True),  # serving_chat: thinking unless chat_template_kwargs turn it off
    "k2_horizon": ThinkRule("<ifm|think>", "</ifm|think>", forced=True, tool_start="<ifm|tool_call"),
    "kimi": ThinkRule(start="◁think▷", end="◁/think▷", forced=False),
    "kimi_k2": ThinkRule(tool_start="<|tool_calls_section_begin|>"),
    "ling3": ThinkRule(tool_start="<tool_call>", nonempty=True),
    "mimo": _QWEN3,
    "minimax": ThinkRule(forced=True, tool_start="<tool_call>"),
    "minimax-m3": ThinkRule(start="<mm:think>", end="</mm:think>", drop_leading_close=True),
    "mistral": ThinkRule(start="[THINK]", end="[/THINK]"),
    "nanbeige": _QWEN3,
    "nemotron_3": _QWEN3,
    "poolside_v1": _QWEN3,
    "qwen3": _QWEN3,
    "qwen3-thinking": ThinkRule(forced=True, tool_start="<tool_call>"),
    "step3": _R1,
    "step3p5": _R1,
}


# --- Detectors with a one-shot rule of their own ---------------------------------------------------


def _harmony(text: str, opened: bool) -> Split:
    """GptOssDetector: HarmonyParser events; tool-call blocks stay in the answer with their markers."""
    events = harmony.harmony_events(text)
    thoughts = [e for e in events if e.kind == "reasoning"]
    return Split(
        reasoning="".join(e.content for e in thoughts),
        content="".join(e.raw or e.content for e in events if e.kind != "reasoning"),
        reasoning_closed=not any(e.partial for e in thoughts),
        had_reasoning=bool(thoughts),
    )


def _append_think(text: str, opened: bool) -> Split:
    """MiniMaxAppendThinkDetector: all answer, with the <think> the prompt consumed put back."""
    return Split(reasoning="", content="<think>" + text, reasoning_closed=True, had_reasoning=False)


_K3_THINK_OPEN = "<|open|>think<|sep|>"
_K3_THINK_CLOSE = "<|close|>think<|sep|>"
_K3_RESPONSE_OPEN = "<|open|>response<|sep|>"
_K3_RESPONSE_CLOSE = "<|close|>response<|sep|>"
_K3_TOOLS_OPEN = "<|open|>tools<|sep|>"
_K3_TOOLS_CLOSE = "<|close|>tools<|sep|>"
_K3_MESSAGE_CLOSE = "<|close|>message<|sep|>"
_K3_PARTIAL = tuple(
    ["<|open|>", "<|close|>"]
    + [
        m.removesuffix("<|sep|>")
        for m in (_K3_THINK_CLOSE, _K3_RESPONSE_OPEN, _K3_RESPONSE_CLOSE, _K3_TOOLS_OPEN, _K3_TOOLS_CLOSE)
    ]
    + [_K3_MESSAGE_CLOSE.removesuffix("<|sep|>")]
)


def _k3_strip_partial(text: str) -> str:
    for suffix in _K3_PARTIAL:
        if text.endswith(suffix):
            return text[: -len(suffix)]
    return text


def k3_unwrap(text: str) -> str:
    """kimik3_format.strip_response_wrappers."""
    at = text.find(_K3_RESPONSE_OPEN)
    if at != -1:
        close = text.find(_K3_RESPONSE_CLOSE, at + len(_K3_RESPONSE_OPEN))
        text = text[at + len(_K3_RESPONSE_OPEN) : close] if close != -1 else text[at + len(_K3_RESPONSE_OPEN) :]
    else:
        text = text.replace(_K3_RESPONSE_CLOSE, "")
    return _k3_strip_partial(text.replace(_K3_MESSAGE_CLOSE, ""))


def _k3_clean(text: str) -> str:
    at = text.find(_K3_TOOLS_OPEN)
    return k3_unwrap(text[:at]) + text[at:] if at != -1 else k3_unwrap(text)


def _kimi_k3(text: str, opened: bool) -> Split:
    """KimiK3Detector.detect_and_parse (XTML think/response/tools channels)."""
    if not (opened or _K3_THINK_OPEN in text) and _K3_THINK_CLOSE not in text:
        return Split("", _k3_clean(text), True, False)
    at = text.find(_K3_THINK_OPEN)
    start = at + len(_K3_THINK_OPEN) if at != -1 else 0
    close = text.find(_K3_THINK_CLOSE, start)
    tools = text.find(_K3_TOOLS_OPEN, start)
    channels = [i for i in (text.find(_K3_RESPONSE_OPEN, start), tools) if i != -1]
    channel = min(channels) if channels else -1
    response_close = text.find(_K3_RESPONSE_CLOSE, start)
    if response_close != -1 and all(b == -1 or response_close < b for b in (close, channel)):
        return Split("", _k3_clean(text[start:].replace(_K3_THINK_CLOSE, "")), True, False)
    if close != -1 and tools != -1 and tools < close:
        return Split(_k3_strip_partial(text[start:tools]), _k3_clean(text[tools:]), True, True)
    if close == -1:
        if channel != -1:
            return Split(_k3_strip_partial(text[start:channel]), _k3_clean(text[channel:]), True, True)
        return Split(_k3_strip_partial(text[start:]), "", False, True)
    return Split(text[start:close], _k3_clean(text[close + len(_K3_THINK_CLOSE) :]), True, True)


def _apertus(text: str, opened: bool) -> Split:
    """Apertus2509Detector: every <|inner_prefix|>...<|inner_suffix|> block is reasoning, except tool
    calls (<|tools_prefix|>[...<|tools_suffix|>) inside it, which go to the answer; the prompt is ignored."""
    start, end, tool_start, tool_end = "<|inner_prefix|>", "<|inner_suffix|>", "<|tools_prefix|>[", "<|tools_suffix|>"
    reasoning: list[str] = []
    content: list[str] = []
    closed = True

    def inner(block: str) -> None:
        cursor = 0
        while True:
            s = block.find(tool_start, cursor)
            if s == -1:
                reasoning.append(block[cursor:])
                return
            reasoning.append(block[cursor:s])
            e = block.find(tool_end, s)
            if e == -1:
                content.append(block[s:])
                return
            content.append(block[s : e + len(tool_end)])
            cursor = e + len(tool_end)

    cursor = 0
    while True:
        s = text.find(start, cursor)
        if s == -1:
            content.append(text[cursor:])
            break
        content.append(text[cursor:s])
        cursor = s + len(start)
        e = text.find(end, cursor)
        if e == -1:
            inner(text[cursor:])
            closed = False
            break
        inner(text[cursor:e])
        cursor = e + len(end)
    thought = "".join(reasoning)
    return Split(thought, "".join(content), closed, start in text)


_COHERE_TEXT_START, _COHERE_TEXT_END = "<|START_TEXT|>", "<|END_TEXT|>"
_COHERE_ACTION = "<|START_ACTION|>"


def _cohere(text: str, opened: bool) -> Split:
    """CohereCommand4Detector: reasoning up to <|END_THINKING|> (or the text/action block); the answer is
    the <|START_TEXT|> block without its markers, or an action block verbatim for the tool-call parser."""
    end = "<|END_THINKING|>"
    cut = [(text.find(m), m) for m in (end, _COHERE_TEXT_START, _COHERE_ACTION)]
    at, marker = next(((i, m) for i, m in cut if i != -1), (-1, ""))
    if at == -1:
        reasoning, rest = text, ""
    elif marker == end:
        reasoning, rest = text[:at], text[at + len(end) :]
    else:
        reasoning, rest = text[:at], text[at:]
    if reasoning.startswith("<|START_THINKING|>"):
        reasoning = reasoning[len("<|START_THINKING|>") :]
    s = rest.find(_COHERE_TEXT_START)
    if s == -1:
        answer = rest if _COHERE_ACTION in rest else ""
    else:
        answer = rest[s + len(_COHERE_TEXT_START) :].split(_COHERE_TEXT_END, 1)[0]
    return Split(reasoning, answer, at != -1, bool(reasoning) or marker == end)


_INK_THINKING, _INK_TEXT = "<|content_thinking|>", "<|content_text|>"
_INK_MODEL, _INK_END, _INK_END_SAMPLING = "<|message_model|>", "<|end_message|>", "<|content_model_end_sampling|>"
_INK_TOOLS = ("<|content_invoke_tool_json|>", "<|content_invoke_tool_text|>")
INKLING_CONTROL = sorted(
    {
        "<|endoftext|>",
        "<|message_user|>",
        _INK_MODEL,
        "<|message_system|>",
        "<|message_tool|>",
        _INK_TEXT,
        "<|content_image|>",
        _INK_END_SAMPLING,
        _INK_THINKING,
        _INK_END,
        "<|content_audio_input|>",
        "<|content_tool_error|>",
        "<|content_xml|>",
        "<|audio_end|>",
        *_INK_TOOLS,
        "<|content_invoke_tool|>",
        "<|model_trigger_generation|>",
    }
)


def _inkling(text: str, opened: bool) -> Split:
    """InklingDetector._parse_blocks, one shot: typed content blocks (thinking, text, tool invocations)."""
    import re

    reasoning: list[str] = []
    content: list[str] = []
    kind: str | None = None
    header = pending = ""
    saw = False
    pos = 0

    def emit(piece: str) -> None:
        nonlocal header, pending
        if kind == "reasoning":
            pending += piece
        elif kind == "header":
            header += piece
        elif kind in ("content", "tool") or piece:
            content.append(piece)

    def flush() -> None:
        nonlocal pending
        if kind == "reasoning":
            reasoning.append(pending)
            pending = ""

    for match in re.finditer("|".join(re.escape(t) for t in INKLING_CONTROL), text):
        saw = True
        emit(text[pos : match.start()])
        token, pos = match.group(0), match.end()
        if token == _INK_MODEL:
            if kind in (None, "header"):
                flush()
                header, kind = "", "header"
            else:
                emit(token)
        elif token in _INK_TOOLS:
            flush()
            if kind == "header":
                content.extend((_INK_MODEL, header, token))
                header = ""
            else:
                content.append(token)
            kind = "tool"
        elif kind == "tool":
            content.append(token)
            if token in (_INK_END_SAMPLING, _INK_END):
                kind = None
        elif token in (_INK_THINKING, _INK_TEXT):
            flush()
            header, kind = "", ("reasoning" if token == _INK_THINKING else "content")
        elif token in (_INK_END_SAMPLING, _INK_END):
            flush()
            header, kind = "", None
    if saw or kind is not None:
        emit(text[pos:])
    else:
        content.append(text)
    closed = kind != "reasoning"
    if kind == "reasoning":
        reasoning.append(pending)
    return Split("".join(reasoning), "".join(content), closed, _INK_THINKING in text)


SplitFn = Callable[[str, bool], Split]

SPECIAL: dict[str, tuple[SplitFn, str]] = {
    # name: (one-shot rule, what it splits, for the docs table)
    "apertus2509": (_apertus, "`<|inner_prefix|>`…`<|inner_suffix|>`; tool calls inside go to the answer"),
    "cohere_command4": (_cohere, "`<|START_THINKING|>`…`<|END_THINKING|>`, answer from `<|START_TEXT|>`"),
    "gpt-oss": (_harmony, "Harmony channels: `analysis` is reasoning, `final`/`commentary` the answer"),
    "inkling": (_inkling, "typed blocks `<|content_thinking|>` / `<|content_text|>`"),
    "kimi_k3": (_kimi_k3, "XTML `<|open|>think<|sep|>` channel; `response` unwrapped, `tools` kept"),
    "minimax-append-think": (_append_think, "nothing: all answer, with the consumed `<think>` put back"),
}

# The opening tag a prompt may end with to open the reasoning, for the detectors above that honour it.
SPECIAL_OPENING: dict[str, str] = {"kimi_k3": _K3_THINK_OPEN}


def describe(rule: ThinkRule) -> str:
    """What a think rule splits, for the docs table."""
    text = f"`{rule.start}{rule.self_label.strip()}`…`{rule.end}`"
    if rule.forced is True:
        text += ", always in reasoning first"
    elif rule.forced is False:
        text += ", the prompt cannot open it"
    if rule.tool_start:
        text += f"; `{rule.tool_start}` ends it"
    if rule.nonempty:
        text += "; reasoning alone becomes the answer"
    if rule.strip_answer_newlines:
        text += "; answer's leading newlines dropped"
    if rule.drop_leading_close:
        text += "; a leading stray closing tag dropped"
    return text
