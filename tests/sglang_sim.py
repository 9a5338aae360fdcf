"""A faithful stand-in for an SGLang server's native HTTP API, for tests.

This module owns the simulator: a real loopback HTTP server (stdlib ``ThreadingHTTPServer``,
HTTP/1.1 keep-alive) that answers ``/generate`` and the informational endpoints the way SGLang
0.5.23 or 0.5.14 does (``/work/shared/sglang_api.md`` is the reference: status codes, error body
shapes, finish reasons, aborts, auth), with a deterministic fake model and injectable faults.

The fake model decodes the prompt, takes the last user message U and answers
``<think>Reasoning about: U</think>Answer: U`` followed by EOS. When the prompt already ends with
``<think>`` (Kimi-K2.5 style) the opening tag is left out, when it ends with ``</think>`` (thinking
switched off by the template) or with ``--no-reasoning`` only the answer is written. Output is
truncated at ``max_new_tokens`` exactly as SGLang does, and ``text`` is decoded with the request's
``skip_special_tokens`` (default true), so special think tags vanish from ``text`` as they do on a
real server.

Faults (503 queue full, dropped connection, abort with partial output, slow answer) are decided
per request from ``--fault-seed``, the request's token ids and how often the same ids were seen
before, so a run makes the same decisions whatever the thread interleaving. Fault rates, the
per-token delay and ``fail_first_n`` can be changed at runtime through ``POST /sim/config``;
``GET /sim/stats`` reports what the server saw. ``/sim/*`` is the only non-SGLang surface and
needs no API key.

Run ``python tests/sglang_sim.py --help`` for the command line. Once listening, the process prints
exactly one line, ``SIM READY port=<port> pid=<pid>``, on stdout; everything else goes to stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import logging
import os
import random
import signal
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field, fields, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tokenizers import Tokenizer

log = logging.getLogger("sglang_sim")

VERSIONS = ("0.5.23", "0.5.14")
DEFAULT_MAX_NEW_TOKENS = 128
# The KV pool of the real CPU server in real_sglang_cpu.md; it only matters for contexts above it.
KV_POOL_TOKENS = 65536
# tp_worker.py reserves this many tokens below the context length for the scheduler-side check.
SCHEDULER_RESERVED_TOKENS = 5

# The fake model understands these chat formats; anything else is answered about the whole prompt.
USER_TURN_MARKERS = ("<|im_start|>user\n", "<|im_user|>user<|im_middle|>")
TURN_END = "<|im_end|>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

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
# SGLang's auth middleware never checks these; /sim/ is the simulator's own control surface.
AUTH_EXEMPT_PREFIXES = ("/health", "/ready", "/metrics", "/sim/")


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

    @property
    def max_req_input_len(self) -> int:
        return min(self.context_length - 1, KV_POOL_TOKENS - 1) - SCHEDULER_RESERVED_TOKENS

    @property
    def max_req_len(self) -> int:
        return min(self.context_length - 1, KV_POOL_TOKENS - 1)


# --------------------------------------------------------------------------------------------
# The fake model


class FakeModel:
    """Tokenizer plus a deterministic 'model' that echoes the last user message."""

    def __init__(self, tokenizer_dir: Path, reasoning: bool):
        self.tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
        self.reasoning = reasoning
        eos = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())["eos_token"]
        eos = eos["content"] if isinstance(eos, dict) else eos
        self.eos_id = self.tokenizer.token_to_id(eos)

    def encode_prompt(self, text: str) -> list[int]:
        # SGLang tokenizes text with the HF default add_special_tokens=True (BOS if the tokenizer
        # adds one), which is why a rendered template that already has BOS gets a second one.
        return self.tokenizer.encode(text).ids

    def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def complete(self, input_ids: list[int]) -> list[int]:
        """The full output, ending with EOS, that the model would write given unlimited tokens."""
        prompt = self.decode(input_ids, skip_special_tokens=False)
        user = last_user_message(prompt)
        answer = f"Answer: {user}"
        reasoning = f"Reasoning about: {user}"
        tail = prompt.rstrip()
        if not self.reasoning or tail.endswith(THINK_CLOSE):
            output = answer
        elif tail.endswith(THINK_OPEN):
            output = reasoning + THINK_CLOSE + answer
        else:
            output = THINK_OPEN + reasoning + THINK_CLOSE + answer
        return self.tokenizer.encode(output, add_special_tokens=False).ids + [self.eos_id]


def last_user_message(prompt: str) -> str:
    for marker in USER_TURN_MARKERS:
        start = prompt.rfind(marker)
        if start >= 0:
            start += len(marker)
            end = prompt.find(TURN_END, start)
            return prompt[start:] if end < 0 else prompt[start:end]
    return prompt


# --------------------------------------------------------------------------------------------
# Request validation: /generate body -> sequences to generate, or an HttpError


@dataclass
class Sequence:
    """One prompt x sample being generated; a /generate request holds one or more."""

    rid: str
    input_ids: list[int]
    max_new_tokens: int  # after the scheduler's clamp
    skip_special_tokens: bool
    planned: list[int] = field(default_factory=list)  # the model's whole output, EOS included
    aborted: bool = False  # set by /abort_request


@dataclass
class ParsedRequest:
    sequences: list[Sequence]
    returns_list: bool  # batch input or n > 1
    prompts: list[list[int]]  # one per prompt (not per sample), in request order


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
        prompts = [model.encode_prompt(t) for t in (text if is_batch else [text])]
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
    if body.get("stream"):
        # Not SGLang behaviour: the simulator does not speak SSE, and says so instead of guessing.
        raise value_error("sglang_sim does not simulate streaming; send stream=false.")
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
    rids = expand_rids(None if n > 1 else body.get("rid"), len(prompts) * n, single)
    for params in per_prompt:
        verify_sampling(params)
    max_new = [check_length(len(p), params, settings) for p, params in zip(prompts, per_prompt, strict=True)]

    sequences = [
        Sequence(
            rid=rids[i * n + j],
            input_ids=prompt,
            max_new_tokens=max_new[i],
            skip_special_tokens=sampling_value(params, "skip_special_tokens", True),
        )
        for i, (prompt, params) in enumerate(zip(prompts, per_prompt, strict=True))
        for j in range(n)
    ]
    return ParsedRequest(sequences, not single, prompts)


# --------------------------------------------------------------------------------------------
# Shared server state: in-flight registry, faults, statistics


@dataclass
class Job:
    """One /generate request while it generates; /abort_request reaches it through the registry."""

    sequences: list[Sequence]
    wake: threading.Event = field(default_factory=threading.Event)


@dataclass
class Plan:
    """The fault decisions for one request."""

    outcome: str  # "generate" | "drop" | "503" | "abort"
    slow: bool


class SimState:
    """Everything handler threads share, guarded by one lock."""

    def __init__(self, settings: Settings, faults: Faults):
        self.settings = settings
        self.initial_faults = faults
        self.lock = threading.Lock()
        # Live requests, which /sim/reset leaves alone: they still have to finish and unregister.
        self.inflight: dict[str, tuple[Job, Sequence]] = {}
        self.jobs_in_flight = 0
        self._reset_locked()

    def _reset_locked(self) -> None:
        self.faults = replace(self.initial_faults)
        self.fail_remaining = self.faults.fail_first_n
        self.generate_requests = 0
        self.by_outcome: dict[str, int] = {}
        self.prompt_counts: dict[str, int] = {}
        self.request_attempts: dict[str, int] = {}

    def reset(self) -> None:
        with self.lock:
            self._reset_locked()

    def configure(self, changes: dict) -> dict:
        names = {f.name for f in fields(Faults)}
        for key, value in changes.items():
            if key not in names:
                raise HttpError(400, {"error": f"unknown sim config key {key!r}; known: {sorted(names)}"})
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise HttpError(400, {"error": f"{key} must be a non-negative number"})
            if key.startswith("rate_") and value > 1:
                raise HttpError(400, {"error": f"{key} must be a probability in [0, 1]"})
        with self.lock:
            self.faults = replace(self.faults, **changes)
            if "fail_first_n" in changes:
                self.fail_remaining = int(changes["fail_first_n"])
            return asdict(self.faults)

    def current_faults(self) -> Faults:
        with self.lock:
            return replace(self.faults)

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

    def unregister(self, job: Job) -> None:
        with self.lock:
            for seq in job.sequences:
                self.inflight.pop(seq.rid, None)
            self.jobs_in_flight -= 1

    def abort(self, rid: str, abort_all: bool) -> None:
        # The scheduler matches by prefix, so aborting "job" also aborts "job_0", "job_1", ...
        with self.lock:
            for seq_rid, (job, seq) in self.inflight.items():
                if abort_all or (rid and seq_rid.startswith(rid)):
                    seq.aborted = True
                    job.wake.set()

    def record(self, outcome: str, prompts: list[list[int]], rid) -> None:
        with self.lock:
            self.generate_requests += 1
            self.by_outcome[outcome] = self.by_outcome.get(outcome, 0) + 1
            if self.settings.request_log:
                line = {
                    "time": time.time(),
                    "prompt_sha1": [prompt_sha1(p) for p in prompts],
                    "rid": rid,
                    "outcome": outcome,
                }
                with self.settings.request_log.open("a") as fh:
                    fh.write(json.dumps(line) + "\n")

    def busy(self) -> bool:
        with self.lock:
            return self.jobs_in_flight > 0

    def stats(self) -> dict:
        with self.lock:
            return {
                "generate_requests": self.generate_requests,
                "completed": self.by_outcome.get("ok", 0),
                "in_flight": self.jobs_in_flight,
                "by_outcome": dict(self.by_outcome),
                "prompt_counts": dict(self.prompt_counts),
            }


# --------------------------------------------------------------------------------------------
# Generation


def run_generation(job: Job, model: FakeModel, plan: Plan, faults: Faults) -> None:
    """Produce every sequence's output, one token per step, honouring delays and aborts.

    The sequences of a request advance in lockstep, as they would in one scheduler batch.
    Waits are on the job's wake event, so /abort_request cuts a slow or delayed request short.
    """
    for seq in job.sequences:
        seq.planned = model.complete(seq.input_ids)
    if plan.slow:
        job.wake.wait(faults.slow_seconds)
    produced = 0
    pending = list(job.sequences)
    while pending:
        still_running = []
        for seq in pending:
            target = min(len(seq.planned), seq.max_new_tokens)
            fault_abort = plan.outcome == "abort" and produced >= target // 2
            if seq.aborted or fault_abort:
                seq.aborted = True
                seq.planned = seq.planned[:produced]
            elif produced >= target:
                seq.planned = seq.planned[:target]
            else:
                still_running.append(seq)
        pending = still_running
        if pending:
            produced += 1
            if faults.token_delay > 0 and job.wake.wait(faults.token_delay):
                job.wake.clear()


def response_item(seq: Sequence, model: FakeModel, settings: Settings, started: float) -> dict:
    output = seq.planned
    if seq.aborted:
        finish = dict(ABORTED)
        text_ids = output
    elif len(output) >= seq.max_new_tokens:
        # SGLang checks the length limit before EOS, so an EOS landing on the last allowed token
        # still reports "length" and stays in the text.
        finish = {"type": "length", "length": seq.max_new_tokens}
        text_ids = output
    else:
        finish = {"type": "stop", "matched": model.eos_id}
        text_ids = output[:-1]
    meta = {
        "id": seq.rid,
        "finish_reason": finish,
        "prompt_tokens": len(seq.input_ids),
        "weight_version": "default",
        "num_retractions": 0,
    }
    if settings.version == "0.5.23":
        meta["reasoning_tokens"] = 0
    meta |= {
        "completion_tokens": len(output),
        "cached_tokens": 0,
    }
    if settings.version == "0.5.23":
        # Seen in the real 0.5.23 server's answers (CPU run), though not in the source notes.
        meta |= {
            "weight_versions": [{"version": "default", "start": 0, "end": len(output)}],
            "cached_tokens_details": None,
            "dp_rank": None,
        }
    meta |= {
        "e2e_latency": time.monotonic() - started,
        "response_sent_to_client_ts": time.time(),
    }
    return {
        "text": model.decode(text_ids, skip_special_tokens=seq.skip_special_tokens),
        "output_ids": output,
        "meta_info": meta,
    }


# --------------------------------------------------------------------------------------------
# HTTP


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
        path = self.path.split("?", 1)[0]
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
            "tokenizer_path": s.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
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
        return 200, {
            "model_path": s.model_path,
            "tokenizer_path": s.model_path,
            "served_model_name": s.served_model_name,
            # The launch argument, not the model's length: null unless --context-length was given
            # (as the real server reports); clients read the length from /v1/models.
            "context_length": None,
            "tp_size": 1,
            "dp_size": 1,
            "max_running_requests": 4096,
            "reasoning_parser": None,
            "max_total_num_tokens": KV_POOL_TOKENS,
            "max_req_input_len": s.max_req_input_len,
            "startup_time": self.server.started,
            "internal_states": [{"last_gen_throughput": 0.0}],
            "version": s.version,
            "frontend": "python",
        }

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
        body = self._json(raw)
        self.server.state.abort(body.get("rid") or "", bool(body.get("abort_all")))
        return 200, None

    def generate(self, raw):
        started = time.monotonic()
        state, settings, model = self.server.state, self.server.settings, self.server.model
        outcome, prompts, rid = "http_500", [], None
        try:
            body = self._json(raw)
            rid = body.get("rid") if isinstance(body, dict) else None
            parsed = parse_generate(body, settings, model)
            prompts = parsed.prompts
            job = Job(parsed.sequences)
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
                run_generation(job, model, plan, state.current_faults())
            finally:
                state.unregister(job)
            items = [response_item(seq, model, settings, started) for seq in job.sequences]
            outcome = "aborted" if any(seq.aborted for seq in job.sequences) else "ok"
            return 200, items if parsed.returns_list else items[0]
        except HttpError as error:
            outcome = f"http_{error.status}"
            raise
        finally:
            state.record(outcome, prompts, rid)

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
            "  python tests/sglang_sim.py --tokenizer-dir /tmp/tok --port 30000\n"
            "  python tests/sglang_sim.py --tokenizer-dir /tmp/tok --version 0.5.14 --api-key k\n"
            "  python tests/sglang_sim.py --tokenizer-dir /tmp/tok --fault-seed 7 \\\n"
            "      --rate-503 0.2 --rate-drop 0.05 --request-log /tmp/sim.jsonl\n"
        ),
    )
    add = parser.add_argument
    add(
        "--tokenizer-dir",
        type=Path,
        required=True,
        help="HF tokenizer dir (tokenizer.json, config.json)",
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
    add("--request-log", type=Path, help="append one JSON line per /generate request to this file")
    return parser.parse_args(argv)


def build_settings(args: argparse.Namespace, tokenizer: Tokenizer) -> Settings:
    config_file = args.tokenizer_dir / "config.json"
    config = json.loads(config_file.read_text()) if config_file.exists() else {}
    model_path = args.tokenizer_path_report or str(args.tokenizer_dir)
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
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s sglang_sim %(message)s")
    model = FakeModel(args.tokenizer_dir, args.reasoning)
    settings = build_settings(args, model.tokenizer)
    faults = Faults(
        rate_503=args.rate_503,
        rate_drop=args.rate_drop,
        rate_abort=args.rate_abort,
        rate_slow=args.rate_slow,
        slow_seconds=args.slow_seconds,
        token_delay=args.token_delay,
        fail_first_n=args.fail_first_n,
    )
    server = SimServer((args.host, args.port), settings, faults, model)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    # A short poll interval keeps shutdown (and so a harness restart) quick.
    serving = threading.Thread(target=server.serve_forever, args=(0.05,), name="serve", daemon=True)
    serving.start()
    print(f"SIM READY port={server.server_address[1]} pid={os.getpid()}", flush=True)
    log.info("listening on %s:%d (SGLang %s)", args.host, server.server_address[1], settings.version)
    stop.wait()
    log.info("shutting down")
    server.shutdown()
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
