"""Turning outputs/<dataset>/raw_responses.jsonl into files trainers load as they are.

    scan_dataset   pass 1: read a results file, drop rows (counted per reason), keep where each kept row is
    split_rows     which kept rows go to the train file and which to the validation file, in what order
    write_export   pass 2: read each kept row again by its byte offset, convert it, write atomically
    format_report  what would be exported, why rows are dropped, and the length distributions

Rows are never held in memory all at once: pass 1 keeps (file, offset, length) of each kept row, so a
shuffled export of a few million long reasoning rows costs a few hundred bytes per row.

Formats (each output row comes from exactly one input row; see docs/export.md):

    tokens     {"id", "input_ids", "loss_mask"} from the ids the server saw and returned (no re-tokenization):
               input_ids = prompt ids + output ids (stop token included), loss_mask 1 on generated tokens.
               A regenerate=all row with several generated turns is one sequence when each earlier turn's
               prompt + output ids are a prefix of the last turn's prompt ids (every generated span masked 1);
               otherwise (e.g. the template drops earlier reasoning from the history) one row per turn, with
               ids "<dataset>/<id>#<turn>". Rows without stored ids are dropped and counted. The exact route.
    specforge  {"id", "conversations": [...], "tools"?: "<JSON string>", <chat_template_kwargs>...,
                "status": "success", "synthgen_meta": {...}}, one row per generated turn ending at it (ids
               "#<turn>" when there are several), for SpecForge's data.train_only_last_turn: true.
               SpecForge's online loader (build_eagle3_dataset) pops "conversations", "id" and "tools" and
               passes every other column to the chat template as a variable, so the row's chat_template_kwargs
               are top-level keys and everything else sits under "synthgen_meta" (its offline
               prepare_hidden_states.py keeps only conversations and tools). Types are the same in every row
               so Arrow loads the file: content and reasoning_content strings, function.arguments a JSON
               string, tools a JSON string.
    messages   {"id", "messages": [...], "generated_turns", "tools"?, "chat_template_kwargs"?}: OpenAI-style,
               for SFT trainers, history in the prompt file's form (arguments object or string).

Each specforge/messages row comes with what it must render to (Expected) for the render check (rendercheck).

Output ids are "<dataset>/<id>": the same prompt id in two datasets stays two rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import tempfile
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from synthgen.data.provenance import recorded_sets
from synthgen.data.records import ResultRecord, parse_line, typed_list
from synthgen.errors import EXIT_FAILURES, InputFileError, StoreWriteError, SynthgenError
from synthgen.export.histogram import histogram
from synthgen.export.rendercheck import TEXT, Tally, verdict

FORMATS = ("specforge", "tokens", "messages")
META_KEY = "synthgen_meta"
# Keys SpecForge itself reads, or that apply_chat_template takes as arguments: never template variables.
RESERVED_KEYS = frozenset(
    {
        "id",
        "conversations",
        "tools",
        "status",
        "text",
        META_KEY,
        "messages",
        "conversation",
        "tokenize",
        "add_generation_prompt",
        "add_special_tokens",
        "chat_template",
        "documents",
        "continue_final_message",
        "return_dict",
        "tokenizer_kwargs",
    }
)
# Left in a reasoning or answer field, these mean the split into reasoning and answer went wrong.
STRAY_MARKERS = (
    "<think>",
    "</think>",
    "<|channel|>",
    "<|message|>",
    "<|start|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|constrain|>",
)

# Drop reasons, in the order they are tested (a row counts under the first that applies) and reported.
DUPLICATE = "duplicate"
MALFORMED = "malformed"
OTHER_SETTINGS = "other_settings"
NO_IDS = "no_ids"
TRUNCATED = "truncated"
UNCLOSED = "unclosed"
EMPTY = "empty"
STRAY = "stray"
REASONS = {
    DUPLICATE: "duplicate id (first kept)",
    MALFORMED: "malformed",
    OTHER_SETTINGS: "other settings set",
    NO_IDS: "no stored token ids",
    TRUNCATED: "cut at max tokens",
    UNCLOSED: "reasoning never closed",
    EMPTY: "empty answer",
    STRAY: "stray think/channel markers",
}
HINTS = {
    OTHER_SETTINGS: "not the set --settings picks",
    NO_IDS: "rows written before ids were stored; use --format specforge or messages",
    TRUNCATED: "finish_reason length; --keep-truncated keeps them",
    STRAY: "a tag left in reasoning_content or content",
}


@dataclass(frozen=True, slots=True)
class DatasetRef:
    name: str
    path: Path  # its raw_responses.jsonl


@dataclass(frozen=True)
class ExportConfig:
    """What to export and how; built by export_cli from the arguments.

    ``tokenizer`` is a loaded tokenizer (templating.load_tokenizer) for the re-tokenization check, or None.
    """

    datasets: tuple[DatasetRef, ...]
    format: str = "specforge"
    out: Path | None = None  # None: report only
    keep_truncated: bool = False
    shuffle: bool = False
    seed: int = 0
    val_fraction: float = 0.0
    tokenizer: Any = None
    vocabs: dict[str, int] = field(default_factory=dict)  # dataset -> vocabulary size, when known
    settings: str | None = None  # export only the rows of this settings set (its id)
    # the render check: dataset -> its route (rendercheck.TemplateRoute / SpecForgeRoute); absent: not checked
    checkers: dict[str, Any] = field(default_factory=dict)
    fail_on_drift: bool = False


@dataclass(frozen=True, slots=True)
class RowRef:
    dataset: str
    id: str
    path: Path
    offset: int
    length: int
    conversation: str = ""  # the source conversation: rows of one `each` conversation share it ("": the id)

    @property
    def group(self) -> str:
        return self.conversation or self.id


@dataclass
class DatasetScan:
    """What pass 1 learned about one dataset."""

    ref: DatasetRef
    kept: list[RowRef] = field(default_factory=list)
    rows: int = 0  # lines that parsed as JSON objects
    unreadable: int = 0  # torn or not JSON
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> rows
    malformed_example: str = ""  # why the first malformed row is malformed
    settings: Counter[str] = field(default_factory=Counter)  # settings id ("" unrecorded) -> unique rows
    settings_known: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> settings.jsonl's settings
    # over unique rows, before the filters: what the generation produced
    completion_tokens: list[int] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    reasoning_chars: list[int] = field(default_factory=list)
    tool_calls: Counter[int] = field(default_factory=Counter)  # calls in a row -> rows
    cut: int = 0
    empty: int = 0
    render: Tally | None = None  # the render check of the exported rows, when it ran

    @property
    def unique(self) -> int:
        return len(self.completion_tokens)


# --- reading ------------------------------------------------------------------------------------------
def iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """(byte offset, line) of every line; an unreadable file is the user's to fix."""
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise InputFileError(path, None, "no such results file; check --output-dir and the dataset name") from None
    except OSError as exc:
        raise InputFileError(path, None, f"cannot read ({exc.strerror})") from exc
    offset = 0
    with fh:
        for line in fh:
            yield offset, line
            offset += len(line)


