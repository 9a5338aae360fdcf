"""Exports loaded by SpecForge's and speculators' own data code: the pinned `specforge` and
`speculators` packages (their data code, no GPU dependencies) run in the demo server's venv, which has CPU
torch (tests/support/demo_trainers.py installs them, pinned, as the real-server tests install SGLang).

Rows come from runs of a Qwen3-style reasoning model (the real Qwen3 chat template on a tiny tokenizer) against
the simulator: thinking off, several turns regenerated (`--regenerate all`) and tool calls; and thinking on
(every answer with its reasoning), several turns. Checked:

- `--format tokens` rows arrive exactly in SpecForge (prepare_prompt_tasks, the `data.prompts_path` route) and
  in speculators (build_speculator_training_dataset, its pre-tokenized rows);
- for `--format specforge` rows, the render check's route (SpecForgeRoute) produces the very ids and loss mask
  SpecForge's loader produces, and the report's verdict (rows exact, kinds) is what those ids and masks say.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import pytest
from demo_trainers import is_specforge_setup, setup_specforge, specforge_env
from workspace import chat

from synthgen.demo.commands import DemoPaths
from synthgen.export.rendercheck import KINDS, Rendering, verdict
from tests.e2e.test_export_trainer_rows import COMMON, agent

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXPORT = REPO / "export_training.py"

pytestmark = pytest.mark.real_sglang
TEMPLATES = ("qwen3-instruct", "qwen3-thinking")


@pytest.fixture(scope="module")
def specforge(real_setup) -> DemoPaths:
    paths = DemoPaths.default()
    if not is_specforge_setup(paths):
        setup_specforge(paths, say=lambda line: print(f"[specforge] {line}", file=sys.stderr, flush=True))
    return paths


def in_specforge_venv(paths: DemoPaths, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = specforge_env(paths)
    env["PYTHONPATH"] = f"{env['PYTHONPATH']}:{REPO}"
    return subprocess.run(
        [str(paths.python), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


class SpecForgeLoader:
    """specforge_load.py in the demo venv, started once and asked for one load after another: torch,
    SpecForge and speculators are imported once for the module instead of once per load."""

    def __init__(self, paths: DemoPaths, cwd: Path):
        env = specforge_env(paths)
        env["PYTHONPATH"] = f"{env['PYTHONPATH']}:{REPO}"
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [str(paths.python), str(HERE / "specforge_load.py")],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # the process exited

    def _stderr_tail(self) -> str:
        self.stderr.seek(0)
        return self.stderr.read().decode(errors="replace")[-3000:]

    def load(self, tokenizer: Path, template: str, files: list[Path], route: bool, speculators: bool = False) -> list:
        ask = {"tokenizer": str(tokenizer), "template": template, "files": [str(f) for f in files], "route": route}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({**ask, "speculators": speculators}) + "\n")
        self.proc.stdin.flush()
        answers = []
        while True:
            try:
                line = self.lines.get(timeout=600)
            except queue.Empty:
                line = None
            assert line is not None, f"specforge_load.py gave no answer: {self._stderr_tail()}"
            if line == "done":
                return answers
            if line.startswith("{"):
                answers.append(json.loads(line))

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.stderr.close()


@pytest.fixture(scope="module")
def loader(specforge, tmp_path_factory):
    started = SpecForgeLoader(specforge, tmp_path_factory.mktemp("specforge-loader"))
    yield started
    started.close()


def run_models(ws, qwen3: Path) -> None:
    from simharness import start_sim

    off = ("--chat-template-kwargs", '{"enable_thinking": false}')
    ws.dataset("short", "chats", [chat("c", "Name a prime.", "old 1", "Another one?", "old 2", "And a third?")])
    system = {"id": "s", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]}
    ws.dataset("short", "plain", [system, chat("p", "Name a colour.")])
    ws.dataset("short", "agents", [agent("tool")])
    for dataset, style, extra in (
        ("chats", "think", ("--regenerate", "all")),
        ("plain", "think", ()),
        ("agents", "qwen_tool", ()),
    ):
        args = ("--tool-call-parser", "qwen25", "--reasoning-parser", "qwen3", "--output-style", style)
        with start_sim(qwen3, *args) as sim:
            done = ws.run("--server-url", sim.url, "--dataset", dataset, *COMMON, *off, *extra)
            assert done.returncode == 0, done.stderr


def report_counts(stdout: str) -> tuple[int, int, Counter[str]]:
    """(rows exact, rows checked, rows per drift kind) summed over the report's datasets."""
    exact = checked = 0
    kinds: Counter[str] = Counter()
    for line in stdout.splitlines():
        if line.startswith("  render check"):
            words = line.split()
            exact, checked = exact + int(words[2].replace(",", "")), checked + int(words[4].replace(",", ""))
        for kind in KINDS:
            if line.startswith(f"    {kind} "):
                kinds[kind] += int(line[len(kind) + 4 :].split()[0].replace(",", ""))
    return exact, checked, kinds


