"""A faithful stand-in for an SGLang server's native HTTP API, for tests and benchmarks.

This module owns the simulator: a real loopback HTTP server (stdlib ``ThreadingHTTPServer``,
HTTP/1.1 keep-alive) that answers ``/generate`` and the informational endpoints the way SGLang
0.5.23 or 0.5.14 does (``/work/shared/sglang_api.md`` is the reference: status codes, error body
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

Run ``python tests/support/sglang_sim.py --help`` for the command line. Once listening, the process prints
exactly one line, ``SIM READY port=<port> pid=<pid>``, on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import hmac
import json
import logging
import os
import random
import re
import signal
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import asdict, dataclass, field, fields, replace
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import sim_logprobs
from sim_streaming import STREAM_POLL, ChunkStream, Watch
from tokenizers import Tokenizer

log = logging.getLogger("sglang_sim")

VERSIONS = ("0.5.23", "0.5.14")
DEFAULT_MAX_NEW_TOKENS = 128
# The KV pool of the real CPU server in real_sglang_cpu.md; it only matters for contexts above it.
KV_POOL_TOKENS = 65536
# tp_worker.py reserves this many tokens below the context length for the scheduler-side check.
SCHEDULER_RESERVED_TOKENS = 5

# Prompt markers (in the last user turn) for the waste and loop guard tests: ``[sim:loop]`` makes
# the model repeat LOOP_SENTENCE until max_new_tokens, ``[sim:long=N]`` makes its output N ids long.
SIM_MARKER = re.compile(r"\[sim:(?:(?P<loop>loop)|long=(?P<long>\d+))\]")
LOOP_SENTENCE = " Wait, let me check that step again."
LOOP_LENGTH = 1 << 16
# How far back a continuation's partial output may begin (the longest output the simulator writes).
MAX_CONTINUED_OUTPUT = LOOP_LENGTH + 64
FILLER_WORDS = (
    "apple", "river", "stone", "cloud", "number", "garden", "signal", "window", "market", "candle",
    "forest", "engine", "silver", "planet", "bridge", "letter", "shadow", "harbor", "pencil", "valley",
    "rocket", "mirror", "ladder", "button", "circle", "meadow", "thread", "castle", "summer", "anchor",
    "copper", "island", "lantern", "marble", "orchid", "puzzle", "quartz", "ribbon", "saddle", "tunnel",
    "velvet", "walnut", "yellow", "zipper", "basket", "canyon", "dragon", "falcon", "glacier", "hammer",
)  # fmt: skip
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
# Turn headers of the chat formats the fake model reads (see the module docstring); each named
# group is one format, and END_MARKERS says where a turn of that format ends.
TURN_HEADER = re.compile(
    r"<\|im_start\|>(?P<chatml>[^\n<]*)\n"
    r"|<\|im_(?P<kimi>user|system)\|>(?P<kimi_name>[^<]*)<\|im_middle\|>"
    r"|<\|start\|>(?P<harmony>[^<]*)(?:<\|channel\|>[^<]*)?<\|message\|>"
    r"|<\|start_header_id\|>(?P<llama>[^<]*)<\|end_header_id\|>\n\n"
    r"|(?P<ds_user><｜User｜>)"
    r"|(?P<ds_tool><｜tool▁output▁begin｜>)"
)
END_MARKERS = {
    "chatml": "<|im_end|>",
    "kimi": "<|im_end|>",
    "harmony": "<|end|>",
    "llama": "<|eot_id|>",
    "ds_user": "<｜Assistant｜>",
    "ds_tool": "<｜tool▁output▁end｜>",
}
OUTPUT_STYLES = ("think", "kimi_tool", "qwen_tool", "harmony", "harmony_tool")
TOOL_NAME = "lookup"
HARMONY_RETURN = "<|return|>"
# Reasoning parsers whose end-of-thinking marker is not </think>.
THINK_END_BY_PARSER = {"gpt-oss": "<|end|>"}
# The [S23] request contract: sampling keys in the order its "unknown field" message lists them.
CONTRACT_SAMPLING_KEYS = (
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
    "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "no_stop_trim", "stream_interval", "logit_bias",
    "sampling_seed", "custom_params", "beam_width", "watermark", "choice",
)  # fmt: skip
# Scalar fields whose JSON type the contract checks, by the serde name its messages use.
# Compound fields (stop, logit_bias, ...) are accepted as sent: their messages are not documented.
CONTRACT_TYPES = {
    **dict.fromkeys(
        ("max_new_tokens", "min_new_tokens", "top_k", "n", "stream_interval", "sampling_seed",
         "beam_width"), "i64"),
    **dict.fromkeys(
        ("temperature", "top_p", "min_p", "frequency_penalty", "presence_penalty",
         "repetition_penalty"), "f64"),
    **dict.fromkeys(
        ("ignore_eos", "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim"),
        "a boolean"),
    **dict.fromkeys(("json_schema", "regex", "ebnf", "structural_tag"), "a string"),
}  # fmt: skip
CONTRACT_TOP_LEVEL_TYPES = {"stream": "a boolean"}

QUEUE_FULL_BODY = {
    "object": "error",
    "message": "The request queue is full.",
    "type": "503",
    "param": None,
    "code": 503,
}
ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
# What the tokenizer manager answers for a request aborted before the scheduler ran it.
ABORTED_WAITING = {"type": "abort", "message": "Abort in waiting queue"}
# sglang-router's answer when no worker can take a request (text/plain, router.rs).
NO_WORKERS_TEXT = "No available workers (all circuits open or unhealthy)"
# SGLang's auth middleware never checks these; /sim/ is the simulator's own control surface.
AUTH_EXEMPT_PREFIXES = ("/health", "/ready", "/metrics", "/sim/")
MALFORMED_KINDS = (
    "finish_reason_list", "prompt_tokens_string", "no_finish_reason",
    "negative_completion_tokens", "bad_gzip", "no_meta_info",
)  # fmt: skip
PAUSE_MODES = ("abort", "retract", "in_place")

# SGLang's scheduling constants (schedule_policy.py, environ.py, 0.5.23 defaults).
CLIP_MAX_NEW_TOKENS = 4096
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO = INIT_NEW_TOKEN_RATIO * 0.14
NEW_TOKEN_RATIO_DECAY = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS = 20
DEFAULT_MAX_RUNNING_REQUESTS = 4096
# gen_throughput is averaged over this many seconds of recent output.
THROUGHPUT_WINDOW = 5.0


def prompt_sha1(input_ids: list[int]) -> str:
    """The key ``/sim/stats`` and the request log use for one prompt's token ids."""
    return hashlib.sha1(",".join(map(str, input_ids)).encode()).hexdigest()


class HttpError(Exception):
    """An error response, raised anywhere in request handling and sent by the handler.

    ``body`` is JSON-encoded unless it is a ``str``, which is sent as plain text.
    """

    def __init__(self, status: int, body):
        super().__init__(status)
        self.status = status
        self.body = body


def value_error(message: str) -> HttpError:
    """SGLang turns a ValueError from validation into this 400 shape."""
    return HttpError(400, {"error": {"message": message}})


# Starlette's answer to an exception nothing caught.
INTERNAL_SERVER_ERROR = HttpError(500, "Internal Server Error")


# --------------------------------------------------------------------------------------------
# Configuration


@dataclass
class Faults:
    """The runtime-changeable behaviour (``POST /sim/config`` takes these names)."""

    rate_503: float = 0.0
    rate_drop: float = 0.0
    rate_abort: float = 0.0
    rate_slow: float = 0.0
    slow_seconds: float = 2.0
    token_delay: float = 0.0
    fail_first_n: int = 0
    malformed: str | None = None  # one of MALFORMED_KINDS: every 200 /generate answer is broken so
    no_workers: bool = False  # /generate answers sglang-router's 503 "No available workers"
    # smg 1.13 in front (sglang_api.md §11): the first N /generate answer its admission shed (429,
    # Retry-After, x-smg-error-code); answers name a worker from ``worker_ids`` (comma-separated, by
    # arrival); after ``garbage_after`` answers the last worker (or the server) answers "!!!!" to the end.
    shed_first_n: int = 0
    shed_retry_after: float = 2.0
    worker_ids: str = ""
    garbage_after: int | None = None


@dataclass(frozen=True)
class SchedulerConfig:
    """The scheduler mode's knobs (``--max-total-tokens`` switches the mode on)."""

    max_total_tokens: int
    max_running_requests: int
    step_time: float  # seconds per decode step ...
    step_time_per_req: float  # ... plus this much per running request
    prefill_time_per_token: float  # ... plus this much per prompt token admitted in the step


@dataclass(frozen=True)
class Settings:
    """What the server was started with; fixed for the life of the process."""

    model_path: str
    served_model_name: str
    api_key: str | None
    context_length: int
    version: str
    reasoning: bool
    max_vocab: int
    fault_seed: int
    request_log: Path | None
    model_type: str
    tokenizer_path: str = ""
    kv_pool_tokens: int = KV_POOL_TOKENS
    max_running_requests: int = DEFAULT_MAX_RUNNING_REQUESTS
    scheduler: SchedulerConfig | None = None
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    weight_version: str = "default"
    v1_loads: bool = True
    abort_request: bool = True  # False: POST /abort_request answers 404, as behind smg 1.13
    exit_after: int | None = None
    stream_interval: int = 1
    incremental_streaming_output: bool = False
    disconnect_check: float = 4.0  # seconds between checks of a plain request's client (SGLang: 4)

    @property
    def max_req_input_len(self) -> int:
        return min(self.context_length - 1, self.kv_pool_tokens - 1) - SCHEDULER_RESERVED_TOKENS

    @property
    def max_req_len(self) -> int:
        return min(self.context_length - 1, self.kv_pool_tokens - 1)


# Pareto shape of ``--output-len-dist longtail:LO-HI``: median 1.6 x LO, mean about 3 x LO before the
# cap, one answer in a hundred over 21 x LO.
LONGTAIL_ALPHA = 1.5


