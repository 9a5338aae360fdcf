"""The simulator's logprobs: SGLang 0.5.23's ``return_logprob`` fields from a deterministic toy model.

The toy model: after the tokens ``ids[:i]`` the next-token distribution over the whole vocabulary puts
logit ``HIGH - STEP * j`` on CANDIDATES tokens ``(seed + j) % vocab`` (j = 0, 1, ...; ``seed`` from the
previous token and the position) and logit 0 on every other token. So each position's top-k is its
first k candidates, in order, and every logprob is an exact log-softmax over the vocabulary (a test can
compute any of them with ``logprob_of``). As on the real server, prompt-side (input) logprobs are at
temperature 1 and output-side ones at the request's sampling temperature.

Request fields (tokenizer_manager.py ``add_logprob_to_meta_info``, io_struct.py ``GenerateReqInput``):

- ``logprob_start_len`` S >= 0: ``input_token_logprobs`` / ``input_top_logprobs`` cover the input
  positions S..len-1, the first entry null (``[null, id, null]`` / ``null``): one row per token after S.
  -1 (the default): no input side.
- ``return_flat_raw_top_logprobs``: the input side as ``input_top_logprobs_val_flat`` /
  ``_idx_flat`` (row-major [rows, k]) with ``input_top_logprobs_shape`` [rows, k] and
  ``input_top_logprobs_null_prefix`` instead of nested triples; ``return_flat_raw_output_top_logprobs``
  the same for the output side (finished answers only: with ``stream`` it is a ValueError);
  ``return_flat_raw_top_logprobs_b64``: the arrays as base64 little-endian float32 / int32 under
  ``*_val_flat_b64`` / ``*_idx_flat_b64`` (+ ``*_b64_dtype``), a ValueError without one of the two.
- the output side has one row per output token, and with ``max_new_tokens: 0`` one row: the
  distribution after the last input token (as measured on the real CPU server).
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

CANDIDATES = 64  # tokens with a raised logit at each position: the most any top-k shows
HIGH = 8.0
STEP = 0.25


@dataclass(frozen=True)
class LogprobRequest:
    top_k: int
    start: int  # logprob_start_len; -1: output side only
    flat_input: bool
    flat_output: bool
    b64: bool
    temperature: float  # the output side's; the input side is always at 1


def parse(body: dict, params: dict) -> LogprobRequest | None:
    """The request's logprob options (None without ``return_logprob``); ValueError as SGLang raises it."""
    flat_input = body.get("return_flat_raw_top_logprobs") is True
    flat_output = body.get("return_flat_raw_output_top_logprobs") is True
    b64 = body.get("return_flat_raw_top_logprobs_b64") is True
    if flat_output and body.get("stream") is True:
        raise ValueError(
            "return_flat_raw_output_top_logprobs is only set on the finished response and does not support stream=True."
        )
    if b64 and not (flat_input or flat_output):
        raise ValueError(
            "return_flat_raw_top_logprobs_b64 requires return_flat_raw_top_logprobs "
            "or return_flat_raw_output_top_logprobs."
        )
    if body.get("return_logprob") is not True:
        return None
    start = body.get("logprob_start_len")
    top_k = body.get("top_logprobs_num") or 0
    temperature = params.get("temperature")
    return LogprobRequest(
        top_k=int(top_k),
        start=-1 if start is None else int(start),
        flat_input=flat_input,
        flat_output=flat_output,
        b64=b64,
        temperature=float(temperature) if isinstance(temperature, (int, float)) and temperature > 0 else 1.0,
    )


def candidates(ids: list[int], position: int, vocab: int) -> list[int]:
    """The raised tokens at ``position`` (predicting ids[position]), most likely first."""
    previous = ids[position - 1] if position > 0 else 0
    seed = (previous * 1_000_003 + position * 7_919) % vocab
    return [(seed + j) % vocab for j in range(min(CANDIDATES, vocab))]


def _log_norm(vocab: int, count: int, temperature: float) -> float:
    raised = sum(math.exp((HIGH - STEP * j) / temperature) for j in range(count))
    return math.log(raised + (vocab - count))


def distribution(ids: list[int], position: int, vocab: int, temperature: float = 1.0) -> dict[int, float]:
    """Logprob of every raised token at ``position``; any other token has ``rest_logprob``."""
    tokens = candidates(ids, position, vocab)
    norm = _log_norm(vocab, len(tokens), temperature)
    return {token: (HIGH - STEP * j) / temperature - norm for j, token in enumerate(tokens)}


