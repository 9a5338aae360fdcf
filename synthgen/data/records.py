"""The rows this tool writes, in one place: typed records built here and read back through the
same types by the store (resume), the budget calculator, the exporter, the benchmarks and the tests.

    ResultRecord   one line of outputs/<dataset>/raw_responses.jsonl: a completed prompt
    ErrorRecord    one line of outputs/<dataset>/errors.jsonl: the latest failure or skip of a prompt
    DoneEntry      what the resume scan keeps of a result row (id, tokens, where it came from)

Adding a field to a row is a one-place change: add it to the dataclass (with a default, so rows
written before it existed stay readable) and fill it where the record is built. JSON is the
edge: ``to_json`` writes one whole line with orjson, ``from_dict`` reads any version of a row
and never raises on a missing or mistyped optional field.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from typing import Any

import orjson

from synthgen.data.samples import row_key
from synthgen.redact import redact

_LINE = orjson.OPT_APPEND_NEWLINE
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # the JSON escape of a surrogate (U+D800-U+DFFF)


def json_line(obj: Any) -> bytes:
    """One JSONL line (newline included): orjson's, or, for a value orjson refuses (a lone surrogate, as a
    model's ``\\ud83d`` escape leaves in a tool call's arguments), the standard library's with every
    non-ASCII character escaped, which :func:`parse_line` reads back to the same value."""
    try:
        return orjson.dumps(obj, option=_LINE)
    except TypeError:
        return (json.dumps(obj, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


@dataclass(slots=True)
class ResultRecord:
    # --- which prompt -------------------------------------------------------------------------
    id: str
    dataset: str
    partition: str
    # the prompt plus the generated assistant turn(s): role, content, reasoning_content, tool_calls, ...
    messages: list[dict[str, Any]]
    # --- the generated (last) turn, split with the reasoning / tool-call parsers ----------------
    reasoning_content: str
    content: str
    finish_reason: str  # stop | length
    finish_detail: dict[str, Any]  # the server's finish_reason object, e.g. {"type": "stop", "matched": 163586}
    reasoning_complete: bool  # False: reasoning was opened and never closed (cut off)
    prompt_tokens: int
    completion_tokens: int  # all generated turns of the row together
    cached_tokens: int | None
    output_text: str  # the raw completion, nothing stripped
    # --- how it was made ------------------------------------------------------------------------
    model: str | None
    sampling_params: dict[str, Any]
    chat_template_kwargs: dict[str, Any] | None
    latency_s: float
    server_latency_s: float | None
    attempts: int
    request_id: str
    created_at: str
    # --- added later: rows written before these existed read them as their defaults ------------
    source: str | None = None  # the prompt file, relative to --prompts-dir (partition/name.jsonl)
    prompt_hash: str | None = None  # hash of the prompt as rendered (messages + tools): resume checks it
    tools: list[dict[str, Any]] | None = None  # the row's tool schemas, as given
    tool_calls: list[dict[str, Any]] | None = None  # calls the model made in the generated turn (OpenAI shape)
    input_ids: list[int] | None = None  # the prompt ids exactly as sent (of the last turn)
    output_ids: list[int] | None = None  # as the server returned them, stop token included; None: not returned
    ids_note: str | None = None  # why output_ids is missing, when it is
    regenerate: str | None = None  # last | each | all
    turns: list[dict[str, Any]] | None = None  # regenerate=all: every generated turn (Turn.to_dict), in order
    stopped_early: str | None = None  # regenerate=all: why the conversation ends before its last turn
    settings: str | None = None  # id of the settings set in the dataset's settings.jsonl
    # output tokens per attempt when the answer was continued from a partial output (a stop, an abort,
    # --continue-cut): output_ids is their concatenation; None: one attempt made it all
    segments: list[int] | None = None
    extended_by: int | None = None  # --continue-cut: the tokens the cut answer was given beyond --max-tokens
    worker: str | None = None  # the replica that wrote the (last) turn: smg's worker id, else the server URL
    # The training mix (left out of a row without it): which sample of the prompt, its seed, its recipe.
    sample: int | None = None
    sampling_seed: int | None = None
    recipe: dict[str, Any] | None = None
    # With segments, the sampling_seed each attempt sent (null: none); left out where no attempt sent one.
    segment_seeds: list[int | None] | None = None

    def to_json(self) -> bytes:
        return json_line(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        row = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {k: v for k, v in row.items() if v is not None or k not in MIX_FIELDS}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> ResultRecord:
        """Any version of a result row: a field it does not have reads as its default (None where there
        is none); the values it has are taken as they are, unchecked (``DoneEntry`` checks what resume uses)."""
        get = row.get
        values: dict[str, Any] = {name: get(name, default) for name, default in _RECORD_DEFAULTS}
        return cls(**values)

    @property
    def finished_turns(self) -> list[dict[str, Any]]:
        """The generated turns: ``turns`` for regenerate=all, else the one turn of the row."""
        if self.turns:
            return self.turns
        return [
            {
                "reasoning_content": self.reasoning_content,
                "content": self.content,
                "tool_calls": self.tool_calls,
                "finish_reason": self.finish_reason,
                "reasoning_complete": self.reasoning_complete,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "input_ids": self.input_ids,
                "output_ids": self.output_ids,
                "output_text": self.output_text,
            }
        ]


@dataclass(slots=True)
class Turn:
    """One generated assistant turn: the parsed answer, the exact tokens, and how it was made."""

    reasoning_content: str
    content: str
    tool_calls: list[dict[str, Any]] | None
    had_reasoning: bool
    finish_reason: str
    finish_detail: dict[str, Any]
    reasoning_complete: bool
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None
    output_text: str
    input_ids: list[int] | None  # None: a row written before ids were stored (as read back)
    output_ids: list[int] | None
    latency_s: float
    server_latency_s: float | None
    attempts: int
    request_id: str
    segments: list[int] | None = None  # continued: output tokens per attempt (see ResultRecord.segments)
    extended_by: int | None = None  # --continue-cut (see ResultRecord.extended_by)
    worker: str | None = None  # the replica that generated it
    segment_seeds: list[int | None] | None = None  # with segments (see ResultRecord.segment_seeds)

    def to_dict(self) -> dict[str, Any]:
        row = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {k: v for k, v in row.items() if v is not None or k not in MIX_FIELDS}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Turn:
        values: dict[str, Any] = {f.name: row.get(f.name) for f in dataclasses.fields(cls)}
        return cls(**values)

    def message(self) -> dict[str, Any]:
        """The assistant message of this turn, as a conversation (and a chat template) holds it."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.had_reasoning:
            message["reasoning_content"] = self.reasoning_content
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


