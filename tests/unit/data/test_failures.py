"""The failure kinds: one table, from which docs/outputs.md's list is generated; no kind is a bare string
elsewhere in the package; a settled skip's key changes with the prompt and with what decides it."""

import re
from pathlib import Path

from synthgen.config import RunConfig
from synthgen.data import failures
from synthgen.data.failures import KINDS, docs_table, kind_of, settled_key

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs" / "outputs.md"


def test_the_docs_table_is_the_generated_one():
    text = DOCS.read_text()
    found = re.search(r"<!-- failure kinds:[^\n]*-->\n(.*?)\n<!-- end of failure kinds -->", text, re.S)
    assert found, "docs/outputs.md lost its failure-kinds markers"
    assert found.group(1) == docs_table(), "regenerate it: python -m synthgen.data.failures"


def test_every_kind_string_in_the_package_goes_through_the_table():
    names = [name for name in KINDS if not name.startswith("http_")]
    pattern = re.compile("[\"'](" + "|".join(names) + ")[\"']")
    bare = []
    for path in sorted((REPO / "synthgen").rglob("*.py")):
        if path.name == "failures.py":
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), start=1):
            if pattern.search(line):
                bare.append(f"{path.relative_to(REPO)}:{lineno}: {line.strip()}")
    assert not bare, "use synthgen.data.failures' constants:\n" + "\n".join(bare)


def test_http_kinds_share_one_entry_and_unknown_kinds_have_none():
    assert kind_of("http_413") is failures.HTTP and kind_of(failures.http_kind(503)) is failures.HTTP
    assert kind_of("http_abc") is None and kind_of("no_such_kind") is None


def test_a_settled_key_changes_with_the_prompt_and_the_settings_that_decide_it_only():
    cfg = RunConfig(regenerate="all")
    key = settled_key("cannot_regenerate", "hash-1", cfg)
    assert key is not None and key == settled_key("cannot_regenerate", "hash-1", RunConfig(regenerate="all"))
    assert key != settled_key("cannot_regenerate", "hash-2", cfg)
    assert key != settled_key("cannot_regenerate", "hash-1", RunConfig(regenerate="each"))
    assert key == settled_key("cannot_regenerate", "hash-1", RunConfig(regenerate="all", max_tokens=7))
    too_long = settled_key("prompt_too_long", "hash-1", cfg)
    assert too_long != settled_key("prompt_too_long", "hash-1", RunConfig(regenerate="all", max_seq_len=9000))
    assert settled_key("template_error", "hash-1", cfg) is None  # a render may time out: tried again
    assert settled_key("timeout", "hash-1", cfg) is None