# --- checks on one row (pure) -------------------------------------------------------------------------
def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


ROLES = frozenset({"system", "user", "assistant", "tool"})


def _bad_ids(value: Any, vocab: int | None) -> str | None:
    """Why a stored id list cannot be trained on, or None (None itself is "not stored", a later filter)."""
    if value is None:
        return None
    if typed_list(value, int) is None:
        return "token ids are not a list of integers"
    if any(v < 0 for v in value):
        return "a negative token id"
    if vocab is not None and any(v >= vocab for v in value):
        return f"a token id outside the vocabulary ({vocab:,} ids)"
    return None


def malformed(record: ResultRecord, vocab: int | None = None) -> str | None:
    """Why a row cannot become a training row (the fields every format needs, with their types), or None.

    ``vocab``: the tokenizer's size when one is known; ids at or above it are malformed."""
    if not isinstance(record.id, str):
        return "no string id"
    messages = record.messages
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
    if record.tools is not None and not isinstance(record.tools, list):
        return "tools is not a list"
    if record.turns is not None and not isinstance(record.turns, list):
        return "turns is not a list"
    for turn in record.finished_turns:
        if not isinstance(turn, dict):
            return "a turn is not an object"
        if not isinstance(turn.get("content"), str):
            return "the generated content is not a string"
        for key in ("input_ids", "output_ids"):
            reason = _bad_ids(turn.get(key), vocab)
            if reason is not None:
                return f"{key}: {reason}"
    return None


