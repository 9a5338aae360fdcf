"""Every parser's work is bounded by its input's length, for any input (a parser hang would freeze the run).

A seeded generator damages model outputs in every format (cut, a marker dropped, doubled or moved, a block
repeated many times) and runs each through every registered parser, counting the Python lines executed
(``sys.settrace``): the count per character of input is bounded, and a parse that passes the bound is
stopped there, so a hang fails the test instead of holding it. Work inside the regular expressions is not
traced: the patterns the parsers use must have no nested unbounded repeat (the shape of SGLang's pythonic
pattern, whose backtracking is exponential), which the last test checks on every pattern a parse used.
"""

from __future__ import annotations

import random
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from parser_samples import REASONING_TEXTS, SGLANG_TEST_TEXTS, TOOL_TEXTS, TOOLS

from synthgen.chat.parsers import OutputParser
from synthgen.chat.parsers.reasoning import harmony
from synthgen.chat.parsers.registry import REASONING, TOOL_CALL
from synthgen.chat.parsers.tools import glm, pythonic

try:  # Python 3.11+
    from re import _constants as sre_constants
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

LINES_PER_CHAR = 400  # the most measured is pythonic's machine, ~130 a character; a quadratic loop passes it
LINES_FIXED = 20_000  # imports on first use, schema set-up
SEED = 20261202
MARKER = re.compile(r"<[^<>\s]{1,40}>|\[[A-Z_/]{2,12}\]|<\|\"\|>|\]<\]minimax\[>\[|[{}\[\]()\"',=:]")


class TooMuchWork(Exception):
    pass


