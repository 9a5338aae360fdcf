"""SpecForge's check of a regenerated data file, restated for our tests: what its
``scripts/validate_regenerated_data.py --data-path FILE`` accepts, rule by rule.

Source: github.com/sgl-project/SpecForge, ``scripts/validate_regenerated_data.py`` (``validate_row``,
``validate_dataset``) and ``scripts/conversation_validation.py`` (``validate_conversation``,
``has_think_marker``) at commit 69e18e6bb7358ba6dddf0554629c2d0a04fed82a (the last commit to change either
file in the snapshot read, a6b6b0230009d15ec2a97a57384e6f53f0f96946). Restated, not copied: the rules and their
order are SpecForge's, the code and the wording ours. Re-read those two files when SpecForge changes them.

The rules (a file passes when every row does and it has at least one row; duplicate ids are allowed):

1. every non-blank line is a JSON object;
2. ``id`` is a non-empty string and ``status`` is ``"success"``;
3. ``conversations`` is a non-empty list of objects, each with a non-empty string ``content`` (so a
   tool-calling turn with empty or null content fails); ``system`` turns only before the first user turn; then
   only ``user`` and ``assistant``, alternating, starting with ``user`` (so ``tool`` turns fail); at least one
   user turn;
4. every assistant ``reasoning_content`` is a string or null; with ``--expect-reasoning`` every assistant turn,
   the history's included, has a non-empty one; with ``--expect-non-reasoning`` none has;
   with ``--strict-think-markers`` no ``<think>``/``</think>`` (any case) in an assistant content or reasoning;
5. at least one assistant turn, and the last turn is the assistant's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _think_marker(text: str) -> bool:
    return "<think>" in text.lower() or "</think>" in text.lower()


def _conversation_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "conversations must be a non-empty list"
    want, seen_user = "user", False
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"message {i} must be an object"
        role, content = m.get("role"), m.get("content")
        if not isinstance(content, str) or not content.strip():
            return f"message {i} content must be a non-empty string"
        if role == "system" and not seen_user:
            continue
        if role not in ("user", "assistant"):
            return f"message {i} has unsupported role {role!r}"
        if role != want:
            return f"message {i} expected role {want!r}, got {role!r}"
        seen_user = True
        want = "assistant" if role == "user" else "user"
    return None if seen_user else "conversation has no user message"


def _assistant_problem(i: int, m: dict, expect_reasoning: bool, expect_non_reasoning: bool, strict: bool) -> str | None:
    reasoning = m.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        return f"assistant message {i} reasoning_content must be a string or null"
    if expect_non_reasoning and reasoning and reasoning.strip():
        return f"assistant message {i} has non-empty reasoning_content"
    if expect_reasoning and not (isinstance(reasoning, str) and reasoning.strip()):
        return f"assistant message {i} has empty reasoning_content"
    if strict and (_think_marker(m["content"]) or (isinstance(reasoning, str) and _think_marker(reasoning))):
        return f"assistant message {i} contains a thinking marker"
    return None


def validate_row(
    row: dict, *, expect_reasoning: bool = False, expect_non_reasoning: bool = False, strict_think_markers: bool = False
) -> int:
    """The row's assistant turns; ValueError naming the first rule it breaks."""
    if not isinstance(row.get("id"), str) or not row["id"].strip():
        raise ValueError("id must be a non-empty string")
    if row.get("status") != "success":
        raise ValueError("status must be 'success'")
    messages = row.get("conversations")
    problem = _conversation_problem(messages)
    if problem:
        raise ValueError(problem)
    assistants = 0
    for i, m in enumerate(messages):
        if m.get("role") == "assistant":
            assistants += 1
            problem = _assistant_problem(i, m, expect_reasoning, expect_non_reasoning, strict_think_markers)
            if problem:
                raise ValueError(problem)
    if not assistants:
        raise ValueError("conversation has no assistant message")
    if messages[-1].get("role") != "assistant":
        raise ValueError("conversation must end with an assistant message")
    return assistants


def validate_file(path: Path, **flags: bool) -> int:
    """The file's rows; ValueError ``line N: ...`` at the first row SpecForge's validator refuses."""
    rows = 0
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {n}: invalid JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise ValueError(f"line {n}: expected a JSON object")
        try:
            validate_row(row, **flags)
        except ValueError as exc:
            raise ValueError(f"line {n}: {exc}") from exc
        rows += 1
    if not rows:
        raise ValueError(f"{path} contains no data rows")
    return rows