@dataclass(frozen=True)
class LengthDist:
    """Output lengths (EOS included) per prompt, drawn from a hash of its ids: a prompt always gets
    the same length. ``longtail`` is a Pareto tail from ``low`` cut at ``high``: most answers short,
    a few many times longer, as a reasoning model's are."""

    kind: str  # fixed | uniform | longtail
    low: int
    high: int

    def length(self, key: str) -> int:
        draw = int(key, 16)
        if self.kind == "longtail":
            unit = (draw % 2**53) / 2**53  # in [0, 1)
            return min(self.high, int(self.low / (1.0 - unit) ** (1.0 / LONGTAIL_ALPHA)))
        return self.low + draw % (self.high - self.low + 1)


def parse_length_dist(spec: str) -> LengthDist | None:
    """``model`` -> None; ``fixed:N``, ``uniform:LO-HI``, ``longtail:LO-HI`` -> a LengthDist. Raises ValueError."""
    if spec == "model":
        return None
    kind, _, value = spec.partition(":")
    if kind == "fixed" and value.isdigit():
        low = high = int(value)
    elif kind in ("uniform", "longtail") and re.fullmatch(r"\d+-\d+", value):
        low, high = map(int, value.split("-"))
    else:
        raise ValueError(f"expected model, fixed:N, uniform:LO-HI or longtail:LO-HI, got {spec!r}")
    if not 1 <= low <= high:
        raise ValueError(f"lengths must satisfy 1 <= LO <= HI, got {spec!r}")
    return LengthDist(kind, low, high)


# --------------------------------------------------------------------------------------------
# The fake model


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


