"""SGLang's PythonicDetector: a Python list of calls, ``[f(a=1), g()]``."""

from __future__ import annotations

import ast
import json
import re
from typing import Any, cast

from synthgen.chat.parsers.calls import (
    Found,
    Item,
    Tools,
    parse_python,
)
from synthgen.chat.parsers.registry import tool_parser

_PYTHONIC = re.compile(
    r"\[([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s)?\),\s*)*"
    r"([a-zA-Z]+\w*\(([a-zA-Z]+\w*=.*,\s*)*([a-zA-Z]+\w*=.*\s*)?\)\s*)+\]",
    re.DOTALL,
)


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
    match = _PYTHONIC.search(text)
    if match is None:
        return None
    normal = text[: match.start()] + text[match.end() :]
    try:
        module = parse_python(text[match.start() : match.end()])
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
