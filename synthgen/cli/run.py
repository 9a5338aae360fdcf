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
from synthgen.config import CHANGED_PROMPTS, RunConfig, redact_url
from synthgen.data.prompts import REGENERATE_MODES
from synthgen.data.selection import SAMPLE_MODES
from synthgen.errors import OneLineParser, UsageError, run_guarded
from synthgen.run.runner import Runner
from synthgen.server.supervisor import DEMO_MAX_TOKENS, Supervisor, default_max_tokens

PROG = "run_inference.py"
PROG_CALL = "python run_inference.py"

EXAMPLES = """\
exit codes:
  0 done (skips no rerun changes are listed at the end)   1 some prompts failed; rerun retries them
  2 bad arguments or input
  3 server unreachable / gave up / changed model / API key refused   4 dataset locked by another run
  5 write error (disk full, permissions)   130/143/129 stopped by SIGINT/SIGTERM/SIGHUP (rerun resumes)

examples:
  # every dataset of the 'short' partition; requests in flight follow the server's load
  python run_inference.py --partition short --max-tokens 32768

  # cap each dataset to its first 2,636 prompts; rerun the same command to resume
  python run_inference.py --partition long --max-samples 2636

  # per-dataset caps from compute_budget.py, unattended, with a log file
  nohup python run_inference.py --partition all --budget budget.json \\
        --log-file outputs/run.log > outputs/nohup.out 2>&1 &

  # stop each dataset at 10M output tokens (earlier runs included)
  python run_inference.py --partition short --max-tokens-per-dataset 10M

  # no server running yet: start one (restarted if it dies, stopped at the end)
  python run_inference.py --partition short --launch-server demo
  python run_inference.py --partition all --launch-server \\
        'python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 --port 30000 --trust-remote-code'

  # Kimi-K2.5 with thinking on; see what would be sent without sending anything
  python run_inference.py --partition short --dataset glaive \\
        --chat-template-kwargs '{"thinking": true}' --dry-run
"""