class FakeModel:
    """Tokenizer plus a deterministic 'model' that answers the last user or tool turn."""

    def __init__(
        self,
        tokenizer_dir: Path,
        reasoning: bool,
        style: str = "think",
        length_dist: LengthDist | None = None,
        reasoning_parser: str | None = None,
    ):
        self.tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
        self.reasoning = reasoning
        self.style = style
        self.length_dist = length_dist
        self.stop_ids = self._stop_ids(tokenizer_dir)
        if not self.stop_ids:
            raise ValueError(
                f"{tokenizer_dir}: no EOS token in tokenizer_config.json, config.json or generation_config.json"
            )
        self.eos_id = self.stop_ids[0]
        self.pad_id = self.encode_text(".")[-1]
        # What 0.5.23 counts reasoning tokens up to; None without --reasoning-parser.
        self.think_end_ids: list[int] | None = None
        if reasoning_parser:
            self.think_end_ids = self.encode_text(THINK_END_BY_PARSER.get(reasoning_parser, THINK_CLOSE))

    def _stop_ids(self, tokenizer_dir: Path) -> list[int]:
        ids: list[int] = []
        eos = read_json(tokenizer_dir / "tokenizer_config.json").get("eos_token")
        eos = eos["content"] if isinstance(eos, dict) else eos
        eos_id = self.tokenizer.token_to_id(eos) if isinstance(eos, str) else None
        if eos_id is not None:
            ids.append(eos_id)
        for name in ("config.json", "generation_config.json"):
            value = read_json(tokenizer_dir / name).get("eos_token_id")
            for token in value if isinstance(value, list) else [value]:
                if isinstance(token, int) and token not in ids:
                    ids.append(token)
        return ids

    def encode_prompt(self, text: str) -> list[int]:
        # SGLang tokenizes text with the HF default add_special_tokens=True (BOS if the tokenizer
        # adds one), which is why a rendered template that already has BOS gets a second one.
        return self.tokenizer.encode(text).ids

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def planned(self, seq: Sequence) -> list[int]:
        """The output of one sequence: the model's, or a sick worker's "!" to the length limit."""
        if seq.garbled:
            return self.encode_text("!")[:1] * seq.max_new_tokens
        return self.complete(seq.input_ids, seq.variation)

    def complete(self, input_ids: list[int], variation: int = 0) -> list[int]:
        """The output, ending with a stop id unless it loops, that the model would write given
        unlimited tokens (``variation`` pad tokens before the stop id: a seeded sample, see
        seeded_variation). Greedy and stateless, as a model is: when the ids are a prompt followed
        by the start of this model's output for it (a continuation: prompt + partial ids), the
        answer is the rest of that output.

        A ``<think>`` that ends the ids can be the template's (Kimi-style) or the model's first
        token; the text is the same either way. Without a ``[sim:...]`` marker it is the prompt's,
        as before continuations existed; with one it is the model's, so ``[sim:long=N]`` stays N ids
        long whatever the partial. Lengths from ``--output-len-dist`` therefore hold across a
        continuation only for partials longer than that one token and prompts not ending in it."""
        marked = SIM_MARKER.search(self.decode(input_ids, skip_special_tokens=False)) is not None
        for split in self._continuation_splits(input_ids, marked):
            rest = self._continued(input_ids, split, variation)
            if rest is not None:
                return rest
        return self._complete_prompt(input_ids, variation)

    def _continued(self, input_ids: list[int], split: int, variation: int = 0) -> list[int] | None:
        full = self._complete_prompt(input_ids[:split], variation)
        partial = len(input_ids) - split
        return full[partial:] if input_ids[split:] == full[:partial] else None

    def _continuation_splits(self, input_ids: list[int], marked: bool) -> list[int]:
        """Where a partial output could begin, longest partial first: positions whose ids begin
        one of the output's forms (full think block, open think tag left out, no think block)."""
        tail = self.decode(input_ids[-8:], skip_special_tokens=False)
        if not marked and tail.rstrip().endswith(THINK_OPEN):
            return []
        starts = self._output_starts
        firsts = {ids[0] for ids in starts}
        end = len(input_ids)
        return [
            i
            for i in range(max(1, end - MAX_CONTINUED_OUTPUT), end)
            if input_ids[i] in firsts and any(input_ids[i : i + len(ids)] == ids[: end - i] for ids in starts)
        ]

    @functools.cached_property
    def _output_starts(self) -> list[list[int]]:
        starts = [THINK_OPEN + "Reasoning", "Reasoning", "Answer", "<|channel|>", "<tool_call>"]
        starts += ["<|tool_calls_section_begin|>"]
        return [ids for ids in (self.encode_text(text) for text in starts) if ids]

    def _complete_prompt(self, input_ids: list[int], variation: int = 0) -> list[int]:
        prompt = self.decode(input_ids, skip_special_tokens=False)
        kind, message = last_turn(prompt)
        marker = SIM_MARKER.search(message)
        if marker and marker["loop"] is not None:
            return self._looping(prompt)
        ids = self.encode_text(self.output_text(prompt))
        if not ids or ids[-1] not in self.stop_ids:
            ids.append(self.eos_id)
        if variation:
            ids = ids[:-1] + [self.pad_id] * variation + ids[-1:]
        if marker and marker["long"]:
            return self._lengthened(prompt, input_ids, ids, int(marker["long"]))
        if self.length_dist is None:
            return ids
        length = self.length_dist.length(prompt_sha1(input_ids))
        body, stop = ids[:-1], ids[-1]
        if length <= len(ids):
            return body[: length - 1] + [stop]
        return body + [self.pad_id] * (length - len(ids)) + [stop]

    def _looping(self, prompt: str) -> list[int]:
        """``[sim:loop]``: the start of the reasoning, then one sentence over and over, never a stop."""
        head = self.output_text(prompt)
        reasoning = f"Reasoning about: {last_turn(prompt)[1]}"
        cut = head.find(reasoning)
        head = head[: cut + len(reasoning)] if cut >= 0 else ""
        ids = self.encode_text(head + LOOP_SENTENCE)
        sentence = self.encode_text(LOOP_SENTENCE)
        repeats = max(1, (LOOP_LENGTH - len(ids)) // max(1, len(sentence)) + 1)
        return ids + sentence * repeats

    def _lengthened(self, prompt: str, input_ids: list[int], ids: list[int], length: int) -> list[int]:
        """``[sim:long=N]``: exactly N ids (stop id included), the reasoning (else the answer)
        lengthened with varied words that never repeat a pattern, so a loop guard stays quiet."""
        text = self.output_text(prompt)
        kind, message = last_turn(prompt)
        for part in (f"Reasoning about: {message}", f"Answer: {message}"):
            at = text.find(part)
            if at >= 0:
                cut = at + len(part)
                break
        else:
            cut = len(text)
        before = self.encode_text(text[:cut])
        after = ids[len(before) :] if ids[: len(before)] == before else ids[-1:]
        words = random.Random(prompt_sha1(input_ids))
        filler: list[int] = []
        while len(before) + len(filler) + len(after) < length:
            filler += self.encode_text(" " + " ".join(words.choice(FILLER_WORDS) for _ in range(64)))
        body = (before + filler[: max(0, length - len(before) - len(after))] + after)[: length - 1]
        return body + [ids[-1]]

    def output_text(self, prompt: str) -> str:
        kind, message = last_turn(prompt)
        reasoning, answer = f"Reasoning about: {message}", f"Answer: {message}"
        if kind == "user" and self.style == "harmony_tool":
            arguments = json.dumps({"query": message}, ensure_ascii=False)
            return (
                f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant<|channel|>commentary "
                f"to=functions.{TOOL_NAME} <|constrain|>json<|message|>{arguments}<|call|>"
            )
        if self.style in ("harmony", "harmony_tool"):
            final = f"<|channel|>final<|message|>{answer}{HARMONY_RETURN}"
            if not self.reasoning:
                return final
            return f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant{final}"
        if kind == "user" and self.style == "kimi_tool":
            arguments = json.dumps({"query": message}, ensure_ascii=False)
            answer = (
                f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{TOOL_NAME}:0"
                f"<|tool_call_argument_begin|>{arguments}<|tool_call_end|><|tool_calls_section_end|>"
            )
        elif kind == "user" and self.style == "qwen_tool":
            call = json.dumps({"name": TOOL_NAME, "arguments": {"query": message}}, ensure_ascii=False)
            answer = f"<tool_call>\n{call}\n</tool_call>"
        tail = prompt.rstrip()
        if not self.reasoning or tail.endswith(THINK_CLOSE):
            return answer
        if tail.endswith(THINK_OPEN):
            return reasoning + THINK_CLOSE + answer
        return THINK_OPEN + reasoning + THINK_CLOSE + answer

    def reasoning_tokens(self, output: list[int]) -> int:
        """0.5.23's count for a request with require_reasoning: tokens through the end marker."""
        end = self.think_end_ids
        if not end:
            return 0
        for i in range(len(output) - len(end) + 1):
            if output[i : i + len(end)] == end:
                return i + len(end)
        return len(output)


def last_turn(prompt: str) -> tuple[str, str]:
    """("user" | "tool", U) for the prompt's last user or tool turn (see the module docstring)."""
    found: tuple[str, str, int] | None = None  # kind, format, content start
    for match in TURN_HEADER.finditer(prompt):
        fmt = str(match.lastgroup) if match.lastgroup != "kimi_name" else "kimi"
        kind = turn_kind(fmt, match)
        if kind:
            found = (kind, fmt, match.end())
    if found is None:
        return "user", prompt
    kind, fmt, start = found
    end = prompt.find(END_MARKERS[fmt], start)
    content = prompt[start:] if end < 0 else prompt[start:end]
    if fmt == "chatml" and kind == "tool" and "<tool_response>" in content:
        inner = content[content.rfind("<tool_response>") + len("<tool_response>") :]
        content = inner.split("</tool_response>", 1)[0]
    elif fmt == "kimi" and kind == "tool" and content.startswith("## Return of "):
        content = content.partition("\n")[2]
    return kind, content.strip() if kind == "tool" else content


def turn_kind(fmt: str, match: re.Match) -> str | None:
    if fmt == "chatml":
        role = match["chatml"]
        if role == "tool":
            return "tool"
        if role == "user":
            following = match.string[match.end() : match.end() + 64].lstrip()
            return "tool" if following.startswith("<tool_response>") else "user"
        return None
    if fmt == "kimi":
        if match["kimi"] == "user":
            return "user"
        following = match.string[match.end() : match.end() + 13]
        return "tool" if match["kimi_name"] == "tool" or following == "## Return of " else None
    if fmt == "harmony":
        role = match["harmony"].strip()
        return "user" if role == "user" else "tool" if role.startswith("functions.") else None
    if fmt == "llama":
        role = match["llama"]
        return "user" if role == "user" else "tool" if role in ("ipython", "tool") else None
    return "user" if fmt == "ds_user" else "tool"


# --------------------------------------------------------------------------------------------
# Request validation: /generate body -> sequences to generate, or an HttpError


@dataclass(eq=False)
class Sequence:
    """One prompt x sample being generated; a /generate request holds one or more."""

    rid: str
    input_ids: list[int]
    max_new_tokens: int  # after the scheduler's clamp
    skip_special_tokens: bool
    require_reasoning: bool = False
    variation: int = 0  # pad tokens of a seeded sample (seeded_variation)
    planned: list[int] = field(default_factory=list)  # the model's whole output, stop id included
    garbled: bool = False  # a sick worker's answer: "!" to the length limit (Faults.garbage_after)
    aborted: bool = False  # set by /abort_request
    # Scheduler mode: progress, and how the request fared in the queue.
    produced: int = 0
    retractions: int = 0
    enqueued_at: float = 0.0
    queue_time: float = 0.0
    abort_at: int | None = None  # the rate_abort fault ends the sequence after this many tokens
    aborted_waiting: bool = False  # aborted before the scheduler ran it (or after a retraction)
    job: Job | None = None
    stream_interval: int = 1  # the request's sampling key, else the server's --stream-interval
    logprobs: sim_logprobs.LogprobRequest | None = None  # return_logprob's options (sim_logprobs.py)

    @property
    def target(self) -> int:
        return min(len(self.planned), self.max_new_tokens)


@dataclass
class ParsedRequest:
    sequences: list[Sequence]
    returns_list: bool  # batch input or n > 1
    prompts: list[list[int]]  # one per prompt (not per sample), in request order
    stream: bool = False


def json_type_description(value) -> str:
    """How serde names an unexpected JSON value in an 'invalid type' message."""
    if isinstance(value, bool):
        return f"boolean `{str(value).lower()}`"
    if isinstance(value, int):
        return f"integer `{value}`"
    if isinstance(value, float):
        return f"floating point `{value!r}`"
    if isinstance(value, str):
        return f"string {json.dumps(value)}"
    return "sequence" if isinstance(value, list) else "map"


def matches_type(value, expected: str) -> bool:
    if value is None:  # every contract field is optional
        return True
    if expected == "i64":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "f64":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected == "a boolean":
        return isinstance(value, bool)
    return isinstance(value, str)


def contract_error(body: dict, version: str) -> HttpError | None:
    """The [S23] contract check, or the [S14] equivalent: an uncaught TypeError (500)."""
    problem = None
    for key, value in body.items():
        expected = CONTRACT_TOP_LEVEL_TYPES.get(key)
        if expected and not matches_type(value, expected):
            problem = f"invalid type: {json_type_description(value)}, expected {expected}"
            break
        if key == "sampling_params":
            problem = sampling_contract_problem(value)
            if problem:
                break
    if problem is None:
        return None
    if version == "0.5.23":
        return HttpError(400, {"error": problem})
    # [S14] passes the keys to SamplingParams(**kwargs): an unknown one raises TypeError, and a
    # wrongly typed value raises TypeError at its first comparison in verify(). Nothing catches it.
    return INTERNAL_SERVER_ERROR


def sampling_contract_problem(sampling) -> str | None:
    for params in sampling if isinstance(sampling, list) else [sampling or {}]:
        if not isinstance(params, dict):
            return f"invalid type: {json_type_description(params)}, expected struct SamplingParams"
        for key, value in params.items():
            if key not in CONTRACT_SAMPLING_KEYS:
                expected = ", ".join(f"`{k}`" for k in CONTRACT_SAMPLING_KEYS)
                return f"unknown field `{key}`, expected one of {expected}"
            expected_type = CONTRACT_TYPES.get(key)
            if expected_type and not matches_type(value, expected_type):
                return f"invalid type: {json_type_description(value)}, expected {expected_type}"
    return None


def seeded_variation(params: dict) -> int:
    """Pad tokens a seeded, sampled request adds to its answer: 0..3 from the seed, 0 when greedy or unseeded."""
    seed, temperature = params.get("sampling_seed"), params.get("temperature")
    if not isinstance(seed, int) or not isinstance(temperature, (int, float)) or temperature <= 0:
        return 0
    return int(hashlib.sha1(str(seed).encode()).hexdigest(), 16) % 4


def sampling_value(params: dict, key: str, default):
    value = params.get(key)
    return default if value is None else value


def verify_sampling(params: dict) -> None:
    """SamplingParams.verify(): the range checks a batch client can trip over."""
    temperature = sampling_value(params, "temperature", 1.0)
    top_p = sampling_value(params, "top_p", 1.0)
    top_k = sampling_value(params, "top_k", -1)
    max_new = params.get("max_new_tokens")
    if temperature < 0:
        raise value_error(f"temperature must be non-negative, got {temperature}.")
    if not 0 < top_p <= 1:
        raise value_error(f"top_p must be in (0, 1], got {top_p}.")
    if top_k != -1 and top_k < 1:
        raise value_error(f"top_k must be -1 (disable), or at least 1, got {top_k}.")
    if max_new is not None and max_new < 0:
        raise value_error(f"max_new_tokens must be at least 0, got {max_new}.")


def normalize_prompts(body: dict, model: FakeModel) -> tuple[list[list[int]], bool]:
    """The prompts as token ids, and whether the request was a batch."""
    text, input_ids = body.get("text"), body.get("input_ids")
    if text is None and input_ids is None:
        raise value_error("Either text, input_ids or input_embeds should be provided.")
    # With both given, the real 0.5.23 server answers 200 from input_ids (seen on CPU).
    if input_ids is None:
        is_batch = isinstance(text, list)
        texts: list = text if isinstance(text, list) else [text]
        prompts = [model.encode_prompt(t) for t in texts]
    else:
        is_batch = bool(input_ids) and isinstance(input_ids[0], list)
        prompts = input_ids if is_batch else [input_ids]
    if not prompts or any(len(p) == 0 for p in prompts):
        raise value_error("input_ids cannot be empty.")
    for prompt in prompts:
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in prompt):
            # Not SGLang wording: a well-formed client never sends this.
            raise value_error("input_ids must hold integer token ids.")
    return prompts, is_batch


def expand_rids(rid, count: int, single: bool) -> list[str]:
    if rid is None:
        return [uuid.uuid4().hex for _ in range(count)]
    if isinstance(rid, str):
        return [rid] if single else [f"{rid}_{i}" for i in range(count)]
    if len(rid) != count:
        raise value_error("The specified rids length mismatch with the batch_size for batch processing.")
    duplicates = sorted({r for r in rid if rid.count(r) > 1})
    if duplicates:
        raise value_error(f"Duplicate request IDs detected within the request: {duplicates}")
    return list(rid)


def check_length(n_input: int, params: dict, settings: Settings) -> int:
    """The tokenizer- and scheduler-side length checks; returns the clamped max_new_tokens."""
    context = settings.context_length
    if n_input >= context:
        raise value_error(f"The input ({n_input} tokens) is longer than the model's context length ({context} tokens).")
    requested = params.get("max_new_tokens")
    if requested is not None and n_input + requested > context:
        raise value_error(
            "Requested token count exceeds the model's maximum context length of "
            f"{context} tokens. You requested a total of {n_input + requested} tokens: "
            f"{n_input} tokens from the input messages and {requested} tokens for the "
            "completion. Please reduce the number of tokens in the input messages or the "
            "completion to fit within the limit."
        )
    limit = settings.max_req_input_len
    if n_input >= limit:
        raise value_error(
            f"Input length ({n_input} tokens) exceeds the maximum allowed length ({limit} tokens). "
            "Use a shorter input or enable --allow-auto-truncate."
        )
    # The scheduler silently clamps whatever was asked for (or the default) to what still fits.
    wanted = DEFAULT_MAX_NEW_TOKENS if requested is None else requested
    return min(wanted, settings.max_req_len - n_input - 1)


