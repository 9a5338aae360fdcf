"""Read one scoring answer's top-k logprobs, in any of SGLang's shapes (pure).

A scoring request (``max_new_tokens: 0``, ``logprob_start_len: start - 1``, ``top_logprobs_num: K``)
answers, for the input positions start-1 .. len-1, one leading null and then one top-k row per
position start .. len-1 (docs/sglang_api.md §1; measured on the real 0.5.23 CPU server). The rows come as

- nested ``input_top_logprobs``: ``[null, [[logprob, id, text], ...], ...]`` (every SGLang);
- flat ``input_top_logprobs_val_flat`` / ``_idx_flat`` with ``input_top_logprobs_shape`` [rows, K] and
  ``input_top_logprobs_null_prefix`` (``return_flat_raw_top_logprobs``, 0.5.23);
- the same as base64 little-endian float32 / int32 under ``*_val_flat_b64`` / ``*_idx_flat_b64``.

``input_token_logprobs`` gives the logprob of the token actually at each position.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

FLAT_KEYS = ("input_top_logprobs_val_flat_b64", "input_top_logprobs_val_flat")
TRANSPORTS = ("b64", "flat", "nested")


class MissingLogprobs(ValueError):
    """The answer has no top-k rows at all: the server (or a gateway) dropped the fields."""


def payload(input_ids: list[int], start: int, top_k: int, transport: str, rid: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "input_ids": input_ids,
        "sampling_params": {"max_new_tokens": 0},
        "return_logprob": True,
        "logprob_start_len": start - 1,
        "top_logprobs_num": top_k,
    }
    if transport in ("flat", "b64"):
        body["return_flat_raw_top_logprobs"] = True
    if transport == "b64":
        body["return_flat_raw_top_logprobs_b64"] = True
    if rid is not None:
        body["rid"] = rid
    return body


def _flat(meta: dict[str, Any], rows: int) -> tuple[np.ndarray, np.ndarray]:
    shape = meta.get("input_top_logprobs_shape")
    prefix = meta.get("input_top_logprobs_null_prefix")
    if not (isinstance(shape, list) and len(shape) == 2 and prefix == 1 and shape[0] == rows):
        raise ValueError(f"flat top logprobs of shape {shape} after {prefix} nulls; expected [{rows}, K] after 1")
    if "input_top_logprobs_val_flat_b64" in meta:
        values = np.frombuffer(base64.b64decode(meta["input_top_logprobs_val_flat_b64"]), dtype="<f4")
        ids = np.frombuffer(base64.b64decode(meta["input_top_logprobs_idx_flat_b64"]), dtype="<i4")
    else:
        values = np.asarray(meta["input_top_logprobs_val_flat"], dtype=np.float32)
        ids = np.asarray(meta["input_top_logprobs_idx_flat"], dtype=np.int32)
    return ids.astype(np.int32).reshape(shape), values.astype(np.float32).reshape(shape)


def _nested(meta: dict[str, Any], rows: int) -> tuple[np.ndarray, np.ndarray]:
    nested = meta.get("input_top_logprobs")
    if not isinstance(nested, list) or len(nested) != rows + 1 or nested[0]:
        raise ValueError(
            f"input_top_logprobs has {len(nested) if isinstance(nested, list) else 'no'} entries; "
            f"expected a null and {rows} rows"
        )
    k = len(nested[1]) if rows else 0
    if any(not isinstance(row, list) or len(row) != k for row in nested[1:]):
        raise ValueError("input_top_logprobs rows differ in length")
    ids = np.array([[t[1] for t in row] for row in nested[1:]], dtype=np.int32).reshape(rows, k)
    values = np.array([[t[0] for t in row] for row in nested[1:]], dtype=np.float32).reshape(rows, k)
    return ids, values


def read_scores(meta: dict[str, Any], input_ids: list[int], start: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(topk_ids [n, K] int32, topk_logprobs [n, K] float32, token_logprob [n] float32), n = len - start.

    MissingLogprobs when the answer has no top-k fields; ValueError when they do not fit the request."""
    rows = len(input_ids) - start
    if any(key in meta for key in FLAT_KEYS):
        ids, values = _flat(meta, rows)
    elif "input_top_logprobs" in meta:
        ids, values = _nested(meta, rows)
    else:
        raise MissingLogprobs("the answer has no input_top_logprobs (nested or flat)")
    tokens = meta.get("input_token_logprobs")
    if not isinstance(tokens, list) or len(tokens) != rows + 1:
        raise ValueError(
            f"input_token_logprobs has {len(tokens) if isinstance(tokens, list) else 'no'} entries; expected {rows + 1}"
        )
    if [t[1] for t in tokens[1:]] != input_ids[start:]:
        raise ValueError("input_token_logprobs name other tokens than the ones sent")
    token = np.array([t[0] for t in tokens[1:]], dtype=np.float32)
    return ids, values, token
