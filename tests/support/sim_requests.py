"""The simulator's request validation: a /generate body -> sequences to generate, or an HttpError, as SGLang's
tokenizer manager and sampling-params checks answer."""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import sim_logprobs
from sim_config import (
    CONTRACT_SAMPLING_KEYS,
    CONTRACT_TOP_LEVEL_TYPES,
    CONTRACT_TYPES,
    DEFAULT_MAX_NEW_TOKENS,
    INTERNAL_SERVER_ERROR,
    HttpError,
    Settings,
    value_error,
)
from sim_model import FakeModel

if TYPE_CHECKING:  # a cycle at run time: only the annotations need it
    from sim_state import Job


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
    cached: int = 0  # prompt ids served from the prefix cache (--prefix-cache), its cached_tokens

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