def parse_generate(body, settings: Settings, model: FakeModel) -> ParsedRequest:
    """Validate a /generate body in SGLang's order: contract, inputs, rids, ranges, lengths."""
    if not isinstance(body, dict):
        raise INTERNAL_SERVER_ERROR
    error = contract_error(body, settings.version)
    if error:
        raise error
    prompts, is_batch = normalize_prompts(body, model)

    sampling = body.get("sampling_params") or {}
    if isinstance(sampling, list):
        if len(sampling) != len(prompts):
            # Wording not taken from SGLang.
            raise value_error("The number of sampling_params does not match the batch size.")
        per_prompt = sampling
    else:
        per_prompt = [sampling] * len(prompts)
    n_samples = {sampling_value(params, "n", 1) for params in per_prompt}
    if len(n_samples) > 1:
        # Wording not taken from SGLang.
        raise value_error("The n parameter must be the same for all sampling_params.")
    n = n_samples.pop()

    # n > 1 gives every sample a fresh id, so the caller's rid does not appear in the response.
    single = not is_batch and n == 1
    stream = body.get("stream") is True
    if stream and not single:
        # Not SGLang behaviour: SGLang streams batches with an "index" per chunk; the simulator does not.
        raise value_error("sglang_sim streams single requests (one prompt, n=1) only.")
    rids = expand_rids(None if n > 1 else body.get("rid"), len(prompts) * n, single)
    for params in per_prompt:
        verify_sampling(params)
    try:
        logprobs = [sim_logprobs.parse(body, params) for params in per_prompt]
    except ValueError as exc:
        raise value_error(str(exc)) from None
    max_new = [check_length(len(p), params, settings) for p, params in zip(prompts, per_prompt, strict=True)]

    sequences = [
        Sequence(
            rid=rids[i * n + j],
            input_ids=prompt,
            max_new_tokens=max_new[i],
            skip_special_tokens=sampling_value(params, "skip_special_tokens", True),
            require_reasoning=body.get("require_reasoning") is True,
            variation=seeded_variation(params),
            stream_interval=params.get("stream_interval") or settings.stream_interval,
            logprobs=logprobs[i],
        )
        for i, (prompt, params) in enumerate(zip(prompts, per_prompt, strict=True))
        for j in range(n)
    ]
    return ParsedRequest(sequences, not single, prompts, stream)


# --------------------------------------------------------------------------------------------
# Shared server state: in-flight registry, faults, statistics


@dataclass(eq=False)
class Job:
    """One /generate request while it generates; /abort_request reaches it through the registry."""

    sequences: list[Sequence]
    wake: threading.Event = field(default_factory=threading.Event)  # aborts, pause changes
    done: threading.Event = field(default_factory=threading.Event)  # scheduler mode: all finished
    unfinished: int = 0
    advanced: threading.Event = field(default_factory=threading.Event)  # scheduler mode: a step, a finish
    streamed: bool = False  # scheduler mode: wake the handler when a chunk is due, to send it
    due: int = 1  # ... that is, once this many tokens are out


@dataclass
class Plan:
    """The fault decisions for one request."""

    outcome: str  # "generate" | "drop" | "503" | "abort"
    slow: bool


class BusyClock:
    """Accumulates the time some condition (e.g. 'a request is running') holds."""

    def __init__(self) -> None:
        self.total = 0.0
        self.since: float | None = None

    def update(self, busy: bool, now: float) -> None:
        if busy and self.since is None:
            self.since = now
        elif not busy and self.since is not None:
            self.total += now - self.since
            self.since = None

    def read(self, now: float) -> float:
        return self.total + (now - self.since if self.since is not None else 0.0)

    def reset(self, now: float) -> None:
        self.total = 0.0
        if self.since is not None:
            self.since = now


class CountClock:
    """Accumulates a count integrated over time (running sequences x seconds)."""

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0
        self.since = time.monotonic()

    def update(self, count: int, now: float) -> None:
        self.total += self.count * max(0.0, now - self.since)
        self.count, self.since = count, max(now, self.since)

    def read(self, now: float) -> float:
        return self.total + self.count * max(0.0, now - self.since)

    def reset(self, now: float) -> None:
        self.total, self.since = 0.0, now


class Throughput:
    """Output tokens per second over the last THROUGHPUT_WINDOW seconds (/v1/loads gen_throughput)."""

    def __init__(self) -> None:
        self.events: deque[tuple[float, int]] = deque()
        self.total = 0

    def add(self, now: float, tokens: int) -> None:
        self.events.append((now, tokens))
        self.total += tokens
        self._trim(now)

    def rate(self, now: float) -> float:
        self._trim(now)
        return self.total / THROUGHPUT_WINDOW

    def _trim(self, now: float) -> None:
        while self.events and self.events[0][0] < now - THROUGHPUT_WINDOW:
            self.total -= self.events.popleft()[1]


def validate_config_change(key: str, value) -> None:
    """Raise HttpError unless ``value`` suits the Faults field ``key``."""
    if key == "malformed":
        if value is not None and value not in MALFORMED_KINDS:
            raise HttpError(400, {"error": f"malformed must be null or one of {list(MALFORMED_KINDS)}"})
    elif key == "worker_ids":
        if not isinstance(value, str):
            raise HttpError(400, {"error": "worker_ids must be a string of comma-separated names"})
    elif key == "garbage_after" and value is None:
        pass
    elif key == "no_workers":
        if not isinstance(value, bool):
            raise HttpError(400, {"error": "no_workers must be true or false"})
    elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise HttpError(400, {"error": f"{key} must be a non-negative number"})
    elif key.startswith("rate_") and value > 1:
        raise HttpError(400, {"error": f"{key} must be a probability in [0, 1]"})