@dataclass(frozen=True, slots=True)
class RowContext:
    """What a row says about its prompt and run, whatever its turns."""

    id: str
    dataset: str
    partition: str
    source: str
    prompt_hash: str
    tools: list[dict[str, Any]] | None
    model: str | None
    sampling_params: dict[str, Any]
    chat_template_kwargs: dict[str, Any] | None
    regenerate: str
    settings: str | None
    mix: dict[str, Any] | None = None  # sample, sampling_seed, recipe (run.mix.SampleRequest.row_fields)


def build_result(
    ctx: RowContext,
    messages: list[dict[str, Any]],
    turns: list[Turn],
    created_at: str,
    stopped_early: str | None = None,
) -> ResultRecord:
    """The one place a result row is made. ``messages``: the conversation with the model's turns in
    it; the flat answer fields describe the last turn, token counts cover every turn."""
    last = turns[-1]
    return ResultRecord(
        id=ctx.id,
        dataset=ctx.dataset,
        partition=ctx.partition,
        messages=messages,
        reasoning_content=last.reasoning_content,
        content=last.content,
        finish_reason=last.finish_reason,
        finish_detail=last.finish_detail,
        reasoning_complete=last.reasoning_complete,
        prompt_tokens=last.prompt_tokens,
        completion_tokens=sum(t.completion_tokens for t in turns),
        cached_tokens=last.cached_tokens,
        output_text=last.output_text,
        model=ctx.model,
        sampling_params=ctx.sampling_params,
        chat_template_kwargs=ctx.chat_template_kwargs,
        latency_s=round(sum(t.latency_s for t in turns), 3),
        server_latency_s=last.server_latency_s,
        attempts=last.attempts,
        request_id=last.request_id,
        created_at=created_at,
        source=ctx.source,
        prompt_hash=ctx.prompt_hash,
        tools=ctx.tools,
        tool_calls=last.tool_calls,
        input_ids=last.input_ids,
        output_ids=last.output_ids,
        ids_note=None
        if all(t.output_ids is not None for t in turns)
        else (
            "the server returned no output_ids for this answer; they were not re-tokenized from the text "
            "(use a server or route that returns them for token-exact rows)"
        ),
        regenerate=ctx.regenerate,
        turns=[t.to_dict() for t in turns] if ctx.regenerate == "all" else None,
        stopped_early=stopped_early,
        settings=ctx.settings,
        segments=last.segments,
        extended_by=last.extended_by,
        worker=last.worker,
        **(ctx.mix or {}),
        segment_seeds=last.segment_seeds,
    )


