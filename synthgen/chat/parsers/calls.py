"""What SGLang's tool-call detectors share: the request's tools, call ids, ``parse_base_json`` and the
schema-driven conversion of XML-style argument values (``sglang/srt/function_call/utils.py``)."""

from __future__ import annotations

import ast
import hashlib
import json
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Call = dict[str, Any]  # OpenAI shape: {"id", "type": "function", "function": {"name", "arguments"}}


@dataclass(frozen=True, slots=True)
class Item:
    """SGLang's ToolCallItem: the call's name, its arguments as SGLang serializes them, its tool index."""

    name: str
    arguments: str
    tool_index: int = -1


@dataclass(frozen=True)
class Tools:
    """The request's declared tools. ``schemas is None``: no tool list was seen, so every called function
    counts as declared (what SGLang does with ``SGLANG_FORWARD_UNKNOWN_TOOLS``) and no schema converts."""

    schemas: Mapping[str, object] | None = None  # function name -> its ``parameters`` schema
    order: tuple[str, ...] = field(default=())

    @classmethod
    def from_openai(cls, tools: list[Any] | None) -> Tools:
        if tools is None:
            return cls()
        schemas: dict[str, object] = {}
        order: list[str] = []
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            name = function.get("name") if isinstance(function, dict) else None
            if isinstance(name, str) and name:
                schemas.setdefault(name, function.get("parameters") if isinstance(function, dict) else None)
                if name not in order:
                    order.append(name)
        return cls(schemas, tuple(order))

    def declared(self, name: object) -> bool:
        return self.schemas is None or (isinstance(name, str) and name in self.schemas)

    def index(self, name: str) -> int:
        """SGLang's tool_index: the tool's position in the request (-1 when undeclared)."""
        if self.schemas is None:
            return -1
        return self.order.index(name) if name in self.order else -1

    def properties(self, name: str) -> dict[str, Any]:
        """``_get_arguments_config``: the function's top-level ``properties`` (or its schema), {} if unknown."""
        if self.schemas is None or name not in self.schemas:
            return {}
        params = self.schemas[name]
        if not isinstance(params, dict):
            return {}
        props = schema_properties(params)
        return props if props or "properties" in params else dict(params)


def random_style_id(call_id_prefix: str, index: int) -> str:
    # SGLang: f"call_{uuid.uuid4().hex[:24]}"; same shape, but reproducible per prompt and position.
    return "call_" + hashlib.sha256(f"{call_id_prefix}\x00{index}".encode()).hexdigest()[:24]


def dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def base_json(action: Any, tools: Tools) -> list[Item]:
    """``BaseFormatDetector.parse_base_json``: undeclared names dropped, arguments re-serialized."""
    actions: list[Any] = action if isinstance(action, list) else [action]
    items: list[Item] = []
    for act in actions:
        name = act.get("name")  # a non-object raises AttributeError, as in SGLang
        if not (name and tools.declared(name)):
            continue
        arguments = act.get("parameters") or act.get("arguments", {})
        items.append(Item(name, dumps(arguments), tools.index(name)))
    return items


def literal_eval(text: str) -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=SyntaxWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        return ast.literal_eval(text)


def parse_python(text: str) -> ast.Module:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=SyntaxWarning)
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        return ast.parse(text)


def schema_properties(schema: object) -> dict[str, Any]:
    """``get_schema_properties``: top-level properties, through anyOf/oneOf/allOf branches."""
    if not isinstance(schema, dict):
        return {}
    properties = schema.get("properties")
    if isinstance(properties, dict):
        return properties
    merged: dict[str, Any] = {}
    for keyword in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list):
            for branch in branches:
                for key, value in schema_properties(branch).items():
                    merged.setdefault(key, value)
    return merged


def infer_type(schema: object) -> str | None:
    """``infer_type_from_json_schema``."""
    if not isinstance(schema, dict):
        return None
    if "type" in schema:
        value = schema["type"]
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value:
            non_null = [t for t in value if t != "null"]
            return str(non_null[0]) if non_null else "string"
    if "anyOf" in schema or "oneOf" in schema:
        subs = schema.get("anyOf") or schema.get("oneOf")
        if isinstance(subs, list):
            types = [t for t in (infer_type(s) for s in subs) if t]
            if types:
                if len(set(types)) == 1:
                    return types[0]
                if len(set(types)) == 2 and "null" in types:
                    return next(t for t in types if t != "null")
                return "string" if "string" in types else types[0]
    if "enum" in schema and isinstance(schema["enum"], list):
        if not schema["enum"]:
            return "string"
        kinds: set[str] = set()
        for value in schema["enum"]:
            kinds.add(_json_kind(value))
        return kinds.pop() if len(kinds) == 1 else "string"
    if "allOf" in schema and isinstance(schema["allOf"], list):
        for sub in schema["allOf"]:
            inferred = infer_type(sub)
            if inferred and inferred != "string":
                return inferred
        return "string"
    if "properties" in schema:
        return "object"
    if "items" in schema:
        return "array"
    return None


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else ""


def convert_qwen3_coder(value: str, name: str, config: dict[str, Any]) -> Any:
    """``Qwen3CoderDetector._convert_param_value``: a parameter's text to the type its schema names."""
    if value.lower() == "null":
        return None
    if name not in config:
        return value
    kind = str(infer_type(config[name]) or "string").strip().lower()
    if kind in ("string", "str", "text", "varchar", "char", "enum"):
        return value
    if kind.startswith(("int", "uint", "long", "short", "unsigned")):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(("num", "float")):
        try:
            number = float(value)
        except ValueError:
            return value
        if "." not in value and "e" not in value.lower() and number.is_integer():
            return int(number)
        return number
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    if kind in ("object", "array", "arr") or kind.startswith(("dict", "list")):
        try:
            return json.loads(value)
        except ValueError:
            pass
    try:
        return literal_eval(value)
    except Exception:  # ast.literal_eval raises several kinds; SGLang degenerates to the string
        return value


Found = tuple[str, list[Item]] | None
"""A detector's result: None when its ``has_tool_call`` is false, else the answer SGLang keeps and the calls."""

ToolParser = Callable[[str, Tools], Found]
