"""Command line of run_inference.py: arguments -> RunConfig -> Runner -> exit code."""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from pathlib import Path
from typing import TextIO

import orjson

from synthgen import __version__
from synthgen.budget.file import read_budget
from synthgen.budget.plan import parse_count
from synthgen.config import CHANGED_PROMPTS, RunConfig
from synthgen.data.prompts import REGENERATE_MODES
from synthgen.data.selection import SAMPLE_MODES
from synthgen.errors import OneLineParser, UsageError, run_guarded
from synthgen.launch.supervisor import DEMO_MAX_TOKENS, Supervisor, default_max_tokens
from synthgen.redact import redact
from synthgen.run.progress import write_last
from synthgen.run.runner import Runner

PROG = "run_inference.py"
PROG_CALL = "python run_inference.py"

EXAMPLES = """\
exit codes:
  0 done (skips no rerun can change are listed at the end)   1 some prompts failed: rerun retries them
  2 bad arguments or input   3 server unreachable, gone, changed model, key refused, launch failed
  4 dataset locked by another run   5 write error   130/143/129 stopped by SIGINT/SIGTERM/SIGHUP (rerun resumes)

more: docs/command-line.md (every option), docs/server.md (--launch-server), docs/unattended.md (nohup)

examples:
  # the 'short' partition on the server at --server-url; rerun the same command to resume
  python run_inference.py --partition short

  # no server yet: the CPU demo server, started and stopped by the run
  python run_inference.py --partition short --launch-server demo

  # a budgeted run: sample counts per dataset from compute_budget.py, unattended
  python compute_budget.py --partition long --tokens-per-dataset 10M --out budget.json
  nohup python run_inference.py --partition long --budget budget.json \\
        --log-file outputs/long.log > outputs/long.nohup 2>&1 &

  # multi-turn chats: every assistant turn written by the model, on its own earlier replies
  python run_inference.py --partition short --dataset chats --regenerate all

  # your own server command, watched and restarted; what would be sent, without sending
  python run_inference.py --partition all --launch-server \\
        'python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 --port 30000 --trust-remote-code'
  python run_inference.py --partition short --chat-template-kwargs '{"thinking": true}' --dry-run

  # then: the rows as SpecForge training data
  python export_training.py --partition short --out train.jsonl
"""


def concurrency_arg(text: str) -> int | None:
    """``auto`` (None) or a whole number; argparse reports anything else as a usage error."""
    if text.strip().lower() == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number, got {text!r}") from None