def conversation_key(record: ResultRecord) -> str:
    """The source conversation of a row: ``<id>`` for the ``<id>#<k>`` rows of mode each, else ""."""
    each = record.regenerate == "each" or (record.regenerate is None and re.fullmatch(r".+#\d+", record.id))
    return record.id.rpartition("#")[0] if each and "#" in record.id else ""


def turn_ids(turn: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    prompt, output = typed_list(turn.get("input_ids"), int), typed_list(turn.get("output_ids"), int)
    return (prompt, output) if prompt is not None and output is not None else None


def _calls(turn: dict[str, Any]) -> int:
    calls = turn.get("tool_calls")
    return len(calls) if isinstance(calls, list) else 0


def is_empty_answer(turn: dict[str, Any]) -> bool:
    """Reasoning closed (or none), yet no answer and no tool call."""
    return turn.get("reasoning_complete") is not False and not _text(turn.get("content")).strip() and not _calls(turn)


def has_stray_marker(turn: dict[str, Any]) -> bool:
    fields = (_text(turn.get("reasoning_content")), _text(turn.get("content")))
    return any(marker in text for text in fields for marker in STRAY_MARKERS)


def drop_reason(record: ResultRecord, fmt: str, keep_truncated: bool) -> str | None:
    """Why a (unique, well-formed) row is not exported, or None to export it."""
    turns = record.finished_turns
    if fmt == "tokens" and any(turn_ids(t) is None for t in turns):
        return NO_IDS
    cut = any(t.get("finish_reason") == "length" for t in turns)
    if cut and keep_truncated:
        return STRAY if any(has_stray_marker(t) for t in turns) else None
    if cut:
        return TRUNCATED
    if any(t.get("reasoning_complete") is False for t in turns):
        return UNCLOSED
    if any(is_empty_answer(t) for t in turns):
        return EMPTY
    if any(has_stray_marker(t) for t in turns):
        return STRAY
    return None


# --- converting one row (pure) ------------------------------------------------------------------------
def export_id(record: ResultRecord) -> str:
    return f"{record.dataset}/{record.id}"


def _arguments(value: Any) -> str:
    """A tool call's arguments as a JSON string. The model's own text is kept byte for byte; an object (only
    a prompt's history carries one) becomes the text a template's ``tojson`` writes for it, so a trainer that
    parses it back (SpecForge does) or prints it as it is renders what the model saw."""
    if isinstance(value, str):
        return value
    return json.dumps(value if value is not None else {}, ensure_ascii=False)


def tool_call(call: dict[str, Any], as_string: bool = True) -> dict[str, Any]:
    """One call in the OpenAI shape. ``as_string`` (specforge, for Arrow's one type per column): arguments as
    a JSON string; else (messages) arguments in the form the prompt file gave them, object or string."""
    function = call.get("function")
    if not isinstance(function, dict):
        function = {}
    out: dict[str, Any] = {}
    if isinstance(call.get("id"), str):
        out["id"] = call["id"]
    out["type"] = call.get("type") if isinstance(call.get("type"), str) else "function"
    arguments = function.get("arguments")
    if as_string or not isinstance(arguments, (dict, str)):
        arguments = _arguments(arguments)
    out["function"] = {"name": _text(function.get("name")), "arguments": arguments}
    return out


def message(raw: dict[str, Any], as_string: bool = True) -> dict[str, Any]:
    """One message with the keys a chat template reads (the ones that made the prompt's ids, RENDERED_KEYS),
    in stable types; a tool-calling turn's null content stays null, as the template saw it."""
    content = raw.get("content")
    out: dict[str, Any] = {"role": raw["role"], "content": content if content is None else _text(content)}
    if isinstance(raw.get("reasoning_content"), str):
        out["reasoning_content"] = raw["reasoning_content"]
    calls = raw.get("tool_calls")
    if isinstance(calls, list) and calls:
        out["tool_calls"] = [tool_call(c, as_string) for c in calls if isinstance(c, dict)]
    for key in ("tool_call_id", "name"):
        if isinstance(raw.get(key), str):
            out[key] = raw[key]
    return out


def template_kwargs(record: ResultRecord) -> dict[str, Any]:
    kwargs = record.chat_template_kwargs
    return {k: v for k, v in kwargs.items() if k not in RESERVED_KEYS} if isinstance(kwargs, dict) else {}


def generated_positions(record: ResultRecord) -> list[int]:
    """Message indices of the assistant turns the model wrote: the last one for last/each rows, the last
    ``len(turns)`` assistant turns for all rows (a greeting before the first user turn is the source's)."""
    assistant = [i for i, m in enumerate(record.messages) if m.get("role") == "assistant"]
    return assistant[-len(record.finished_turns) :]


def meta(record: ResultRecord, generated: list[int]) -> dict[str, Any]:
    """Everything a trainer does not read, as scalars of one type each (JSON text for the nested ones)."""

    def as_json(value: Any) -> str | None:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode() if value is not None else None

    return {
        "dataset": record.dataset,
        "id": record.id,
        "partition": _text(record.partition) or None,
        "source": record.source,
        "finish_reason": record.finish_reason,
        "reasoning_complete": record.reasoning_complete,
        "prompt_tokens": _int(record.prompt_tokens),
        "completion_tokens": _int(record.completion_tokens),
        "generated_turns": generated,
        "model": record.model,
        "regenerate": record.regenerate,
        "settings": record.settings,
        "chat_template_kwargs": as_json(record.chat_template_kwargs),
        "sampling_params": as_json(record.sampling_params),
        "created_at": record.created_at,
    }


@dataclass(frozen=True, slots=True)
class Expected:
    """What one exported row must render to: ``ids`` (prompt ids + output ids as stored) with the generated
    span ``[start, len(ids))`` trained and nothing else."""

    ids: list[int]
    start: int
    reasoning: str = ""  # the generated turn's reasoning, to name a drift that drops it


@dataclass(frozen=True, slots=True)
class Exported:
    row: dict[str, Any]
    expected: Expected | None = None  # None: exact by construction (tokens) or no stored ids to compare


def _expected(turn: dict[str, Any]) -> Expected | None:
    ids = turn_ids(turn)
    if ids is None:
        return None
    prompt, output = ids
    return Expected(prompt + output, len(prompt), _text(turn.get("reasoning_content")))


def specforge_rows(record: ResultRecord) -> list[Exported]:
    """One row per generated turn, ending at that turn, with the history as the model saw it: trained with
    SpecForge's ``data.train_only_last_turn: true``, each row trains exactly the turn the model wrote."""
    positions = generated_positions(record)
    turns = record.finished_turns
    out = []
    for k, (position, turn) in enumerate(zip(positions, turns, strict=False)):
        rid = export_id(record) if len(positions) == 1 else f"{export_id(record)}#{k}"
        row: dict[str, Any] = {
            "id": rid,
            "conversations": [message(m) for m in record.messages[: position + 1]],
        }
        if record.tools:
            row["tools"] = orjson.dumps(record.tools).decode()
        row.update(template_kwargs(record))
        row["status"] = "success"  # what SpecForge's data validator looks for
        row[META_KEY] = meta(record, [p for p in positions if p <= position])
        out.append(Exported(row, _expected(turn)))
    return out


def to_messages(record: ResultRecord) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": export_id(record),
        "messages": [message(m, as_string=False) for m in record.messages],
        "generated_turns": generated_positions(record),
    }
    if record.tools:
        row["tools"] = record.tools
    if template_kwargs(record):
        row["chat_template_kwargs"] = template_kwargs(record)
    return row


