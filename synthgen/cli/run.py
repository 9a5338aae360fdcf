"""Command line of run_inference.py: arguments -> RunConfig -> Runner -> exit code."""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, TextIO

import orjson

from synthgen import __version__
from synthgen.budget.file import Budget, read_budget
from synthgen.budget.plan import parse_count
from synthgen.cli.launchflags import launch_flags
from synthgen.config import CHANGED_PROMPTS, RunConfig, default_of
from synthgen.data.mix import load_mix
from synthgen.data.prompts import REGENERATE_MODES
from synthgen.data.readers.base import NO_COLUMNS, Columns
from synthgen.data.sampling_keys import FLAGGED
from synthgen.data.selection import SAMPLE_MODES
from synthgen.data.shards import env_hint, parse_shard, prepare_folder, token_share
from synthgen.errors import OneLineParser, UsageError, run_guarded
from synthgen.launch.supervisor import DEMO_MAX_TOKENS, Supervisor, default_max_tokens
from synthgen.redact import redact
from synthgen.report.status import selected, show_status
from synthgen.run.progress import Progress, write_last
from synthgen.run.runner import Runner
from synthgen.run.stopping import RunStop

PROG = "run_inference.py"
PROG_CALL = "python run_inference.py"
# RunConfig's fields: a sampling flag with one of its own (--max-tokens) goes there, the others to sampling_flags.
RUN_FIELDS = frozenset(one.name for one in fields(RunConfig))

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

  # one SGLang server per GPU group, no gateway: requests spread by load, a conversation on one server
  python run_inference.py --partition all --server-url http://gpu0:30000 --server-url http://gpu1:30000

  # multi-turn chats: every assistant turn written by the model, on its own earlier replies
  python run_inference.py --partition short --dataset chats --regenerate all

  # your own server command, watched and restarted; what would be sent, without sending
  python run_inference.py --partition all --launch-server \\
        'python -m sglang.launch_server --model-path moonshotai/Kimi-K2.5 --tp 8 --port 30000 --trust-remote-code'
  python run_inference.py --partition short --chat-template-kwargs '{"thinking": true}' --dry-run

  # from another shell: what the folder holds (rows, failed, cut, loops, tokens), the live run's pid
  python run_inference.py --status --output-dir outputs

  # then: the rows as training data, the exact ids for drafters (docs/export.md)
  python export_training.py --partition short --format tokens --out tokens.jsonl
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
    _what_to_run(p.add_argument_group("what to run"))
    _how_many(p.add_argument_group("how many"))
    _server(p.add_argument_group("server"))
    _model_and_template(p.add_argument_group("model and template"))
    _sampling(p.add_argument_group("sampling"))
    _running(p.add_argument_group("running"))
    return p


def _what_to_run(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--partition",
        default=default_of("partition"),
        metavar="NAME",
        help="folder under --prompts-dir, or all (default: %(default)s)",
    )
    g.add_argument("--dataset", action="append", default=[], metavar="NAME", help="only this dataset; repeatable")
    g.add_argument(
        "--prompts-dir", type=Path, default=default_of("prompts_dir"), metavar="DIR", help="default: %(default)s"
    )
    g.add_argument(
        "--output-dir", type=Path, default=default_of("output_dir"), metavar="DIR", help="default: %(default)s"
    )
    g.add_argument("--skip-bad-lines", action="store_true", help="skip malformed prompt lines instead of stopping")
    g.add_argument(
        "--columns",
        metavar="FIELD=COLUMN,...",
        help="e.g. prompt=question,id=uid (docs/inputs.md)",
    )
    g.add_argument(
        "--regenerate",
        choices=REGENERATE_MODES,
        default=default_of("regenerate"),
        help="assistant turns the model writes: last (default), each (one prompt per turn), all (every turn, "
        "on its own replies)",
    )


