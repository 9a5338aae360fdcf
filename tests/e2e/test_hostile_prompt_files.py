"""Both scripts, run as a user runs them, on prompt files no scan should accept: one ``file:line`` error
naming the fix, exit code 2, no traceback and no results file. The scan's own promise on any file is
tests/unit/data/test_malformed_prompt_files.py's."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from workspace import BUDGET, RUN

from synthgen.data.prompts import DatasetSource, scan_dataset
from synthgen.errors import InputFileError

GOOD = b'{"id": "ok", "prompt": "a fine question"}\n'
CLI_FILES = {
    "random_bytes": random.Random(20240601).randbytes(4096),
    "invalid_utf8": GOOD + b'{"id": "b", "prompt": "caf\xe9"}\n',
    "deep_nesting": GOOD + GOOD.replace(b"ok", b"ok2") + b"[" * 10_000 + b"]" * 10_000 + b"\n",
    "wrong_id": GOOD + b'{"id": ["b"], "prompt": "q"}\n',
}


def expected_error(data: bytes) -> InputFileError:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.jsonl"
        path.write_bytes(data)
        with pytest.raises(InputFileError) as caught:
            scan_dataset(DatasetSource("f", "short", path))
    return caught.value


@pytest.mark.parametrize(
    "script, args",
    [
        (RUN, ("--partition", "short", "--server-url", "http://127.0.0.1:9")),
        (BUDGET, ("--partition", "short")),
    ],
    ids=["run_inference", "compute_budget"],
)
@pytest.mark.parametrize("name", CLI_FILES)
def test_both_scripts_stop_on_a_hostile_file_with_one_file_line_error(ws, name, script, args):
    folder = ws.prompts / "short"
    folder.mkdir(parents=True)
    (folder / f"{name}.jsonl").write_bytes(CLI_FILES[name])
    error = expected_error(CLI_FILES[name])

    result = ws.run(*args, script=script)

    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert result.stderr.endswith("\n")
    last = result.stderr.splitlines()[-1]
    assert last == f"{script.name}: error: prompts/short/{name}.jsonl:{error.line}: {error.problem}"
    assert not (ws.outputs / name / "raw_responses.jsonl").exists()