def token_rows(record: ResultRecord) -> list[dict[str, Any]]:
    """One sequence when the generated turns chain, else one row per turn (see the module docstring)."""
    spans = [ids for ids in (turn_ids(t) for t in record.finished_turns) if ids is not None]
    last_prompt, last_output = spans[-1]
    sequence = last_prompt + last_output
    chained = all(sequence[: len(p) + len(o)] == p + o and len(p) + len(o) <= len(last_prompt) for p, o in spans[:-1])
    if chained:
        mask = [0] * len(sequence)
        for prompt, output in spans:
            mask[len(prompt) : len(prompt) + len(output)] = [1] * len(output)
        return [{"id": export_id(record), "input_ids": sequence, "loss_mask": mask}]
    return [
        {"id": f"{export_id(record)}#{k}", "input_ids": p + o, "loss_mask": [0] * len(p) + [1] * len(o)}
        for k, (p, o) in enumerate(spans)
    ]


def export_rows(record: ResultRecord, fmt: str) -> list[Exported]:
    """The output rows of one result row, each with what it must render to (see Expected)."""
    if fmt == "tokens":
        return [Exported(row) for row in token_rows(record)]
    if fmt == "specforge":
        return specforge_rows(record)
    return [Exported(to_messages(record), _expected(record.finished_turns[-1]))]


