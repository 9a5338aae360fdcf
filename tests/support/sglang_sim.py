"""A faithful stand-in for an SGLang server's native HTTP API, for tests and benchmarks.

This module owns the simulator: a real loopback HTTP server (stdlib ``ThreadingHTTPServer``,
HTTP/1.1 keep-alive) that answers ``/generate`` and the informational endpoints the way SGLang
0.5.23 or 0.5.14 does (``docs/sglang_api.md`` is the reference: status codes, error body
shapes, finish reasons, aborts, auth), with a deterministic fake model and injectable faults.

The fake model
--------------
The prompt is decoded (special tokens kept) and its last user or tool turn is found. Turn headers
understood: ChatML ``<|im_start|>ROLE\n`` (role ``user``; role ``tool``, or a user turn starting
with ``<tool_response>``, is a tool result), Kimi ``<|im_user|>NAME<|im_middle|>`` and
``<|im_system|>NAME<|im_middle|>`` (a tool result when NAME is ``tool`` or the content starts with
``## Return of ``), harmony ``<|start|>user<|message|>`` and ``<|start|>functions.X ...<|message|>``
(tool), Llama-3 ``<|start_header_id|>user|ipython|tool<|end_header_id|>\n\n`` and DeepSeek
``<｜User｜>`` / ``<｜tool▁output▁begin｜>``. The last such turn gives U:

- a user turn: its content up to the turn's end marker, verbatim (the whole rest of the prompt if
  the turn is not closed; the whole prompt if no turn header is found);
- a tool result: the content of the last ``<tool_response>...</tool_response>`` in it (Qwen), or
  the text after the ``## Return of ID`` line (Kimi), or the content, stripped of surrounding
  whitespace.

Output styles (``--output-style``), as text; ``R = "Reasoning about: U"``, ``A = "Answer: U"``:

- ``think`` (default): ``<think>R</think>A``.
- ``kimi_tool``: for a user turn ``<think>R</think>`` then
  ``<|tool_calls_section_begin|><|tool_call_begin|>functions.lookup:0<|tool_call_argument_begin|>``
  ``ARGS<|tool_call_end|><|tool_calls_section_end|>`` where ARGS is
  ``json.dumps({"query": U}, ensure_ascii=False)``; for a tool result ``<think>R</think>A``.
- ``qwen_tool``: for a user turn ``<think>R</think><tool_call>\nCALL\n</tool_call>`` where CALL is
  ``json.dumps({"name": "lookup", "arguments": {"query": U}}, ensure_ascii=False)``; for a tool
  result ``<think>R</think>A``.
- ``harmony``: ``<|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>final<|message|>A<|return|>``.
- ``harmony_tool``: for a user turn ``<|channel|>analysis<|message|>R<|end|><|start|>assistant<|channel|>``
  ``commentary to=functions.lookup <|constrain|>json<|message|>ARGS<|call|>`` (ARGS as ``kimi_tool``'s;
  a gpt-oss ``generation_config.json`` makes ``<|call|>`` a stop id); for a tool result as ``harmony``.

In the three think-tag styles the reasoning part follows the prompt's tail: when the prompt ends
with ``<think>`` (Kimi-K2.5 style, ignoring trailing whitespace) the opening tag is left out; when
it ends with ``</think>`` (thinking switched off by the template), or with ``--no-reasoning``, the
``<think>R</think>`` part is left out. With ``--no-reasoning`` harmony writes only
``<|channel|>final<|message|>A<|return|>``.

The text is encoded with the loaded tokenizer (no special tokens added), so whatever markers that
tokenizer knows become single ids and the others are spelled out in ordinary tokens. The model's
EOS follows, except when the text's last token is already a stop id (harmony's ``<|return|>`` in a
gpt-oss tokenizer). Stop ids are the tokenizer's ``eos_token`` plus ``eos_token_id`` of
``config.json`` and ``generation_config.json``; ``finish_reason.matched`` is the id that ended the
output, which ``output_ids`` includes and ``text`` does not.

A request with ``sampling_params.sampling_seed`` and a ``temperature`` above 0 (sent, not defaulted)
stands for a sampled answer: the output gets ``V`` more pad tokens (the last token of ``"."``) before its
stop id, ``V`` = the seed's SHA-1 mod 4, so samples of one prompt under different seeds mostly differ and
the same seed always gives the same answer (what a server with deterministic inference does).

``--output-len-dist`` overrides the length (EOS included) per prompt: ``fixed:N``, or
``uniform:LO-HI`` or ``longtail:LO-HI`` (a Pareto tail from LO, cut at HI) drawn from the prompt
ids' SHA-1. A shorter length cuts the styled output (then
EOS), a longer one pads it with the last token of ``"."`` before EOS. Output is truncated at
``max_new_tokens`` exactly as SGLang does (``finish_reason`` length), and ``text`` is decoded with
the request's ``skip_special_tokens`` (default true), so special tags vanish from ``text`` as on a
real server. ``meta_info.reasoning_tokens`` is 0 unless the request sets ``require_reasoning`` and
the server has ``--reasoning-parser``: then it counts output tokens up to and including the first
``</think>`` (``<|end|>`` for ``gpt-oss``), as 0.5.23's scheduler does.

Streaming, aborts, disconnects, continuations
---------------------------------------------
``"stream": true`` answers as 0.5.23 does (``sim_streaming.py`` has the details): SSE chunks at the
request's ``stream_interval`` (else ``--stream-interval``, default 1), cumulative unless
``--incremental-streaming-output``, the last with the finish reason, then ``data: [DONE]``; a check
that SGLang makes after the stream began (input too long, duplicate rid, ...) is a 200 with a
``data: {"error": ...}`` event. Only single requests (one prompt, n=1) stream here.
``POST /abort_request`` with the rid of a request in flight ends it and every request whose rid
starts with that rid (an unknown rid is ignored, as 0.5.23's tokenizer manager does; ``abort_all``
ends all): a plain request answers 200 with ``finish_reason`` abort and the output so far, a
streamed one sends that as its last chunk (``--no-abort-request``: 404, as behind smg 1.13). A
client that disconnects aborts its request (outcome ``disconnected``): streamed at once, plain at
the next check (``--disconnect-check``, 4 s as SGLang).
The model is stateless and greedy: input ids that are a prompt followed by the start of its
output continue that output (see ``FakeModel.complete``), as a continuation on a real server does
under greedy sampling.

Prompt markers, in the last user turn: ``[sim:loop]`` makes the output loop (the start of the
reasoning, then one sentence repeated until ``max_new_tokens``, never a stop id), for loop-guard
tests; ``[sim:long=N]`` makes it exactly N ids (stop included) of varied words inside the reasoning
(else the answer), which no repetition check should flag, for tests of long answers.

Two engines
-----------
Without ``--max-total-tokens`` every request generates on its own handler thread, one token per
``token_delay`` (the original behaviour). With it, one scheduler thread imitates SGLang's
continuous batching (``Scheduler``): a FCFS waiting queue, admission while the KV pool has room,
``--max-running-requests``, one decode step at a time whose duration grows with the batch, and
retraction of running requests when the pool runs out. Handler threads only wait for their request.

Faults (503 queue full, dropped connection, abort with partial output, slow answer) are decided
per request from ``--fault-seed``, the request's token ids and how often the same ids were seen
before, so a run makes the same decisions whatever the thread interleaving. Malformed answers
(``--malformed KIND``), a router's "no available workers" 503 (``--no-workers``) and a crash on
the N-th request (``--exit-after``) serve client robustness tests. Fault settings can be changed
at runtime through ``POST /sim/config``; ``GET /sim/stats`` reports what the server saw.
``/sim/*`` is the only non-SGLang surface and needs no API key.

Control and statistics
----------------------
``POST /pause_generation`` (``mode`` abort | retract | in_place, as SGLang) and
``POST /continue_generation``: while paused, requests queue and running ones stop between tokens
(abort mode first aborts everything in flight; retract mode moves the scheduler's running requests
back to the waiting queue, counting retractions; the per-request engine treats it as in_place).

``GET /v1/loads`` answers as 0.5.23 does for one DP rank (``?include=`` core, memory, disagg,
queues, all; ``?dp_rank=``; no prometheus format): ``num_running_reqs`` / ``num_waiting_reqs`` are
the scheduler's, or in the per-request engine the sequences in flight and 0; ``token_usage`` is the
KV pool share held; ``gen_throughput`` is output tokens per second over the last 5 s;
``utilization`` is 0.0 as on the real server. ``--no-v1-loads`` makes it 404.

``meta_info.cached_tokens`` is 0 unless ``--prefix-cache``: then the ids of every finished request (prompt
and output) are kept as SGLang's radix cache keeps them, and a request's ``cached_tokens`` is the longest
prefix of its ids found there (all but its last id at most).

``GET /sim/stats`` keys: ``generate_requests``, ``completed``, ``in_flight`` (requests registered
and generating), ``by_outcome``, ``prompt_counts`` (by ``prompt_sha1``); ``mode`` (per_request |
scheduler); ``http_in_flight`` / ``peak_in_flight`` (/generate requests received and not yet
answered); ``running`` / ``peak_running`` and ``waiting`` / ``peak_waiting`` (sequences);
``busy_time`` (seconds with at least one running sequence; per-request engine: one generating
request); ``running_time`` (scheduler mode: running sequences integrated over time, in
sequence-seconds, so ``running_time / (max_running_requests * wall)`` is the share of the server's
slots in use; 0 in the per-request engine); ``first_request_at`` / ``last_finish_at``
(``time.time()`` of the first /generate received and the last one answered, null before);
``queue_time_total`` / ``queue_time_max`` (seconds sequences spent in the waiting queue, retractions
included; the max is per sequence); ``retractions``; ``decode_steps``; ``token_usage``;
``tokens_generated`` (output tokens in 200 answers); in the scheduler mode ``tokens_decoded`` (every
token a decode step made, answered or not). ``POST /sim/reset`` zeroes them (peaks restart from the
current values).

``--request-log FILE`` appends one JSON line per /generate request: ``time``, ``prompt_sha1``
(list), ``rid`` (as sent), ``outcome``, and for a 200 ``answers``: one
``{rid, input_ids, output_ids, text, finish_reason}`` per sequence, as generated (before any
``--malformed`` breakage).

Malformed kinds (``--malformed`` or ``POST /sim/config {"malformed": KIND}``; null switches it
off), applied to every item of every 200 /generate answer: ``finish_reason_list`` (the finish
reason wrapped in a list), ``prompt_tokens_string``, ``no_finish_reason`` (key removed),
``negative_completion_tokens`` (``-max(1, len(output_ids))``), ``bad_gzip`` (header
``Content-Encoding: gzip`` on a plain JSON body), ``no_meta_info`` (key removed).
``--no-workers`` (or ``no_workers: true``) answers every /generate with sglang-router's
``503 text/plain "No available workers (all circuits open or unhealthy)"``. ``--exit-after N``
exits with code 1, unanswered, as the N-th /generate request arrives.

In the scheduler mode all faults work: 503s, drops and slow starts happen before the request is
queued, rate_abort ends a sequence at half its length, and token_delay lengthens every step.

Modules
-------
This file is the entry point (the command line and ``main``); tests and benches start it as
``python tests/support/sglang_sim.py`` and import ``parse_length_dist`` and ``prompt_sha1`` from it. The
simulator lives beside it, a module per part: ``sim_config.py`` (constants, settings, faults, length
distributions), ``sim_model.py`` (the fake model), ``sim_requests.py`` (a /generate body validated into
sequences), ``sim_state.py`` (the in-flight registry, fault decisions, statistics), ``sim_scheduler.py``
(the scheduler mode), ``sim_generation.py`` (one request's tokens over time, its answer items),
``sim_http.py`` (the server and its handler: the routes and the /generate payload handling) and
``sim_streaming.py`` (streamed answers, disconnects).

Run ``python tests/support/sglang_sim.py --help`` for the command line. Once listening, the process prints
exactly one line, ``SIM READY port=<port> pid=<pid>``, on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from sim_config import (
    DEFAULT_MAX_RUNNING_REQUESTS,
    KV_POOL_TOKENS,
    MALFORMED_KINDS,
    OUTPUT_STYLES,
    VERSIONS,
    Faults,
    SchedulerConfig,
    Settings,
    log,
    parse_length_dist,
    prompt_sha1,
)
from sim_http import SimServer
from sim_model import FakeModel
from tokenizers import Tokenizer

__all__ = ["main", "parse_length_dist", "prompt_sha1"]


# --------------------------------------------------------------------------------------------
# Command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="sglang_sim.py",
        description="Simulate an SGLang server's native HTTP API for tests.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=(
            "Examples:\n"
            "  python tests/support/sglang_sim.py --tokenizer-dir /tmp/tok --port 30000\n"
            "  python tests/support/sglang_sim.py --tokenizer-dir /tmp/tok --version 0.5.14 --api-key k\n"
            "  python tests/support/sglang_sim.py --tokenizer-dir /tmp/tok --fault-seed 7 \\\n"
            "      --rate-503 0.2 --rate-drop 0.05 --request-log /tmp/sim.jsonl\n"
        ),
    )
    add = parser.add_argument
    add(
        "--tokenizer-dir",
        "--tokenizer-path",
        dest="tokenizer_dir",
        type=Path,
        required=True,
        help="HF tokenizer dir (tokenizer.json; tokenizer_config.json, config.json, generation_config.json if any)",
    )
    add("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    add("--port", type=int, default=0, help="port; 0 picks a free one (default %(default)s)")
    add("--api-key", help="require 'Authorization: Bearer KEY' except on /health*")
    add(
        "--context-length",
        type=int,
        default=4096,
        help="model context length (default %(default)s)",
    )
    add(
        "--version",
        choices=VERSIONS,
        default="0.5.23",
        help="SGLang version to imitate (default %(default)s)",
    )
    add("--served-model-name", help="name in /v1/models and /model_info (default: the model path)")
    add(
        "--tokenizer-path-report",
        help="model_path/tokenizer_path that /model_info reports (default: tokenizer dir)",
    )
    add("--fault-seed", type=int, default=0, help="seed for fault decisions (default %(default)s)")
    add("--rate-503", type=float, default=0.0, help="probability of a 503 queue-full answer")
    add(
        "--rate-drop",
        type=float,
        default=0.0,
        help="probability of closing the connection unanswered",
    )
    add(
        "--rate-abort",
        type=float,
        default=0.0,
        help="probability of a 200 abort with partial output",
    )
    add("--rate-slow", type=float, default=0.0, help="probability of waiting --slow-seconds first")
    add(
        "--slow-seconds",
        type=float,
        default=2.0,
        help="delay of a slow request (default %(default)s)",
    )
    add(
        "--fail-first-n",
        type=int,
        default=0,
        help="answer the first N valid /generate requests with 503",
    )
    add("--token-delay", type=float, default=0.0, help="seconds per generated token (default 0)")
    add(
        "--reasoning",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write a think block (default on)",
    )
    add(
        "--max-vocab",
        type=int,
        help="crash like the real server on an input id >= this (default: config.json vocab_size)",
    )
    add(
        "--request-log",
        type=Path,
        help="append one JSON line per /generate request to this file (a 200 also logs its answers)",
    )
    add(
        "--output-style",
        choices=OUTPUT_STYLES,
        default="think",
        help="what the fake model writes (default %(default)s)",
    )
    add(
        "--output-len-dist",
        default="model",
        help="output length incl. EOS: model, fixed:N, uniform:LO-HI or longtail:LO-HI (a Pareto tail from LO "
        "cut at HI: most answers near LO, one in a hundred over 21 x LO) (default %(default)s)",
    )
    add("--reasoning-parser", help="reported by /model_info and /server_info; enables reasoning_tokens")
    add("--tool-call-parser", help="reported by /model_info and /server_info")
    add("--weight-version", default="default", help="meta_info and /model_info weight_version (default %(default)s)")
    add("--no-v1-loads", action="store_true", help="answer GET /v1/loads with 404, as an older server")
    add("--prefix-cache", action="store_true", help="report cached_tokens from a prefix cache (default: always 0)")
    add("--no-abort-request", action="store_true", help="answer POST /abort_request with 404, as smg 1.13 does")
    add("--exit-after", type=int, help="exit with code 1, unanswered, when the N-th /generate request arrives")
    add("--malformed", choices=MALFORMED_KINDS, help="break every 200 /generate answer this way")
    add("--no-workers", action="store_true", help="answer /generate with sglang-router's 503 'No available workers'")
    add(
        "--stream-interval",
        type=int,
        default=1,
        help="tokens per streamed chunk unless a request sets stream_interval (default %(default)s)",
    )
    add(
        "--incremental-streaming-output",
        action="store_true",
        help="streamed chunks carry only the ids and text added since the last one (default: cumulative)",
    )
    add(
        "--disconnect-check",
        type=float,
        default=4.0,
        help="seconds between checks that a plain request's client is still there (default %(default)s)",
    )
    sched = parser.add_argument_group("scheduler mode (on with --max-total-tokens)")
    sched.add_argument("--max-total-tokens", type=int, help="KV pool size in tokens; switches the scheduler on")
    sched.add_argument(
        "--max-running-requests",
        type=int,
        default=DEFAULT_MAX_RUNNING_REQUESTS,
        help="most requests decoding at once (default %(default)s)",
    )
    sched.add_argument("--step-time", type=float, default=0.0, help="seconds per decode step (default 0)")
    sched.add_argument(
        "--step-time-per-req", type=float, default=0.0, help="extra seconds per step per running request"
    )
    sched.add_argument(
        "--prefill-time-per-token",
        type=float,
        default=0.0,
        help="extra seconds per prompt token admitted in a step (default 0)",
    )
    args = parser.parse_args(argv)
    try:
        args.length_dist = parse_length_dist(args.output_len_dist)
    except ValueError as exc:
        parser.error(f"--output-len-dist: {exc}")
    if args.max_total_tokens is not None and args.max_total_tokens < 16:
        parser.error("--max-total-tokens must be at least 16")
    if args.max_running_requests < 1:
        parser.error("--max-running-requests must be at least 1")
    if args.exit_after is not None and args.exit_after < 1:
        parser.error("--exit-after must be at least 1")
    if args.stream_interval < 1:
        parser.error("--stream-interval must be at least 1")
    if args.disconnect_check <= 0:
        parser.error("--disconnect-check must be above 0")
    return args


def build_settings(args: argparse.Namespace, tokenizer: Tokenizer) -> Settings:
    config_file = args.tokenizer_dir / "config.json"
    config = json.loads(config_file.read_text()) if config_file.exists() else {}
    model_path = args.tokenizer_path_report or str(args.tokenizer_dir)
    scheduler = None
    if args.max_total_tokens is not None:
        scheduler = SchedulerConfig(
            max_total_tokens=args.max_total_tokens,
            max_running_requests=args.max_running_requests,
            step_time=args.step_time,
            step_time_per_req=args.step_time_per_req,
            prefill_time_per_token=args.prefill_time_per_token,
        )
    return Settings(
        model_path=model_path,
        served_model_name=args.served_model_name or model_path,
        api_key=args.api_key,
        context_length=args.context_length,
        version=args.version,
        reasoning=args.reasoning,
        max_vocab=args.max_vocab or config.get("vocab_size") or tokenizer.get_vocab_size(),
        fault_seed=args.fault_seed,
        request_log=args.request_log,
        model_type=config.get("model_type", "qwen2"),
        tokenizer_path=model_path,
        kv_pool_tokens=args.max_total_tokens or KV_POOL_TOKENS,
        max_running_requests=args.max_running_requests,
        scheduler=scheduler,
        reasoning_parser=args.reasoning_parser,
        tool_call_parser=args.tool_call_parser,
        weight_version=args.weight_version,
        v1_loads=not args.no_v1_loads,
        abort_request=not args.no_abort_request,
        exit_after=args.exit_after,
        stream_interval=args.stream_interval,
        incremental_streaming_output=args.incremental_streaming_output,
        disconnect_check=args.disconnect_check,
        prefix_cache=args.prefix_cache,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s sglang_sim %(message)s")
    model = FakeModel(args.tokenizer_dir, args.reasoning, args.output_style, args.length_dist, args.reasoning_parser)
    settings = build_settings(args, model.tokenizer)
    faults = Faults(
        rate_503=args.rate_503,
        rate_drop=args.rate_drop,
        rate_abort=args.rate_abort,
        rate_slow=args.rate_slow,
        slow_seconds=args.slow_seconds,
        token_delay=args.token_delay,
        fail_first_n=args.fail_first_n,
        malformed=args.malformed,
        no_workers=args.no_workers,
    )
    server = SimServer((args.host, args.port), settings, faults, model)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # A short poll interval keeps shutdown (and so a harness restart) quick.
    serving = threading.Thread(target=server.serve_forever, args=(0.05,), name="serve", daemon=True)
    serving.start()
    print(f"SIM READY port={server.server_address[1]} pid={os.getpid()}", flush=True)
    mode = f"scheduler, {args.max_total_tokens} KV tokens" if settings.scheduler else "per-request"
    log.info("listening on %s:%d (SGLang %s, %s)", args.host, server.server_address[1], settings.version, mode)
    stop.wait()
    log.info("shutting down")
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
