"""The unit tier stays a quick in-process loop: no unit test starts a process (a subprocess, the simulator,
a CLI run as a program). Those live in tests/e2e (docs/testing.md)."""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).resolve().parent
NAMES = {"subprocess", "Popen", "make_sim", "start_sim", "simharness", "sglang_sim", "create_subprocess_exec"}
ATTRIBUTES = {("sys", "executable"), ("ws", "run"), ("ws", "start")}


def process_starts(tree: ast.AST) -> list[int]:
    """Lines that name a way to start a process: an import, a name, a fixture parameter, an attribute."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [alias.name for alias in node.names] + [getattr(node, "module", None) or ""]
            named = any(part in NAMES for module in modules for part in module.split("."))
        elif isinstance(node, ast.Name):
            named = node.id in NAMES
        elif isinstance(node, ast.arg):
            named = node.arg in NAMES
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            named = node.attr in NAMES or (node.value.id, node.attr) in ATTRIBUTES
        else:
            named = False
        if named:
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_unit_test_starts_a_process():
    found = [
        f"{path.relative_to(UNIT.parents[1])}:{line}"
        for path in sorted(UNIT.rglob("*.py"))
        for line in process_starts(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not found, "tests that start a process belong in tests/e2e: " + ", ".join(found)


def test_the_check_sees_each_way_in():
    source = "import subprocess\nfrom simharness import x\ndef test(make_sim, ws):\n    ws.run()\n    sys.executable\n"
    assert process_starts(ast.parse(source)) == [1, 2, 3, 4, 5]