class SimState:
    """Everything handler threads share, guarded by one lock (the scheduler has its own)."""

    def __init__(self, settings: Settings, faults: Faults):
        self.settings = settings
        self.initial_faults = faults
        self.lock = threading.Lock()
        # Live requests, which /sim/reset leaves alone: they still have to finish and unregister.
        self.inflight: dict[str, tuple[Job, Sequence]] = {}
        self.jobs_in_flight = 0
        self.http_in_flight = 0  # /generate requests received and not yet answered
        self.arrivals = 0  # /generate requests ever received, for --exit-after
        self.paused = False  # /pause_generation in the per-thread engine
        self.scheduler: Scheduler | None = None
        self.busy_clock = BusyClock()  # per-thread engine: time with a request generating
        self.throughput = Throughput()
        self._reset_locked()

    def _reset_locked(self) -> None:
        self.faults = replace(self.initial_faults)
        self.fail_remaining = self.faults.fail_first_n
        self.shed_remaining = self.faults.shed_first_n
        self.sick_answers = 0
        self.generate_requests = 0
        self.by_outcome: dict[str, int] = {}
        self.prompt_counts: dict[str, int] = {}
        self.request_attempts: dict[str, int] = {}
        self.peak_in_flight = self.http_in_flight
        self.peak_sequences = len(self.inflight)
        self.first_request_at: float | None = None
        self.last_finish_at: float | None = None
        self.tokens_generated = 0
        self.busy_clock.reset(time.monotonic())

    def reset(self) -> None:
        with self.lock:
            self._reset_locked()
        if self.scheduler:
            self.scheduler.reset_stats()

    def configure(self, changes: dict) -> dict:
        names = {f.name for f in fields(Faults)}
        for key, value in changes.items():
            if key not in names:
                raise HttpError(400, {"error": f"unknown sim config key {key!r}; known: {sorted(names)}"})
            validate_config_change(key, value)
        with self.lock:
            self.faults = replace(self.faults, **changes)
            if "fail_first_n" in changes:
                self.fail_remaining = int(changes["fail_first_n"])
            if "shed_first_n" in changes:
                self.shed_remaining = int(changes["shed_first_n"])
            return asdict(self.faults)

    def current_faults(self) -> Faults:
        with self.lock:
            return replace(self.faults)

    def take_shed(self) -> bool:
        """Whether this /generate is one of the first ``shed_first_n``: shed by the admission limit."""
        with self.lock:
            if self.shed_remaining <= 0:
                return False
            self.shed_remaining -= 1
            return True

    def sick_answer(self) -> bool:
        """Count an answer of the sick worker; True once it is past ``garbage_after`` answers."""
        with self.lock:
            self.sick_answers += 1
            after = self.faults.garbage_after
            return after is not None and self.sick_answers > after

    def arrive(self) -> int:
        """Count a /generate request as received; returns its arrival number (1-based)."""
        with self.lock:
            self.arrivals += 1
            self.http_in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.http_in_flight)
            if self.first_request_at is None:
                self.first_request_at = time.time()
            return self.arrivals

    def plan(self, prompts: list[list[int]]) -> Plan:
        """Count the request's prompts and decide its faults."""
        keys = [prompt_sha1(p) for p in prompts]
        request_key = keys[0] if len(keys) == 1 else hashlib.sha1(" ".join(keys).encode()).hexdigest()
        with self.lock:
            for key in keys:
                self.prompt_counts[key] = self.prompt_counts.get(key, 0) + 1
            attempt = self.request_attempts.get(request_key, 0)
            self.request_attempts[request_key] = attempt + 1
            faults = self.faults
            if self.fail_remaining > 0:
                self.fail_remaining -= 1
                return Plan("503", slow=False)
        # Seeded by content and attempt rather than by arrival order, so concurrent clients see
        # the same decisions on every run; a retry of the same prompt rolls fresh dice.
        rng = random.Random(f"{self.settings.fault_seed}:{request_key}:{attempt}")
        roll, slow_roll = rng.random(), rng.random()
        outcome = "generate"
        for name, rate in (
            ("drop", faults.rate_drop),
            ("503", faults.rate_503),
            ("abort", faults.rate_abort),
        ):
            if roll < rate:
                outcome = name
                break
            roll -= rate
        return Plan(outcome, slow=slow_roll < faults.rate_slow)

    def register(self, job: Job) -> None:
        with self.lock:
            for seq in job.sequences:
                if seq.rid in self.inflight:
                    raise value_error(f"Duplicate request ID detected: {seq.rid}")
            for seq in job.sequences:
                self.inflight[seq.rid] = (job, seq)
            self.jobs_in_flight += 1
            self.peak_sequences = max(self.peak_sequences, len(self.inflight))
            self.busy_clock.update(True, time.monotonic())

    def unregister(self, job: Job) -> None:
        with self.lock:
            for seq in job.sequences:
                self.inflight.pop(seq.rid, None)
            self.jobs_in_flight -= 1
            self.busy_clock.update(self.jobs_in_flight > 0, time.monotonic())

    def abort(self, rid: str, abort_all: bool) -> None:
        # The tokenizer manager passes an abort on only when its rid is in flight (one tokenizer
        # worker, the default); the scheduler then matches by prefix, so aborting "row#s1" also
        # aborts "row#s10", while "job" alone reaches no part of a batch "job" (job_0, job_1).
        with self.lock:
            if not abort_all and rid not in self.inflight:
                return
            for seq_rid, (job, seq) in self.inflight.items():
                if abort_all or (rid and seq_rid.startswith(rid)):
                    seq.aborted = True
                    job.wake.set()
        if self.scheduler:
            self.scheduler.notice_aborts()

    def set_paused(self, paused: bool) -> None:
        """Pause or resume the per-thread engine (the scheduler pauses itself)."""
        with self.lock:
            self.paused = paused
            for job, _ in self.inflight.values():
                job.wake.set()

    def is_paused(self) -> bool:
        with self.lock:
            return self.paused

    def record(self, outcome: str, prompts: list[list[int]], rid, answer: list[dict] | None) -> None:
        """Account for an answered (or dropped) /generate request; ``answer`` is what a 200 sent."""
        now = time.time()
        with self.lock:
            self.http_in_flight -= 1
            self.last_finish_at = now
            self.generate_requests += 1
            self.by_outcome[outcome] = self.by_outcome.get(outcome, 0) + 1
            tokens = sum(len(item["output_ids"]) for item in answer or [])
            self.tokens_generated += tokens
            if tokens and self.scheduler is None:
                self.throughput.add(time.monotonic(), tokens)
            if self.settings.request_log:
                line = {
                    "time": now,
                    "prompt_sha1": [prompt_sha1(p) for p in prompts],
                    "rid": rid,
                    "outcome": outcome,
                }
                if answer is not None:
                    line["answers"] = answer
                with self.settings.request_log.open("a") as fh:
                    fh.write(json.dumps(line) + "\n")

    def busy(self) -> bool:
        with self.lock:
            return self.jobs_in_flight > 0

    def running_sequences(self) -> list[Sequence]:
        with self.lock:
            return [seq for _, seq in self.inflight.values()]

    def stats(self) -> dict:
        now = time.monotonic()
        with self.lock:
            result = {
                "generate_requests": self.generate_requests,
                "completed": self.by_outcome.get("ok", 0),
                "in_flight": self.jobs_in_flight,
                "by_outcome": dict(self.by_outcome),
                "prompt_counts": dict(self.prompt_counts),
                "mode": "scheduler" if self.scheduler else "per_request",
                "http_in_flight": self.http_in_flight,
                "peak_in_flight": self.peak_in_flight,
                "first_request_at": self.first_request_at,
                "last_finish_at": self.last_finish_at,
                "tokens_generated": self.tokens_generated,
                "running": len(self.inflight),
                "waiting": 0,
                "peak_running": self.peak_sequences,
                "peak_waiting": 0,
                "busy_time": self.busy_clock.read(now),
                "running_time": 0.0,
                "queue_time_total": 0.0,
                "queue_time_max": 0.0,
                "retractions": 0,
                "decode_steps": 0,
                "token_usage": 0.0,
            }
        if self.scheduler:
            result |= self.scheduler.stats()
        return result


# --------------------------------------------------------------------------------------------
# The scheduler mode


