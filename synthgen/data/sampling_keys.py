"""The sampling keys: one table, read by the command line, the config's checks, recipes, provenance,
continuation and the gateway's forwarded keys (pure).

Each row is one SGLang ``sampling_params`` key and what the run knows of it: the option (``name``: the
RunConfig field or ``sampling_flags`` entry and the ``--sampling-mix`` recipe key) and its flag, the value's
type and range, whether a continuation from a partial output would draw from another distribution (the
key counts output tokens), whether smg 1.13 forwards it, and whether the run sets it
itself. A key with no flag is still sent when the user gives it in ``--sampling-params``.

A new sampling flag is one row here (with ``name``, ``flag``, ``kind``, ``must``/``within``, ``metavar`` and
``help``) and its line in docs/command-line.md's generated table (``python -m synthgen.data.sampling_keys``).

    by_name("top_p").problem(1.5)   # "must be in (0, 1]": an error says "--top-p must be in (0, 1], got 1.5"
    FLAGGED                          # the rows with a flag, in --help's order
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Why a continuation from a partial output would not be the same distribution as one whole request. A seed
# does not: SGLang draws each token from (sampling_seed, its position in the sequence) alone
# (``multinomial_with_seed``), so a continuation under the sample's seed draws what one request would have.
COUNTS_OUTPUT = "it counts output tokens"
# Who sets a key (the user may not): for every request, or for each sample of several or of a mix.
RUN = "run"
SAMPLE = "sample"
SETTERS = {RUN: "set by the run", SAMPLE: "set by the run for each sample (with samples or a mix)"}


def _any(value: float) -> bool:
    return True


@dataclass(frozen=True)
class SamplingKey:
    key: str  # SGLang's sampling_params key
    name: str | None = None  # the option (RunConfig, recipes); None: given only through --sampling-params
    flag: str | None = None  # run_inference.py's flag
    kind: type[float] | type[int] = float  # int or float: the flag's type and what a recipe must give
    must: str = ""  # the range as an error says it: "--top-p must be in (0, 1], got 1.5"
    within: Callable[[float], bool] = _any  # the range, on a value of the right kind
    metavar: str = ""
    help: str = ""  # --help's text; {default} is RunConfig's default, {demo} the demo server's
    continuation: str | None = None  # COUNTS_OUTPUT: why a continuation differs
    neutral: Any = None  # with `continuation`: the value that changes nothing
    # smg 1.13 forwards it to a worker's /generate: measured by sending every key SGLang 0.5.23 accepts through
    # smg to a server that prints what it receives (2026-12-02); smg drops the others without a word.
    smg: bool = False
    set_by: str | None = None  # RUN or SAMPLE: the run sets it, a user's value would not be what is sent

    def problem(self, value: Any) -> str | None:
        """None when ``value`` is fine for this key, else what it must be ("must be in (0, 1]")."""
        if isinstance(value, bool) or not isinstance(value, (int, float) if self.kind is float else int):
            return "must be a number" if self.kind is float else "must be a whole number"
        return None if self.within(value) else f"must be {self.must}"

    def blocks_continuation(self, value: Any) -> bool:
        return self.continuation is not None and value is not None and value != self.neutral


def _positive(value: float) -> bool:
    return value >= 1


def _temperature(value: float) -> bool:
    return value >= 0 and math.isfinite(value)  # nan compares false to everything


def _top_p(value: float) -> bool:
    return 0 < value <= 1


def _top_k(value: float) -> bool:
    return value == -1 or value >= 1


# The order counts: --help lists the flags in it, a recipe's keys are named in it, and a continuation's
# blocker and a recipe's reserved key are the first found in it.
SAMPLING_KEYS: tuple[SamplingKey, ...] = (
    SamplingKey(
        "temperature",
        name="temperature",
        flag="--temperature",
        must="0 or more",
        within=_temperature,
        metavar="T",
        help="default: the model's",
        smg=True,
    ),
    SamplingKey(
        "top_p",
        name="top_p",
        flag="--top-p",
        must="in (0, 1]",
        within=_top_p,
        metavar="P",
        help="default: the server's",
        smg=True,
    ),
    SamplingKey(
        "top_k",
        name="top_k",
        flag="--top-k",
        kind=int,
        must="-1 or at least 1",
        within=_top_k,
        metavar="K",
        help="default: the server's",
        smg=True,
    ),
    SamplingKey(
        "max_new_tokens",
        name="max_tokens",
        flag="--max-tokens",
        kind=int,
        must="a positive number",
        within=_positive,
        metavar="N",
        help="per answer (default: {default}; {demo} with the demo)",
        smg=True,
        set_by=RUN,
    ),
    SamplingKey("min_p", smg=True),
    SamplingKey("frequency_penalty", continuation=COUNTS_OUTPUT, neutral=0.0, smg=True),
    SamplingKey("presence_penalty", continuation=COUNTS_OUTPUT, neutral=0.0, smg=True),
    SamplingKey("repetition_penalty", continuation=COUNTS_OUTPUT, neutral=1.0, smg=True),
    SamplingKey("min_new_tokens", continuation=COUNTS_OUTPUT, neutral=0, smg=True),
    SamplingKey("skip_special_tokens", smg=True, set_by=RUN),  # off, so special think tags stay in the text
    SamplingKey("stream", set_by=RUN),  # not a sampling key (a top-level field): refused so no one thinks it streams
    SamplingKey("n", smg=True, set_by=RUN),  # one sample per request; several are several requests
    SamplingKey("sampling_seed", smg=True, set_by=SAMPLE),
    *(SamplingKey(key, smg=True) for key in ("stop", "stop_token_ids", "ignore_eos", "no_stop_trim")),
    *(SamplingKey(key, smg=True) for key in ("regex", "json_schema", "ebnf", "custom_params")),
    SamplingKey("stream_interval"),  # the client sets it on a streamed request
    *(SamplingKey(key) for key in ("stop_regex", "logit_bias", "spaces_between_special_tokens")),
    *(SamplingKey(key) for key in ("thinking_budget", "structural_tag")),
)
FLAGGED = tuple(row for row in SAMPLING_KEYS if row.flag is not None)
BY_KEY = {row.key: row for row in SAMPLING_KEYS}
BY_NAME = {row.name: row for row in FLAGGED if row.name is not None}
# The keys smg 1.13 forwards to a worker's /generate; it drops the others without a word.
SMG_FORWARDED = frozenset(row.key for row in SAMPLING_KEYS if row.smg)


def by_name(name: str) -> SamplingKey:
    return BY_NAME[name]


def reserved(*, samples: bool) -> tuple[str, ...]:
    """The keys the run sets itself, which --sampling-params (and, ``samples``, a recipe) may not."""
    setters = (RUN, SAMPLE) if samples else (RUN,)
    return tuple(row.key for row in SAMPLING_KEYS if row.set_by in setters)


def continuation_rows() -> tuple[SamplingKey, ...]:
    return tuple(row for row in SAMPLING_KEYS if row.continuation is not None)


def docs_table() -> str:
    """docs/command-line.md's table of sampling keys, from the rows above."""
    lines = [
        "| SGLang key | flag / recipe key | range | continued from a partial output | smg forwards it |",
        "|---|---|---|---|---|",
    ]
    for row in SAMPLING_KEYS:
        option = f"`{row.flag}` / `{row.name}`" if row.flag else SETTERS.get(row.set_by or "", "`--sampling-params`")
        continued = "yes" if row.continuation is None else f"no: {row.continuation}"
        lines.append(f"| `{row.key}` | {option} | {row.must or '-'} | {continued} | {'yes' if row.smg else 'no'} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(docs_table())
