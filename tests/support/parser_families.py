"""Shared checks for the per-family parser tests (tests/unit/chat/parsers/): each family module's
registered names, and one sample per name parsed with the tools of parser_samples.TOOLS."""

from __future__ import annotations

from types import ModuleType
from typing import NamedTuple

from parser_samples import TOOLS

from synthgen.chat.parsers import OutputParser
from synthgen.chat.parsers.registry import REASONING, TOOL_CALL


class Sample(NamedTuple):
    name: str  # the SGLang parser name
    text: str
    content: str  # what SGLang keeps as the answer
    calls: list[tuple[str, str]]  # (name, arguments as SGLang serializes them)


def tool_names_in(module: ModuleType) -> set[str]:
    """The tool-call names registered by the code of ``module``."""
    return {name for name, entry in TOOL_CALL.items() if _module_of(entry.parse) == module.__name__}


def reasoning_names_in(module: ModuleType) -> set[str]:
    return {name for name, entry in REASONING.items() if _module_of(entry.split) == module.__name__}


def _module_of(fn: object) -> str:
    module = getattr(fn, "__module__", None)
    return module if isinstance(module, str) else type(fn).__module__


def parse_sample(sample: Sample) -> tuple[str, list[tuple[str, str]]]:
    out = OutputParser(None, sample.name).parse(sample.text, False, call_id_prefix="p", tools=TOOLS)
    return out.content, [(c["function"]["name"], c["function"]["arguments"]) for c in out.tool_calls]