class Scheduler:
    """SGLang's continuous batching, reduced to what matters for a client's concurrency control.

    One thread loops over steps. Each step:

    1. drops aborted requests (running ones answer ``Aborted`` with their partial output, waiting
       ones ``Abort in waiting queue``) and those the rate_abort fault ends;
    2. admits waiting requests in FCFS order, stopping at the first that does not fit
       (head-of-line blocking, as SGLang's PrefillAdder): at most ``max_running_requests`` run,
       and a request is admitted only if ``prompt + produced + min(max_new - produced, 4096)``
       is below the pool's free tokens minus what running requests hold in reserve, which is
       ``min(max_new - produced, 4096) * new_token_ratio`` each, while a request admitted in the
       same step reserves its whole clipped estimate;
    3. retracts running requests while the pool cannot hold one more token for each (fewest
       output tokens first, longest prompt among equals, always keeping one), sending them back
       to the end of the waiting queue with their output kept (re-admission needs prompt +
       output tokens) and resetting new_token_ratio from the remaining requests, as SGLang does;
    4. waits ``step_time + step_time_per_req * batch + prefill_time_per_token * admitted prompt
       tokens + token_delay`` (an abort cuts the wait short), then gives every running request
       one token and finishes those at their stop id or max_new_tokens.

    new_token_ratio starts at 0.7, decays to 0.098 over 600 steps without retraction and resets
    when the server goes idle (SGLang's defaults). Simplifications: page size 1, no prefix cache
    (``cached_tokens`` stays 0), no chunked prefill or prefill token budget, and the prefill of
    an admitted request shares its step with the decode of the others.
    """

    def __init__(self, config: SchedulerConfig, state: SimState):
        self.config = config
        self.state = state
        self.cond = threading.Condition()
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.used = 0  # KV tokens held by running requests
        self.ratio = INIT_NEW_TOKEN_RATIO
        self.paused = False
        self.abort_pending = False
        self.busy_clock = BusyClock()
        self.running_clock = CountClock()
        self.throughput = Throughput()
        self._zero_stats()

    def _zero_stats(self) -> None:
        self.retractions = 0
        self.decode_steps = 0
        self.tokens_decoded = 0  # every token a decode step made, answered or not (bench/bench_waste.py)
        self.queue_time_total = 0.0
        self.queue_time_max = 0.0
        self.peak_running = len(self.running)
        self.peak_waiting = len(self.waiting)
        self.busy_clock.reset(time.monotonic())
        self.running_clock.reset(time.monotonic())

    def reset_stats(self) -> None:
        with self.cond:
            self._zero_stats()

    def start(self) -> None:
        threading.Thread(target=self._loop, name="scheduler", daemon=True).start()

    # -- called from handler threads

    def run_job(self, job: Job, abort_at_half: bool, watch: Watch | None = None) -> None:
        """Queue the job's sequences and block until every one has finished; with a ``watch``,
        its chunks go out as the steps pass and a client gone aborts the job."""
        now = time.monotonic()
        with self.cond:
            for seq in job.sequences:
                seq.job = job
                if abort_at_half:
                    seq.abort_at = seq.target // 2
                if seq.aborted:  # aborted while a slow fault held it back
                    seq.planned = []
                    continue
                seq.enqueued_at = now
                job.unfinished += 1
                self.waiting.append(seq)
            self.peak_waiting = max(self.peak_waiting, len(self.waiting))
            if job.unfinished == 0:
                job.done.set()
            self.cond.notify()
        if watch is None:
            job.done.wait()
            return
        while not job.done.is_set():
            job.due = watch.due() or 1
            job.advanced.wait(watch.poll)
            job.advanced.clear()
            if not job.done.is_set() and not watch.step(job.sequences[0].produced):
                for seq in job.sequences:
                    seq.aborted = True
                self.notice_aborts()
                job.done.wait()

    def notice_aborts(self) -> None:
        with self.cond:
            self.abort_pending = True
            self.cond.notify()

    def pause(self, mode: str) -> None:
        with self.cond:
            self.paused = True
            if mode == "retract":
                now = time.monotonic()
                for seq in sorted(self.running, key=lambda s: s.enqueued_at):
                    self._retract_locked(seq, now)
                self.running = []
                self._after_change_locked(now)
        if mode == "abort":
            self.state.abort("", True)

    def resume(self) -> None:
        with self.cond:
            self.paused = False
            self.cond.notify()

    def stats(self) -> dict:
        now = time.monotonic()
        with self.cond:
            return {
                "running": len(self.running),
                "waiting": len(self.waiting),
                "peak_running": self.peak_running,
                "peak_waiting": self.peak_waiting,
                "busy_time": self.busy_clock.read(now),
                "running_time": self.running_clock.read(now),
                "queue_time_total": self.queue_time_total,
                "queue_time_max": self.queue_time_max,
                "retractions": self.retractions,
                "decode_steps": self.decode_steps,
                "tokens_decoded": self.tokens_decoded,
                "token_usage": round(self.used / self.config.max_total_tokens, 4),
            }

    def load(self) -> dict:
        """The scheduler's part of a /v1/loads entry."""
        now = time.monotonic()
        with self.cond:
            waiting_tokens = sum(len(s.input_ids) + s.produced for s in self.waiting)
            return {
                "num_running_reqs": len(self.running),
                "num_waiting_reqs": len(self.waiting),
                "num_waiting_uncached_tokens": waiting_tokens,
                "num_used_tokens": self.used,
                "num_total_tokens": self.used + waiting_tokens,
                "num_active_tokens": self.used + waiting_tokens,
                "token_usage": round(self.used / self.config.max_total_tokens, 4),
                "gen_throughput": round(self.throughput.rate(now), 2),
                "retracted": sum(1 for s in self.waiting if s.retractions),
            }

    # -- the scheduler thread

    def _loop(self) -> None:
        while True:
            with self.cond:
                while self.paused or not (self.running or self.waiting):
                    self._drop_aborted_locked(time.monotonic())
                    if not (self.running or self.waiting):
                        self.ratio = INIT_NEW_TOKEN_RATIO
                    self.cond.wait()
                now = time.monotonic()
                self._drop_aborted_locked(now)
                admitted_tokens = self._admit_locked(now)
                self._retract_for_decode_locked(now)
                faults = self.state.current_faults()
                config = self.config
                step = (
                    config.step_time
                    + config.step_time_per_req * len(self.running)
                    + config.prefill_time_per_token * admitted_tokens
                    + faults.token_delay
                )
                deadline = now + step
                while self.running and not self.paused:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self.cond.wait(remaining)
                    self._drop_aborted_locked(time.monotonic())
                if not self.paused:
                    self._decode_locked(time.monotonic())
            if step <= 0:
                time.sleep(0)  # let handler threads take the lock between zero-time steps

    def _drop_aborted_locked(self, now: float) -> None:
        for seq in [s for s in self.running if s.aborted or (s.abort_at is not None and s.produced >= s.abort_at)]:
            seq.aborted = True
            self.running.remove(seq)
            self.used -= len(seq.input_ids) + seq.produced
            self._finish_locked(seq)
        if self.abort_pending:
            self.abort_pending = False
            aborted = [s for s in self.waiting if s.aborted]
            if aborted:
                self.waiting = deque(s for s in self.waiting if not s.aborted)
                for seq in aborted:
                    seq.aborted_waiting = True
                    self._account_queue_time(seq, now)
                    self._finish_locked(seq)
        self._after_change_locked(now)

    def _admit_locked(self, now: float) -> int:
        config = self.config
        reserved = sum(min(s.max_new_tokens - s.produced, CLIP_MAX_NEW_TOKENS) for s in self.running) * self.ratio
        free = config.max_total_tokens - self.used - reserved
        admitted_tokens = 0
        while self.waiting and len(self.running) < config.max_running_requests:
            seq = self.waiting[0]
            held = len(seq.input_ids) + seq.produced
            need = held + min(seq.max_new_tokens - seq.produced, CLIP_MAX_NEW_TOKENS)
            if need >= free:
                break
            free -= need
            self.waiting.popleft()
            self._account_queue_time(seq, now)
            if seq.target <= seq.produced or seq.abort_at == 0:
                # max_new_tokens 0 (n>1 warm-up) or a fault abort before the first token.
                seq.aborted = seq.aborted or seq.abort_at == 0
                self._finish_locked(seq)
                continue
            self.running.append(seq)
            self.used += held
            admitted_tokens += held
        self._after_change_locked(now)
        return admitted_tokens

    def _retract_for_decode_locked(self, now: float) -> None:
        if self.used + len(self.running) <= self.config.max_total_tokens:
            return
        # SGLang retracts from the end of this order: fewest output tokens, then longest prompt.
        order = sorted(self.running, key=lambda s: (s.produced, -len(s.input_ids)), reverse=True)
        while len(order) > 1 and self.used + len(order) > self.config.max_total_tokens:
            self._retract_locked(order.pop(), now)
        self.running = [s for s in self.running if s in order]
        decoded = sum(s.produced for s in self.running)
        wanted = sum(s.max_new_tokens for s in self.running)
        self.ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / (wanted + 1))
        self._after_change_locked(now)

    def _retract_locked(self, seq: Sequence, now: float) -> None:
        self.used -= len(seq.input_ids) + seq.produced
        seq.retractions += 1
        seq.enqueued_at = now
        self.retractions += 1
        self.waiting.append(seq)
        log.info("retracted %s after %d tokens", seq.rid, seq.produced)

    def _decode_locked(self, now: float) -> None:
        if not self.running:
            return
        self.decode_steps += 1
        self.tokens_decoded += len(self.running)
        self.ratio = max(self.ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
        self.used += len(self.running)
        self.throughput.add(now, len(self.running))
        still_running = []
        for seq in self.running:
            seq.produced += 1
            if seq.job is not None and seq.job.streamed and seq.produced >= seq.job.due:
                seq.job.advanced.set()
            if seq.abort_at is not None and seq.produced >= seq.abort_at:
                seq.aborted = True
            if seq.aborted or seq.produced >= seq.target:
                self.used -= len(seq.input_ids) + seq.produced
                self._finish_locked(seq)
            else:
                still_running.append(seq)
        self.running = still_running
        self._after_change_locked(now)

    def _finish_locked(self, seq: Sequence) -> None:
        seq.planned = seq.planned[: seq.produced]
        job = seq.job
        assert job is not None
        job.unfinished -= 1
        if job.unfinished == 0:
            job.done.set()
            job.advanced.set()

    def _account_queue_time(self, seq: Sequence, now: float) -> None:
        waited = now - seq.enqueued_at
        seq.queue_time += waited
        self.queue_time_total += waited
        self.queue_time_max = max(self.queue_time_max, seq.queue_time)

    def _after_change_locked(self, now: float) -> None:
        self.peak_running = max(self.peak_running, len(self.running))
        self.peak_waiting = max(self.peak_waiting, len(self.waiting))
        self.busy_clock.update(bool(self.running), now)
        self.running_clock.update(len(self.running), now)


# --------------------------------------------------------------------------------------------
# Generation


def run_generation(
    job: Job, model: FakeModel, plan: Plan, faults: Faults, state: SimState, watch: Watch | None = None
) -> None:
    """Produce every sequence's output, one token per step, honouring delays and aborts.

    The sequences of a request advance in lockstep, as they would in one scheduler batch.
    Waits are on the job's wake event, so /abort_request cuts a slow or delayed request short.
    While /pause_generation holds the engine, requests stop between tokens. A ``watch`` sends a
    streamed request's chunks as tokens pass and aborts the request once its client is gone.
    """
    for seq in job.sequences:
        seq.planned = model.planned(seq)
    if plan.slow:
        job.wake.wait(faults.slow_seconds)
    produced = 0
    pending = list(job.sequences)
    while pending:
        still_running = []
        for seq in pending:
            target = seq.target
            fault_abort = plan.outcome == "abort" and produced >= target // 2
            if seq.aborted or fault_abort:
                seq.aborted = True
                seq.planned = seq.planned[:produced]
            elif produced >= target:
                seq.planned = seq.planned[:target]
            else:
                still_running.append(seq)
        pending = still_running
        while pending and state.is_paused() and not any(seq.aborted for seq in pending):
            job.wake.wait()
            job.wake.clear()
        if pending and faults.token_delay > 0:
            # One wait through the tokens up to the next event (a sequence's end, or the abort
            # fault's half-way point), not one per token: at 1,000 requests in flight, per-token
            # wake-ups would make the simulator, not the client, the bottleneck. An abort or a
            # pause wakes it early; the tokens produced are those whose time has begun, as before.
            ends = [seq.target for seq in pending]
            if plan.outcome == "abort":
                ends += [seq.target // 2 for seq in pending]
            due = watch.due() if watch else None
            if due is not None:
                ends.append(due)
            steps = max(1, min((end for end in ends if end > produced), default=produced + 1) - produced)
            produced += wait_tokens(job, steps, faults.token_delay, watch)
        elif pending:
            produced += 1
        if watch and pending and not watch.step(min(produced, min(seq.target for seq in pending) - 1)):
            for seq in pending:
                seq.aborted = True


def wait_tokens(job: Job, steps: int, delay: float, watch: Watch | None) -> int:
    """Wait out ``steps`` tokens of ``delay`` seconds; returns how many began. An abort or a pause
    wakes it early, and so does a client gone (looked at every ``watch.poll`` seconds)."""
    began = time.monotonic()
    deadline = began + steps * delay
    while (remaining := deadline - time.monotonic()) > 0:
        if job.wake.wait(min(remaining, watch.poll) if watch else remaining):
            job.wake.clear()
            break
        if watch and not watch.check():
            break
    else:
        return steps
    return min(steps, 1 + int((time.monotonic() - began) / delay))


def response_item(
    seq: Sequence, model: FakeModel, settings: Settings, started: float, count: int | None = None
) -> dict:
    """The answer item of a finished sequence, or with ``count`` a streamed chunk's: the first
    ``count`` output ids, no finish reason yet."""
    output = seq.planned if count is None else seq.planned[:count]
    text_ids = output
    if seq.aborted_waiting and count is None:
        # The tokenizer manager answers a waiting-queue abort itself, with fewer meta_info keys.
        return {
            "text": model.decode(output, skip_special_tokens=seq.skip_special_tokens),
            "output_ids": output,
            "meta_info": {
                "id": seq.rid,
                "finish_reason": dict(ABORTED_WAITING),
                "weight_version": settings.weight_version,
                "e2e_latency": time.monotonic() - started,
                "completion_tokens": len(output),
            },
        }
    finish: dict[str, str | int | None] | None
    if count is not None:
        finish = None
    elif seq.aborted:
        finish = dict(ABORTED)
    elif len(output) >= seq.max_new_tokens:
        # SGLang checks the length limit before EOS, so an EOS landing on the last allowed token
        # still reports "length" and stays in the text.
        finish = {"type": "length", "length": seq.max_new_tokens}
    else:
        finish = {"type": "stop", "matched": output[-1]}
        text_ids = output[:-1]
    meta = {
        "id": seq.rid,
        "finish_reason": finish,
        "prompt_tokens": len(seq.input_ids),
        "weight_version": settings.weight_version,
        "num_retractions": seq.retractions,
    }
    if settings.version == "0.5.23":
        meta["reasoning_tokens"] = model.reasoning_tokens(output) if seq.require_reasoning else 0
    meta |= {
        "completion_tokens": len(output),
        "cached_tokens": 0,
    }
    if settings.version == "0.5.23":
        # Seen in the real 0.5.23 server's answers (CPU run), though not in the source notes.
        meta |= {
            "weight_versions": [{"version": settings.weight_version, "start": 0, "end": len(output)}],
            "cached_tokens_details": None,
            "dp_rank": None,
        }
    if seq.logprobs is not None and count is None:
        meta |= sim_logprobs.meta_fields(seq.logprobs, seq.input_ids, output, settings.max_vocab)
    meta |= {
        "e2e_latency": time.monotonic() - started,
        "response_sent_to_client_ts": time.time(),
    }
    return {
        "text": model.decode(text_ids, skip_special_tokens=seq.skip_special_tokens),
        "output_ids": output,
        "meta_info": meta,
    }


SHED_CODE = "admission_queue_full"


def malform(item: dict, kind: str) -> dict:
    """Break one /generate answer item the way ``kind`` says (see MALFORMED_KINDS)."""
    meta = item.get("meta_info", {})
    if kind == "finish_reason_list":
        meta["finish_reason"] = [meta.get("finish_reason")]
    elif kind == "prompt_tokens_string":
        meta["prompt_tokens"] = str(meta.get("prompt_tokens"))
    elif kind == "no_finish_reason":
        meta.pop("finish_reason", None)
    elif kind == "negative_completion_tokens":
        meta["completion_tokens"] = -max(1, len(item["output_ids"]))
    elif kind == "no_meta_info":
        item.pop("meta_info", None)
    return item


# --------------------------------------------------------------------------------------------
# HTTP


# generate()'s body when it has written a streamed answer itself.
STREAMED = object()


def is_value_error(error: HttpError) -> bool:
    """A 400 of SGLang's ValueError shape (``value_error``), not the request contract's."""
    body = error.body
    return error.status == 400 and isinstance(body, dict) and isinstance(body.get("error"), dict)


def logged_answers(job: Job, items: list[dict]) -> list[dict]:
    """What ``--request-log`` keeps of a 200 answer, one entry per sequence."""
    return [
        {
            "rid": seq.rid,
            "input_ids": seq.input_ids,
            "output_ids": item["output_ids"],
            "text": item["text"],
            "finish_reason": item["meta_info"]["finish_reason"],
        }
        for seq, item in zip(job.sequences, items, strict=True)
    ]


class DropConnection(Exception):
    """Close the socket without answering (simulates a worker or proxy dying mid-request)."""


class SimServer(ThreadingHTTPServer):
    daemon_threads = True
    # Many concurrent clients connect at once; the default backlog of 5 would refuse some.
    request_queue_size = 1024

    def __init__(self, address, settings: Settings, faults: Faults, model: FakeModel):
        super().__init__(address, SimHandler)
        self.settings = settings
        self.state = SimState(settings, faults)
        self.model = model
        self.started = time.time()
        self.scheduler: Scheduler | None = None
        if settings.scheduler:
            self.scheduler = self.state.scheduler = Scheduler(settings.scheduler, self.state)
            self.scheduler.start()


class SimHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, the client's delayed ACK would add
    # ~40 ms to every response on a kept-alive connection.
    disable_nagle_algorithm = True
    server: SimServer

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def log_message(self, fmt, *args):
        log.info("%s %s", self.address_string(), fmt % args)

    # -- plumbing

    def _dispatch(self, method: str) -> None:
        path, _, query = self.path.partition("?")
        self.query = {key: values[-1] for key, values in parse_qs(query).items()}
        self.extra_headers: dict[str, str] = {}
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            status, body = self._route(method, path, raw)
        except HttpError as error:
            status, body = error.status, error.body
        except DropConnection:
            self.close_connection = True
            return
        except Exception:
            log.exception("unhandled error on %s %s", method, path)
            status, body = INTERNAL_SERVER_ERROR.status, INTERNAL_SERVER_ERROR.body
        if body is STREAMED:
            return
        try:
            self._send(status, body)
        except ConnectionError:
            # The client gave up (its own timeout, say) before the answer was ready.
            log.info("client went away before the %s %s answer", method, path)
            self.close_connection = True

    def _route(self, method: str, path: str, raw: bytes):
        # SGLang's auth middleware runs before routing, so even unknown paths answer 401.
        if not self._authorized(path):
            raise HttpError(401, {"error": "Unauthorized"})
        routes = ROUTES.get(path)
        if routes is None or (path in VERSION_GATED and self.server.settings.version != "0.5.23"):
            raise HttpError(404, {"detail": "Not Found"})
        handler = routes.get(method)
        if handler is None:
            raise HttpError(405, {"detail": "Method Not Allowed"})
        return handler(self, raw)

    def _authorized(self, path: str) -> bool:
        key = self.server.settings.api_key
        if key is None or path.startswith(AUTH_EXEMPT_PREFIXES):
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {key}".encode())

    def _send(self, status: int, body) -> None:
        """Send a whole response: None is an empty body, a str plain text, anything else JSON."""
        if body is None:
            payload, content_type = b"", None
        elif isinstance(body, str):
            payload, content_type = body.encode(), "text/plain; charset=utf-8"
        else:
            payload = json.dumps(body, separators=(",", ":")).encode()
            content_type = "application/json"
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for name, value in self.extra_headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    @staticmethod
    def _json(raw: bytes):
        try:
            return json.loads(raw or b"{}")
        except ValueError as exc:
            # FastAPI's binding-error shape; the exact message is not SGLang's.
            raise HttpError(
                400,
                {
                    "object": "error",
                    "message": f"Invalid JSON body: {exc}",
                    "type": "Bad Request",
                    "param": None,
                    "code": 400,
                },
            ) from exc

    # -- SGLang endpoints

    def health(self, raw):
        return 200, None

    def model_info(self, raw):
        s = self.server.settings
        info = {
            "model_path": s.model_path,
            "served_model_name": s.served_model_name,
            "tokenizer_path": s.tokenizer_path or s.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": s.weight_version,
            "load_format": "auto",
            "reasoning_parser": s.reasoning_parser,
            "tool_call_parser": s.tool_call_parser,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": s.model_type,
            "architectures": ["Qwen2ForCausalLM"],
        }
        if s.version == "0.5.14":
            info = {key: info[key] for key in S14_MODEL_INFO_KEYS}
        return 200, info

    def server_info(self, raw):
        s = self.server.settings
        args = {
            "model_path": s.model_path,
            "tokenizer_path": s.tokenizer_path or s.model_path,
            "served_model_name": s.served_model_name,
            # The launch argument, not the model's length: null unless --context-length was given
            # (as the real server reports); clients read the length from /v1/models.
            "context_length": None,
            "tp_size": 1,
            "dp_size": 1,
            "max_running_requests": s.max_running_requests,
            "max_queued_requests": None,
            "max_total_tokens": s.scheduler.max_total_tokens if s.scheduler else None,
            "page_size": 1,
            "schedule_policy": "fcfs",
            "schedule_conservativeness": 1.0,
            "reasoning_parser": s.reasoning_parser,
            "tool_call_parser": s.tool_call_parser,
            "weight_version": s.weight_version,
        }
        internal_state = {
            **args,
            "world_size": 1,
            "startup_time": self.server.started,
            "effective_max_running_requests_per_dp": s.max_running_requests,
            "last_gen_throughput": self._gen_throughput(),
        }
        return 200, {
            **args,
            "max_total_num_tokens": s.kv_pool_tokens,
            "max_req_input_len": s.max_req_input_len,
            "startup_time": self.server.started,
            "internal_states": [internal_state],
            "version": s.version,
            "frontend": "python",
        }

    def _gen_throughput(self) -> float:
        if self.server.scheduler:
            return self.server.scheduler.load()["gen_throughput"]
        state = self.server.state
        with state.lock:
            return round(state.throughput.rate(time.monotonic()), 2)

    def loads(self, raw):
        """GET /v1/loads as 0.5.23's v1_loads.py answers it for one DP rank on a CPU."""
        s = self.server.settings
        if not s.v1_loads:
            raise HttpError(404, {"detail": "Not Found"})
        include = self.query.get("include")
        sections = {part.strip() for part in include.split(",")} if include else None
        valid = {"core", "memory", "spec", "lora", "disagg", "queues", "all"}
        if sections is not None and not sections <= valid:
            raise HttpError(
                400,
                {"detail": f"Invalid include sections: {sections - valid}. Valid options: {sorted(valid)}"},
            )
        dp_rank = self.query.get("dp_rank")
        loads = [] if dp_rank not in (None, "0") else [self._load(sections)]
        return 200, {
            "timestamp": datetime.now(UTC).isoformat(),
            "version": s.version,
            "accelerator": None,
            "num_accelerators": 1,
            "loads": loads,
        }

    def _load(self, sections: set[str] | None) -> dict:
        s = self.server.settings
        if self.server.scheduler:
            current = self.server.scheduler.load()
        else:
            # The per-thread engine has no queue: everything in flight is running.
            running = self.server.state.running_sequences()
            used = sum(len(seq.input_ids) for seq in running)
            current = {
                "num_running_reqs": len(running),
                "num_waiting_reqs": 0,
                "num_waiting_uncached_tokens": 0,
                "num_used_tokens": used,
                "num_total_tokens": used,
                "num_active_tokens": used,
                "token_usage": round(used / s.kv_pool_tokens, 4),
                "gen_throughput": self._gen_throughput(),
                "retracted": 0,
            }
        load = {
            "timestamp": time.time(),
            "dp_rank": 0,
            "num_running_reqs": current["num_running_reqs"],
            "num_waiting_reqs": current["num_waiting_reqs"],
            "num_waiting_uncached_tokens": current["num_waiting_uncached_tokens"],
            "num_used_tokens": current["num_used_tokens"],
            "num_total_tokens": current["num_total_tokens"],
            "num_active_tokens": current["num_active_tokens"],
            "num_prealloc_ready_tokens": 0,
            "max_total_num_tokens": s.kv_pool_tokens,
            "max_running_requests": s.max_running_requests,
            "token_usage": current["token_usage"],
            "gen_throughput": current["gen_throughput"],
            "cache_hit_rate": 0.0,
            # 0.5.23 never sets max_running_requests_under_SLO, so its utilization stays 0.
            "utilization": 0.0,
            "total_prefill_uncached_tokens": 0,
            "total_prefill_busy_us": 0,
            "decode_moments": None,
        }
        if sections == {"core"}:
            return load
        chosen = sections or {"all"}
        every = "all" in chosen
        if every or "memory" in chosen:
            load["memory"] = {"weight_gb": 0.0, "kv_cache_gb": 0.0, "graph_gb": 0.0, "token_capacity": s.kv_pool_tokens}
        if every or "disagg" in chosen:
            load["disaggregation"] = {
                "mode": "null", "prefill_bootstrap_queue_reqs": 0, "prefill_inflight_queue_reqs": 0,
                "decode_prealloc_queue_reqs": 0, "decode_transfer_queue_reqs": 0,
                "decode_retracted_queue_reqs": 0, "kv_transfer_speed_gb_s": 0.0, "kv_transfer_latency_ms": 0.0,
            }  # fmt: skip
        if every or "queues" in chosen:
            load["queues"] = {
                "waiting": current["num_waiting_reqs"], "grammar": 0, "paused": 0,
                "retracted": current["retracted"], "prealloc_ready": 0,
            }  # fmt: skip
        return load

    def models(self, raw):
        s = self.server.settings
        card = {
            "id": s.served_model_name,
            "object": "model",
            "created": int(self.server.started),
            "owned_by": "sglang",
            "root": s.served_model_name,
            "parent": None,
            "max_model_len": s.context_length,
        }
        return 200, {"object": "list", "data": [card]}

    def flush_cache(self, raw):
        # Same text either way; the status says whether it happened (not with requests running).
        status = 400 if self.server.state.busy() else 200
        return status, (
            "Cache flushed.\nPlease check backend logs for more details. (When there are running "
            "or waiting requests, the operation will not be performed.)\n"
        )

    def abort_request(self, raw):
        if not self.server.settings.abort_request:
            raise HttpError(404, {"detail": "Not Found"})
        body = self._json(raw)
        self.server.state.abort(body.get("rid") or "", bool(body.get("abort_all")))
        return 200, None

    def pause_generation(self, raw):
        body = self._json(raw)
        mode = body.get("mode", "abort") if isinstance(body, dict) else None
        if mode not in PAUSE_MODES:
            raise HttpError(400, {"error": f"mode must be one of {list(PAUSE_MODES)}"})
        state = self.server.state
        if self.server.scheduler:
            self.server.scheduler.pause(mode)
        else:
            # The per-thread engine has no queue to retract into: retract behaves like in_place.
            state.set_paused(True)
            if mode == "abort":
                state.abort("", True)
        return 200, {"message": "Generation paused successfully.", "status": "ok"}

    def continue_generation(self, raw):
        if self.server.scheduler:
            self.server.scheduler.resume()
        self.server.state.set_paused(False)
        return 200, {"message": "Generation continued successfully.", "status": "ok"}

    def generate(self, raw):
        started = time.monotonic()
        state, settings, model = self.server.state, self.server.settings, self.server.model
        arrival = state.arrive()
        if settings.exit_after is not None and arrival >= settings.exit_after:
            log.error("exiting on /generate request %d (--exit-after %d)", arrival, settings.exit_after)
            os._exit(1)
        outcome, prompts, rid, logged = "http_500", [], None, None
        streamed = False
        try:
            faults = state.current_faults()
            if faults.no_workers:
                raise HttpError(503, NO_WORKERS_TEXT)
            workers = [w for w in faults.worker_ids.split(",") if w]
            if workers:
                self.extra_headers["x-smg-routed-worker-id"] = workers[arrival % len(workers)]
            if faults.shed_first_n and state.take_shed():
                self.extra_headers |= {"Retry-After": f"{faults.shed_retry_after:g}", "x-smg-error-code": SHED_CODE}
                raise HttpError(429, {"error": {"message": "Admission queue is full", "code": SHED_CODE}})
            body = self._json(raw)
            rid = body.get("rid") if isinstance(body, dict) else None
            streamed = isinstance(body, dict) and body.get("stream") is True
            parsed = parse_generate(body, settings, model)
            prompts = parsed.prompts
            job = Job(parsed.sequences, streamed=parsed.stream)
            sick = not workers or self.extra_headers.get("x-smg-routed-worker-id") == workers[-1]
            if faults.garbage_after is not None and sick and state.sick_answer():
                for seq in job.sequences:
                    seq.garbled = True
            # The tokenizer manager rejects an in-flight rid before the scheduler sees anything.
            state.register(job)
            try:
                plan = state.plan(prompts)
                if plan.outcome == "drop":
                    outcome = "dropped"
                    raise DropConnection
                if plan.outcome == "503":
                    raise HttpError(503, QUEUE_FULL_BODY)
                self._crash_on_out_of_vocab(prompts)
                watch = self._watch(job, started)
                if self.server.scheduler:
                    for seq in job.sequences:
                        seq.planned = model.planned(seq)
                    if plan.slow:
                        job.wake.wait(faults.slow_seconds)
                    self.server.scheduler.run_job(job, abort_at_half=plan.outcome == "abort", watch=watch)
                else:
                    run_generation(job, model, plan, faults, state, watch)
            finally:
                state.unregister(job)
            items = [response_item(seq, model, settings, started) for seq in job.sequences]
            logged = logged_answers(job, items)
            outcome = "aborted" if any(seq.aborted for seq in job.sequences) else "ok"
            if watch.gone:
                outcome = "disconnected"
                raise DropConnection
            kind = state.current_faults().malformed
            if kind:
                items = [malform(item, kind) for item in items]
            if watch.stream:
                seq = job.sequences[0]
                watch.stream.finish(items[0], len(seq.planned), waiting_abort=seq.aborted_waiting)
                return 200, STREAMED
            if kind == "bad_gzip":
                self.extra_headers["Content-Encoding"] = "gzip"
            return 200, items if parsed.returns_list else items[0]
        except HttpError as error:
            outcome = f"http_{error.status}"
            if streamed and is_value_error(error):
                # Checks past the request contract run once the stream began: an error event.
                self._stream_error(error.body["error"].get("message", ""))
                return 200, STREAMED
            raise
        finally:
            state.record(outcome, prompts, rid, logged)

    def _watch(self, job: Job, started: float) -> Watch:
        """The request's client check, and for a streamed request its chunk stream (whose 200
        head goes out now: the faults decided before this point answered without one)."""
        settings, model = self.server.settings, self.server.model
        if not job.streamed:
            return Watch(self.connection, settings.disconnect_check)
        seq = job.sequences[0]
        self._stream_head()
        stream = ChunkStream(
            self.wfile,
            seq.stream_interval,
            settings.incremental_streaming_output,
            lambda count: response_item(seq, model, settings, started, count),
        )
        kind = self.server.state.current_faults().malformed
        if kind:
            stream.transform = lambda item: malform(item, kind)
        return Watch(self.connection, STREAM_POLL, stream)

    def _stream_head(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        for name, value in self.extra_headers.items():  # smg's worker header (Faults.worker_ids)
            self.send_header(name, value)
        if self.server.state.current_faults().malformed == "bad_gzip":
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _stream_error(self, message: str) -> None:
        self._stream_head()
        stream = ChunkStream(self.wfile, 1, False, lambda count: {})
        error = {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}
        stream.event(json.dumps({"error": error}, separators=(",", ":")).encode())
        stream.event(b"[DONE]")
        stream.write(b"0\r\n\r\n")

    def _crash_on_out_of_vocab(self, prompts: list[list[int]]) -> None:
        # The real scheduler dies in F.embedding and takes the whole server down with it.
        limit = self.server.settings.max_vocab
        for prompt in prompts:
            bad = next((i for i in prompt if i < 0 or i >= limit), None)
            if bad is not None:
                log.error("token id %d is outside the model vocab (%d): scheduler crashed", bad, limit)
                print("IndexError: index out of range in self", file=sys.stderr, flush=True)
                os._exit(1)

    # -- simulator control (/sim/*)

    def sim_stats(self, raw):
        return 200, self.server.state.stats()

    def sim_config_get(self, raw):
        return 200, asdict(self.server.state.current_faults())

    def sim_config_set(self, raw):
        changes = self._json(raw)
        if not isinstance(changes, dict):
            raise HttpError(400, {"error": "expected a JSON object"})
        return 200, self.server.state.configure(changes)

    def sim_reset(self, raw):
        self.server.state.reset()
        return 200, {}


ROUTES = {
    "/health": {"GET": SimHandler.health},
    "/health_generate": {"GET": SimHandler.health},
    "/model_info": {"GET": SimHandler.model_info},
    "/get_model_info": {"GET": SimHandler.model_info},
    "/server_info": {"GET": SimHandler.server_info},
    "/get_server_info": {"GET": SimHandler.server_info},
    "/v1/models": {"GET": SimHandler.models},
    "/flush_cache": {"GET": SimHandler.flush_cache, "POST": SimHandler.flush_cache},
    "/abort_request": {"POST": SimHandler.abort_request},
    "/pause_generation": {"POST": SimHandler.pause_generation},
    "/continue_generation": {"POST": SimHandler.continue_generation},
    "/v1/loads": {"GET": SimHandler.loads},
    "/generate": {"POST": SimHandler.generate, "PUT": SimHandler.generate},
    "/sim/stats": {"GET": SimHandler.sim_stats},
    "/sim/config": {"GET": SimHandler.sim_config_get, "POST": SimHandler.sim_config_set},
    "/sim/reset": {"POST": SimHandler.sim_reset},
}
S14_MODEL_INFO_KEYS = (
    "model_path", "tokenizer_path", "is_generation", "preferred_sampling_params",
    "weight_version", "has_image_understanding", "has_audio_understanding", "model_type",
    "architectures",
)  # fmt: skip
# The un-prefixed names are new in [S23]; older servers only answer the /get_ forms.
VERSION_GATED = {"/model_info", "/server_info"}


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
