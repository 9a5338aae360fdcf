"""A request's life as values: frozen jobs and outcomes, one writer of rows and of the tally.

Read from the source: no module of synthgen/run/ but the writer changes a count or a token figure,
and none assigns the fields of an object it does not own.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

import synthgen.run
from synthgen.run import outcomes
from synthgen.run.job import Carry, Job

RUN = Path(synthgen.run.__file__).parent
WRITER = "writer.py"
# Fields set on objects that are not the module's own: a third-party object's (tqdm's bar).
ALLOWED = {("progress.py", "bar.total")}


def assignments(path: Path) -> list[tuple[int, ast.Attribute]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for one in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(one, ast.Attribute):
                    found.append((node.lineno, one))
    return found


def owned(target: ast.Attribute) -> bool:
    """``self.x``, or a private part of the object's own (``self._part.x``)."""
    base = target.value
    if isinstance(base, ast.Name):
        return base.id in ("self", "cls")
    return isinstance(base, ast.Attribute) and base.attr.startswith("_") and owned(base)


def test_the_grep_of_the_issue_lists_only_the_writer():
    pattern = re.compile(r"\.tokens\.[a-z]+ [-+]?=|\.counts\.[a-z_]+ [-+]?=")
    hits = {p.name for p in RUN.glob("*.py") if pattern.search(p.read_text())}
    assert hits <= {WRITER}


def test_no_module_but_the_writer_assigns_another_objects_fields():
    found = [
        f"{path.name}:{line}: {ast.unparse(target)}"
        for path in sorted(RUN.glob("*.py"))
        if path.name != WRITER
        for line, target in assignments(path)
        if not owned(target) and (path.name, ast.unparse(target)) not in ALLOWED
    ]
    assert found == []


def test_the_writer_changes_only_the_tally_and_its_own_fields():
    for line, target in assignments(RUN / WRITER):
        text = ast.unparse(target)
        tally = text.split(".")[0] in ("c", "t", "tokens") or ".counts." in text
        assert owned(target) or tally, f"writer.py:{line}: {text}"


@pytest.mark.parametrize(
    "cls",
    [
        Job,
        Carry,
        *[v for v in vars(outcomes).values() if dataclasses.is_dataclass(v) and v.__module__ == outcomes.__name__],
    ],
)
def test_jobs_and_outcomes_are_frozen(cls):
    assert cls.__dataclass_params__.frozen, cls.__name__  # type: ignore[attr-defined]
