"""The render check: does an exported row train on exactly what the model saw and wrote?

Each exported specforge/messages row is rendered the way its trainer will render it, tokenized, and compared
with what it must be (``formats.Expected``: the stored prompt ids + output ids, the output span trained and
nothing else). Two routes:

    template    the model's chat template with the row's kwargs (what a trainer calling
                ``apply_chat_template`` does); the trained span is everything after the generation prompt of
                the history, as completion-only trainers mask it.
    specforge   SpecForge's own parser for a template name of its registry (``data.chat_template``), run on
                the row as ``build_eagle3_dataset`` receives it (conversations, tools, every other column a
                template variable) with ``train_only_last_turn``; only when the ``specforge`` package imports.

A row is exact when the rendered ids start with the expected ids and the trained tokens are exactly the
generated span (tokens after the turn, untrained, are allowed). Otherwise it drifts, by kind (KINDS).
"""

from __future__ import annotations

import importlib
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from synthgen.chat.templating import TOOL_TURN_SHAPES
from synthgen.data.conversations import template_messages
from synthgen.fmt import plural

SYSTEM_ADDED = "system prompt added"
REASONING_DROPPED = "reasoning dropped"
BOUNDARY = "boundary re-tokenization"
TEXT = "text differs"
UNTRAINED = "untrained tokens"
EXTRA = "extra-trained tokens"
HISTORY = "history turns trained"
KINDS = (SYSTEM_ADDED, REASONING_DROPPED, BOUNDARY, TEXT, UNTRAINED, EXTRA, HISTORY)
HINTS = {
    SYSTEM_ADDED: "the trainer adds its template's system prompt to rows without one",
    REASONING_DROPPED: "the template drops this turn's reasoning",
    BOUNDARY: "the same text tokenizes differently when re-tokenized whole",
    TEXT: "the rendered text is not what the model saw and wrote",
    UNTRAINED: "generated tokens the trainer does not train",
    EXTRA: "tokens after the generated turn are trained (e.g. a newline after the end-of-turn token)",
    HISTORY: "assistant turns of the history are trained",
}
# Columns build_eagle3_dataset does not pass to the template (it pops these).
SPECFORGE_POPPED = ("conversations", "id", "tools")
SPECFORGE_MESSAGE_KEYS = ("role", "content", "reasoning_content", "tool_calls", "tool_call_id", "name")


@dataclass(frozen=True, slots=True)
class Rendering:
    ids: list[int]
    mask: list[int] | None  # the trained tokens, or None when the route cannot tell


class Route(Protocol):
    """How a trainer renders an exported row: TemplateRoute or SpecForgeRoute."""

    name: str
    system_prompt: str | None

    def render(self, row: dict[str, Any]) -> Rendering: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass
class Tally:
    """The render check's counts for one dataset."""

    route: str = ""
    checked: int = 0
    exact: int = 0
    no_ids: int = 0  # rows without stored ids: nothing to compare with
    kinds: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)  # kind -> the first row's id and detail

    @property
    def drifting(self) -> int:
        return self.checked - self.exact

    def add(self, row_id: str, verdict: dict[str, str]) -> None:
        self.checked += 1
        if not verdict:
            self.exact += 1
        for kind, detail in verdict.items():
            self.kinds[kind] += 1
            self.examples.setdefault(kind, f"{row_id}: {detail}")

    def lines(self, label: int = 30) -> list[str]:
        head = f"  {'render check':<{label}} {self.exact:>9,} of {plural(self.checked, 'row')} exact   ({self.route})"
        out = [head]
        if self.no_ids:
            out.append(f"    {'without stored ids':<{label - 2}} {self.no_ids:>9,}   (not checked)")
        for kind in KINDS:
            if self.kinds[kind]:
                out.append(f"    {kind:<{label - 2}} {self.kinds[kind]:>9,}   ({HINTS[kind]})")
                out.append(f"      first: {self.examples[kind]}")
        return out

    def summary(self) -> str:
        kinds = ", ".join(f"{self.kinds[k]:,} {k}" for k in KINDS if self.kinds[k])
        text = f"render check ({self.route}): {self.exact:,} of {plural(self.checked, 'row')} exact"
        return text + (f"; drifting: {kinds}" if kinds else "")


def _short(text: str, limit: int = 70) -> str:
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def verdict(
    expected_ids: Sequence[int],
    start: int,
    reasoning: str,
    rendering: Rendering,
    decode: Any,
    system_prompt: str | None = None,
) -> dict[str, str]:
    """The kinds of drift of one row (empty: exact), each with a short detail."""
    n = len(expected_ids)
    ids, mask = rendering.ids, rendering.mask
    out: dict[str, str] = {}
    if list(ids[:n]) == list(expected_ids):
        if mask is not None:
            untrained = mask[start:n].count(0)
            if untrained:
                out[UNTRAINED] = f"{untrained} of {n - start} generated tokens untrained"
            history = sum(mask[:start])
            if history:
                out[HISTORY] = f"{history} tokens before the generated turn trained"
            after = [i for i in range(n, len(ids)) if mask[i]]
            if after:
                out[EXTRA] = f"{len(after)} trained after the turn: {_short(decode([ids[i] for i in after]))}"
        return out
    want, got = decode(list(expected_ids)), decode(list(ids))
    if got.startswith(want):
        first = next(i for i, (a, b) in enumerate(zip(ids, expected_ids, strict=False)) if a != b)
        out[BOUNDARY] = f"token {first}: {_short(decode(list(expected_ids[first : first + 3])))} stored, " + (
            f"{_short(decode(list(ids[first : first + 3])))} re-tokenized"
        )
        return out
    if system_prompt and system_prompt in got[: len(system_prompt) + 200] and system_prompt not in want:
        out[SYSTEM_ADDED] = f"{_short(system_prompt)} before the conversation"
    if reasoning.strip() and reasoning.strip() not in got:
        out[REASONING_DROPPED] = f"{_short(reasoning.strip()[:40])} not in the rendered text"
    if not out:
        at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
        out[TEXT] = f"char {at}: {_short(want[at : at + 30])} expected, {_short(got[at : at + 30])} rendered"
    return out


