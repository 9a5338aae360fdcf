"""A scratch project folder for end-to-end tests: prompt files in, the CLI run as a user runs
it (a subprocess in that folder), result files read back and checked against the output schema.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "run_inference.py"
BUDGET = REPO / "compute_budget.py"

RESULT_FIELDS = {
    "id": str,
    "dataset": str,
    "partition": str,
    "messages": list,
    "reasoning_content": str,
    "content": str,
    "finish_reason": str,
    "finish_detail": dict,
    "reasoning_complete": bool,
    "prompt_tokens": int,
    "completion_tokens": int,
    "output_text": str,
    "sampling_params": dict,
    "latency_s": float,
    "attempts": int,
    "request_id": str,
    "created_at": str,
}


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_API_KEY"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1", **extra)
    return env


def last_line(stderr: str) -> str:
    """The last line a CLI printed ("" when none), which is where its one-line error goes; never a traceback."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    return lines[-1] if lines else ""


def chat(rid: str, *turns: str, system: str | None = None) -> dict:
    """A conversation prompt alternating user and assistant turns, starting with the user."""
    messages = [{"role": "system", "content": system}] if system else []
    messages += [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i, text in enumerate(turns)]
    return {"id": rid, "messages": messages}


def user_text(messages: list[dict]) -> str:
    return [m["content"] for m in messages if m["role"] == "user"][-1]


class Workspace:
    def __init__(self, root: Path):
        self.root = root
        self.prompts = root / "prompts"
        self.outputs = root / "outputs"

    def dataset(self, partition: str, name: str, rows: list[dict] | int, prefix: str | None = None) -> list[str]:
        """Write a dataset; an int makes that many simple prompts. Returns the ids in file order."""
        if isinstance(rows, int):
            prefix = prefix or name
            rows = [{"id": f"{prefix}-{i:04d}", "prompt": f"question {i} of {name}"} for i in range(rows)]
        folder = self.prompts / partition
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
        return [r.get("id") for r in rows]

    def command(self, *args: str, script: Path = RUN) -> list[str]:
        return [sys.executable, str(script), *args]

    def run(
        self,
        *args: str,
        script: Path = RUN,
        env: dict | None = None,
        timeout: float = 300,
        preexec: Callable[[], None] | None = None,
    ) -> subprocess.CompletedProcess:
        """The CLI as a user runs it, in this folder; ``preexec`` runs in the child before the exec."""
        return subprocess.run(
            self.command(*args, script=script),
            cwd=self.root,
            env=env or cli_env(),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            preexec_fn=preexec,
        )

    def start(self, *args: str, env: dict | None = None, log: Path | None = None) -> subprocess.Popen:
        """A background run whose stderr goes to a file (as under nohup)."""
        log = log or self.root / "nohup.out"
        return subprocess.Popen(
            self.command(*args),
            cwd=self.root,
            env=env or cli_env(),
            stdout=open(log, "ab"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def raw_lines(self, dataset: str, name: str = "raw_responses.jsonl") -> list[bytes]:
        path = self.outputs / dataset / name
        return path.read_bytes().splitlines(keepends=True) if path.exists() else []

    def rows(self, dataset: str, name: str = "raw_responses.jsonl") -> list[dict]:
        """Every line parsed: a torn or merged line fails the test here."""
        lines = self.raw_lines(dataset, name)
        for line in lines:
            assert line.endswith(b"\n"), f"{dataset}/{name}: unterminated line {line[:80]!r}"
        return [orjson.loads(line) for line in lines]

    def results(self, dataset: str) -> list[dict]:
        rows = self.rows(dataset)
        for row in rows:
            for key, kind in RESULT_FIELDS.items():
                assert isinstance(row.get(key), kind), f"{dataset}: {key} of {row.get('id')} is {row.get(key)!r}"
            assert row["finish_reason"] in ("stop", "length")
            assert row["dataset"] == dataset
        return rows

    def errors(self, dataset: str) -> list[dict]:
        return self.rows(dataset, "errors.jsonl")

    def assert_exactly_once(self, dataset: str, expected_ids) -> list[dict]:
        rows = self.results(dataset)
        counts = Counter(r["id"] for r in rows)
        dupes = {k: v for k, v in counts.items() if v > 1}
        assert not dupes, f"{dataset}: duplicated ids {dupes}"
        assert set(counts) == set(expected_ids), (
            f"{dataset}: missing {sorted(set(expected_ids) - set(counts))[:5]}, "
            f"unexpected {sorted(set(counts) - set(expected_ids))[:5]}"
        )
        return rows


def assert_model_answer(row: dict) -> None:
    """The simulator's model answers the last user message U with <think>Reasoning about: U</think>Answer: U."""
    u = user_text(row["messages"][:-1])
    assert row["reasoning_content"] == f"Reasoning about: {u}", row
    assert row["content"] == f"Answer: {u}", row
    assert row["finish_reason"] == "stop" and row["reasoning_complete"] is True
    assert row["messages"][-1] == {
        "role": "assistant",
        "content": row["content"],
        "reasoning_content": row["reasoning_content"],
    }