def concurrency_arg(text: str) -> int | None:
    """``auto`` (None) or a whole number; argparse reports anything else as a usage error."""
    if text.strip().lower() == "auto":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto or a whole number, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Generate reasoning + answer for every prompt of the selected datasets through an SGLang "
        "server's /generate endpoint. Results are appended to outputs/<dataset>/raw_responses.jsonl; "
        "a rerun skips the ids already there.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("input and output")
    g.add_argument(
        "--partition",
        default="all",
        help="partition folder under --prompts-dir (e.g. short, long), or 'all' (default: all)",
    )
    g.add_argument(
        "--dataset",
        action="append",
        default=[],
        metavar="NAME",
        help="only this dataset (file stem); repeatable (default: every dataset of the partition)",
    )
    g.add_argument("--prompts-dir", type=Path, default=Path("prompts"), help="default: prompts")
    g.add_argument("--output-dir", type=Path, default=Path("outputs"), help="default: outputs")
    g.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="count and skip malformed prompt lines instead of stopping before the run",
    )

    g = p.add_argument_group("how many prompts")
    g.add_argument(
        "--max-samples",
        type=int,
        metavar="N",
        help="cap every dataset to N prompts (first N in file order, or see --sample); completed ids "
        "count toward N. Overrides --budget",
    )
    g.add_argument(
        "--budget", type=Path, metavar="FILE", help="per-dataset max_samples from compute_budget.py --out FILE"
    )
    g.add_argument(
        "--max-tokens-per-dataset",
        metavar="N",
        help="stop launching a dataset's prompts once its output tokens (earlier runs included) plus the "
        "expected tokens of its in-flight requests reach N (accepts 10M, 2.5B, 500K)",
    )
    g.add_argument(
        "--sample",
        choices=SAMPLE_MODES,
        default="first",
        help="first: file order (default); random: by a stable hash of (seed, id)",
    )
    g.add_argument("--seed", type=int, default=0, help="seed of --sample random (default: 0)")

    g = p.add_argument_group("server")
    g.add_argument("--server-url", default="http://127.0.0.1:30000", help="default: http://127.0.0.1:30000")
    g.add_argument(
        "--api-key", default=None, help="sent as 'Authorization: Bearer'; default: $SGLANG_API_KEY. Never printed"
    )
    g.add_argument(
        "--concurrency",
        type=concurrency_arg,
        default=None,
        metavar="auto|N",
        help="requests in flight, all datasets together: auto keeps just enough in flight that the "
        "server always has work waiting, from its own load (/v1/loads); N keeps N (default: auto)",
    )
    g.add_argument(
        "--max-concurrency",
        type=int,
        default=1024,
        metavar="N",
        help="the most requests auto keeps in flight (default: 1024)",
    )
    g.add_argument(
        "--request-timeout", type=float, default=3600.0, help="seconds to wait for one generation (default: 3600)"
    )
    g.add_argument(
        "--max-attempts",
        type=int,
        default=5,
        help="attempts per prompt for retryable errors; outage time does not count (default: 5)",
    )
    g.add_argument(
        "--retry-backoff",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="first retry delay; doubles per attempt up to 60 s, with jitter (default: 1)",
    )
    g.add_argument(
        "--server-wait", type=float, default=600.0, help="seconds of continuous outage before giving up (default: 600)"
    )
    g.add_argument(
        "--drain-timeout",
        type=float,
        default=30.0,
        help="seconds in-flight requests get to finish after SIGTERM/SIGINT (default: 30)",
    )

    g = p.add_argument_group("launching the server")
    g.add_argument(
        "--launch-server",
        metavar="CMD|demo",
        help="start this server command (e.g. 'python -m sglang.launch_server --model-path M --port "
        "30000'), wait until --server-url is healthy, restart it if it dies, stop it at the end. "
        "'demo': the real SGLang server on the CPU with a tiny local model (installed into .cache "
        "on first use; its answers are noise). A healthy server already at --server-url is used "
        "instead. Raises --server-wait to at least --server-start-timeout + 120 s, so a restart "
        "is waited out",
    )
    g.add_argument(
        "--server-log",
        type=Path,
        metavar="FILE",
        help="the launched server's output (default: <output-dir>/server.log)",
    )
    g.add_argument(
        "--server-start-timeout",
        type=float,
        default=1800.0,
        metavar="SECONDS",
        help="seconds the launched server may take to become healthy (default: 1800)",
    )
    g.add_argument(
        "--server-restarts",
        type=int,
        default=3,
        metavar="N",
        help="restarts of a launched server that died or stopped answering (default: 3)",
    )
    g.add_argument(
        "--keep-server",
        action="store_true",
        help="leave the launched server running after the run; the next run uses it",
    )

    g = p.add_argument_group("model and template")
    g.add_argument("--tokenizer", help="tokenizer path or name (default: the tokenizer_path the server reports)")
    g.add_argument("--trust-remote-code", action="store_true", help="allow the tokenizer's own code")
    g.add_argument(
        "--chat-template-kwargs",
        default="{}",
        metavar="JSON",
        help="extra chat template variables, e.g. '{\"thinking\": true}' or '{\"enable_thinking\": true}'",
    )
    g.add_argument(
        "--chat-template",
        type=Path,
        metavar="FILE",
        help="render with this Jinja template (or a tokenizer_config.json's) instead of the tokenizer's, "
        "e.g. for models that ship none (DeepSeek-V3.2); its hash is recorded in settings.jsonl",
    )
    g.add_argument(
        "--reasoning-parser",
        metavar="NAME",
        help="SGLang's --reasoning-parser name (deepseek-r1, qwen3, kimi_k2, glm45, minimax, gpt-oss, "
        "...); default: what the server reports it was started with, else the --think-start/"
        "--think-end rule",
    )
    g.add_argument(
        "--tool-call-parser",
        metavar="NAME",
        help="SGLang's --tool-call-parser name (kimi_k2, qwen25, gpt-oss, ...) for prompts that carry "
        "tools; default: what the server reports, else none",
    )
    g.add_argument("--think-start", default="<think>", help="opening reasoning tag (default: <think>)")
    g.add_argument("--think-end", default="</think>", help="closing reasoning tag (default: </think>)")
    g.add_argument(
        "--regenerate",
        choices=REGENERATE_MODES,
        default="last",
        help="which assistant turns are generated: last (the reply after the conversation, cut back "
        "before its trailing assistant turns), each (one prompt per assistant turn with the "
        "original history; ids <id>#<k>), all (every assistant turn, in order, on the model's own "
        "earlier replies) (default: last)",
    )
    g.add_argument(
        "--allow-mixed-settings",
        action="store_true",
        help="write rows even though the settings (model, template, parsers, sampling, --max-tokens, "
        "--regenerate) differ from those recorded for the rows already there",
    )
    g.add_argument(
        "--changed-prompts",
        choices=CHANGED_PROMPTS,
        default="refuse",
        help="done prompts whose text changed since their rows were written: refuse (default), keep "
        "the old rows, or regenerate them (old rows move to changed_rows.jsonl)",
    )

    g = p.add_argument_group("sampling")
    g.add_argument(
        "--max-tokens",
        type=int,
        help="max_new_tokens per request, reduced to fit --max-seq-len (default: 32768; "
        f"{DEMO_MAX_TOKENS} with --launch-server demo)",
    )
    g.add_argument(
        "--max-seq-len",
        type=int,
        help="prompt + completion limit (default: the server's max_model_len from /v1/models)",
    )
    g.add_argument("--temperature", type=float, help="default: the model's preferred value on the server")
    g.add_argument("--top-p", type=float, help="default: the server's")
    g.add_argument("--top-k", type=int, help="default: the server's")

    g = p.add_argument_group("running")
    g.add_argument(
        "--dry-run",
        action="store_true",
        help="load, select and tokenize a sample; print the plan and the first request; send nothing",
    )
    g.add_argument("--log-file", type=Path, help="also append status lines and events to this file")
    g.add_argument(
        "--status-interval",
        type=float,
        default=10.0,
        help="seconds between status lines when stderr is not a terminal (default: 10)",
    )
    g.add_argument("--debug", action="store_true", help="show tracebacks for errors")
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
        dry_run=args.dry_run,
    ).validate()


def rerun_command(argv: list[str]) -> str:
    """This run's command as a user can paste it again; an API key given as a flag is printed as
    "$SGLANG_API_KEY", and a password in the server URL as ***."""
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
            shown.append(redact_url(arg))
    return " ".join([PROG_CALL, *(a if a.endswith('"$SGLANG_API_KEY"') else shlex.quote(a) for a in shown)])


def main(argv: list[str] | None = None, stream: TextIO | None = None, tty: bool | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    out = stream or sys.stderr

    async def run(config: RunConfig) -> int:
        runner = Runner(config, out, tty)
        runner.rerun_command = rerun_command(argv)
        # The supervisor ends the run through the runner when the launched server cannot be brought back,
        # and starts a launched server only when the run needs one (not for "nothing to do").
        async with Supervisor(config, runner.progress.message, on_fatal=runner.fail_run, lazy=True) as supervisor:
            runner.before_connect = supervisor.start
            return await runner.run()

    def body() -> int:
        # A mistyped flag or value is a UsageError here: one line with the closest valid one.
        args = build_parser().parse_args(argv)
        return asyncio.run(run(config_from_args(args)))

    return run_guarded(PROG, body, out, "--debug" in argv)