def convert(record: ResultRecord, fmt: str) -> list[dict[str, Any]]:
    return [e.row for e in export_rows(record, fmt)]


# --- pass 1 -------------------------------------------------------------------------------------------
def vocab_size(tokenizer: Any) -> int | None:
    try:
        return len(tokenizer) if tokenizer is not None else None
    except TypeError:  # a stand-in without a length
        return None


def scan_dataset(ref: DatasetRef, config: ExportConfig) -> DatasetScan:
    scan = DatasetScan(ref)
    scan.settings_known = {s["id"]: s["settings"] for s in recorded_sets(ref.path.parent)}
    vocab = config.vocabs.get(ref.name, vocab_size(config.tokenizer))
    seen: set[str] = set()
    for offset, line in iter_lines(ref.path):
        if not line.strip():
            continue
        row = parse_line(line)  # None for a torn tail or a line that is not JSON, as store.iter_rows skips
        if row is None:
            scan.unreadable += 1
            continue
        scan.rows += 1
        record = ResultRecord.from_dict(row)
        why = malformed(record, vocab)
        if why is not None:
            scan.dropped[MALFORMED] += 1
            scan.malformed_example = scan.malformed_example or f"line at byte {offset:,}: {why}"
            continue
        if record.id in seen:
            scan.dropped[DUPLICATE] += 1
            continue
        seen.add(record.id)
        record.dataset = ref.name  # rows copied between folders still belong to the folder they are in
        settings = record.settings if isinstance(record.settings, str) else ""
        scan.settings[settings] += 1
        if config.settings is not None and settings != config.settings:
            scan.dropped[OTHER_SETTINGS] += 1
            continue
        _measure(scan, record)
        reason = drop_reason(record, config.format, config.keep_truncated)
        if reason is not None:
            scan.dropped[reason] += 1
            continue
        scan.kept.append(RowRef(ref.name, record.id, ref.path, offset, len(line), conversation_key(record)))
    return scan


