"""The simulator's settings and shared constants: SGLang versions, protocol constants, the HTTP error type,
the fault, scheduler and server settings, and output length distributions."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path

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
    reject_all: bool = False  # /generate answers SGLang's 400 at once, whatever it is sent
    # smg 1.13 in front (docs/sglang_api.md §11): the first N /generate answer its admission shed (429,
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
    prefix_cache: bool = False  # report cached_tokens from a prefix cache of finished requests (else 0)

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
