"""A corpus for the loop guard, built at run time from this machine (nothing downloaded).

This module owns three kinds of samples, each a list of output token ids as a model would stream them:

- ``real_files``: files of this machine, picked deterministically and bounded in count (the running
  Python's standard library, its JSON and CSV data, C headers under /usr/include, certificates under
  /etc/ssl/certs, docs under /usr/share/doc and this repository's docs);
- ``STRUCTURED``: legitimate answers made of identical rows (zero matrices, a C zero buffer, empty
  sudoku grids, 100 default JSON/YAML records, 200 identical CSV rows, an empty HTML table, numpy's
  print of a zero array, base64 of zero bytes, ...), each after reasoning and a short explanation, as
  a reasoning model writes them: repetition that ends;
- ``LOOPS``: degenerate loops that run to the budget (--max-tokens), each after normal text, with
  the output index where the loop starts: repetition that never ends.

The tokenizer (``build_tokenizer``) is real-sized: a 32,768-id byte-level BPE trained on the standard
library with Qwen2's pre-tokenizer split (digits one by one, as Qwen2/3 and DeepSeek-V3 do), so a row of
zeros costs what it costs with such a model (``0, `` is three ids). ``tests/unit/run/test_loopguard.py``
and ``bench/bench_loopguard.py`` use it.
"""

from __future__ import annotations

import base64
import json
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parents[2]
STDLIB = Path(sysconfig.get_paths()["stdlib"])
# Qwen2's tokenizer.json pre-tokenizer split (Qwen3 and DeepSeek-V3 split digits the same way).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
VOCAB_SIZE = 32768
TRAIN_FILES = 100  # stdlib modules (~2.5 MB): a few seconds to train
FILE_CHARS = 100_000  # a real file is read up to here: about an answer's size at --max-tokens 32,768


def build_tokenizer(vocab_size: int = VOCAB_SIZE, files: int = TRAIN_FILES) -> Tokenizer:
    """A real-sized byte-level BPE (Qwen2's split) trained on the first ``files`` stdlib modules."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    texts = (p.read_text(encoding="utf-8", errors="ignore") for p in sorted(STDLIB.glob("*.py"))[:files])
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


# ---------------------------------------------------------------------------------------- real files

REAL_KINDS: dict[str, tuple[Callable[[], Iterator[Path]], int]] = {
    # kind -> (the candidate files, in a fixed order; how many are taken, evenly spaced)
    "stdlib .py": (lambda: iter(sorted(STDLIB.rglob("*.py"))), 60),
    "json": (lambda: iter(sorted([*STDLIB.rglob("*.json"), *Path("/usr/lib").glob("python3*/**/*.json")])), 20),
    "csv": (lambda: iter(sorted([*STDLIB.rglob("*.csv"), *Path("/usr/lib").glob("python3*/**/*.csv")])), 20),
    "C header": (lambda: iter(sorted(Path("/usr/include").rglob("*.h"))), 40),
    "certificate": (lambda: iter(sorted(Path("/etc/ssl/certs").glob("*.pem"))), 20),
    "doc": (
        lambda: iter(sorted([*Path("/usr/share/doc").rglob("*.md"), *Path("/usr/share/doc").rglob("copyright")])),
        30,
    ),
    "repo doc": (lambda: iter(sorted((ROOT / "docs").glob("*.md"))), 20),
}


def spaced(paths: list[Path], count: int) -> list[Path]:
    """``count`` of ``paths`` evenly spaced (all of them when there are fewer)."""
    if len(paths) <= count:
        return paths
    return [paths[i * len(paths) // count] for i in range(count)]


def real_files(scale: float = 1.0) -> list[tuple[str, str]]:
    """(name, text) of the machine's files, ``scale`` times each kind's count (at least one of each
    kind the machine has); unreadable or empty files are skipped."""
    out = []
    for kind, (candidates, count) in REAL_KINDS.items():
        files = [p for p in candidates() if p.is_file()]
        for path in spaced(files, max(1, round(count * scale))):
            try:
                text = path.read_text(encoding="utf-8", errors="ignore")[:FILE_CHARS]
            except OSError:
                continue
            if text.strip():
                out.append((f"{kind}: {path}", text))
    return out


# ---------------------------------------------------------------------------------- structured answers

REASONING = (
    "<think>\nThe user wants {what}. Let me think about the format first. They did not say which language, "
    "so I will pick the most common one and keep it plain, without comments inside the data, so that it can be "
    "pasted as it is. Every entry should be the default value: zero, empty or null, because they will fill the "
    "values in later. I should not abbreviate with an ellipsis, since the point is to have the whole thing written "
    "out; a shortened version would not paste. I will also say in one sentence how to change the size, and check "
    "the count of rows and columns before I answer. Rows: {rows}. That matches what was asked, so the answer is "
    "the full listing followed by a short note.\n</think>\n\n"
)


def answer(what: str, rows: int, intro: str, body: str, outro: str = "") -> str:
    """A reasoning model's answer: reasoning, a short explanation, the structure, a closing line."""
    closing = outro or "Change the values as you need; every row has the same shape."
    return REASONING.format(what=what, rows=rows) + intro + "\n\n" + body + "\n" + closing + "\n"


