"""One reader of a result row: a line of raw_responses.jsonl in, one of three outcomes out. The resume scan,
the run report, ``--status`` and the export all read rows through ``read_row``.

    Row          a result row as typed values: its key, the record's fields, every generated turn a ``Turn``
    Malformed    a JSON object that is no usable result row, and why (with its key when it has a string id)
    Unreadable   a line that is no JSON object (torn, not JSON)

``read_row(line)`` parses every field; ``read_row(line, lean=True)`` passes over the token id arrays
(``rowscan.without_ids``: their int objects are most of a row's parse), which the resume scan, the report and
``--status`` never look at: a lean row's ``input_ids``/``output_ids`` are ``[]`` where the line had ids, so
only the full read checks them.

A row's key is ``samples.row_key``: ``(id, sample)``, one per sample of a prompt. What each reader does with a
malformed row is its policy, said where it reads: the resume counts one with a key as done (sending it again
would make a second row of that key), the report and ``--status`` count it apart from rows, the export drops
it as malformed.

A turn's kinds are defined here once, on ``Turn`` values (``cut``, ``looped``, ``empty_answer``,
``cut_unanswered``); the ledger, the report, the export's filters and formats use these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from synthgen.data.records import DoneEntry, ResultRecord, Turn, parse_line, typed_list
from synthgen.data.rowscan import resume_row
from synthgen.data.samples import row_key, row_sample

LENGTH, LOOPED = "length", "repetition"
ROLES = frozenset({"system", "user", "assistant", "tool"})


# --- what a turn is: defined once -------------------------------------------------------------------
def cut(turn: Turn) -> bool:
    """Ended at the token limit (finish_reason ``length``): --max-tokens, or the context."""
    return turn.finish_reason == LENGTH


def looped(turn: Turn) -> bool:
    """Ended by the loop guard (finish_reason ``repetition``): kept as a row, never training data."""
    return turn.finish_reason == LOOPED


def answered(turn: Turn) -> bool:
    """Wrote an answer or made a tool call."""
    return bool(turn.content.strip() or turn.tool_calls)


def empty_answer(turn: Turn) -> bool:
    """Reasoning closed (or none), yet no answer and no tool call."""
    return turn.reasoning_complete and not answered(turn)


def cut_unanswered(turn: Turn) -> bool:
    """Cut before its answer: at the token limit with its reasoning still open or nothing answered (what
    --continue-cut continues; the exports drop these even with --keep-truncated)."""
    return cut(turn) and (not turn.reasoning_complete or not answered(turn))


# --- the outcomes -------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Unreadable:
    """A line that is no JSON object: torn by a kill, or not JSON."""

    reason: str = "not a JSON object"


@dataclass(frozen=True, slots=True)
class Malformed:
    """A JSON object that is no usable result row; ``key``: its row key when it has a string id; ``row``: the
    object as read (the resume's ``done_entry`` takes what it needs of it)."""

    key: str | None
    reason: str
    row: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)


class Row:
    """A result row read once: its key and counts checked, its record (the fields as stored) and its generated
    turns typed (each a ``Turn``); the record and the turns are built when first asked for (the resume scan
    asks for neither)."""

    __slots__ = ("_record", "_turns", "fields", "key", "measured", "output_tokens", "prompt_tokens", "sample")

    def __init__(self, fields: dict[str, Any], key: str, sample: int, tokens: int | None, prompt_tokens: int):
        self.fields = fields  # the row as parsed (checked by ``from_dict``)
        self.key = key  # samples.row_key: (id, sample)
        self.sample = sample
        self.output_tokens = tokens or 0  # completion_tokens over every turn; 0 when not a count (``measured``)
        self.measured = tokens is not None  # the row's completion_tokens is a real count (a budget may average it)
        self.prompt_tokens = prompt_tokens
        self._record: ResultRecord | None = None
        self._turns: list[Turn] | None = None

    @property
    def id(self) -> str:
        rid: str = self.fields["id"]  # a string: from_dict checked it
        return rid

    @property
    def worker(self) -> str | None:
        """The replica that wrote the row's (last) turn."""
        worker = self.fields.get("worker")
        return worker if isinstance(worker, str) else None

    @property
    def record(self) -> ResultRecord:
        if self._record is None:
            self._record = ResultRecord.from_dict(self.fields)
        return self._record

    @property
    def turns(self) -> list[Turn]:
        """Every generated turn (one, or regenerate=all's), in order."""
        if self._turns is None:
            self._turns = [_turn(d) for d in self.fields.get("turns") or (self.fields,)]
        return self._turns

    @property
    def finish(self) -> str:
        """The row's (last turn's) finish reason; "unknown" when it has none."""
        return self.turns[-1].finish_reason or "unknown"

    @property
    def cut(self) -> bool:
        return any(cut(t) for t in self.turns)

    @property
    def looped(self) -> bool:
        return any(looped(t) for t in self.turns)

    @property
    def empty_answer(self) -> bool:
        return any(empty_answer(t) for t in self.turns)

    @property
    def cut_unanswered(self) -> bool:
        """The row (its last turn) was cut before its answer: the ledger's and the export report's "cut"."""
        return cut_unanswered(self.turns[-1])


