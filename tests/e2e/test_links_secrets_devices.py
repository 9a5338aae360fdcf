"""Links in output folders, secrets in what is printed, FIFOs and devices as
inputs, chat templates that never finish. Each test failed before its fix; the hanging cases have a
subprocess timeout only as a safety net (they hung forever before) and assert on the exit code and
the message."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest
from workspace import RUN, Workspace, last_line

from synthgen.data.records import ErrorRecord

MASK = "***"

FAST = ("--max-tokens", "4", "--status-interval", "5")
SAFETY = 120  # seconds: a hung run fails the test here instead of hanging the suite


def run_cli(ws: Workspace, *args: str, timeout: float = SAFETY) -> subprocess.CompletedProcess:
    return ws.run(*args, timeout=timeout)


def done_row(rid: str, regenerate: str | None = None) -> bytes:
    row = {"id": rid, "completion_tokens": 3, "content": "old"}
    if regenerate:
        row["regenerate"] = regenerate
    return orjson.dumps(row) + b"\n"


# --- links in an output folder --------------------------------------------------------------------
@pytest.mark.parametrize(
    "name",
    [
        "raw_responses.jsonl",
        "errors.jsonl",
        "settings.jsonl",
        "partial_turns.jsonl",
        ".lock",
        "raw_responses.jsonl.torn",
    ],
)
def test_a_symlinked_file_in_a_dataset_folder_is_refused_and_its_target_untouched(ws, make_sim, name):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 2)
    folder = ws.outputs / "d"
    folder.mkdir(parents=True)
    # A torn last line: the repair would cut it off and move it to raw_responses.jsonl.torn. The
    # partial turns are read by --regenerate all only, so that row was written in that mode.
    mode = "all" if name == "partial_turns.jsonl" else None
    (folder / "raw_responses.jsonl").write_bytes(done_row(ids[0], mode) + b'{"id": "torn')
    target = ws.root / "precious.txt"
    target.write_bytes(b"line one\nline two without newline")
    before = target.read_bytes()
    if name == "raw_responses.jsonl":
        (folder / name).unlink()
        target.write_bytes(done_row(ids[0]) + b'{"id": "torn')
        before = target.read_bytes()
    (folder / name).symlink_to(target)
    extra = ("--regenerate", "all") if name == "partial_turns.jsonl" else ()
    result = run_cli(ws, "--server-url", sim.url, *FAST, *extra)
    assert result.returncode == 2, result.stderr
    assert last_line(result.stderr) == (
        f"run_inference.py: error: outputs/d/{name}: is a symbolic link (to {target}); files of an output "
        "folder are never written through a link: replace it with the file itself (or remove it) and rerun"
    )
    assert target.read_bytes() == before
    assert sim.stats()["generate_requests"] == 0


def test_a_symlinked_lock_table_is_refused_and_its_target_not_truncated(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 1)
    ws.outputs.mkdir()
    target = ws.root / "precious.txt"
    target.write_bytes(b"keep me")
    (ws.outputs / ".locks").symlink_to(target)
    result = run_cli(ws, "--server-url", sim.url, *FAST)
    assert result.returncode == 2
    assert "outputs/.locks: is a symbolic link" in last_line(result.stderr)
    assert target.read_bytes() == b"keep me"


def test_a_symlinked_log_file_is_refused_before_anything_is_written(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 1)
    target = ws.root / "precious.txt"
    target.write_bytes(b"keep me")
    (ws.root / "run.log").symlink_to(target)
    result = run_cli(ws, "--server-url", sim.url, "--log-file", "run.log", *FAST)
    assert result.returncode == 2
    assert last_line(result.stderr).startswith("run_inference.py: error: run.log: is a symbolic link")
    assert target.read_bytes() == b"keep me"


def test_a_fifo_in_a_dataset_folder_is_refused_not_waited_on(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 1)
    (ws.outputs / "d").mkdir(parents=True)
    os.mkfifo(ws.outputs / "d" / "errors.jsonl")
    result = run_cli(ws, "--server-url", sim.url, *FAST)
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        "run_inference.py: error: outputs/d/errors.jsonl: is a FIFO (named pipe), not a regular file; "
        "move it aside and rerun"
    )


def test_a_stale_temporary_file_that_is_a_link_is_replaced_not_written_through(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 2)
    folder = ws.outputs / "d"
    folder.mkdir(parents=True)
    (folder / "errors.jsonl").write_bytes(b'{"id": "%s", "status": "failed"}\n' % ids[0].encode())
    target = ws.root / "precious.txt"
    target.write_bytes(b"keep me")
    (folder / "errors.jsonl.tmp").symlink_to(target)
    result = run_cli(ws, "--server-url", sim.url, *FAST)
    assert result.returncode == 0, result.stderr
    assert target.read_bytes() == b"keep me"
    ws.assert_exactly_once("d", ids)


# --- secrets --------------------------------------------------------------------------------------
REDACTIONS = [
    # (printed, shown)
    ("http://TOKEN123@host:30000/v1", f"http://{MASK}@host:30000/v1"),
    ("http://user:p@ss@host/x", f"http://user:{MASK}@host/x"),
    ("http://u:pw@h:8/x", f"http://u:{MASK}@h:8/x"),
    ("https://h:8/a@b", "https://h:8/a@b"),
    ("http://h/?api_key=abc&x=1", f"http://h/?api_key={MASK}&x=1"),
    ("http://h/generate?key=abc", f"http://h/generate?key={MASK}"),
    ("http://h/?token=t1#frag", f"http://h/?token={MASK}#frag"),
    ("http://h/?access_token=t1", f"http://h/?access_token={MASK}"),
    (
        "https://b.s3.amazonaws.com/f?X-Amz-Signature=abc&a=b",
        f"https://b.s3.amazonaws.com/f?X-Amz-Signature={MASK}&a=b",
    ),
    ("http://h/?monkey=1&tokens=2", "http://h/?monkey=1&tokens=2"),
    (
        "python -m sglang.launch_server --api-key sk-1 --port 3",
        f"python -m sglang.launch_server --api-key {MASK} --port 3",
    ),
    ("launch --api-key=sk-1", f"launch --api-key={MASK}"),
    ("launch --admin-api-key 'a b' --port 1", f"launch --admin-api-key {MASK} --port 1"),
    ("launch --hf-token hf_abc", f"launch --hf-token {MASK}"),
    ("--max-tokens 32 --tokenizer /t --max-new-tokens 4", "--max-tokens 32 --tokenizer /t --max-new-tokens 4"),
    ("API_KEY=zz python x", f"API_KEY={MASK} python x"),
    ("env SGLANG_API_KEY=zz HF_TOKEN=hf_x run", f"env SGLANG_API_KEY={MASK} HF_TOKEN={MASK} run"),
    ("Authorization: Bearer sk-live-123", f"Authorization: Bearer {MASK}"),
    ("server_args=ServerArgs(api_key='sk-9', port=3)", f"server_args=ServerArgs(api_key='{MASK}', port=3)"),
    ('{"api_key": "v", "b": 1}', f'{{"api_key": "{MASK}", "b": 1}}'),
    ("set SGLANG_API_KEY (or --api-key) to the key", "set SGLANG_API_KEY (or --api-key) to the key"),
    ("done 20/20 (100.0%) | out tok/s 1m 5", "done 20/20 (100.0%) | out tok/s 1m 5"),
]


@pytest.mark.parametrize("printed, shown", REDACTIONS)
def test_every_credential_shape_is_redacted_and_nothing_else(printed, shown):
    from synthgen.redact import redact

    assert redact(printed) == shown


def test_a_remembered_key_is_hidden_wherever_it_appears_and_json_values_by_their_key():
    from synthgen.redact import redact, redact_value, remember

    remember("kq-remembered-5678")
    assert redact("the server said: bad key kq-remembered-5678!") == f"the server said: bad key {MASK}!"
    assert redact_value({"api_key": 5, "hf-token": "q", "max_tokens": 3, "x": ["http://a@b"]}) == {
        "api_key": MASK,
        "hf-token": MASK,
        "max_tokens": 3,
        "x": [f"http://{MASK}@b"],
    }


def test_an_error_row_never_carries_a_credential():
    record = ErrorRecord("p", "d", "failed", "http_500", "GET http://h/x?key=abc failed", 1, 500, "now")
    assert orjson.loads(record.to_json())["error"] == f"GET http://h/x?key={MASK} failed"


@pytest.mark.parametrize(
    "url, secrets",
    [
        ("http://USERTOKEN77@127.0.0.1:9", ["USERTOKEN77"]),
        ("http://user:pa@ss77@127.0.0.1:9", ["pa@ss77", "ss77"]),
        ("http://127.0.0.1:9/?api_key=QUERYKEY77", ["QUERYKEY77"]),
    ],
)
def test_a_credential_in_the_server_url_is_printed_nowhere(ws, url, secrets):
    ws.dataset("short", "d", 1)
    result = run_cli(ws, "--server-url", url, "--log-file", "run.log", "--server-wait", "0", *FAST)
    assert result.returncode == 3, result.stderr
    log = (ws.root / "run.log").read_text()
    for secret in secrets:
        assert secret not in result.stderr and secret not in log, (secret, result.stderr)
    assert MASK in result.stderr


def test_the_launch_command_in_server_log_and_stderr_hides_the_api_key(ws, tokenizers):
    from simharness import free_port, sim_command

    port = free_port()
    key = "sk-launch-SECRET-4242"
    ws.dataset("short", "d", 2)
    command = sim_command(tokenizers["chatml"], port, "--api-key", key)
    result = run_cli(
        ws,
        "--server-url",
        f"http://127.0.0.1:{port}",
        "--api-key",
        key,
        "--launch-server",
        command,
        "--log-file",
        "run.log",
        *FAST,
    )
    assert result.returncode == 0, result.stderr
    header = [line for line in (ws.outputs / "server.log").read_text().splitlines() if "===== synthgen" in line]
    assert header and header[0].endswith(f"--api-key {MASK}"), header
    assert key not in header[0] and key not in result.stderr
    assert key not in (ws.root / "run.log").read_text()
    for name in ("settings.jsonl", "raw_responses.jsonl"):
        assert key not in (ws.outputs / "d" / name).read_text()


def test_settings_jsonl_hides_a_credential_among_the_template_kwargs_and_a_rerun_matches_it(ws, make_sim):
    sim = make_sim("chatml")
    ids = ws.dataset("short", "d", 2)
    args = ("--server-url", sim.url, "--chat-template-kwargs", '{"api_key": "KWSECRET99"}', *FAST)
    first = run_cli(ws, *args, "--max-samples", "1")
    assert first.returncode == 0, first.stderr
    assert "KWSECRET99" not in (ws.outputs / "d" / "settings.jsonl").read_text()
    second = run_cli(ws, *args)
    assert second.returncode == 0, second.stderr
    ws.assert_exactly_once("d", ids)


# --- FIFOs and devices as inputs ------------------------------------------------------------------
def test_a_fifo_as_a_prompt_file_is_refused_in_one_line_not_waited_on(ws):
    ws.dataset("short", "ok", 1)
    os.mkfifo(ws.prompts / "short" / "pipe.jsonl")
    result = run_cli(ws, "--server-url", "http://127.0.0.1:9", *FAST)
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        "run_inference.py: error: prompts/short/pipe.jsonl: is a FIFO (named pipe), not a regular file; "
        "a prompt file must be a regular file (or a link to one): replace it or move it out of the partition"
    )


def test_a_prompt_file_linked_to_dev_zero_is_refused_not_read_into_memory(ws):
    ws.dataset("short", "ok", 1)
    (ws.prompts / "short" / "zero.jsonl").symlink_to("/dev/zero")
    result = run_cli(ws, "--server-url", "http://127.0.0.1:9", *FAST)
    assert result.returncode == 2
    assert last_line(result.stderr).startswith(
        "run_inference.py: error: prompts/short/zero.jsonl: is a character device, not a regular file"
    )


def test_a_prompt_line_over_the_bound_is_a_bad_line_read_in_chunks(ws, tmp_path):
    MAX_LINE = 64 << 20  # synthgen.data.prompts.MAX_LINE
    ws.dataset("short", "ok", 1)
    with open(ws.prompts / "short" / "sparse.jsonl", "wb") as fh:
        fh.truncate(MAX_LINE + 10)  # a sparse file: MAX_LINE + 10 NUL bytes, no newline
    result = run_cli(ws, "--server-url", "http://127.0.0.1:9", *FAST)
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        f"run_inference.py: error: prompts/short/sparse.jsonl:1: the line has {MAX_LINE + 10:,} bytes, over the "
        f"{MAX_LINE >> 20} MiB a prompt line may have; fix or remove the line, or pass --skip-bad-lines"
    )


def test_bounded_lines_keep_short_lines_and_report_long_ones_by_length():
    from synthgen.data.openfiles import Oversize, bounded_lines

    data = b"short\n" + b"x" * 50 + b"\nlast"
    assert list(bounded_lines(io.BytesIO(data), limit=10, chunk=7)) == [b"short\n", Oversize(51), b"last"]


def test_a_fifo_as_the_chat_template_is_refused_in_one_line_not_waited_on(ws, make_sim):
    sim = make_sim("chatml")
    ws.dataset("short", "d", 1)
    os.mkfifo(ws.root / "template.jinja")
    result = run_cli(ws, "--server-url", sim.url, "--chat-template", "template.jinja", *FAST)
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        "run_inference.py: error: template.jinja: is a FIFO (named pipe), not a regular file; "
        "pass a template file with --chat-template FILE"
    )


def test_a_fifo_as_the_budget_file_is_refused_in_one_line_not_waited_on(ws):
    ws.dataset("short", "d", 1)
    os.mkfifo(ws.root / "budget.json")
    result = run_cli(ws, "--server-url", "http://127.0.0.1:9", "--budget", "budget.json", *FAST)
    assert result.returncode == 2
    assert last_line(result.stderr).startswith("run_inference.py: error: budget.json: is a FIFO (named pipe)")


# --- templates that never finish ------------------------------------------------------------------
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
NESTED_LOOPS = (
    "{% if 'HANG' in messages[-1].content %}{% set xs = range(100000)|list %}"
    "{% for a in xs %}{% for b in xs %}{% endfor %}{% endfor %}{% endif %}" + CHATML
)
HUGE_OUTPUT = (
    "{% if 'HUGE' in messages[-1].content %}{% for i in range(30000) %}{{ 'x' * 1000 }}{% endfor %}{% endif %}"
)


@pytest.mark.parametrize(
    "template, trigger, kind, reason",
    [
        (NESTED_LOOPS, "HANG", "template_error", "the chat template ran "),
        (HUGE_OUTPUT + CHATML, "HUGE", "prompt_too_long", "the rendered prompt passed "),
    ],
)
def test_a_template_that_never_finishes_or_outputs_30_mb_is_a_skip_and_the_run_goes_on(
    ws, make_sim, template, trigger, kind, reason
):
    sim = make_sim("chatml")
    ws.dataset("short", "d", [{"id": "bad", "prompt": f"{trigger} me"}, {"id": "good", "prompt": "fine"}])
    (ws.root / "t.jinja").write_text(template)
    result = run_cli(ws, "--server-url", sim.url, "--chat-template", "t.jinja", *FAST)
    # Exit 0: no rerun of the same command renders that prompt otherwise (docs/command-line.md).
    assert result.returncode == 0, result.stderr
    assert f"1 prompt skipped ({kind}), a rerun will not change that" in result.stderr
    assert [r["id"] for r in ws.results("d")] == ["good"]
    (error,) = ws.errors("d")
    assert (error["id"], error["status"], error["error_type"]) == ("bad", "skipped", kind)
    assert error["error"].startswith(reason), error


def test_the_bounds_are_installed_in_transformers_sandbox(tokenizers):
    from synthgen.chat.templating import ChatRenderer, bounded, load_tokenizer

    renderer = ChatRenderer(load_tokenizer(str(tokenizers["chatml"])))
    assert bounded(renderer.template_source)
    assert renderer.render_text([{"role": "user", "content": "hi"}]).endswith("<|im_start|>assistant\n")


RUNAWAY = [
    ("{% for i in range(10) %}{{ i }}{% endfor %}", "RENDER_STEPS", 5, "the chat template ran over 5 loop steps"),
    ("{% for i in range(10) %}{{ i }}{% endfor %}", "RENDER_SECONDS", -1, "the chat template ran for over -1 s"),
    (
        "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
        "RENDER_STEPS",
        1000,
        "the chat template ran over 1,000 loop steps",
    ),
    ("{{ 'x' * 10 ** 12 }}", "RENDER_MAX_CHARS", 1 << 20, "the chat template's output passed 1 MiB"),
    (
        "{% set ns = namespace(s='x') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "RENDER_MAX_CHARS",
        1 << 20,
        "the chat template's output passed 1 MiB",
    ),
    ("{{ 2 ** (10 ** 9) }}", "RENDER_STEPS", 100, "the chat template computes a number too large"),
]


@pytest.mark.parametrize("template, bound, value, reason", RUNAWAY)
def test_each_runaway_shape_stops_at_its_bound(tokenizers, monkeypatch, template, bound, value, reason):
    from synthgen.chat import templating

    monkeypatch.setattr(templating, bound, value)
    renderer = templating.ChatRenderer(templating.load_tokenizer(str(tokenizers["chatml"])), chat_template=template)
    with pytest.raises(templating.TemplateBudgetError) as caught:
        renderer.render_text([{"role": "user", "content": "hi"}])
    assert caught.value.kind == "template_error" and str(caught.value).startswith(reason)


def test_a_bounded_template_renders_what_the_plain_sandbox_renders(tokenizers):
    from synthgen.chat import templating

    source = (
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
        "{{ loop.index }}/{{ loop.length }}:{{ m.role ~ '=' ~ m.content }}{% if loop.last %}!{% endif %}"
        "{% endfor %}{{ ns.n }}{{ 'ab' * 2 }}{{ 2 ** 3 }}{% for k in {'a': 1} %}{{ k }}{% else %}none{% endfor %}"
    )
    renderer = templating.ChatRenderer(templating.load_tokenizer(str(tokenizers["chatml"])), chat_template=source)
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "q"},
    ]
    assert renderer.render_text(messages) == "1/3:user=hi2/3:assistant=yo3/3:user=q!3abab8a"


def test_a_signal_stops_the_run_while_its_worker_is_stuck_in_a_render(tmp_path, tokenizers):
    """In-process: the render blocks until the test lets it go; SIGTERM must end the run anyway."""
    import httpx

    from synthgen.config import RunConfig
    from synthgen.run import prepare
    from synthgen.run.progress import Progress
    from synthgen.run.runner import Runner
    from synthgen.server.client import SGLangClient
    from tests.unit.run.test_runner_scripted_server import URL, ScriptedServer

    folder = tmp_path / "prompts" / "p"
    folder.mkdir(parents=True)
    (folder / "d.jsonl").write_bytes(orjson.dumps({"id": "q", "prompt": "question"}) + b"\n")
    cfg = RunConfig(
        partition="p", prompts_dir=tmp_path / "prompts", output_dir=tmp_path / "out", server_url=URL, concurrency=2
    ).validate()
    started, release = threading.Event(), threading.Event()
    safety = threading.Timer(SAFETY, release.set)  # a run that waits for the render is freed, and fails
    safety.daemon = True
    safety.start()

    def stuck(self, run, prompt_id):
        started.set()
        release.wait()
        raise AssertionError("the run went on waiting for the render")

    client = SGLangClient(URL, None, 2, 30.0, transport=httpx.MockTransport(ScriptedServer(tokenizers["chatml"])))

    async def main() -> int:
        runner = Runner(cfg, Progress.of_run(cfg, io.StringIO(), tty=False), client=client)
        task = asyncio.create_task(runner.run())
        await asyncio.get_running_loop().run_in_executor(None, started.wait)
        os.kill(os.getpid(), signal.SIGTERM)
        try:
            return await asyncio.wait_for(task, SAFETY)
        finally:
            await client.aclose()

    original = prepare.Preparer.prepare
    prepare.Preparer.prepare = stuck  # type: ignore[method-assign]
    try:
        code = asyncio.run(main())
    finally:
        prepare.Preparer.prepare = original  # type: ignore[method-assign]
        release.set()
        safety.cancel()
    assert code == 143


def test_the_process_exits_with_its_code_while_a_worker_thread_is_still_busy(tmp_path):
    script = (
        "import threading\n"
        "from synthgen.errors import exit_process\n"
        "threading.Thread(target=threading.Event().wait).start()\n"
        "exit_process(143)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=Path(RUN).parent, capture_output=True, text=True, timeout=SAFETY
    )
    assert result.returncode == 143, result.stderr