def fence(lang: str, text: str) -> str:
    return f"```{lang}\n{text}```\n"


def zero_matrix(n: int) -> str:
    rows = "".join("    [" + ", ".join(["0"] * n) + "],\n" for _ in range(n))
    return answer(
        f"a {n}x{n} zero matrix in Python",
        n,
        f"Here is a {n}x{n} matrix of zeros as a list of lists:",
        fence("python", "matrix = [\n" + rows + "]\n"),
        f"`[[0] * {n} for _ in range({n})]` builds the same matrix in code.",
    )


def c_zero_buffer(size: int) -> str:
    lines = "".join("    " + ", ".join(["0x00"] * 16) + ",\n" for _ in range(size // 16))
    return answer(
        f"a C array of {size} zero bytes",
        size // 16,
        f"A {size}-byte buffer initialised to zero, written out in full (16 bytes a line):",
        fence("c", f"static const uint8_t buffer[{size}] = {{\n{lines}}};\n"),
        "In C, `= {0}` gives the same result; the explicit form is useful for a table you will edit.",
    )


def sudoku_grids(count: int) -> str:
    row = "| . . . | . . . | . . . |\n"
    rule = "+-------+-------+-------+\n"
    grid = rule + row * 3 + rule + row * 3 + rule + row * 3 + rule
    body = fence("", "\n".join([grid] * count))
    return answer(
        f"{count} empty sudoku grids to print",
        9 * count,
        f"Here are {count} empty 9x9 sudoku grids; a dot marks an empty cell:",
        body,
    )


def json_records(count: int) -> str:
    record = {"id": 0, "name": "", "email": None, "active": False, "tags": [], "score": 0.0}
    return answer(
        f"a JSON array of {count} default user records",
        count,
        f"A JSON array of {count} records, each with every field at its default value:",
        fence("json", json.dumps([record] * count, indent=2) + "\n"),
    )


def yaml_records(count: int) -> str:
    record = "- name: ''\n  enabled: false\n  retries: 0\n  timeout: 30\n  labels: {}\n"
    return answer(
        f"a YAML list of {count} default service entries",
        count,
        f"Here is the YAML list with {count} entries, all at their defaults:",
        fence("yaml", "services:\n" + "".join("  " + line + "\n" for line in (record * count).splitlines())),
    )


def csv_rows(count: int) -> str:
    return answer(
        f"a CSV template of {count} identical rows",
        count,
        f"The CSV file with a header and {count} identical placeholder rows:",
        fence("csv", "date,product,quantity,price,discount,note\n" + "2026-01-01,widget,0,0.00,0,\n" * count),
    )


def html_table(count: int) -> str:
    row = "    <tr><td></td><td></td><td></td><td></td></tr>\n"
    return answer(
        f"an empty HTML table of {count} rows",
        count,
        f"An empty table with four columns and {count} rows, ready to fill in:",
        fence("html", "<table>\n  <tbody>\n" + row * count + "  </tbody>\n</table>\n"),
    )


def numpy_zeros(n: int) -> str:
    """numpy's repr of np.zeros((n, n)) (n * n <= 1000: not summarised)."""
    row = "[" + " ".join(["0."] * n) + "]"
    printed = "[" + ("\n ".join([row] * n)) + "]\n"
    return answer(
        f"the output of print(np.zeros(({n}, {n})))",
        n,
        f"`print(np.zeros(({n}, {n})))` prints:",
        fence("", printed),
        "numpy prints a float array's zeros as `0.`.",
    )


def base64_zeros(size: int) -> str:
    return answer(
        f"the base64 of {size} zero bytes",
        size // 57,
        f"The base64 encoding of {size} zero bytes, wrapped at 76 characters as `base64` does:",
        fence("", base64.encodebytes(bytes(size)).decode()),
    )


def markdown_grid(count: int) -> str:
    return answer(
        f"an empty markdown table of {count} rows for a sign-up sheet",
        count,
        "A sign-up sheet with empty cells:",
        "| Name | Email | Phone | Signature |\n|------|-------|-------|-----------|\n" + "|  |  |  |  |\n" * count,
    )


def sql_inserts(count: int) -> str:
    line = "INSERT INTO slots (user_id, starts_at, note) VALUES (NULL, NULL, '');\n"
    return answer(
        f"{count} SQL inserts of empty slots",
        count,
        f"The {count} INSERT statements, one per empty slot:",
        fence("sql", line * count),
    )


def lines_on_request(count: int) -> str:
    return answer(
        f'the sentence "I will not talk in class." written {count} times',
        count,
        f"Here it is, {count} times:",
        "I will not talk in class.\n" * count,
        "That is the sentence written out in full as asked.",
    )


def latex_zero_matrix(n: int) -> str:
    row = " & ".join(["0"] * n) + " \\\\\n"
    return answer(
        f"a {n}x{n} zero matrix in LaTeX",
        n,
        "In LaTeX, with `bmatrix` from amsmath:",
        fence("latex", "\\begin{bmatrix}\n" + row * n + "\\end{bmatrix}\n"),
    )


def ascii_board(n: int) -> str:
    rule = "+" + "---+" * n + "\n"
    row = "|" + "   |" * n + "\n"
    return answer(f"an empty {n}x{n} ASCII board", n, f"An empty {n}x{n} board:", fence("", rule + (row + rule) * n))


def hexdump_zeros(size: int) -> str:
    return answer(
        f"a hex listing of {size} zero bytes without offsets",
        size // 16,
        "Sixteen bytes a line:",
        fence("", (" ".join(["00"] * 16) + "\n") * (size // 16)),
    )


def checklist(count: int) -> str:
    return answer(
        f"a blank checklist of {count} items",
        count,
        f"A blank checklist of {count} boxes:",
        "- [ ] \n" * count,
    )


STRUCTURED: dict[str, Callable[[], str]] = {
    "zero matrix 32x32": lambda: zero_matrix(32),
    "zero matrix 64x64": lambda: zero_matrix(64),
    "C zero buffer 1024 bytes": lambda: c_zero_buffer(1024),
    "C zero buffer 4096 bytes": lambda: c_zero_buffer(4096),
    "empty sudoku grids x4": lambda: sudoku_grids(4),
    "empty sudoku grids x10": lambda: sudoku_grids(10),
    "JSON array of 100 default records": lambda: json_records(100),
    "YAML list of 100 default records": lambda: yaml_records(100),
    "CSV of 200 identical rows": lambda: csv_rows(200),
    "empty HTML table of 100 rows": lambda: html_table(100),
    "numpy print of zeros 30x30": lambda: numpy_zeros(30),
    "base64 of 4096 zero bytes": lambda: base64_zeros(4096),
    "base64 of 16384 zero bytes": lambda: base64_zeros(16384),
    "empty markdown table of 100 rows": lambda: markdown_grid(100),
    "100 SQL inserts of empty slots": lambda: sql_inserts(100),
    "a sentence written 100 times on request": lambda: lines_on_request(100),
    "LaTeX zero matrix 20x20": lambda: latex_zero_matrix(20),
    "empty ASCII board 19x19": lambda: ascii_board(19),
    "hex listing of 2048 zero bytes": lambda: hexdump_zeros(2048),
    "blank checklist of 200 items": lambda: checklist(200),
}


# ------------------------------------------------------------------------------------- degenerate loops

LEAD = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")[:3000]  # normal text before a loop
WAIT = (
    "Wait, let me check again. The sum of the first two terms is 12, and adding the third gives 19. "
    "Hmm, but the question asks for the product, not the sum. Let me recompute.\n"
)


@dataclass(frozen=True)
class Loop:
    """A degenerate loop: ``lead`` (normal text), then ``unit(i)`` for i = 0, 1, ... until the budget."""

    lead: str
    unit: Callable[[int], str]


LOOPS: dict[str, Loop] = {
    "a sentence": Loop("<think>\n" + LEAD, lambda i: " Wait, let me check that step again."),
    "a paragraph": Loop(
        "<think>\n" + LEAD,
        lambda i: (
            "\n\nSo the function returns the cached value when the key is present, and otherwise it computes the "
            "value, stores it and returns it. The cache is never invalidated, which is fine here because the "
            "inputs are immutable. Therefore the complexity is linear in the number of distinct keys."
        ),
    ),
    "a long paragraph (~400 ids)": Loop("<think>\n" + LEAD[:800], lambda i: "\n\n" + LEAD[800:2300].replace("\n", " ")),
    "one token": Loop("<think>\n" + LEAD, lambda i: " the"),
    "newlines": Loop("<think>\n" + LEAD, lambda i: "\n"),
    "a short phrase": Loop("<think>\n" + LEAD, lambda i: " and so on,"),
    "Wait, let me check again (reasoning)": Loop("<think>\n" + LEAD, lambda i: WAIT),
    "after a long normal text": Loop(
        "<think>\n" + (STDLIB / "argparse.py").read_text(encoding="utf-8")[:30000],
        lambda i: "\nLet me reconsider the previous step.",
    ),
    "a table row, forever": Loop("Here is the table:\n\n| a | b | c |\n|---|---|---|\n", lambda i: "| 0 | 0 | 0 |\n"),
    "a code line, forever": Loop("```python\ndef reset(state):\n", lambda i: "    state.value = 0\n"),
    "the final answer, again and again": Loop(
        "<think>\n" + LEAD[:1500] + "\n</think>\n\n",
        lambda i: "**Answer:** the total is 42, because 6 times 7 is 42 and no other factor pair fits.\n\n",
    ),
    "a slowly incrementing number (every 40)": Loop(
        "<think>\n" + LEAD, lambda i: f" Checking again: the value is {i // 40}, so it holds."
    ),
    "an incrementing number (every step)": Loop("<think>\n" + LEAD, lambda i: f" Try {i}: no, check again."),
}


# Loops of data rows (no letters): held to the guard's data span; the rest are text.
DATA_LOOPS = frozenset({"newlines", "a table row, forever"})
# Loops no exact-period check can catch: the repeated text changes (a number that counts up).
NOT_CAUGHT = frozenset({"a slowly incrementing number (every 40)", "an incrementing number (every step)"})
# Structured answers whose repetition runs past 40% of a 32,768-id budget: cut by the guard by design.
LARGER_THAN_DATA_SPAN = frozenset({"C zero buffer 4096 bytes", "base64 of 16384 zero bytes"})


def loop_ids(encode: Callable[[str], list[int]], loop: Loop, budget: int) -> tuple[list[int], int]:
    """The loop's first ``budget`` output ids and the index where the loop starts (the text is
    encoded whole, so merges across the units are the tokenizer's own)."""
    lead, units = encode(loop.lead), 64
    while True:
        ids = encode(loop.lead + "".join(loop.unit(i) for i in range(units)))
        if len(ids) >= budget:
            break
        units *= 2
    start = next((k for k, (a, b) in enumerate(zip(lead, ids, strict=False)) if a != b), len(lead))
    return ids[:budget], start