# --- routes ---------------------------------------------------------------------------------------------
def _messages_and_tools(row: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    messages = row.get("conversations") if "conversations" in row else row.get("messages")
    tools = row.get("tools")
    if isinstance(tools, str):
        tools = json.loads(tools)
    return list(messages or []), tools or None


class TemplateRoute:
    """The model's chat template, with the row's template kwargs (top-level in specforge rows,
    ``chat_template_kwargs`` in messages rows), tried in the tool-call shapes the run renders with."""

    name = "the model's chat template"
    system_prompt: str | None = None

    def __init__(self, tokenizer: Any, skip_keys: frozenset[str]) -> None:
        self.tokenizer = tokenizer
        self.skip_keys = skip_keys

    def _kwargs(self, row: dict[str, Any]) -> dict[str, Any]:
        if "messages" in row:
            kwargs = row.get("chat_template_kwargs")
            return dict(kwargs) if isinstance(kwargs, dict) else {}
        return {k: v for k, v in row.items() if k not in self.skip_keys}

    def _text(self, messages: list[dict[str, Any]], tools: Any, prompt: bool, kwargs: dict[str, Any]) -> str:
        calls = any(m.get("role") == "assistant" and m.get("tool_calls") for m in messages)
        error: Exception | None = None
        for arguments, null_content in TOOL_TURN_SHAPES if calls else TOOL_TURN_SHAPES[:1]:
            shaped = template_messages(messages, arguments, null_content)
            try:
                text = self.tokenizer.apply_chat_template(
                    shaped, tools=tools, tokenize=False, add_generation_prompt=prompt, **kwargs
                )
            except Exception as exc:  # a template's raise_exception, TypeError, jinja errors
                error = error or exc
                continue
            return str(text)
        raise ValueError(f"chat template failed: {error}")

    def render(self, row: dict[str, Any]) -> Rendering:
        messages, tools = _messages_and_tools(row)
        kwargs = self._kwargs(row)
        full = self._text(messages, tools, False, kwargs)
        ids = list(self.tokenizer(full, add_special_tokens=False)["input_ids"])
        prefix = self._text(messages[:-1], tools, True, kwargs)
        if not full.startswith(prefix):
            return Rendering(ids, None)
        start = len(self.tokenizer(prefix, add_special_tokens=False)["input_ids"])
        return Rendering(ids, [0] * start + [1] * (len(ids) - start))

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))


def specforge_available() -> bool:
    try:
        importlib.import_module("specforge.data.parse")
        importlib.import_module("specforge.data.template")
    except Exception:  # ImportError, or its torch/datasets failing to import
        return False
    return True


class SpecForgeRoute(TemplateRoute):
    """SpecForge's own parser (specforge.data.parse) for a template of its registry, as build_eagle3_dataset
    runs it with ``train_only_last_turn``."""

    def __init__(self, tokenizer: Any, template_name: str) -> None:
        super().__init__(tokenizer, frozenset(SPECFORGE_POPPED))
        parse = importlib.import_module("specforge.data.parse")
        registry = importlib.import_module("specforge.data.template").TEMPLATE_REGISTRY
        if template_name not in registry.get_all_template_names():
            names = ", ".join(registry.get_all_template_names())
            raise KeyError(f"{template_name} is not a SpecForge template (known: {names})")
        template = registry.get(template_name)
        parsers = {
            "general": parse.GeneralParser,
            "thinking": parse.ThinkingParser,
            "glm": parse.GLMParser,
            "openai-harmony": parse.HarmonyParser,
        }
        self.parser = parsers[template.parser_type](tokenizer, template)
        self.system_prompt = template.system_prompt or None
        self.name = f"SpecForge's parser, template {template_name}, train_only_last_turn"

    def render(self, row: dict[str, Any]) -> Rendering:
        messages, tools = _messages_and_tools(row)
        # As Arrow loads the file: every message carries every key, missing ones as null.
        messages = [{k: m.get(k) for k in SPECFORGE_MESSAGE_KEYS} for m in messages]
        kwargs = {k: v for k, v in row.items() if k not in SPECFORGE_POPPED}
        input_ids, loss_mask = self.parser.parse(
            messages, 1 << 30, preformatted=False, train_only_last_turn=True, tool=tools or [], **kwargs
        )
        return Rendering([int(i) for i in input_ids.tolist()], [int(b) for b in loss_mask.tolist()])