def traced_lines(parse: Callable[[], Any], budget: int) -> int:
    """Lines ``parse`` executes; raises TooMuchWork as soon as they pass ``budget``."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
            if count > budget:
                raise TooMuchWork(f"over {budget} lines")
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        parse()
    finally:
        sys.settrace(previous)
    return count


def damaged(rng: random.Random, text: str, markers: list[str]) -> str:
    """One damage: cut, a marker dropped, doubled or swapped for another, or a slice repeated."""
    spots = [m.span() for m in MARKER.finditer(text)] or [(0, 0)]
    start, end = rng.choice(spots)
    kind = rng.randrange(6)
    if kind == 0:
        return text[: rng.randint(0, len(text))]
    if kind == 1:
        return text[:start] + text[end:]
    if kind == 2:
        return text[:end] + text[start:]
    if kind == 3:
        return text[:start] + rng.choice(markers) + text[end:]
    if kind == 4:
        a, b = sorted(rng.randint(0, len(text)) for _ in range(2))
        return text[:b] + text[a:b] * rng.randint(2, 40) + text[b:]
    return text[:start] + text[end:][: rng.randint(0, len(text))]


def corpus(seed: int, count: int) -> Iterator[str]:
    rng = random.Random(seed)
    bases = TOOL_TEXTS + SGLANG_TEST_TEXTS + REASONING_TEXTS
    markers = sorted({m.group(0) for text in bases for m in MARKER.finditer(text)})
    for _ in range(count):
        text = rng.choice(bases)
        for _ in range(rng.randint(1, 3)):
            text = damaged(rng, text, markers)
        yield text
    for text in bases[::11]:  # long inputs: a superlinear parser shows here
        yield text * 60
        yield text[: len(text) // 2] * 60


def assert_bounded(parser: OutputParser, text: str, opened: bool = False, tools: Any = None) -> None:
    budget = LINES_PER_CHAR * len(text) + LINES_FIXED
    try:
        traced_lines(lambda: parser.parse(text, opened, tools=tools), budget)
    except TooMuchWork:
        name = parser.tool_call or parser.reasoning
        pytest.fail(f"{name}: over {budget} lines on a {len(text)}-character input: {text[:300]!r}")


@pytest.mark.parametrize("name", sorted(TOOL_CALL))
def test_every_tool_call_parser_works_in_time_linear_in_its_input(name):
    parser = OutputParser(None, name)
    for i, text in enumerate(corpus(SEED + len(name), 30)):
        assert_bounded(parser, text, tools=TOOLS if i % 2 else None)


@pytest.mark.parametrize("name", sorted(REASONING))
def test_every_reasoning_parser_works_in_time_linear_in_its_input(name):
    parser = OutputParser(name, None)
    for i, text in enumerate(corpus(SEED - len(name), 15)):
        assert_bounded(parser, text, opened=bool(i % 2))


def test_gemma4_with_a_stray_bracket_in_an_array_ends():
    # A missing <|"|> left a "]" where an array item starts: SGLang's loop appended "" forever.
    text = '<|tool_call>call:f{query:[<|"|>a<|"|>,<|"|>b],x:{y:[<|"|>c<|"|>]}}<tool_call|>'
    assert_bounded(OutputParser(None, "gemma4"), text)


def test_the_pythonic_machine_finds_sglangs_regex_match():
    rng = random.Random(SEED)
    names, separators = ["f", "g1", "aé", "x_y"], [", ", ",", " ", "", ",\n", " , "]
    arguments = ["", "a=1", "a=1, b='x'", "a=[1, 2]", "a=1,", "a=1 ", "b=(1)", "c=')'", "d=f(x=1)", "e=]"]
    for _ in range(1500):
        calls = [f"{rng.choice(names)}({rng.choice(arguments)}){rng.choice(separators)}" for _ in range(4)]
        text = rng.choice(["", "x ", "["]) + "[" + "".join(calls[: rng.randint(1, 4)])
        text += rng.choice(["]", "", " ]", ")]", "] tail )]", "]]"])
        at = rng.randrange(len(text) + 1)
        text = text[:at] + rng.choice(["", "]", "[", ")", "(", ",", "=", " "]) + text[at:]
        match = pythonic.PATTERN.search(text)
        assert pythonic._find_call_list(text) == ((match.start(), match.end()) if match else None), text


def test_a_cut_pythonic_call_list_is_linear():
    # SGLang's regex: ~0.1 s for 3 such calls, ten times more for each one more (CVE-2025-48887's shape).
    calls = ", ".join(f"lookup(query='city {i}', n={i}, tags='t')" for i in range(200))
    for text in ("[" + calls, "[" + calls + " ) x]"):
        assert_bounded(OutputParser(None, "pythonic"), text)


def _unbounded_repeat_inside_repeat(tree: Any, inside: bool = False) -> bool:
    for op, av in tree:
        if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
            unbounded = av[1] == sre_constants.MAXREPEAT
            if (unbounded and inside) or _unbounded_repeat_inside_repeat(av[2], inside or unbounded):
                return True
        elif op == sre_constants.SUBPATTERN and _unbounded_repeat_inside_repeat(av[-1], inside):
            return True
        elif op == sre_constants.BRANCH and any(_unbounded_repeat_inside_repeat(b, inside) for b in av[1]):
            return True
        elif op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT) and _unbounded_repeat_inside_repeat(av[1], inside):
            return True
    return False


def _patterns_in(value: Any) -> Iterator[str]:
    if isinstance(value, re.Pattern) and value is not pythonic.PATTERN:  # PATTERN: the reference, unused
        yield value.pattern
    elif hasattr(value, "__dict__") and type(value).__module__.startswith("synthgen.chat.parsers"):
        for item in vars(value).values():  # a detector object's compiled patterns (deepseek's DSML)
            yield from _patterns_in(item)


def test_no_pattern_a_parser_uses_nests_unbounded_repeats(monkeypatch):
    used: set[str] = set()
    original = re._compile  # type: ignore[attr-defined]

    def recording(pattern: Any, flags: int) -> Any:
        compiled = original(pattern, flags)
        used.add(compiled.pattern)
        return compiled

    monkeypatch.setattr(re, "_compile", recording)  # what re.findall(...) and friends compile
    for name in sorted(TOOL_CALL):
        for text in TOOL_TEXTS:
            OutputParser(None, name).parse(text, False, tools=TOOLS)
    for name in sorted(REASONING):
        for text in REASONING_TEXTS:
            OutputParser(name, None).parse(text, False)
    for module_name, module in list(sys.modules.items()):
        if module_name.startswith("synthgen.chat.parsers"):
            for value in vars(module).values():
                used.update(_patterns_in(value))
    assert len(used) > 40
    nested = [p for p in used if isinstance(p, str) and _unbounded_repeat_inside_repeat(sre_parse.parse(p))]
    assert not nested, nested


def test_the_harmony_plain_text_patterns_match_as_sglangs_do():
    # Rewritten so a run of whitespace is scanned once (a model looping on newlines took seconds).
    flags = [re.IGNORECASE | re.DOTALL] * 3 + [re.IGNORECASE] * 2
    theirs = [re.compile(p, f) for p, f in zip(harmony.SGLANG_TEXT_PATTERNS, flags, strict=True)]
    ours = [
        harmony._TEXT_ANALYSIS_THEN_FINAL,
        harmony._TEXT_FINAL_ONLY,
        harmony._TEXT_ANALYSIS_ONLY,
        harmony._TEXT_CHANNEL_WORD,  # used only to ask whether it is found
        harmony._TEXT_STRATEGY,
    ]
    words = [" ", "\n", "\t", "assistant", "analysis", "commentary", "assistantfinal", "final", "x", "ANALYSIS", "."]
    rng = random.Random(SEED)
    for _ in range(5000):
        text = "".join(rng.choice(words) for _ in range(rng.randint(0, 10)))
        for i, (sglang, pattern) in enumerate(zip(theirs, ours, strict=True)):
            if i < 3:
                a, b = sglang.match(text), pattern.match(text)
                assert (a and (a.span(), a.groups())) == (b and (b.span(), b.groups())), (i, text)
            else:
                assert bool(sglang.search(text)) == bool(pattern.search(text)), (i, text)


def test_the_linear_glm_argument_reader_finds_sglangs_pairs():
    # SGLang's pattern rescans to the end from every <arg_key> no pair follows (quadratic in one block).
    tight = re.compile(r"<arg_key>(.*?)</arg_key><arg_value>(.*?)</arg_value>", re.DOTALL)  # Spark-2.5's
    pieces = ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", " ", "\n", "\\n", "\\", "k", "v", "<arg_"]
    rng = random.Random(SEED)
    for _ in range(5000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        assert glm.glm_arg_pairs(text) == (glm._GLM_ARG.findall(text), glm._GLM_ARG.sub("", text)), text
        assert glm.glm_arg_pairs(text, tight=True)[0] == tight.findall(text), text
    text = "<tool_call>f\n" + "<arg_key>" * 20_000 + "</arg_key></arg_value></tool_call>"
    assert_bounded(OutputParser(None, "glm47"), text)
