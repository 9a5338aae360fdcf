"""Who a sample is: its seed, its request ids and its id in exported files (pure, no I/O).

With ``--samples-per-prompt N`` every selected prompt is sent N times, each time as a sample of its own,
numbered 0..N-1. A sample is known by ``(prompt id, sample)``, and everything about it derives from that
pair and ``--seed`` alone, never from the order prompts run in or which other prompts run:

    sample_seed       the request's sampling_params.sampling_seed (0 .. 2**63-1)
    draw_key          the key of the generator that draws its recipe (synthgen.data.mix)
    sample_rid        its request id: SGLang's /abort_request matches rids by prefix, so the sample is a
                      fixed-width suffix and two samples of one prompt never prefix-match each other
    export_id         its id in a training file, unique per sample
    sample_key        its key where resume keeps what is done (done sets, errors, partial turns): the prompt
                      id itself for sample 0, so a folder written before samples existed resumes as it was
    row_key           a stored row's key, the same: the one key of a row for every reader (the resume scan,
                      the report, --status, the export); two rows with one key are a duplicate

A row of sample 0 written before samples existed carries no ``sample`` key: ``row_sample`` reads it as 0.
Resume is exactly-once per key: ``sample_work`` gives the (id, sample) pairs a run still owes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

MAX_SAMPLES_PER_PROMPT = 100_000
SAMPLE_DIGITS = len(str(MAX_SAMPLES_PER_PROMPT - 1))  # fixed width: "s000001" and "s000010" share no prefix
SEED_BITS = 63  # SGLang takes sampling_seed as a signed 64-bit integer; stay non-negative
EXPORT_SEPARATOR = "@s"  # "#<k>" already names the turns of an `each` conversation
KEY_SEPARATOR = "\x1fs"  # ASCII unit separator: no prompt id a person writes holds it


def _digest(kind: str, seed: int, prompt_id: str, sample: int) -> int:
    # NUL-separated, so no (id, sample) pair can spell another's key.
    text = f"{kind}\0{seed}\0{prompt_id}\0{sample}".encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


def sample_seed(seed: int, prompt_id: str, sample: int) -> int:
    """sampling_seed of one sample: stable across reruns, one per (--seed, prompt id, sample)."""
    return _digest("seed", seed, prompt_id, sample) >> (64 - SEED_BITS)


def draw_key(seed: int, prompt_id: str, sample: int) -> int:
    """Seed of the generator that draws this sample's recipe; apart from sample_seed, so the recipe
    drawn does not correlate with the seed the server samples with."""
    return _digest("recipe", seed, prompt_id, sample)


def sample_rid(base: str, sample: int) -> str:
    """``<base>-s000003.``: a fixed-width sample number and a terminator, so with one base no rid is a
    prefix of another (an abort of one sample never aborts its siblings)."""
    check_sample(sample)
    return f"{base}-s{sample:0{SAMPLE_DIGITS}d}."


def check_sample(sample: int) -> None:
    if isinstance(sample, bool) or not isinstance(sample, int) or not 0 <= sample < MAX_SAMPLES_PER_PROMPT:
        raise ValueError(f"sample must be a whole number in 0..{MAX_SAMPLES_PER_PROMPT - 1}, got {sample!r}")


def export_id(base: str, sample: int | None) -> str:
    """``<dataset>/<id>`` for a row without samples, ``<dataset>/<id>@s<k>`` for sample k."""
    return base if sample is None else f"{base}{EXPORT_SEPARATOR}{sample}"


def row_sample(row: dict[str, Any]) -> int:
    """The sample a stored row answers: its ``sample`` key, 0 for rows written before samples existed."""
    value = row.get("sample", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return 0
    return value


def sample_key(prompt_id: str, sample: int) -> str:
    """Where resume files a sample: ``id`` for sample 0 (as before samples existed), ``id<US>s<k>`` for k > 0."""
    return prompt_id if sample == 0 else f"{prompt_id}{KEY_SEPARATOR}{sample}"


def row_key(row: dict[str, Any]) -> str | None:
    """A stored row's key: ``sample_key`` of its id and sample; None for a row without a string id."""
    rid = row.get("id")
    return sample_key(rid, row_sample(row)) if isinstance(rid, str) else None


def split_key(key: str) -> tuple[str, int]:
    """(prompt id, sample) of a key ``sample_key`` made."""
    base, sep, number = key.rpartition(KEY_SEPARATOR)
    if sep and number.isdigit():
        return base, int(number)
    return key, 0


def touched_prompts(done_keys: set[str] | frozenset[str]) -> set[str]:
    """The prompts with at least one sample done: they count toward --max-samples (a cap counts prompts),
    and a larger N adds samples to them rather than choosing new prompts."""
    return {split_key(key)[0] for key in done_keys}


def sample_work(
    prompt_ids: Sequence[str], done_keys: set[str] | frozenset[str], per_prompt: int
) -> list[tuple[str, int]]:
    """The (id, sample) pairs still owed, prompt by prompt in the order given: each sample exactly once,
    whatever earlier runs did; samples beyond ``per_prompt`` that exist are kept and never sent again."""
    return [(pid, k) for pid in prompt_ids for k in range(per_prompt) if sample_key(pid, k) not in done_keys]