def _measure(scan: DatasetScan, record: ResultRecord) -> None:
    turns = record.finished_turns
    scan.completion_tokens.append(max(0, _int(record.completion_tokens) or 0))
    scan.prompt_tokens.append(max(0, _int(record.prompt_tokens) or 0))
    scan.reasoning_chars.append(sum(len(_text(t.get("reasoning_content"))) for t in turns))
    scan.tool_calls[sum(_calls(t) for t in turns)] += 1
    scan.cut += any(t.get("finish_reason") == "length" for t in turns)
    scan.empty += any(is_empty_answer(t) for t in turns)


# --- which rows go where (pure) -----------------------------------------------------------------------
def in_validation(ref: RowRef, seed: int, fraction: float) -> bool:
    """A hash of (seed, dataset, conversation): a row stays on its side when the export is redone with more
    rows, and the rows of one `each` conversation (ids ``<id>#<k>``) all go to the same side."""
    digest = hashlib.sha256(f"{seed}\0{ref.dataset}\0{ref.group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def split_rows(rows: Sequence[RowRef], config: ExportConfig) -> tuple[list[RowRef], list[RowRef]]:
    """(train, validation), each in input order or shuffled by the seed."""
    train = [r for r in rows if not in_validation(r, config.seed, config.val_fraction)]
    val = [r for r in rows if in_validation(r, config.seed, config.val_fraction)]
    if config.shuffle:
        rng = random.Random(config.seed)
        rng.shuffle(train)
        rng.shuffle(val)
    return train, val


def val_path(out: Path) -> Path:
    """train.jsonl -> train.val.jsonl; a name without an extension gets .val at its end."""
    out = Path(out)
    return out.with_name(f"{out.stem}.val{out.suffix}") if out.suffix else out.with_name(f"{out.name}.val")


# --- pass 2 -------------------------------------------------------------------------------------------
def read_row(ref: RowRef, fh: BinaryIO) -> ResultRecord:
    fh.seek(ref.offset)
    record = ResultRecord.from_dict(orjson.loads(fh.read(ref.length)))
    record.dataset = ref.dataset
    return record


class DriftError(SynthgenError):
    """--fail-on-drift and some exported rows do not render to the stored ids: nothing is written."""

    exit_code = EXIT_FAILURES


def check_row(tally: Tally, checker: Any, exported: Exported) -> None:
    """One exported row through the render check (see rendercheck)."""
    expected = exported.expected
    if expected is None:
        tally.no_ids += 1
        return
    row_id = str(exported.row.get("id"))
    try:
        rendering = checker.render(exported.row)
    except Exception as exc:  # a template or trainer that cannot render the row at all is drift too
        tally.add(
            row_id, {TEXT: f"cannot render ({str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__})"}
        )
        return
    tally.add(
        row_id,
        verdict(expected.ids, expected.start, expected.reasoning, rendering, checker.decode, checker.system_prompt),
    )


def _tallies(scans: Sequence[DatasetScan], config: ExportConfig) -> dict[str, Tally]:
    out = {}
    for scan in scans:
        checker = config.checkers.get(scan.ref.name)
        if checker is not None and config.format != "tokens":
            scan.render = out[scan.ref.name] = Tally(route=checker.name)
    return out


def check_kept(scans: Sequence[DatasetScan], config: ExportConfig) -> None:
    """The render check over every row that would be exported (the report's pass; an export checks as it
    writes)."""
    tallies = _tallies(scans, config)
    handles: dict[Path, Any] = {}
    try:
        for scan in scans:
            tally = tallies.get(scan.ref.name)
            if tally is None:
                continue
            for ref in scan.kept:
                if ref.path not in handles:
                    handles[ref.path] = open(ref.path, "rb")
                for exported in export_rows(read_row(ref, handles[ref.path]), config.format):
                    check_row(tally, config.checkers[scan.ref.name], exported)
    finally:
        for fh in handles.values():
            fh.close()


def _file_mode() -> int:
    """What a plain open() would give a new file: 0666 less the umask (mkstemp's temp files are 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _write_rows(
    path: Path, refs: Sequence[RowRef], config: ExportConfig, handles: dict[Path, Any], tallies: dict[str, Tally]
) -> tuple[str, int]:
    """Rows to a temp file beside ``path``; returns (temp path, rows written). The caller renames it."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    written = 0
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, "wb") as out:
            for ref in refs:
                if ref.path not in handles:
                    handles[ref.path] = open(ref.path, "rb")
                tally = tallies.get(ref.dataset)
                for exported in export_rows(read_row(ref, handles[ref.path]), config.format):
                    out.write(orjson.dumps(exported.row, option=orjson.OPT_APPEND_NEWLINE))
                    written += 1
                    if tally is not None:
                        check_row(tally, config.checkers[ref.dataset], exported)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp, written