def _formatter(prog: str) -> argparse.HelpFormatter:
    # Flags and their help on one line where the terminal allows.
    return argparse.RawDescriptionHelpFormatter(prog, max_help_position=36)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        usage="%(prog)s [--partition NAME] [--server-url URL | --launch-server CMD|demo] [options]",
        description="Generate reasoning + answer for every prompt of the selected datasets through an SGLang\n"
        "server's /generate endpoint, into <output-dir>/<dataset>/raw_responses.jsonl; a rerun skips the ids\n"
        "already there. The examples at the end show the main jobs.",
        epilog=EXAMPLES,
        formatter_class=_formatter,
    )
    g = p.add_argument_group("what to run")
    g.add_argument("--partition", default="all", metavar="NAME", help="folder under --prompts-dir, or all (default)")
    g.add_argument("--dataset", action="append", default=[], metavar="NAME", help="only this dataset; repeatable")
    g.add_argument("--prompts-dir", type=Path, default=Path("prompts"), metavar="DIR", help="default: prompts")
    g.add_argument("--output-dir", type=Path, default=Path("outputs"), metavar="DIR", help="default: outputs")
    g.add_argument("--skip-bad-lines", action="store_true", help="skip malformed prompt lines instead of stopping")
    g.add_argument(
        "--regenerate",
        choices=REGENERATE_MODES,
        default="last",
        help="assistant turns the model writes: last (default), each (one prompt per turn), all (every turn, "
        "on its own replies)",
    )

    g = p.add_argument_group("how many")
    g.add_argument("--max-samples", type=int, metavar="N", help="at most N prompts per dataset (done ones count)")
    g.add_argument("--budget", type=Path, metavar="FILE", help="per-dataset counts from compute_budget.py --out")
    g.add_argument(
        "--max-tokens-per-dataset", metavar="N", help="stop a dataset at N output tokens, earlier runs included (10M)"
    )
    g.add_argument("--sample", choices=SAMPLE_MODES, default="first", help="which prompts a cap keeps (first)")
    g.add_argument("--seed", type=int, default=0, metavar="N", help="seed of --sample random (default: 0)")

    g = p.add_argument_group("server")
    g.add_argument("--server-url", default="http://127.0.0.1:30000", metavar="URL", help="default: %(default)s")
    g.add_argument("--api-key", default=None, metavar="KEY", help="default: $SGLANG_API_KEY; never printed")
    g.add_argument(
        "--launch-server",
        metavar="CMD|demo",
        help="start this server command (or demo: SGLang on the CPU, tiny model), watch it, stop it at the end",
    )
    g.add_argument("--keep-server", action="store_true", help="leave the launched server running for the next run")
    g.add_argument("--server-log", type=Path, metavar="FILE", help="its output (default: <output-dir>/server.log)")
    g.add_argument(
        "--server-start-timeout", type=float, default=1800.0, metavar="S", help="its start-up limit (default: 1800)"
    )
    g.add_argument("--server-restarts", type=int, default=3, metavar="N", help="restarts if it dies (default: 3)")

    g = p.add_argument_group("model and template")
    g.add_argument("--tokenizer", metavar="PATH", help="default: the tokenizer_path the server reports")
    g.add_argument("--trust-remote-code", action="store_true", help="allow the tokenizer's own code")
    g.add_argument(
        "--chat-template-kwargs", default="{}", metavar="JSON", help="template variables, e.g. '{\"thinking\": true}'"
    )
    g.add_argument("--chat-template", type=Path, metavar="FILE", help="a Jinja template instead of the tokenizer's")
    g.add_argument("--reasoning-parser", metavar="NAME", help="SGLang's name (default: the server's)")
    g.add_argument("--tool-call-parser", metavar="NAME", help="SGLang's name (default: the server's)")
    g.add_argument("--think-start", default="<think>", metavar="TAG", help="without a parser (default: <think>)")
    g.add_argument("--think-end", default="</think>", metavar="TAG", help="without a parser (default: </think>)")
    g.add_argument(
        "--allow-mixed-settings", action="store_true", help="write rows under settings other than the folder's"
    )
    g.add_argument(
        "--changed-prompts",
        choices=CHANGED_PROMPTS,
        default="refuse",
        help="done prompts whose text changed (default: refuse)",
    )

    g = p.add_argument_group("sampling")
    g.add_argument(
        "--max-tokens", type=int, metavar="N", help=f"per answer (default: 32768; {DEMO_MAX_TOKENS} with the demo)"
    )
    g.add_argument("--max-seq-len", type=int, metavar="N", help="prompt + answer (default: the server's)")
    g.add_argument("--temperature", type=float, metavar="T", help="default: the model's")
    g.add_argument("--top-p", type=float, metavar="P", help="default: the server's")
    g.add_argument("--top-k", type=int, metavar="K", help="default: the server's")

    g = p.add_argument_group("running")
    g.add_argument(
        "--concurrency", type=concurrency_arg, default=None, metavar="auto|N", help="in flight (default: auto)"
    )
    g.add_argument("--max-concurrency", type=int, default=1024, metavar="N", help="auto's limit (default: 1024)")
    g.add_argument("--request-timeout", type=float, default=3600.0, metavar="S", help="per answer (default: 3600)")
    g.add_argument("--max-attempts", type=int, default=5, metavar="N", help="per prompt (default: 5)")
    g.add_argument("--retry-backoff", type=float, default=1.0, metavar="S", help="first retry delay (default: 1)")
    g.add_argument("--server-wait", type=float, default=600.0, metavar="S", help="outage before giving up (600)")
    g.add_argument("--drain-timeout", type=float, default=30.0, metavar="S", help="after SIGTERM/SIGINT (30)")
    g.add_argument("--dry-run", action="store_true", help="print the plan and the first request; send nothing")
    g.add_argument("--log-file", type=Path, metavar="FILE", help="also append status lines here")
    g.add_argument("--status-interval", type=float, default=10.0, metavar="S", help="without a terminal (10)")
    g.add_argument(
        "--report-interval", type=float, default=300.0, metavar="S", help="rewrite <output-dir>/report.html (300)"
    )
    g.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    g.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def config_from_args(args: argparse.Namespace) -> RunConfig:
    try:
        template_kwargs = orjson.loads(args.chat_template_kwargs)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"--chat-template-kwargs is not valid JSON ({exc}); e.g. '{{\"thinking\": true}}'") from None
    if not isinstance(template_kwargs, dict):
        raise UsageError("--chat-template-kwargs must be a JSON object, e.g. '{\"thinking\": true}'")
    budget = read_budget(args.budget) if args.budget else None
    token_cap = None
    if args.max_tokens_per_dataset is not None:
        token_cap = parse_count(args.max_tokens_per_dataset, "--max-tokens-per-dataset")
    return RunConfig(
        partition=args.partition,
        datasets=tuple(args.dataset),
        prompts_dir=args.prompts_dir,
        output_dir=args.output_dir,
        skip_bad_lines=args.skip_bad_lines,
        max_samples=args.max_samples,
        budget=budget.caps if budget else {},
        expected_tokens=budget.averages if budget else {},
        budget_path=args.budget,
        max_tokens_per_dataset=token_cap,
        sample=args.sample,
        seed=args.seed,
        server_url=args.server_url,
        api_key=args.api_key if args.api_key is not None else os.environ.get("SGLANG_API_KEY") or None,
        launch_server=args.launch_server,
        server_log=args.server_log,
        server_start_timeout=args.server_start_timeout,
        server_restarts=args.server_restarts,
        keep_server=args.keep_server,
        tokenizer=args.tokenizer,
        trust_remote_code=args.trust_remote_code,
        chat_template_kwargs=template_kwargs,
        think_start=args.think_start,
        think_end=args.think_end,
        chat_template=args.chat_template,
        reasoning_parser=args.reasoning_parser,
        tool_call_parser=args.tool_call_parser,
        regenerate=args.regenerate,
        allow_mixed_settings=args.allow_mixed_settings,
        changed_prompts=args.changed_prompts,
        max_tokens=args.max_tokens if args.max_tokens is not None else default_max_tokens(args.launch_server),
        max_seq_len=args.max_seq_len,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        concurrency=args.concurrency,
        max_concurrency=args.max_concurrency,
        request_timeout=args.request_timeout,
        max_attempts=args.max_attempts,
        backoff_base=args.retry_backoff,
        server_wait=args.server_wait,
        drain_timeout=args.drain_timeout,
        status_interval=args.status_interval,
        log_file=args.log_file,
        report_interval=args.report_interval,
        dry_run=args.dry_run,
    ).validate()


