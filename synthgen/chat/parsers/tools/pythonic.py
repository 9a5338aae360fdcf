"""SGLang's PythonicDetector: a Python list of calls, ``[f(a=1), g()]``."""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable
from typing import Any, cast

from synthgen.chat.parsers.calls import (
    Found,
    Item,
    Tools,
    parse_python,
)
from synthgen.chat.parsers.registry import tool_parser

# SGLang's pattern (pythonic_detector.py), a published ReDoS shape (CVE-2025-48887 in vLLM): nested
# quantifiers over ".*" make Python's backtracking engine exponential on a call list cut before its "]".
# :func:`_find_call_list` finds the same match as ``PATTERN.search`` in linear time; the tests compare them.
PATTERN = re.compile(
    r"\[([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s)?\),\s*)*"
    r"([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s*)?\)\s*)+\]",
    re.DOTALL,
)

# PATTERN as a program of the backtracking machine below: (op, argument, argument).
#   "c": consume one character the class accepts; "s": try the first target, then the second; "j": jump.
_CLASSES: dict[str, Callable[[str], bool]] = {
    "[": lambda c: c == "[",
    "]": lambda c: c == "]",
    "(": lambda c: c == "(",
    ")": lambda c: c == ")",
    ",": lambda c: c == ",",
    "=": lambda c: c == "=",
    "alpha": lambda c: c.isascii() and c.isalpha(),  # [a-zA-Z]
    "word": lambda c: c.isalnum() or c == "_",  # \w (str patterns: Unicode)
    "space": str.isspace,  # \s
    "any": lambda c: True,  # . under DOTALL
}


class _Program:
    def __init__(self) -> None:
        self.ops: list[tuple[str, Any, Any]] = []

    def emit(self, op: str, a: Any = None, b: Any = None) -> int:
        self.ops.append((op, a, b))
        return len(self.ops) - 1

    def star(self, body: Callable[[], None]) -> None:
        """Greedy ``(body)*``: another round first, then on."""
        split = self.emit("s")
        body()
        self.emit("j", split)
        self.ops[split] = ("s", split + 1, len(self.ops))

    def optional(self, body: Callable[[], None]) -> None:
        """Greedy ``(body)?``."""
        split = self.emit("s")
        body()
        self.ops[split] = ("s", split + 1, len(self.ops))

    def char(self, name: str) -> None:
        self.emit("c", _CLASSES[name])

    def ident(self) -> None:  # [a-zA-Z]+\w*
        self.char("alpha")
        self.star(lambda: self.char("alpha"))
        self.star(lambda: self.char("word"))

    def argument(self, tail: Callable[[], None]) -> None:  # [a-zA-Z]+\w*=.* then the tail
        self.ident()
        self.char("=")
        self.star(lambda: self.char("any"))
        tail()

    def spaces(self) -> None:  # \s*
        self.star(lambda: self.char("space"))

    def comma_spaces(self) -> None:  # ,\s*
        self.char(",")
        self.spaces()

    def space(self) -> None:  # \s
        self.char("space")

    def call(self, last: Callable[[], None], after: Callable[[], None]) -> None:
        self.ident()
        self.char("(")
        self.star(lambda: self.argument(self.comma_spaces))
        self.optional(lambda: self.argument(last))
        self.char(")")
        after()


def _compile() -> list[tuple[str, Any, Any]]:
    program = _Program()
    program.char("[")
    program.star(lambda: program.call(program.space, program.comma_spaces))
    program.call(program.spaces, program.spaces)  # (...)+ is one round, then (...)*
    program.star(lambda: program.call(program.spaces, program.spaces))
    program.char("]")
    program.emit("m")
    return program.ops


_OPS = _compile()


def _find_call_list(text: str) -> tuple[int, int] | None:
    """``PATTERN.search(text)``'s span: the backtracking engine's first match, explored in its order, each
    (step, position) at most once (a step that failed from a position fails again), so O(len(text))."""
    start = text.find("[")
    if start == -1 or text.find("]", start) == -1:
        return None
    failed = [bytearray(len(text) + 1) for _ in _OPS]
    while start != -1:
        stack = [(0, start)]
        while stack:
            pc, pos = stack.pop()
            if failed[pc][pos]:
                continue
            failed[pc][pos] = 1
            op, a, b = _OPS[pc]
            if op == "c":
                if pos < len(text) and a(text[pos]):
                    stack.append((pc + 1, pos + 1))
            elif op == "s":
                stack.append((b, pos))
                stack.append((a, pos))
            elif op == "j":
                stack.append((a, pos))
            else:
                return start, pos
        start = text.find("[", start + 1)
    return None


def _python_value(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, (str, int, float)):
            return node.value
        raise ValueError("no JSON representation")
    if isinstance(node, ast.Dict):
        return {
            cast(Any, k).value: _python_value(v) for k, v in zip(node.keys, node.values, strict=True)
        }  # ** raises, as SGLang
    if isinstance(node, ast.List):
        return [_python_value(v) for v in node.elts]
    raise ValueError("tool call arguments must be literals")


@tool_parser("pythonic", family="Python calls", splits="`[func(a=1), other()]`")
def pythonic(text: str, tools: Tools) -> Found:
    """PythonicDetector: ``[func(a=1, b="x"), other()]``, optionally in <|python_start|>...<|python_end|>."""
    text = text.strip().replace("<|python_start|>", "").replace("<|python_end|>", "")
    span = _find_call_list(text)
    if span is None:
        return None
    normal = text[: span[0]] + text[span[1] :]
    try:
        module = parse_python(text[span[0] : span[1]])
        parsed = getattr(module.body[0], "value", None)
        if not (isinstance(parsed, ast.List) and all(isinstance(e, ast.Call) for e in parsed.elts)):
            return normal, []
        calls: list[Item] = []
        for index, call in enumerate(parsed.elts):
            assert isinstance(call, ast.Call)
            if not isinstance(call.func, ast.Name) or not tools.declared(call.func.id):
                continue
            try:
                arguments = {k.arg: _python_value(k.value) for k in call.keywords}
                parameters = json.dumps(arguments, ensure_ascii=False, allow_nan=False)
            except (ValueError, TypeError):
                continue
            calls.append(Item(call.func.id, parameters, index))
        return normal, calls
    except Exception:
        return normal, []