def rest_logprob(vocab: int, temperature: float = 1.0) -> float:
    return -_log_norm(vocab, min(CANDIDATES, vocab), temperature)


def logprob_of(ids: list[int], position: int, vocab: int, temperature: float = 1.0) -> float:
    """The logprob of the token at ids[position] given ids[:position]."""
    return distribution(ids, position, vocab, temperature).get(ids[position], rest_logprob(vocab, temperature))


def _top(ids: list[int], position: int, vocab: int, k: int, temperature: float) -> tuple[list[float], list[int]]:
    dist = distribution(ids, position, vocab, temperature)
    pairs = sorted(dist.items(), key=lambda item: -item[1])[:k]
    if k > len(pairs):  # only with a vocabulary smaller than k: the remaining tokens, lowest ids first
        others = [t for t in range(vocab) if t not in dist][: k - len(pairs)]
        pairs += [(t, rest_logprob(vocab, temperature)) for t in others]
    return [lp for _, lp in pairs], [t for t, _ in pairs]


def _flat(side: str, vals: list[list[float]], idxs: list[list[int]], null_prefix: int, k: int, b64: bool) -> dict:
    rows = len(vals)
    if b64:
        val_arr = np.asarray(vals, dtype=np.float32).reshape(rows, k)
        idx_arr = np.asarray(idxs, dtype=np.int32).reshape(rows, k)
        return {
            f"{side}_top_logprobs_val_flat_b64": base64.b64encode(val_arr.astype("<f4").tobytes()).decode(),
            f"{side}_top_logprobs_idx_flat_b64": base64.b64encode(idx_arr.astype("<i4").tobytes()).decode(),
            f"{side}_top_logprobs_val_flat_b64_dtype": "float32",
            f"{side}_top_logprobs_idx_flat_b64_dtype": "int32",
            f"{side}_top_logprobs_shape": [rows, k],
            f"{side}_top_logprobs_null_prefix": null_prefix,
        }
    return {
        f"{side}_top_logprobs_val_flat": [v for row in vals for v in row],
        f"{side}_top_logprobs_idx_flat": [i for row in idxs for i in row],
        f"{side}_top_logprobs_shape": [rows, k],
        f"{side}_top_logprobs_null_prefix": null_prefix,
    }


def _nested(vals: list[list[float]], idxs: list[list[int]]) -> list[list[list[Any]]]:
    return [[[v, i, None] for v, i in zip(vr, ir, strict=True)] for vr, ir in zip(vals, idxs, strict=True)]


def meta_fields(req: LogprobRequest, input_ids: list[int], output_ids: list[int], vocab: int) -> dict[str, Any]:
    """The meta_info keys a finished answer carries for ``req``."""
    ids = input_ids + output_ids
    n_in = len(input_ids)
    meta: dict[str, Any] = {}
    in_positions = range(req.start + 1, n_in) if 0 <= req.start < n_in else range(0)
    token_in: list[list[Any]] = []
    if 0 <= req.start < n_in:
        token_in = [[None, input_ids[req.start], None]]
        token_in += [[logprob_of(ids, p, vocab), ids[p], None] for p in in_positions]
    # The output side: one row per output token, or with none the distribution after the input.
    out_positions = range(n_in, len(ids)) if output_ids else range(n_in, n_in + 1)
    t = req.temperature
    meta["input_token_logprobs"] = token_in
    meta["output_token_logprobs"] = [[logprob_of(ids, p, vocab, t), ids[p], None] for p in range(n_in, len(ids))]
    meta["output_token_logprobs_length"] = len(output_ids)
    if req.top_k <= 0:
        return meta
    k = req.top_k
    in_rows = [_top(ids, p, vocab, k, 1.0) for p in in_positions]
    in_vals, in_idxs = [r[0] for r in in_rows], [r[1] for r in in_rows]
    if req.flat_input and token_in:
        meta |= _flat("input", in_vals, in_idxs, 1, k, req.b64)
    else:
        meta["input_top_logprobs"] = ([None] if token_in else []) + _nested(in_vals, in_idxs)
    out_rows = [_top(ids, p, vocab, k, t) for p in out_positions]
    out_vals, out_idxs = [r[0] for r in out_rows], [r[1] for r in out_rows]
    if req.flat_output:
        meta |= _flat("output", out_vals, out_idxs, 0, k, req.b64)
    else:
        meta["output_top_logprobs"] = _nested(out_vals, out_idxs)
    return meta
