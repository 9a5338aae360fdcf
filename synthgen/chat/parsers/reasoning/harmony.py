"""Harmony (gpt-oss), as SGLang's ``HarmonyParser`` reads it in one shot (``parse(text) + parse("")``).

``analysis`` blocks are reasoning, ``final`` blocks and ``commentary`` preambles the answer; a
``commentary``/``analysis`` block ending in ``<|call|>`` is a tool call, kept whole (markers included) for
the gpt-oss tool-call parser. Text decoded without the special tokens ("analysis...assistantfinal...")
takes SGLang's plain-text fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from synthgen.chat.parsers.reasoning.base import Split
from synthgen.chat.parsers.registry import reasoning_parser

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
class Event:
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


def _harmony_block(text: str, tokens: list[_Token], at: int) -> tuple[Event, int] | None:
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
        return Event("normal", text[body : tokens[end].start]), end + 1
    header_start = tokens[channel_at + 1].start if channel_at + 1 < len(tokens) else tokens[channel_at].end
    channel = _channel_of(text[header_start : tokens[message_at].start])
    if channel is None:
        return None
    enders = ("RETURN",) if channel == "final" else ("END", "CALL")
    end = next((j for j in range(message_at + 1, len(tokens)) if tokens[j].kind in enders), None)
    if end is None:
        if channel == "final":  # the final answer may run to the end of the output
            return Event("normal", text[body:]), len(tokens)
        return None
    content = text[body : tokens[end].start]
    ender = tokens[end].kind
    if ender == "CALL":  # analysis + <|call|> is a built-in tool (browser, python); commentary a function
        return Event("tool_call", content.strip(), text[tokens[at].start : tokens[end].end]), end + 1
    if channel == "analysis":
        return Event("reasoning", content), end + 1
    if channel == "final" and end + 1 < len(tokens) and tokens[end + 1].kind == "TEXT":
        after = tokens[end + 1]
        return Event("normal", content + text[after.start : after.end]), end + 2
    return Event("normal", content), end + 1


def _harmony_partial_analysis(text: str, tokens: list[_Token], at: int) -> tuple[Event, str] | None:
    """An analysis block the output ends inside: its text so far is reasoning; the header is kept back."""
    found = _harmony_header(text, tokens, at)
    if found is None or found[0] == -1:
        return None
    channel_at, message_at = found
    header_start = tokens[channel_at + 1].start if channel_at + 1 < len(tokens) else tokens[channel_at].end
    if _channel_of(text[header_start : tokens[message_at].start]) != "analysis":
        return None
    body = tokens[message_at].end
    return Event("reasoning", text[body:], partial=True), text[tokens[at].start : body]


def _is_filler(text: str, tokens: list[_Token], i: int) -> bool:
    """Stray "commentary" or <|message|> right after a <|call|>: noise SGLang skips."""
    if i == 0 or tokens[i - 1].kind != "CALL":
        return False
    word = text[tokens[i].start : tokens[i].end].strip().lower()
    return tokens[i].kind == "MESSAGE" or (tokens[i].kind == "TEXT" and word == "commentary")


def _harmony_canonical(text: str) -> tuple[list[Event], str]:
    """Events of the marked-up format, and the tail kept back (SGLang parses it once more, then drops it)."""
    events: list[Event] = []
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
                events.append(Event("normal", piece[: len(piece) - hold]))
            return events, piece[len(piece) - hold :]
        if not _is_filler(text, tokens, i) and piece.strip() not in _HARMONY_MARKERS:
            events.append(Event("normal", piece))
        i += 1
    return events, ""


# SGLang's plain-text patterns, rewritten to match the same (the tests compare them) in linear time: its
# "\s*(?:assistant)?\s*" and "(.*?)\s*assistantfinal" rescan a run of whitespace from each of its positions
# (a model writing thousands of newlines took seconds). Theirs, for the record:
SGLANG_TEXT_PATTERNS = (
    r"^\s*(?:assistant)?\s*(analysis|commentary)(.*?)\s*assistantfinal\s*(.*)\s*$",
    r"^\s*assistantfinal\s*(.*)\s*$",
    r"^\s*(?:assistant)?\s*(analysis|commentary)(.*)\s*$",
    r"(?:^|\s)(?:assistant)?\s*(analysis|commentary)",
    r"(?:^|\s)(?:assistant)?\s*(analysis|commentary|assistantfinal)",
)
_TEXT_ANALYSIS_THEN_FINAL = re.compile(
    r"^\s*(?:assistant\s*)?(analysis|commentary)(.*?)(?<!\s)\s*assistantfinal\s*(.*)\s*$", re.IGNORECASE | re.DOTALL
)
_TEXT_FINAL_ONLY = re.compile(r"^\s*assistantfinal\s*(.*)\s*$", re.IGNORECASE | re.DOTALL)
_TEXT_ANALYSIS_ONLY = re.compile(r"^\s*(?:assistant\s*)?(analysis|commentary)(.*)\s*$", re.IGNORECASE | re.DOTALL)
_TEXT_CHANNEL_WORD = re.compile(r"(?:^|\s)(?:assistant\s*)?(analysis|commentary)", re.IGNORECASE)  # only: found?
_TEXT_STRATEGY = re.compile(r"(?:^|\s)(?:assistant\s*)?(analysis|commentary|assistantfinal)", re.IGNORECASE)


def _harmony_plain(text: str) -> list[Event]:
    """SGLang's fallback for Harmony decoded without its special tokens ("analysis...assistantfinal...")."""
    m = _TEXT_ANALYSIS_THEN_FINAL.match(text)
    if m:
        channel, thought, final = m.groups()
        events = []
        if thought.strip():
            events.append(Event("reasoning" if channel.lower() == "analysis" else "normal", thought.strip()))
        if final.strip():
            events.append(Event("normal", final.strip()))
        return events
    low = text.lower()
    if _TEXT_CHANNEL_WORD.search(text) and "assistantfin" in low and "assistantfinal" not in low:
        return []  # held for an "assistantfinal" that never came
    m = _TEXT_FINAL_ONLY.match(text)
    if m:
        return [Event("normal", m.group(1).strip())] if m.group(1).strip() else []
    m = _TEXT_ANALYSIS_ONLY.match(text)
    if m:
        channel, body = m.groups()
        hold = _held_suffix(body, ["assistantfinal"])
        emit = body[: len(body) - hold]
        if not emit:
            return []
        if channel.lower() == "analysis":
            return [Event("reasoning", emit, partial=True)]
        return [Event("normal", emit if hold else emit.strip())]
    hold = _held_suffix(text, ["analysis", "commentary", "assistantfinal"])
    return [Event("normal", text[: len(text) - hold])] if text[: len(text) - hold] else []