def write_export(scans: Sequence[DatasetScan], config: ExportConfig) -> dict[Path, int]:
    """Write the train file (and the validation file); returns rows written per file.

    Both files are complete in temp files before either is renamed into place, so a failure (or drift under
    --fail-on-drift) leaves the previous export as it was."""
    assert config.out is not None
    train, val = split_rows([r for s in scans for r in s.kept], config)
    targets = [(Path(config.out), train)]
    if config.val_fraction > 0:
        targets.append((val_path(config.out), val))
    tallies = _tallies(scans, config)
    handles: dict[Path, Any] = {}
    temps: list[tuple[str, Path, int]] = []
    try:
        for path, refs in targets:
            tmp, written = _write_rows(path, refs, config, handles, tallies)
            temps.append((tmp, path, written))
        drifting = sum(t.drifting for t in tallies.values())
        if config.fail_on_drift and drifting:
            checked = sum(t.checked for t in tallies.values())
            raise DriftError(
                f"{drifting:,} of {checked:,} exported rows do not render to the stored ids (kinds above); "
                "nothing written: export --format tokens for the exact ids, or drop --fail-on-drift"
            )
        for tmp, path, _ in temps:
            os.replace(tmp, path)
    except OSError as exc:
        target = exc.filename or config.out
        raise StoreWriteError(
            f"{target}: cannot write the export ({exc.strerror}); "
            "check that its folder exists, is writable and has space"
        ) from exc
    finally:
        for tmp, _, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        for fh in handles.values():
            fh.close()
    return {path: written for _, path, written in temps}


# --- the report (pure) --------------------------------------------------------------------------------
def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def _tool_calls_line(counts: Counter[int]) -> str:
    parts = [f"{calls}: {counts[calls]:,}" for calls in sorted(counts)]
    return "   ".join(parts) if parts else "-"


def format_dataset(scan: DatasetScan, config: ExportConfig) -> list[str]:
    kept, dropped = len(scan.kept), sum(scan.dropped.values())
    label = 30
    lines = [
        f"{scan.ref.name}  ({scan.ref.path})",
        f"  {'rows read':<{label}} {scan.rows:>9,}",
        f"  {'exported':<{label}} {kept:>9,}   (--format {config.format})",
        f"  {'dropped':<{label}} {dropped:>9,}",
    ]
    for reason, text in REASONS.items():
        if scan.dropped[reason]:
            hint = f"   ({HINTS[reason]})" if reason in HINTS else ""
            lines.append(f"    {text:<{label - 2}} {scan.dropped[reason]:>9,}{hint}")
            if reason == MALFORMED and scan.malformed_example:
                lines.append(f"      first: {scan.malformed_example}")
    if scan.unreadable:
        lines.append(f"  {'unreadable lines':<{label}} {scan.unreadable:>9,}   (torn or not JSON; skipped)")
    unique = scan.unique
    for text, part in (("share cut at max tokens", scan.cut), ("share with empty answer", scan.empty)):
        lines.append(f"  {text:<{label}} {_share(part, unique):>9}   ({part:,} of {unique:,})")
    lines.append(f"  {'tool calls per row':<{label}} {_tool_calls_line(scan.tool_calls)}")
    lines.extend(settings_lines(scan, label))
    if scan.render is not None:
        lines.extend(scan.render.lines(label))
    for title, values in (
        ("completion tokens", scan.completion_tokens),
        ("prompt tokens", scan.prompt_tokens),
        ("reasoning chars", scan.reasoning_chars),
    ):
        lines.append("")
        lines.extend("  " + line for line in histogram(values, title))
    return lines