Outcome = Row | Malformed | Unreadable


def count(value: Any) -> int | None:
    """A token count: a whole number >= 0, else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _turn_problem(d: Any, full: bool) -> str | None:
    """Why a generated turn (the row itself, or one of its ``turns``) is none, or None; ``full``: its token ids
    were parsed, and are checked too."""
    if not isinstance(d, dict):
        return "a turn is not an object"
    if not isinstance(d.get("content"), str):
        return "the generated content is not a string"
    reasoning = d.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        return "reasoning_content is not a string"
    if full:
        for key in ("input_ids", "output_ids"):
            value = d.get(key)
            if value is not None and typed_list(value, int) is None:
                return f"{key}: token ids are not a list of integers"
    return None


def _turn(d: dict[str, Any]) -> Turn:
    """A turn ``_turn_problem`` passed, as a Turn: counts that are none read as 0 (None where optional)."""
    get = d.get
    calls, detail, worker, reasoning = get("tool_calls"), get("finish_detail"), get("worker"), get("reasoning_content")
    prompt, tokens, cached, attempts = (
        get("prompt_tokens"),
        get("completion_tokens"),
        get("cached_tokens"),
        get("attempts"),
    )
    finish, text, rid, extended = get("finish_reason"), get("output_text"), get("request_id"), get("extended_by")
    segments = get("segments")
    # type() is int: a bool is no count (a per-row hot path, so the checks are written out)
    return Turn(
        reasoning_content=reasoning or "",
        content=d["content"],
        tool_calls=calls if type(calls) is list else None,
        had_reasoning=bool(reasoning),
        finish_reason=finish if type(finish) is str else "",
        finish_detail=detail if type(detail) is dict else {},
        reasoning_complete=get("reasoning_complete") is not False,
        prompt_tokens=prompt if type(prompt) is int and prompt >= 0 else 0,
        completion_tokens=tokens if type(tokens) is int and tokens >= 0 else 0,
        cached_tokens=cached if type(cached) is int and cached >= 0 else None,
        output_text=text if type(text) is str else "",
        input_ids=get("input_ids"),
        output_ids=get("output_ids"),
        latency_s=0.0,
        server_latency_s=None,
        attempts=attempts if type(attempts) is int and attempts >= 0 else 0,
        request_id=rid if type(rid) is str else "",
        segments=None if segments is None else typed_list(segments, int),
        extended_by=extended if type(extended) is int and extended >= 0 else None,
        worker=worker if type(worker) is str else None,
    )


def record_turns(record: ResultRecord) -> list[Turn]:
    """The generated turns of a record the reader took (``Row.record``), typed again: for a format handed the
    record alone."""
    return [_turn(d) for d in record.finished_turns if _turn_problem(d, full=False) is None]


def _bad_messages(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        return "messages is not a list of objects"
    for m in messages:
        role = m.get("role")
        if role not in ROLES:
            return f"unknown role {str(role)[:20]!r}"
        content = m.get("content")
        if not isinstance(content, str) and not (content is None and role == "assistant" and m.get("tool_calls")):
            return f"{role} content is not a string"
        if m.get("reasoning_content") is not None and not isinstance(m.get("reasoning_content"), str):
            return "reasoning_content is not a string"
    if messages[-1].get("role") != "assistant":
        return "the last turn is not the assistant's"
    return None


def from_dict(row: dict[str, Any], full: bool = True) -> Row | Malformed:
    """A parsed result line as a Row, or Malformed with why; ``full``: its token ids were parsed (and are
    checked), not passed over."""
    key = row_key(row)
    if key is None:
        return Malformed(None, "no string id", row)
    why = _bad_messages(row.get("messages"))
    tools, turns = row.get("tools"), row.get("turns")
    if why is None and tools is not None and not isinstance(tools, list):
        why = "tools is not a list"
    if why is None and turns is not None and not isinstance(turns, list):
        why = "turns is not a list"
    for d in turns or (row,):
        why = why or _turn_problem(d, full)
    if why is not None:
        return Malformed(key, why, row)
    return Row(row, key, row_sample(row), count(row.get("completion_tokens")), count(row.get("prompt_tokens")) or 0)


def read_row(line: bytes, lean: bool = False) -> Outcome:
    """One line of a results file (its newline and a blank line's whitespace are the caller's) as its outcome;
    ``lean``: without its token ids (see the module's docstring)."""
    try:
        row = resume_row(line) if lean else parse_line(line)
    except RecursionError:  # a hostile line nested thousands deep
        row = None
    return Unreadable() if row is None else from_dict(row, full=not lean)


def done_entry(outcome: Outcome) -> DoneEntry | None:
    """What the resume keeps of a row (``DoneEntry.from_dict``, the one place its fields are taken): of a Row,
    and of a Malformed one with a key (its prompt is answered: sending it again would make a second row of that
    key); None for the rest, a bad line."""
    if isinstance(outcome, Row):
        return DoneEntry.from_dict(outcome.fields)
    if isinstance(outcome, Malformed) and outcome.key is not None:
        return DoneEntry.from_dict(outcome.row)
    return None
