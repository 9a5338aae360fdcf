"""Parsing a raw completion into reasoning, answer and tool calls, by SGLang's parser names.

The names are those SGLang 0.5.23's ``--reasoning-parser`` and ``--tool-call-parser`` accept; each
reproduces that parser's non-streaming result as ``serving_chat`` chains them: the reasoning parser's
``parse_non_stream`` (:mod:`.reasoning`), then, for a request that declares tools, the tool-call
detector on the answer (:mod:`.tools`) when its ``has_tool_call`` fires. Every parser registers itself
beside its code (:mod:`.registry`); :mod:`.output` chains them for a row.

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

from synthgen.chat.parsers import reasoning as _reasoning  # noqa: F401  (registers the reasoning parsers)
from synthgen.chat.parsers import tools as _tools  # noqa: F401  (registers the tool-call parsers)
from synthgen.chat.parsers.calls import Tools
from synthgen.chat.parsers.output import OutputParser, ParsedOutput, prompt_opens_reasoning
from synthgen.chat.parsers.reasoning.base import Split, split_reasoning
from synthgen.chat.parsers.registry import (
    SGLANG_REASONING,
    SGLANG_TOOL_CALL,
    known,
    not_reproduced,
    parser_table,
    unsupported_note,
)

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

KNOWN_REASONING: tuple[str, ...] = known("reasoning")
KNOWN_TOOL_CALL: tuple[str, ...] = known("tool-call")
NOT_REPRODUCED: dict[tuple[str, str], str] = not_reproduced()
