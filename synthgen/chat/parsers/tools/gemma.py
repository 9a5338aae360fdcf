"""SGLang's Gemma4Detector: ``<|tool_call>call:NAME{key:<|"|>value<|"|>}<tool_call|>``."""

from __future__ import annotations

from typing import Any

from synthgen.chat.parsers.calls import (
    Found,
    Item,
    Tools,
    dumps,
)
from synthgen.chat.parsers.registry import tool_parser
from synthgen.chat.parsers.scan import BlockScan

_G4_DELIM = '<|"|>'


def _g4_scalar(text: str) -> Any:
    text = text.strip()
    if text in ("true", "false"):
        return text == "true"
    if not text:
        return text
    try:
        return float(text) if "." in text else int(text)
    except ValueError:
        return text


def _g4_skip_string(text: str, i: int, unterminated: int) -> int:
    """Index after the <|"|>...<|"|> string starting at ``i`` (``unterminated`` if it never closes)."""
    close = text.find(_G4_DELIM, i + len(_G4_DELIM))
    return close + len(_G4_DELIM) if close != -1 else unterminated


def _g4_block(text: str, i: int, opening: str, closing: str, strings: bool) -> tuple[str, int]:
    """The inside of the bracketed block opening at ``i``, and the index after it."""
    depth, start, i = 1, i + 1, i + 1
    while i < len(text) and depth > 0:
        if strings and text.startswith(_G4_DELIM, i):
            i = _g4_skip_string(text, i, len(text))
            continue
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
        i += 1
    return text[start : i - 1], i


_G4_MAX_DEPTH = 64


def _g4_nesting(depth: int) -> None:
    """Each level rescans its block: past this depth a call is malformed (the answer stays whole), so the
    work stays linear. SGLang recurses on (to a RecursionError, which its serving layer also catches)."""
    if depth > _G4_MAX_DEPTH:
        raise ValueError("gemma4 arguments nested too deep")


def _g4_array(text: str, depth: int = 1) -> list[Any]:
    """gemma4_detector._parse_gemma4_array: <|"|>strings, {objects}, [arrays] and bare scalars."""
    _g4_nesting(depth)
    items: list[Any] = []
    i = 0
    while i < len(text):
        while i < len(text) and text[i] in " ,\n\t":
            i += 1
        if i >= len(text):
            break
        if text.startswith(_G4_DELIM, i):
            end = text.find(_G4_DELIM, i + len(_G4_DELIM))
            if end == -1:
                items.append(text[i + len(_G4_DELIM) :])
                break
            items.append(text[i + len(_G4_DELIM) : end])
            i = end + len(_G4_DELIM)
        elif text[i] == "{":
            inner, i = _g4_block(text, i, "{", "}", True)
            items.append(_g4_args(inner, depth + 1))
        elif text[i] == "[":
            inner, i = _g4_block(text, i, "[", "]", False)  # SGLang skips no strings inside nested arrays
            items.append(_g4_array(inner, depth + 1))
        else:
            start = i
            while i < len(text) and text[i] not in ",]":
                i += 1
            if i == start:  # a stray "]" (a missing <|"|> moved the brackets): SGLang loops here forever
                break
            items.append(_g4_scalar(text[start:i]))
    return items


def _g4_args(text: str, depth: int = 1) -> dict[str, Any]:
    """gemma4_detector._parse_gemma4_args: ``key:value`` pairs."""
    _g4_nesting(depth)
    result: dict[str, Any] = {}
    if not text or not text.strip():
        return result
    i = 0
    while i < len(text):
        while i < len(text) and text[i] in " ,\n\t":
            i += 1
        if i >= len(text):
            break
        colon = text.find(":", i)
        if colon == -1:
            break
        key, i = text[i:colon].strip(), colon + 1
        while i < len(text) and text[i] in " \n\t":
            i += 1
        if i >= len(text):
            result[key] = ""
            break
        if text.startswith(_G4_DELIM, i):
            end = text.find(_G4_DELIM, i + len(_G4_DELIM))
            if end == -1:
                result[key] = text[i + len(_G4_DELIM) :]
                break
            result[key] = text[i + len(_G4_DELIM) : end]
            i = end + len(_G4_DELIM)
        elif text[i] == "{":
            inner, i = _g4_block(text, i, "{", "}", True)
            result[key] = _g4_args(inner, depth + 1)
        elif text[i] == "[":
            inner, i = _g4_block(text, i, "[", "]", True)
            result[key] = _g4_array(inner, depth + 1)
        else:
            start = i
            while i < len(text) and text[i] not in ",}]":
                i += 1
            result[key] = _g4_scalar(text[start:i])
    return result


def _g4_matching_brace(text: str) -> int:
    depth, i = 1, 0
    while i < len(text) and depth > 0:
        if text.startswith(_G4_DELIM, i):
            i = _g4_skip_string(text, i, -1)
            if i == -1:
                return -1
            continue
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
        i += 1
    return i - 1 if depth == 0 else -1


@tool_parser(
    "gemma4",
    family="Gemma-4 calls",
    splits='`<|tool_call>call:NAME{key:<|"|>v<|"|>}<tool_call|>`',
    ends=("<tool_call|>",),
)
def gemma4(text: str, tools: Tools) -> Found:
    """Gemma4Detector: ``<|tool_call>call:NAME{key:value,...}<tool_call|>``, strings in ``<|"|>``;
    calls are not checked against the tools."""
    start_tag, end_tag = "<|tool_call>", "<tool_call|>"
    if start_tag not in text:
        return None
    found: list[tuple[str, str]] = []
    for block in BlockScan(text, start_tag, end_tag):
        if not block.closed:
            break
        inner = block.inner
        if inner.startswith("call:") and inner.find("{") != -1:
            brace = inner.find("{")
            content = inner[brace + 1 :]
            at = _g4_matching_brace(content)
            found.append((inner[5:brace], content[:at] if at != -1 else content))
    if not found:
        return text, []
    try:
        calls = [Item(name, dumps(_g4_args(args)), tools.index(name)) for name, args in found]
    except (ValueError, IndexError, TypeError, KeyError):
        return text, []
    first = text.find(start_tag)
    return (text[:first] if first > 0 else ""), calls
