"""Token-exact rows and provenance through run_inference.py against the simulator.

The simulator's request log (what it received and sent, per rid) is the reference for the ids in
each row; settings.jsonl and the rows' ``settings`` ids are checked across reruns with changed flags.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import orjson
import pytest
from workspace import chat

COMMON = ("--max-tokens", "256", "--concurrency", "4", "--status-interval", "0.2")


def request_log(path: Path) -> dict[str, dict]:
    """rid -> {rid, input_ids, output_ids, text, finish_reason} of every answer the simulator sent."""
    answers = {}
    for line in path.read_bytes().splitlines():
        for answer in orjson.loads(line).get("answers") or []:
            answers[answer["rid"]] = answer
    return answers


@pytest.mark.parametrize("mode", ["last", "each"])
def test_every_row_holds_the_ids_the_server_received_and_sent_with_the_stop_token(ws, make_sim, tmp_path, mode):
    log = tmp_path / "requests.jsonl"
    sim = make_sim("chatml", "--request-log", str(log))
    ws.dataset(
        "short",
        "d",
        [chat("a", "first q", "old", "second q"), chat("b", "one q"), {"id": "c", "prompt": "plain prompt"}],
    )
    result = ws.run("--server-url", sim.url, "--regenerate", mode, *COMMON)
    assert result.returncode == 0, result.stderr
    sent = request_log(log)
    rows = ws.results("d")
    assert len(rows) == len(sent) == (3 if mode == "last" else 4)
    for row in rows:
        answer = sent[row["request_id"]]
        assert row["input_ids"] == answer["input_ids"]
        assert row["output_ids"] == answer["output_ids"]
        assert row["output_ids"][-1] == row["finish_detail"]["matched"]  # the stop token is kept
        assert row["completion_tokens"] == len(row["output_ids"]) and row["prompt_tokens"] == len(row["input_ids"])
        assert row["output_text"] == answer["text"]


def strip_chunk(line: bytes) -> bytes:
    """One SSE line of a streamed answer with its output_ids dropped."""
    if not line.startswith(b"data: {"):
        return line
    chunk = json.loads(line[6:])
    chunk.pop("output_ids", None)
    return b"data: " + json.dumps(chunk).encode() + b"\n"


class StripOutputIds(BaseHTTPRequestHandler):
    """A proxy in front of the simulator that drops output_ids from /generate answers, as some routers do."""

    upstream = ""

    def do_GET(self) -> None:
        self._forward(None)

    def do_POST(self) -> None:
        self._forward(self.rfile.read(int(self.headers.get("Content-Length", 0))))

    def _forward(self, body: bytes | None) -> None:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        response = httpx.request(self.command, self.upstream + self.path, content=body, headers=headers, timeout=60.0)
        data = response.content
        if self.path.startswith("/generate") and "event-stream" in response.headers.get("content-type", ""):
            data = b"".join(strip_chunk(line) for line in data.splitlines(keepends=True))
        elif self.path.startswith("/generate") and response.status_code == 200:
            answer = response.json()
            for item in answer if isinstance(answer, list) else [answer]:
                item.pop("output_ids", None)
            data = json.dumps(answer).encode()
        self.send_response(response.status_code)
        self.send_header("Content-Type", response.headers.get("content-type", "application/json"))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def stripping_proxy(make_sim) -> Iterator[str]:
    sim = make_sim("chatml")
    handler = type("Handler", (StripOutputIds,), {"upstream": sim.url})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_an_answer_without_output_ids_is_stored_as_null_ids_not_re_tokenized(ws, stripping_proxy):
    ws.dataset("short", "d", 3)
    result = ws.run("--server-url", stripping_proxy, *COMMON)
    assert result.returncode == 0, result.stderr
    # Streamed chunks without ids cannot feed checkpoints or the loop guard: said once, then sent plain.
    assert result.stderr.count("stream chunks carry no output_ids") == 1, result.stderr
    for row in ws.results("d"):
        assert row["output_ids"] is None, row
        assert row["input_ids"] and row["completion_tokens"] > 0  # the count still comes from meta_info
    export = ws.run(
        "--dataset",
        "d",
        "--format",
        "tokens",
        "--out",
        "t.jsonl",
        script=Path(__file__).resolve().parents[2] / "export_training.py",
    )
    assert export.returncode == 2, export.stderr
    assert "3" in export.stderr and "ids" in export.stderr


def settings_sets(ws, dataset: str) -> list[dict]:
    return ws.rows(dataset, "settings.jsonl")


def test_a_changed_temperature_refuses_in_one_line_and_mixed_settings_record_both(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 4)
    first = ws.run("--server-url", sim.url, "--max-samples", "2", *COMMON)
    assert first.returncode == 0, first.stderr
    [before] = settings_sets(ws, "d")

    refused = ws.run("--server-url", sim.url, "--temperature", "0.5", *COMMON)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        "run_inference.py: error: settings differ from the rows already written (d: --temperature (unset) -> "
        "0.5); rerun with the same flags, use another --output-dir, or pass "
        "--allow-mixed-settings to record the new settings for the rows this run writes"
    )
    assert len(ws.results("d")) == 2 and len(settings_sets(ws, "d")) == 1
    assert sim.stats()["generate_requests"] == 2

    mixed = ws.run("--server-url", sim.url, "--temperature", "0.5", "--allow-mixed-settings", *COMMON)
    assert mixed.returncode == 0, mixed.stderr
    rows = {r["id"]: r for r in ws.assert_exactly_once("d", ids)}
    old, new = settings_sets(ws, "d")
    assert old == before and new["id"] != old["id"]
    assert old["settings"]["sampling_params"] == {} and new["settings"]["sampling_params"] == {"temperature": 0.5}
    assert {k: v for k, v in new["settings"].items() if k != "sampling_params"} == {
        k: v for k, v in old["settings"].items() if k != "sampling_params"
    }
    for rid in ids[:2]:
        assert rows[rid]["settings"] == old["id"] and "temperature" not in rows[rid]["sampling_params"]
    for rid in ids[2:]:
        assert rows[rid]["settings"] == new["id"] and rows[rid]["sampling_params"]["temperature"] == 0.5

    again = ws.run("--server-url", sim.url, "--temperature", "0.5", *COMMON)
    assert again.returncode == 0 and "nothing to do" in again.stderr


PRE_PROVENANCE_KEYS = (
    "settings",
    "source",
    "prompt_hash",
    "tools",
    "tool_calls",
    "input_ids",
    "output_ids",
    "regenerate",
    "turns",
    "stopped_early",
)


def test_rows_written_before_provenance_stay_readable_and_the_run_resumes_after_them(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 6)
    assert ws.run("--server-url", sim.url, "--max-samples", "3", *COMMON).returncode == 0
    path = ws.outputs / "d" / "raw_responses.jsonl"
    old_rows = [
        {k: v for k, v in json.loads(line).items() if k not in PRE_PROVENANCE_KEYS}
        for line in path.read_text().splitlines()
    ]
    old_bytes = b"".join(orjson.dumps(r) + b"\n" for r in old_rows)
    path.write_bytes(old_bytes)
    (ws.outputs / "d" / "settings.jsonl").unlink()

    result = ws.run("--server-url", sim.url, *COMMON)
    assert result.returncode == 0, result.stderr
    assert "3 already done, 3 to run" in result.stderr
    rows = ws.assert_exactly_once("d", ids)
    assert path.read_bytes().startswith(old_bytes)
    [recorded] = settings_sets(ws, "d")
    assert [r.get("settings") for r in rows] == [None] * 3 + [recorded["id"]] * 3
    assert sim.stats()["generate_requests"] == 6


def test_the_helps_dry_run_example_after_a_demo_sized_run_shows_its_plan_and_says_the_run_would_be_refused(
    ws, make_sim
):
    # The quickstart's demo makes rows with its own --max-tokens 256; --help's --dry-run example passes none and
    # another --chat-template-kwargs. The dry run writes nothing: it shows what it would send, and why the run
    # itself would be refused, instead of refusing to show it.
    sim = make_sim("chatml")
    ws.dataset("short", "d", 3)
    assert (
        ws.run("--server-url", sim.url, "--partition", "short", "--max-tokens", "256", "--max-samples", "2").returncode
        == 0
    )
    before = sorted(p.name for p in (ws.outputs / "d").iterdir())
    example = ("--partition", "short", "--chat-template-kwargs", '{"thinking": true}', "--dry-run")
    dry = ws.run("--server-url", sim.url, *example)
    assert dry.returncode == 0, dry.stderr
    assert "d (short): 3 prompts, no cap, 2 already done, 1 to run" in dry.stderr
    assert "first request (d / d-0002): POST " in dry.stderr
    assert dry.stderr.strip().splitlines()[-1] == (
        "WARNING: a run with these flags would be refused: settings differ from the rows already written (d: "
        '--chat-template-kwargs {} -> {"thinking":true}; --max-tokens 256 -> 32768); rerun with the same flags, '
        "use another --output-dir, or pass --allow-mixed-settings to record the new settings for the rows this run "
        "writes"
    )
    assert sorted(p.name for p in (ws.outputs / "d").iterdir()) == before
    # The run itself still refuses, and changes nothing.
    refused = ws.run("--server-url", sim.url, *example[:-1])
    assert refused.returncode == 2 and "settings differ from the rows already written" in refused.stderr
