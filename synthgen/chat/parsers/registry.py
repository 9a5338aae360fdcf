"""The parser names: SGLang 0.5.23's lists, the ones reproduced, the ones left out, and the docs table.

Each parser registers itself beside its code, with the decorators below (``@tool_parser(...)``,
``@reasoning_parser(...)``, ``think_rule(...)`` for the think-tag detectors): its names, its family and
what it splits. :func:`parser_table` (docs/parsers.md) and the known-name lists follow from those
registrations; importing :mod:`synthgen.chat.parsers` loads every parser module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from synthgen.chat.parsers.calls import ToolParser
    from synthgen.chat.parsers.reasoning.base import Split

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

# SGLang names left out on purpose, and why (a server started with one gets this in its note).
NOT_REPRODUCED: dict[tuple[str, str], str] = {
    ("reasoning", "response_template"): "SGLang derives it from the chat template's response grammar at start-up",
    ("reasoning", "beam"): "a response-template profile (SGLang's template grammar engine)",
    ("tool-call", "response_template"): "SGLang derives it from the chat template's response grammar at start-up",
    ("tool-call", "beam"): "a response-template profile (SGLang's template grammar engine)",
    ("tool-call", "lfm2"): "LFM2's Python-call reader repairs malformed calls with ~900 lines of heuristics; "
    "not reproduced yet",
}

ReasoningSplit = Callable[[str, bool, bool], "Split"]
"""``(text, the prompt opened the reasoning, a tool-call parser reads the answer next) -> Split``."""


@dataclass(frozen=True)
class ReasoningEntry:
    name: str
    split: ReasoningSplit
    family: str  # "think tags" or "own rule"
    splits: str  # what it splits, for the docs table
    opening: str | None  # the tag a rendered prompt may end with to open the reasoning (None: the prompt cannot)
    ends: tuple[str, ...] = ()  # tokens that close a block of its grammar (see ``tool_parser``)
    # SGLang's serving layer decides from the request's chat_template_kwargs whether the output starts in
    # reasoning (iquest_q1's thinking flags), whatever the prompt: that decision, or None (the prompt decides)
    forced_by_kwargs: Callable[[Mapping[str, Any]], bool] | None = None


@dataclass(frozen=True)
class ToolEntry:
    name: str
    parse: ToolParser
    family: str
    splits: str
    ends: tuple[str, ...] = ()  # tokens that close a call in its grammar (see ``tool_parser``)


REASONING: dict[str, ReasoningEntry] = {}
TOOL_CALL: dict[str, ToolEntry] = {}

S = TypeVar("S", bound=ReasoningSplit)
T = TypeVar("T", bound="ToolParser")


def _check(kind: str, name: str, sglang: tuple[str, ...], registered: dict[str, object]) -> None:
    if name not in sglang:
        raise RuntimeError(f"{kind} parser {name!r} is not one of SGLang 0.5.23's names")
    if name in registered:
        raise RuntimeError(f"{kind} parser {name!r} is registered twice")


def add_reasoning(name: str, split: ReasoningSplit, family: str, splits: str, **details: Any) -> None:
    """``details``: the other :class:`ReasoningEntry` fields (opening, ends, forced_by_kwargs)."""
    _check("reasoning", name, SGLANG_REASONING, dict(REASONING))
    REASONING[name] = ReasoningEntry(name, split, family, splits, **details)


def reasoning_parser(
    *names: str, splits: str, opening: str | None = None, ends: tuple[str, ...] = ()
) -> Callable[[S], S]:
    """Registers a reasoning detector with a one-shot rule of its own under SGLang's ``names``."""

    def register(split: S) -> S:
        for name in names:
            add_reasoning(name, split, "own rule", splits, opening=opening, ends=ends)
        return split

    return register


def tool_parser(*names: str, family: str, splits: str, ends: tuple[str, ...] = ()) -> Callable[[T], T]:
    """Registers a tool-call detector under SGLang's ``names``: ``(text, tools) -> Found``.

    ``ends``: the tokens that close a call in its grammar. When the model stops on one (a stop token:
    gpt-oss's ``<|call|>``), the server's ``text`` leaves it out but the model wrote it; the row's parse
    puts it back (:meth:`synthgen.chat.parsers.output.OutputParser.parse`, ``stop``)."""

    def register(parse: T) -> T:
        for name in names:
            _check("tool-call", name, SGLANG_TOOL_CALL, dict(TOOL_CALL))
            TOOL_CALL[name] = ToolEntry(name, parse, family, splits, ends)
        return parse

    return register


def known(kind: str) -> tuple[str, ...]:
    """The reproduced names of a kind ("reasoning" or "tool-call"), sorted."""
    return tuple(sorted(REASONING if kind == "reasoning" else TOOL_CALL))


def not_reproduced() -> dict[tuple[str, str], str]:
    """Every SGLang name not registered here, with the reason."""
    left: dict[tuple[str, str], str] = dict(NOT_REPRODUCED)
    for kind, names, registered in (
        ("reasoning", SGLANG_REASONING, REASONING),
        ("tool-call", SGLANG_TOOL_CALL, TOOL_CALL),
    ):
        for name in names:
            if name not in registered:
                left.setdefault((kind, name), "its detector is not reproduced yet")
    return left


def unsupported_note(kind: str, name: str) -> str:
    """Why a parser name is not one this tool applies ("reasoning" or "tool-call")."""
    reason = not_reproduced().get((kind, name))
    if reason is not None:
        return f"SGLang 0.5.23 knows the {kind} parser '{name}', but this tool does not reproduce it: {reason}"
    return f"'{name}' is not a {kind} parser of SGLang 0.5.23 (newer than this tool, or misspelt)"


def _row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def parser_table() -> str:
    """The docs' parser table (docs/parsers.md), in SGLang's order, generated from the registrations."""
    rows = ["| kind | name | family | what it splits |", "| --- | --- | --- | --- |"]
    left = not_reproduced()
    entries: list[tuple[str, tuple[str, ...], dict[str, ReasoningEntry] | dict[str, ToolEntry]]] = [
        ("reasoning", SGLANG_REASONING, REASONING),
        ("tool-call", SGLANG_TOOL_CALL, TOOL_CALL),
    ]
    for kind, names, registered in entries:
        for name in names:
            entry = registered.get(name)
            if entry is not None:
                rows.append(_row(kind, f"`{name}`", entry.family, entry.splits))
            else:
                rows.append(_row(kind, f"`{name}`", "not reproduced", left[(kind, name)]))
    return "\n".join(rows) + "\n"
