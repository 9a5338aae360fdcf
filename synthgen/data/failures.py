"""The kinds of failure and skip a prompt can end a run with (``error_type`` in errors.jsonl), each
named once, here, with what it means for a user: the HTTP status behind it, what a rerun does with
it, and the fix. docs/outputs.md's table is ``docs_table()`` (a test keeps the two equal).

    FAILED    sent, and no answer came that makes a row; a rerun sends it again (exit code 1)
    SKIPPED   never sent: the prompt cannot become a request under these settings

A skip whose ``settled_by`` is set depends on nothing but the prompt and those settings: its row in
errors.jsonl carries a key of both (``settled_key``), and a rerun whose key is the same does not take
the prompt again (it is listed at the end, with its fix, and the run may have nothing to do).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import orjson

FAILED = "failed"
SKIPPED = "skipped"

# What decides whether a prompt fits or renders at all: the tokenizer and template (and their flags),
# and the server that says how long a prompt may be.
_RENDER = ("tokenizer", "trust_remote_code", "chat_template", "chat_template_kwargs", "regenerate")
_SERVER = ("server_url", "launch_server", "max_seq_len")


@dataclass(frozen=True, slots=True)
class FailureKind:
    name: str  # error_type in errors.jsonl; "http_<status>" stands for every status it names
    status: str  # FAILED or SKIPPED
    http: str  # the HTTP statuses behind it, or "" (not an HTTP answer)
    meaning: str
    fix: str
    # SKIPPED only: the RunConfig fields that (with the prompt) decide it; a rerun under the same ones
    # skips it again without sending. None: a rerun tries it again.
    settled_by: tuple[str, ...] | None = None

    @property
    def rerun(self) -> str:
        """What a rerun of the same command does with a prompt of this kind."""
        if self.settled_by is None:
            return "sends it again" if self.status == FAILED else "tries it again"
        flags = ["--" + name.replace("_", "-") for name in self.settled_by]
        which = f"one of {', '.join(flags)}" if len(flags) > 1 else flags[0]
        return f"skips it unsent, unless the prompt or {which} changed"


KINDS: dict[str, FailureKind] = {}


def register(kind: FailureKind) -> FailureKind:
    """Add ``kind`` to the table (at its definition, below); a name is registered once."""
    if kind.name in KINDS:
        raise ValueError(f"failure kind {kind.name!r} is registered twice")
    KINDS[kind.name] = kind
    return kind


def kind_of(name: str) -> FailureKind | None:
    """The table's entry for an ``error_type`` as written (``http_413`` is ``http_<status>``'s)."""
    if name.startswith("http_") and name[5:].isdigit():
        return KINDS.get(HTTP.name)
    return KINDS.get(name)


def http_kind(status: int) -> str:
    """The ``error_type`` of an HTTP answer that is no usable answer."""
    return f"http_{status}"


# ------------------------------------------------------------------------------ failed: sent
HTTP = register(
    FailureKind(
        "http_<status>",
        FAILED,
        "4xx, 5xx",
        "the server answered with an error: a 4xx at once (the request itself was refused), a 5xx, 408 or "
        "429 after --max-attempts",
        "read the server's message in `error`; a 4xx usually names a server limit the request broke",
    )
)
TIMEOUT = register(
    FailureKind(
        "timeout",
        FAILED,
        "",
        "no answer within --request-timeout, on every attempt",
        "raise --request-timeout, or lower --max-tokens",
    )
)
CONNECTION = register(
    FailureKind(
        "connection",
        FAILED,
        "",
        "the connection failed or was cut on every attempt",
        "check that the server at --server-url is up and reachable",
    )
)
BAD_RESPONSE = register(
    FailureKind(
        "bad_response",
        FAILED,
        "200",
        "the answer could not be read (not JSON, no text, bad token ids or counts) on every attempt",
        "check that --server-url is an SGLang server (or its router)",
    )
)
SERVER_DIED = register(
    FailureKind(
        "server_died",
        FAILED,
        "",
        "the server went down while this prompt was in flight, 3 times (it may be what kills it)",
        "read the server's log around those times; leave the prompt out if it keeps killing the server",
    )
)
GARBAGE = register(
    FailureKind(
        "garbage",
        FAILED,
        "200",
        "every answer was garbage (one token repeated to the end, `!!!!`, no text): a sick worker's engine "
        "fault, named in `worker`; 5 of one worker's last 10 answers garbage stop the run (exit 3), the "
        "prompt it answered last failing so",
        "take the worker named in `worker` out of the gateway (or restart it) and rerun",
    )
)

# ------------------------------------------------------------------------------ skipped: never sent
PROMPT_TOO_LONG = register(
    FailureKind(
        "prompt_too_long",
        SKIPPED,
        "",
        "the prompt alone leaves no room to generate under the server's context (a line too big to fit is "
        "skipped by its size before it is read whole)",
        "a server started with a longer --context-length takes it; rerun with that length as --max-seq-len N, "
        "which also makes the rerun take these prompts again",
        settled_by=_RENDER + _SERVER,
    )
)
TOKEN_OUT_OF_VOCAB = register(
    FailureKind(
        "token_out_of_vocab",
        SKIPPED,
        "",
        "the prompt has token ids beyond the served model's vocabulary",
        "the tokenizer does not match the served model; pass the model's own --tokenizer",
        settled_by=_RENDER + _SERVER,
    )
)
TEMPLATE_ERROR = register(
    FailureKind(
        "template_error",
        SKIPPED,
        "",
        "the chat template failed on the prompt, or ran past its time, step or size bound",
        "the chat template cannot render this prompt; fix the line or pass another --chat-template",
    )
)
EMPTY_PROMPT = register(
    FailureKind(
        "empty_prompt",
        SKIPPED,
        "",
        "the chat template rendered nothing",
        "fix the prompt line",
        settled_by=_RENDER,
    )
)
CANNOT_REGENERATE = register(
    FailureKind(
        "cannot_regenerate",
        SKIPPED,
        "",
        "--regenerate all cannot rebuild the conversation (tool calls and results)",
        "--regenerate all cannot rebuild these conversations; generate them with --regenerate last (or each) "
        "into another --output-dir, or leave them out",
        settled_by=("regenerate",),
    )
)


def lasting(name: str) -> bool:
    """A skip no rerun of the same command changes (the end of a run lists it with its fix)."""
    kind = kind_of(name)
    return kind is not None and kind.status == SKIPPED


def settled_key(name: str, prompt: str, config: object) -> str | None:
    """The key a skip of kind ``name`` is recorded with: the prompt (its hash, or its size when it was
    skipped unread) and the settings that decide it; None for a kind a rerun tries again."""
    kind = kind_of(name)
    if kind is None or kind.settled_by is None:
        return None
    decided = {field: _plain(getattr(config, field, None)) for field in kind.settled_by}
    blob = orjson.dumps([name, prompt, decided], option=orjson.OPT_SORT_KEYS)
    return hashlib.blake2b(blob, digest_size=12).hexdigest()


def _plain(value: Any) -> Any:
    return str(value) if value is not None and not isinstance(value, str | int | float | bool | dict) else value


def docs_table() -> str:
    """The table of docs/outputs.md, from the kinds above."""
    rows = ["| `error_type` | status | HTTP | what happened | a rerun does | the fix |", "|---|---|---|---|---|---|"]
    for kind in KINDS.values():
        http = kind.http or "-"
        rows.append(f"| `{kind.name}` | {kind.status} | {http} | {kind.meaning} | {kind.rerun} | {kind.fix} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(docs_table())