def _how_many(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--max-samples", type=int, metavar="N", help="at most N prompts per dataset (done ones count)")
    g.add_argument("--budget", type=Path, metavar="FILE", help="per-dataset counts from compute_budget.py --out")
    g.add_argument(
        "--max-tokens-per-dataset", metavar="N", help="stop a dataset at N output tokens, earlier runs too (e.g. 10M)"
    )
    g.add_argument(
        "--sample", choices=SAMPLE_MODES, default=default_of("sample"), help="which prompts a cap keeps (%(default)s)"
    )
    g.add_argument(
        "--seed",
        type=int,
        default=default_of("seed"),
        metavar="N",
        help="of --sample random, samples' seeds, recipes (default: %(default)s)",
    )
    g.add_argument(
        "--shard",
        metavar="I/N",
        help="slice I (0..N-1) into <output-dir>/shard-I-of-N (docs/cluster.md)",
    )
    g.add_argument(
        "--samples-per-prompt",
        type=int,
        default=default_of("samples_per_prompt"),
        metavar="N",
        help="each its own request, seed and row (default: %(default)s)",
    )
    g.add_argument(
        "--sampling-mix",
        metavar="JSON|FILE",
        help="weighted recipes for the samples (docs/training-mix.md)",
    )


def _server(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--server-url",
        action="append",
        metavar="URL",
        help=f"default: {default_of('server_url')}; repeat it for several servers",
    )
    g.add_argument("--api-key", default=None, metavar="KEY", help="default: $SGLANG_API_KEY; never printed")
    launch_flags(g, "start this server (demo: SGLang on the CPU), watch, stop it", "for the next run")


def _model_and_template(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--tokenizer", metavar="PATH", help="default: the tokenizer_path the server reports")
    g.add_argument("--trust-remote-code", action="store_true", help="allow the tokenizer's own code")
    g.add_argument(
        "--chat-template-kwargs", default="{}", metavar="JSON", help="template variables, e.g. '{\"thinking\": true}'"
    )
    g.add_argument("--chat-template", type=Path, metavar="FILE", help="a Jinja template instead of the tokenizer's")
    g.add_argument("--reasoning-parser", metavar="NAME", help="SGLang's name (default: the server's)")
    g.add_argument("--tool-call-parser", metavar="NAME", help="SGLang's name (default: the server's)")
    g.add_argument(
        "--think-start",
        default=default_of("think_start"),
        metavar="TAG",
        help="without a parser (default: %(default)s)",
    )
    g.add_argument(
        "--think-end", default=default_of("think_end"), metavar="TAG", help="without a parser (default: %(default)s)"
    )
    g.add_argument(
        "--allow-mixed-settings", action="store_true", help="write rows under settings other than the folder's"
    )
    g.add_argument(
        "--changed-prompts",
        choices=CHANGED_PROMPTS,
        default=default_of("changed_prompts"),
        help="done prompts whose text changed (default: %(default)s)",
    )
    g.add_argument(
        "--redo",
        choices=("repetition",),
        help="generate the rows the loop guard ended again (docs/resume.md)",
    )


def _sampling(g: argparse._ArgumentGroup) -> None:
    for row in FLAGGED:  # synthgen.data.sampling_keys: one row a flag
        default = default_of(row.name) if row.name in RUN_FIELDS else None
        assert row.flag is not None and row.name is not None
        help_text = row.help.format(default=default, demo=DEMO_MAX_TOKENS)
        g.add_argument(row.flag, dest=row.name, type=row.kind, metavar=row.metavar, help=help_text)
    g.add_argument("--max-seq-len", type=int, metavar="N", help="prompt + answer (default: the server's)")
    g.add_argument(
        "--sampling-params",
        default="{}",
        metavar="JSON",
        help="more SGLang sampling keys, e.g. '{\"min_p\": 0.05}'",
    )


def _running(g: argparse._ArgumentGroup) -> None:
    _requests(g)
    _answers(g)
    _status_and_errors(g)


def _requests(g: argparse._ArgumentGroup) -> None:
    """How many requests fly at once, how long each may take, how often and how long they are retried."""
    g.add_argument(
        "--concurrency",
        type=concurrency_arg,
        default=default_of("concurrency"),
        metavar="auto|N",
        help="in flight (default: auto)",
    )
    g.add_argument(
        "--max-concurrency",
        type=int,
        default=default_of("max_concurrency"),
        metavar="N",
        help="auto's limit (default: %(default)s)",
    )
    g.add_argument(
        "--request-timeout",
        type=float,
        default=default_of("request_timeout"),
        metavar="S",
        help="per answer (default: %(default).0f)",
    )
    g.add_argument(
        "--max-attempts",
        type=int,
        default=default_of("max_attempts"),
        metavar="N",
        help="per prompt (default: %(default)s)",
    )
    g.add_argument(
        "--retry-backoff",
        type=float,
        default=default_of("backoff_base"),
        metavar="S",
        help="first retry delay (default: %(default)g)",
    )
    g.add_argument(
        "--server-wait",
        type=float,
        default=default_of("server_wait"),
        metavar="S",
        help="outage before giving up (%(default).0f)",
    )
    g.add_argument(
        "--drain-timeout",
        type=float,
        default=default_of("drain_timeout"),
        metavar="S",
        help="after SIGTERM/SIGINT (%(default).0f)",
    )


def _answers(g: argparse._ArgumentGroup) -> None:
    """What happens to one answer: continued when cut, streamed and saved, ended in a loop, kept on a stop."""
    g.add_argument(
        "--continue-cut",
        type=int,
        default=default_of("continue_cut"),
        metavar="N",
        help="N more tokens once for an answer cut mid-reasoning (0: off)",
    )
    g.add_argument(
        "--checkpoint-tokens",
        type=int,
        default=default_of("checkpoint_tokens"),
        metavar="N",
        help="save streamed output every N tokens (0: off; 256)",
    )
    g.add_argument(
        "--loop-guard",
        choices=("on", "off"),
        default="on",
        help="end an answer looping for 10%%/40%% of --max-tokens (on)",
    )
    g.add_argument(
        "--keep-partials",
        choices=("on", "off"),
        default="on",
        help="keep a stopped request's output to continue it (on)",
    )


def _status_and_errors(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--dry-run", action="store_true", help="print the plan and the first request; send nothing")
    g.add_argument(
        "--status",
        action="store_true",
        help="print what --output-dir holds and exit (reads only)",
    )
    g.add_argument("--log-file", type=Path, metavar="FILE", help="also append status lines here")
    g.add_argument(
        "--status-interval",
        type=float,
        default=default_of("status_interval"),
        metavar="S",
        help="without a terminal (%(default).0f)",
    )
    g.add_argument(
        "--report-interval",
        type=float,
        default=default_of("report_interval"),
        metavar="S",
        help="rewrite <output-dir>/report.html (%(default).0f)",
    )
    g.add_argument("--debug", action="store_true", help="tracebacks instead of one-line errors")
    g.add_argument("--version", action="version", version=f"%(prog)s {__version__}")


def config_from_args(args: argparse.Namespace) -> RunConfig:
    template_kwargs = json_object(args.chat_template_kwargs, "--chat-template-kwargs", '{"thinking": true}')
    extra_sampling = json_object(args.sampling_params, "--sampling-params", '{"min_p": 0.05}')
    budget = _budget_of(args)
    token_cap = None
    if args.max_tokens_per_dataset is not None:
        token_cap = parse_count(args.max_tokens_per_dataset, "--max-tokens-per-dataset")
    return RunConfig(
        partition=args.partition,
        datasets=tuple(args.dataset),
        prompts_dir=args.prompts_dir,
        output_dir=args.output_dir,
        skip_bad_lines=args.skip_bad_lines,
        columns=Columns.parse(args.columns) if args.columns else NO_COLUMNS,
        max_samples=args.max_samples,
        budget=budget.caps if budget else {},
        expected_tokens=budget.averages if budget else {},
        budget_path=args.budget,
        max_tokens_per_dataset=token_cap,
        sample=args.sample,
        seed=args.seed,
        samples_per_prompt=args.samples_per_prompt,
        shard=parse_shard(args.shard) if args.shard is not None else None,
        sampling_mix=load_mix(args.sampling_mix) if args.sampling_mix is not None else None,
        server_url=(args.server_url or [default_of("server_url")])[0],
        server_urls=tuple(args.server_url or ()),
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
        redo_loops=args.redo == "repetition",
        max_tokens=args.max_tokens if args.max_tokens is not None else default_max_tokens(args.launch_server),
        max_seq_len=args.max_seq_len,
        sampling_flags=sampling_flags(args),
        extra_sampling=extra_sampling,
        concurrency=args.concurrency,
        max_concurrency=args.max_concurrency,
        request_timeout=args.request_timeout,
        max_attempts=args.max_attempts,
        backoff_base=args.retry_backoff,
        server_wait=args.server_wait,
        drain_timeout=args.drain_timeout,
        keep_partials=args.keep_partials == "on",
        continue_cut=args.continue_cut,
        checkpoint_tokens=args.checkpoint_tokens,
        loop_guard=args.loop_guard == "on",
        status_interval=args.status_interval,
        log_file=args.log_file,
        report_interval=args.report_interval,
        dry_run=args.dry_run,
    ).validate()


def in_shard_folder(cfg: RunConfig, environ: Mapping[str, str], say: Callable[[str], None]) -> RunConfig:
    """The config of a --shard run: its shard folder as the output folder (checked, and its shard.json written
    unless a dry run) and its share of --max-tokens-per-dataset. Without --shard, a scheduler's array variables
    in the environment get one line saying how to pass them (never used unasked)."""
    hint = env_hint(environ) if cfg.shard is None else None
    if hint:
        say(hint)
    record = {
        "seed": cfg.seed,
        "sample": cfg.sample,
        "samples_per_prompt": cfg.samples_per_prompt,
        "regenerate": cfg.regenerate,
        "max_samples": cfg.max_samples,
        "budget": cfg.budget,
        "max_tokens_per_dataset": cfg.max_tokens_per_dataset,
    }
    folder = prepare_folder(cfg.output_dir, cfg.shard, record, write=cfg.shard is not None and not cfg.dry_run)
    if cfg.shard is None:
        return cfg
    tokens = token_share(cfg.max_tokens_per_dataset, cfg.shard)
    say(f"shard {cfg.shard} into {folder}: every cap counts the whole dataset, this run makes its slice of it")
    log = cfg.server_log if cfg.server_log != cfg.output_dir / "server.log" else None
    return replace(cfg, output_dir=folder, server_log=log, max_tokens_per_dataset=tokens).validate()


def sampling_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The sampling flags given (synthgen.data.sampling_keys), by option name, but those RunConfig has a field for."""
    given = {row.name: getattr(args, row.name or "") for row in FLAGGED if row.name not in RUN_FIELDS}
    return {name: value for name, value in given.items() if name is not None and value is not None}


def _budget_of(args: argparse.Namespace) -> Budget | None:
    """The --budget file, read; it must have been planned for this run's --samples-per-prompt."""
    budget = read_budget(args.budget) if args.budget else None
    if budget is not None and budget.samples_per_prompt != args.samples_per_prompt:
        raise UsageError(
            f"{args.budget} was planned for {budget.samples_per_prompt} sample(s) per prompt; pass "
            f"--samples-per-prompt {budget.samples_per_prompt}, or plan again with compute_budget.py "
            f"--samples-per-prompt {args.samples_per_prompt}"
        )
    return budget


def json_object(text: str, flag: str, example: str) -> dict[str, Any]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{flag} is not valid JSON ({exc}); e.g. '{example}'") from None
    if not isinstance(value, dict):
        raise UsageError(f"{flag} must be a JSON object, e.g. '{example}'")
    return value


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
        progress = Progress.of_run(config, out, tty)
        stop = RunStop(progress, config.drain_timeout)
        # The supervisor ends the run through `stop` when the launched server cannot be brought back,
        # and starts a launched server only when the run needs one (not for "nothing to do").
        async with Supervisor(config, progress.message, on_fatal=stop.fail, lazy=True) as supervisor:
            runner = Runner(
                config,
                progress,
                stop=stop,
                before_connect=supervisor.start,
                restarts=lambda: supervisor.server.restarts if supervisor.server is not None else 0,
                rerun_command=rerun_command(argv),
                hold_end=True,  # what to do next comes last, after the launched server's stop
            )
            try:
                code = await runner.run()
            finally:
                report = runner.finish_report()  # the page of the output folder, also after an error
        write_last(closing_text(runner.end_text, report), out, config.log_file)
        return code

    def body() -> int:
        # A mistyped flag or value is a UsageError here: one line with the closest valid one.
        args = build_parser().parse_args(argv)
        if args.status:
            given = args.partition != default_of("partition") or any(a.startswith("--partition") for a in argv)
            names = selected(args.output_dir, args.prompts_dir, args.partition if given else None, args.dataset)
            return show_status(args.output_dir, names, sys.stdout)
        config = in_shard_folder(config_from_args(args), os.environ, lambda line: write_last(line, out, None))
        return asyncio.run(run(config))

    return run_guarded(PROG, body, out, "--debug" in argv)