def harmony_events(text: str) -> list[Event]:
    """``HarmonyParser.parse(text) + parse("")``: one-shot events, commentary filler after a call removed."""
    if "<|channel|>" in text or "<|start|>" in text:
        first, rest = _harmony_canonical(text)
        second, _ = _harmony_canonical(rest) if rest else ([], "")
        passes = [(first, text), (second, rest)]
    elif _TEXT_STRATEGY.search(text):
        passes = [(_harmony_plain(text), text)]
    else:
        return []  # SGLang waits for a marker that never comes: nothing is emitted
    kept: list[Event] = []
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


@reasoning_parser(
    "gpt-oss", splits="Harmony channels: `analysis` is reasoning, `final`/`commentary` the answer", ends=("<|call|>",)
)
def gpt_oss(text: str, opened: bool, tool_parsing: bool = False) -> Split:
    """GptOssDetector: HarmonyParser events; tool-call blocks stay in the answer with their markers."""
    events = harmony_events(text)
    thoughts = [e for e in events if e.kind == "reasoning"]
    return Split(
        reasoning="".join(e.content for e in thoughts),
        content="".join(e.raw or e.content for e in events if e.kind != "reasoning"),
        reasoning_closed=not any(e.partial for e in thoughts),
        had_reasoning=bool(thoughts),
    )