def closing_text(end_text: str, report: str) -> str:
    """The run's closing lines; the last one says where the rows and the report page are and how to export:
    ``rows: ...; report: outputs/report.html; export them with: ...`` (the report alone when no row exists)."""
    lines = end_text.splitlines()
    if report and lines and lines[-1].startswith("rows: ") and "; export them with: " in lines[-1]:
        where, export = lines[-1].split("; export them with: ", 1)
        lines[-1] = f"{where}; {report}; export them with: {export}"
    elif report:
        lines.append(report)
    return "\n".join(lines)


def rerun_command(argv: list[str]) -> str:
    """This run's command as a user can paste it again; an API key given as a flag is printed as
    "$SGLANG_API_KEY", and every other credential shape hidden (``synthgen.redact``)."""
    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append('"$SGLANG_API_KEY"')
            hide_next = False
        elif arg == "--api-key":
            shown.append(arg)
            hide_next = True
        elif arg.startswith("--api-key="):
            shown.append('--api-key="$SGLANG_API_KEY"')
        else:
            shown.append(redact(arg))
    return " ".join([PROG_CALL, *(a if a.endswith('"$SGLANG_API_KEY"') else shlex.quote(a) for a in shown)])


def main(argv: list[str] | None = None, stream: TextIO | None = None, tty: bool | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    out = stream or sys.stderr

    async def run(config: RunConfig) -> int:
        runner = Runner(config, out, tty)
        runner.rerun_command = rerun_command(argv)
        runner.hold_end = True  # what to do next comes last, after the launched server's stop
        # The supervisor ends the run through the runner when the launched server cannot be brought back,
        # and starts a launched server only when the run needs one (not for "nothing to do").
        async with Supervisor(config, runner.progress.message, on_fatal=runner.fail_run, lazy=True) as supervisor:
            runner.before_connect = supervisor.start
            runner.restarts = lambda: supervisor.server.restarts if supervisor.server is not None else 0
            try:
                code = await runner.run()
            finally:
                report = runner.finish_report()  # the page of the output folder, also after an error
        write_last(closing_text(runner.end_text, report), out, config.log_file)
        return code

    def body() -> int:
        # A mistyped flag or value is a UsageError here: one line with the closest valid one.
        args = build_parser().parse_args(argv)
        return asyncio.run(run(config_from_args(args)))

    return run_guarded(PROG, body, out, "--debug" in argv)