def describe_settings(settings: dict[str, Any] | None) -> str:
    """The settings that tell two sets apart at a glance: model, max tokens, sampling, mode."""
    if settings is None:
        return "(not in settings.jsonl)"
    sampling = settings.get("sampling_params") or {}
    parts = [f"model {settings.get('model')}", f"max_tokens {settings.get('max_tokens')}"]
    if isinstance(sampling, dict):
        parts += [f"{k} {v}" for k, v in sorted(sampling.items()) if k != "max_new_tokens"]
    if settings.get("chat_template_kwargs"):
        parts.append(f"kwargs {orjson.dumps(settings['chat_template_kwargs']).decode()}")
    parts.append(f"regenerate {settings.get('regenerate')}")
    return ", ".join(parts)


def settings_lines(scan: DatasetScan, label: int = 30) -> list[str]:
    """The settings sets of a dataset's rows, with their counts, and a warning when there is more than one."""
    if not scan.settings:
        return []
    lines = [f"  {'settings sets':<{label}} {len(scan.settings):>9,}"]
    for sid, rows in scan.settings.most_common():
        name = sid or "unrecorded"
        what = describe_settings(scan.settings_known.get(sid)) if sid else "(rows written before settings ids)"
        lines.append(f"    {name:<{label - 2}} {rows:>9,}   {what}")
    if len(scan.settings) > 1:
        lines.append(f"  warning: {mixed_settings_warning(scan)}")
    return lines


def mixed_settings_warning(scan: DatasetScan) -> str:
    first = scan.settings.most_common(1)[0][0] or "unrecorded"
    return (
        f"{scan.ref.name}: rows of {len(scan.settings)} settings sets go into one file; "
        f"export one with --settings ID (e.g. --settings {first})"
    )


SPECFORGE_SETTING = "data.train_only_last_turn: true"


def render_notes(scans: Sequence[DatasetScan], config: ExportConfig) -> list[str]:
    """What the render check found overall, and the trainer setting a specforge file needs."""
    lines = []
    if config.format == "tokens":
        lines.append("tokens rows are the stored ids and loss mask: exact by construction")
        return lines
    if config.format == "specforge":
        lines.append(
            f"specforge rows end at the one turn the model generated: train with {SPECFORGE_SETTING} "
            "(SpecForge's config), or earlier assistant turns are trained too"
        )
    tallies = [s.render for s in scans if s.render is not None]
    if not tallies:
        lines.append("render check skipped: no tokenizer; pass --tokenizer PATH (the model's tokenizer folder)")
    elif any(t.drifting for t in tallies):
        lines.append(
            "some rows do not render to the ids the model saw and wrote: export --format tokens to train on "
            "exactly those ids"
        )
    return lines


def format_report(scans: Sequence[DatasetScan], config: ExportConfig) -> str:
    lines: list[str] = []
    for scan in scans:
        lines.extend(format_dataset(scan, config))
        lines.append("")
    read = sum(s.rows for s in scans)
    kept = sum(len(s.kept) for s in scans)
    lines.append(f"total: {kept:,} of {read:,} rows would be exported as {config.format}")
    lines.extend(render_notes(scans, config))
    return "\n".join(lines) + "\n"