MIX_FIELDS = ("sample", "sampling_seed", "recipe", "segment_seeds")
# (name, default) of every ResultRecord field, None where it has none: from_dict reads a row through it.
_RECORD_DEFAULTS = tuple(
    (f.name, None if f.default is dataclasses.MISSING else f.default) for f in dataclasses.fields(ResultRecord)
)


@dataclass(slots=True)
class ErrorRecord:
    id: str
    dataset: str
    status: str  # failed | skipped
    error_type: str  # a kind of synthgen.data.failures: http_400, timeout, prompt_too_long, ...
    error: str
    attempts: int
    http_status: int | None
    at: str
    # A skip that only the prompt and a few settings decide: their key (failures.settled_key). A rerun with
    # the same key does not take the prompt again.
    settled: str | None = None
    worker: str | None = None  # the replica whose answer was the last failure, when one answered

    def to_json(self) -> bytes:
        row = dataclasses.asdict(self)
        row["error"] = redact(self.error)  # a server's message may quote a URL with its key
        if self.settled is None:
            del row["settled"]  # only a settled skip has the key
        return json_line(row)

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> ErrorRecord | None:
        """None for a row that is not an error record of ours (hand-edited, another tool's)."""
        rid = row.get("id")
        if not isinstance(rid, str):
            return None
        attempts = row.get("attempts")
        status = row.get("http_status")
        return cls(
            id=rid,
            dataset=str(row.get("dataset", "")),
            status=str(row.get("status", "failed")),
            error_type=str(row.get("error_type", "")),
            error=str(row.get("error", "")),
            attempts=attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else 0,
            http_status=status if isinstance(status, int) and not isinstance(status, bool) else None,
            at=str(row.get("at", "")),
            settled=settled if isinstance(settled := row.get("settled"), str) else None,
            worker=row["worker"] if isinstance(row.get("worker"), str) else None,
        )


@dataclass(frozen=True, slots=True)
class DoneEntry:
    """What resume and the budget's measurement need of one result row, read without building the whole
    record: the one place a result row's id and token count are validated."""

    id: str  # the row's resume key: its id, with the sample for samples after the first (samples.sample_key)
    completion_tokens: int  # 0 when the row's count is missing or not a count (see ``measured``)
    source: str | None
    prompt_hash: str | None
    measured: bool = True  # the row's completion_tokens is a real count (a budget may average it)
    truncated: bool = False  # finish_reason "length": cut at max tokens
    regenerate: str | None = None  # the row's mode (None: a row written before modes existed, i.e. last)
    looped: bool = False  # finish_reason "repetition": ended by the loop guard

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> DoneEntry | None:
        """None for a line that is not a result row (no string id)."""
        rid = row_key(row)  # sample 0 keeps the id: resume is per (id, sample)
        if rid is None:
            return None
        tokens = row.get("completion_tokens")
        count = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else None
        source, digest, mode = row.get("source"), row.get("prompt_hash"), row.get("regenerate")
        return cls(
            rid,
            count or 0,
            source if isinstance(source, str) else None,
            digest if isinstance(digest, str) else None,
            count is not None,
            row.get("finish_reason") == "length",
            mode if isinstance(mode, str) else None,
            row.get("finish_reason") == "repetition",
        )


def parse_line(line: bytes) -> dict[str, Any] | None:
    """One JSONL line as a dict, or None for anything else (torn, not JSON, not an object)."""
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        if not _SURROGATE_ESCAPE.search(line):
            return None
        try:  # json_line's fallback: a lone surrogate escape, which orjson refuses to read
            row = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: a hostile line nested thousands deep
            return None
    return row if isinstance(row, dict) else None


def typed_list(value: Any, kind: type) -> list[Any] | None:
    """``value`` if it is a list of ``kind`` (bools are not ints), else None."""
    if not isinstance(value, list):
        return None
    if kind is int:
        ok = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    else:
        ok = all(isinstance(v, kind) for v in value)
    return value if ok else None
