"""The project's size rule, checked on every file of the package: no module over 700 lines, no class over
250, no function (method or nested function included) over 70. A failure names every offender with its size.

A class or a function is counted from its ``def``/``class`` line to its last line, decorators left out."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "synthgen"
MAX_MODULE_LINES = 700
MAX_CLASS_LINES = 250
MAX_FUNCTION_LINES = 70


@functools.cache
def modules() -> tuple[Path, ...]:
    return tuple(sorted(PACKAGE.rglob("*.py")))


def where(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def span(node: ast.stmt) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


@functools.cache
def definitions(path: Path) -> list[tuple[str, str, int]]:
    """(kind, dotted name, lines) of every class and function of a module, nested ones included."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                found.append(("class" if isinstance(child, ast.ClassDef) else "function", name, span(child)))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), "")
    return found


def over(kind: str, limit: int) -> list[str]:
    return [
        f"{where(path)}:{name} has {lines} lines"
        for path in modules()
        for found_kind, name, lines in definitions(path)
        if found_kind == kind and lines > limit
    ]


def test_the_walk_finds_the_package_and_its_definitions() -> None:
    # A wrong root would make the three checks below pass on nothing.
    names = {name for path in modules() for _, name, _ in definitions(path)}
    assert len(modules()) > 20
    assert {"Runner", "Runner.run", "build_parser"} <= names


def test_no_module_is_over_700_lines() -> None:
    offenders = [
        f"{where(path)} has {lines} lines"
        for path in modules()
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    ]
    assert not offenders, f"modules over {MAX_MODULE_LINES} lines (split them):\n" + "\n".join(offenders)


def test_no_class_is_over_250_lines() -> None:
    offenders = over("class", MAX_CLASS_LINES)
    assert not offenders, f"classes over {MAX_CLASS_LINES} lines (split them):\n" + "\n".join(offenders)


def test_no_function_is_over_70_lines() -> None:
    offenders = over("function", MAX_FUNCTION_LINES)
    assert not offenders, f"functions over {MAX_FUNCTION_LINES} lines (split them):\n" + "\n".join(offenders)