def test_tokens_and_specforge_rows_as_specforges_own_loader_reads_them(ws, specforge, loader, qwen3):
    run_models(ws, qwen3)
    datasets = ("--dataset", "chats", "--dataset", "plain", "--dataset", "agents")
    results = {f"{d}/{r['id']}": r for d in ("chats", "plain", "agents") for r in ws.results(d)}

    # tokens: SpecForge's pre-tokenized route (data.prompts_path) and speculators' data preparation take the
    # rows exactly as exported
    done = ws.run(*datasets, "--format", "tokens", "--out", "tokens.jsonl", script=EXPORT)
    assert done.returncode == 0, done.stderr
    exported = [json.loads(line) for line in (ws.root / "tokens.jsonl").read_text().splitlines()]
    [loaded] = loader.load(qwen3, "qwen3-instruct", [ws.root / "tokens.jsonl"], route=False, speculators=True)
    assert loaded["rows"] == [{"input_ids": r["input_ids"], "loss_mask": r["loss_mask"]} for r in exported]
    assert loaded["speculators"] == loaded["rows"]
    assert len(exported) >= 6

    kinds_by_template = check_specforge_verdicts(ws, specforge, loader, qwen3, datasets, results, 6)
    for template, kinds in kinds_by_template.items():
        # what SpecForge does to these rows: its template's system prompt on rows without one
        assert kinds["system prompt added"] == 4, (template, kinds)  # c#0-2 and p; s and tool have their own


def test_rows_of_a_reasoning_model_thinking_on_as_specforges_own_loader_reads_them(ws, specforge, loader, qwen3):
    """Thinking on (the Qwen3 template's default): every answer carries its reasoning, the case where
    templates differ most in what they keep of it. tokens rows arrive exactly; for specforge rows the render
    check's verdict is what SpecForge's own loader produces, template by template."""
    from simharness import start_sim

    ws.dataset("short", "reasoned", [chat("r", "Name a prime.", "old 1", "Another one?", "old 2", "And a third?")])
    ws.dataset("short", "single", [chat("q", "Name a colour.")])
    for dataset, extra in (("reasoned", ("--regenerate", "all")), ("single", ())):
        args = ("--reasoning-parser", "qwen3", "--output-style", "think")
        with start_sim(qwen3, *args) as sim:
            done = ws.run("--server-url", sim.url, "--dataset", dataset, *COMMON, *extra)
            assert done.returncode == 0, done.stderr
    results = {f"{d}/{r['id']}": r for d in ("reasoned", "single") for r in ws.results(d)}
    turns = [t for r in results.values() for t in (r.get("turns") or [r])]
    assert len(turns) == 4 and all(t["reasoning_content"] for t in turns), turns
    datasets = ("--dataset", "reasoned", "--dataset", "single")

    done = ws.run(*datasets, "--format", "tokens", "--out", "tokens.jsonl", script=EXPORT)
    assert done.returncode == 0, done.stderr
    exported = [json.loads(line) for line in (ws.root / "tokens.jsonl").read_text().splitlines()]
    [loaded] = loader.load(qwen3, "qwen3-thinking", [ws.root / "tokens.jsonl"], route=False, speculators=True)
    assert loaded["rows"] == [{"input_ids": r["input_ids"], "loss_mask": r["loss_mask"]} for r in exported]
    assert loaded["speculators"] == loaded["rows"]

    check_specforge_verdicts(ws, specforge, loader, qwen3, datasets, results, 4)  # r#0-2 and q


def check_specforge_verdicts(
    ws,
    specforge: DemoPaths,
    loader: SpecForgeLoader,
    qwen3: Path,
    datasets: tuple[str, ...],
    results: dict[str, dict],
    n_rows: int,
) -> dict[str, Counter[str]]:
    """For each SpecForge template: export specforge rows with the render check's SpecForge route, load
    them with SpecForge's own loader, and check that the route renders as SpecForge does and that the
    report's verdict is what SpecForge's ids and masks say. The drift kinds found, by template."""
    by_template: dict[str, Counter[str]] = {}
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(qwen3))

    def decode(ids: list[int]) -> str:
        return str(tokenizer.decode(ids, skip_special_tokens=False))

    # specforge: per template, the render check's verdict is what SpecForge's loader really produces
    for template in TEMPLATES:
        out = ws.root / f"sf-{template}.jsonl"
        done = in_specforge_venv(
            specforge,
            str(EXPORT),
            *datasets,
            "--out",
            str(out),
            "--report",
            "--specforge-template",
            template,
            cwd=ws.root,
        )
        assert done.returncode == 0, done.stderr
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(rows) == n_rows, [r["id"] for r in rows]
        files = []
        for i, row in enumerate(rows):
            one = ws.root / f"row-{template}-{i}.jsonl"
            one.write_text(json.dumps(row) + "\n")
            files.append(one)
        loaded = loader.load(qwen3, template, files, route=True)
        kinds: Counter[str] = Counter()
        exact = 0
        for row, got in zip(rows, loaded, strict=True):
            [actual] = got["rows"]
            assert got["route"] == actual, f"{template} {row['id']}: the render check renders otherwise than SpecForge"
            base, _, k = row["id"].partition("#")
            record = results[base]
            turn = record["turns"][int(k)] if record.get("turns") else record
            expected = turn["input_ids"] + turn["output_ids"]
            found = verdict(
                expected,
                len(turn["input_ids"]),
                turn["reasoning_content"],
                Rendering(actual["input_ids"], actual["loss_mask"]),
                decode,
                "You are a helpful assistant.",
            )
            exact += not found
            kinds.update(found.keys())
        assert report_counts(done.stdout) == (exact, n_rows, kinds), done.stdout
        # The whole file as one Arrow table (every message key in every row, missing ones null; SpecForge
        # shuffles it) gives the same rows as the render check's route.
        [whole] = loader.load(qwen3, template, [out], route=False)

        def key(r: dict) -> str:
            return json.dumps([r["input_ids"], r["loss_mask"]])

        assert sorted(map(key, whole["rows"])) == sorted(key(got["route"]) for got in loaded)
        by_template[template] = kinds
    return by_template
