"""Finding datasets and reading their prompt rows.

Layout: ``<prompts_dir>/<partition>/<dataset>.jsonl`` (or ``.parquet``, ``.arrow``, or a folder of
shards: ``synthgen.data.readers``, which reads each format). One record per row, in any of:

    {"id": ..., "messages": [{"role": ..., "content": ...}, ...]}
    {"id": ..., "conversations": [{"from": "system|human|gpt", "value": ...}, ...]}
    {"id": ..., "conversations": [{"role": ..., "content": ...}, ...]}
    {"id": ..., "prompt": "...", "system": "..." (optional)}
    {"id": ..., "instruction": "...", "input": "..." (optional), "output": "..." (optional)}

Messages may carry OpenAI-style tool calls, tool results and earlier reasoning, and a row may
carry ``tools`` (see ``conversations``). Which prompts a line makes depends on the regeneration
mode: ``last`` (the conversation cut back before its trailing assistant turns, id ``<id>``),
``each`` (one prompt per assistant turn k, id ``<id>#<k>``) or ``all`` (the whole conversation,
regenerated turn by turn, id ``<id>``). A missing id becomes a stable hash of the messages. A
prompt's hash does not depend on the mode: ``last`` and ``all`` give a conversation's own id the
same hash (``conversations.conversation_hash``); a change of mode is a change of settings.

Files are streamed twice: ``scan_dataset`` validates every row and keeps only prompt ids and the
positions the reader gives (so a bad row stops the run before any request), and ``PromptReader``
reads the chosen prompts lazily. The scan also compares the prompts that earlier runs answered with what
the file holds now (``DatasetIndex.changed``). Duplicates are found by the record's id: the
first line with an id wins, whatever prompts the mode makes of it.
"""

from __future__ import annotations

import gc
from collections.abc import Container, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from synthgen.data.conversations import (
    Conversation,
    ConversationError,
    conversation_hash,
    conversation_id,
    each_id,
    legacy_all_hash,
    parse_record,
    prompt_hash,
)
from synthgen.data.idtable import PromptOffsets
from synthgen.data.openfiles import Oversize, limit_error
from synthgen.data.readers import SUFFIXES, folder_dataset, format_of, open_reader
from synthgen.data.readers.base import NO_COLUMNS, Columns, Reader, RowData
from synthgen.data.readers.jsonl import MAX_LINE
from synthgen.data.records import DoneEntry
from synthgen.errors import UsageError

REGENERATE_MODES = ("last", "each", "all")
# Lines longer than this have their size kept, so a prompt too long to fit is skipped before it is read.
LONG_LINE = 1 << 20


@dataclass(frozen=True, slots=True)
class DatasetSource:
    name: str
    partition: str
    path: Path  # the file, or the folder of shards
    format: str = "jsonl"
    files: tuple[Path, ...] = ()  # a folder's shards, in reading order; () for a single file

    @property
    def shards(self) -> tuple[Path, ...]:
        return self.files or (self.path,)

    @property
    def label(self) -> str:
        """The prompt file as rows record it: partition/name.jsonl, or partition/name/ for a folder."""
        return f"{self.partition}/{self.path.name}" + ("/" if self.files else "")

    def reader(self, columns: Columns = NO_COLUMNS) -> Reader:
        return open_reader(self.format, self.shards, columns)


@dataclass(frozen=True, slots=True)
class Prompt:
    id: str
    dataset: str
    messages: tuple[dict[str, Any], ...]  # what is rendered; mode all: the whole conversation
    line: int
    tools: list[dict[str, Any]] | None = None
    prompt_hash: str = ""
    conversation: Conversation | None = None  # mode all: regenerated turn by turn
    input_ids: tuple[int, ...] | None = None  # a line's input_ids: already rendered, sent as they are


@dataclass(slots=True)
class DatasetIndex:
    """What one validation pass learned about a dataset file; ids only, in file order."""

    source: DatasetSource
    reader: Reader
    ids: list[str] = field(default_factory=list)
    offsets: PromptOffsets = field(init=False)  # id -> (the reader's position of its row, row number from 1)
    lines: int = 0  # rows
    mode: str = "last"
    changed: list[str] = field(default_factory=list)  # done prompts whose text is no longer what was answered
    hashes: dict[str, str] = field(default_factory=dict)  # prompt id -> hash, for the ids the scan was asked to track
    long_lines: dict[str, int] = field(default_factory=dict)  # prompt id -> bytes, for lines over LONG_LINE
    dropped_empty_system: int = 0
    duplicates: int = 0
    bad_lines: int = 0
    first_bad: list[str] = field(default_factory=list)  # a few messages, for the warning

    def __post_init__(self) -> None:
        self.offsets = PromptOffsets(self.ids)


class BadLine(ValueError):
    """One row's problem, without the location (the caller adds file:line or file: row n)."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a dataset or partition name (it becomes a folder of its own), or None."""
    if not name:
        return "is empty"
    if not name.strip("."):
        return "is made of dots only"
    if name.startswith("."):
        return "starts with a dot"
    if "/" in name or "\\" in name or "\0" in name:
        return "contains a path separator"
    return None


def _is_hidden(path: Path, stem: str) -> bool:
    """Hidden files (``.name.jsonl``, macOS's ``._name.jsonl``) are not datasets; ``..jsonl`` is no hidden file."""
    return path.name.startswith(".") and bool(stem.strip("."))


def _dataset(path: Path) -> DatasetSource | None:
    """The dataset an entry of a partition folder is (without its partition), or None."""
    fmt = format_of(path.name)
    stem = path.name[: -len(fmt) - 1] if fmt else path.name
    if _is_hidden(path, stem) or (fmt is None and path.name.startswith(".")):
        return None
    if path.is_dir():
        found = folder_dataset(path)
        return None if found is None else DatasetSource(stem, "", path, found[0], found[1])
    return None if fmt is None else DatasetSource(stem, "", path, fmt)


def _entries(folder: Path, what: str) -> list[Path]:
    try:
        return sorted(folder.iterdir())
    except OSError as exc:
        raise limit_error(exc, folder) or UsageError(
            f"{folder}: cannot list the {what} ({exc.strerror}); make it readable (chmod u+rx {folder})"
        ) from exc


def discover(prompts_dir: Path, partition: str, names: Iterable[str] = ()) -> list[DatasetSource]:
    """The datasets a run covers, in a stable order (partition, then file name)."""
    prompts_dir = Path(prompts_dir)
    if not prompts_dir.is_dir():
        raise UsageError(f"{prompts_dir}: prompts directory not found; pass --prompts-dir DIR")
    if partition != "all" and (name_problem(partition) or Path(partition).is_absolute()):
        raise UsageError(
            f"--partition {partition!r}: give the name of one folder under {prompts_dir} "
            "(e.g. short) or 'all', not a path"
        )
    if partition == "all":
        entries = _entries(prompts_dir, "prompts directory")
        folders = [p for p in entries if p.is_dir() and not p.name.startswith(".")]
    else:
        folder = prompts_dir / partition
        if not folder.is_dir():
            entries = _entries(prompts_dir, "prompts directory")
            known = ", ".join(p.name for p in entries if p.is_dir()) or "none"
            raise UsageError(f"{folder}: no such partition (partitions here: {known}, or 'all')")
        folders = [folder]
    sources: dict[str, DatasetSource] = {}
    for folder in folders:
        for path in _entries(folder, "partition folder"):
            found = _dataset(path)
            if found is None:
                continue
            name = found.name
            problem = name_problem(name)
            if problem:
                raise UsageError(
                    f"{path}: the dataset name {name!r} {problem}, so it cannot name an output "
                    f"folder; rename the file (e.g. to {folder / 'data.jsonl'})"
                )
            if name in sources:
                raise UsageError(
                    f"{path}: dataset '{name}' also exists as {sources[name].path}; "
                    "dataset names must be unique across partitions (their outputs share outputs/<dataset>/)"
                )
            sources[name] = replace(found, partition=folder.name)
    wanted = list(dict.fromkeys(names))
    if wanted:
        unknown = [n for n in wanted if n not in sources]
        if unknown:
            known = ", ".join(sources) or "none"
            raise UsageError(f"unknown dataset {', '.join(unknown)} in partition '{partition}' (known: {known})")
        return [sources[n] for n in wanted]
    if not sources:
        kinds = ", ".join(f"*{suffix}" for suffix in SUFFIXES)
        raise UsageError(
            f"no datasets ({kinds} or folders of them) under {prompts_dir}/{partition if partition != 'all' else '*'}"
        )
    return list(sources.values())


_PLAIN_ROLES = frozenset(("system", "user", "assistant"))


def _plain(record: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The messages of a plain chat record (``messages`` of role/content pairs in that order, canonical
    roles, no empty turn, a user turn, no tools), or None to let ``parse_record`` read the record; for
    such a record it makes the same conversation of the same messages, copied."""
    messages = record.get("messages")
    if type(messages) is not list or not messages or record.get("tools") is not None:
        return None
    user = False
    for message in messages:
        if type(message) is not dict or tuple(message) != ("role", "content"):
            return None
        role, content = message["role"], message["content"]
        if type(role) is not str or role not in _PLAIN_ROLES or type(content) is not str or not content.strip():
            return None
        user = user or role == "user"
    return messages if user else None


_NOT_JSON = object()  # what ``_loads`` gives for a line orjson cannot read: ``parse_line`` says why


def _loads(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return _NOT_JSON


def _plain_id(record: Any) -> str | None:
    """The id of a plain chat record (``_plain``) with a string id, or None: then ``parse_record`` reads it."""
    if type(record) is not dict:
        return None
    rid = record.get("id")
    if type(rid) is not str or not rid or rid.isspace() or _plain(record) is None:
        return None
    return rid


def parse_line(line: bytes) -> tuple[str, Conversation] | None:
    """(id, conversation) for one line, None for a blank line; raises BadLine."""
    if not line or line.isspace():
        return None
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise BadLine(f"not valid JSON ({exc})") from exc
    return _parse_record(record)


def _parse_record(record: Any) -> tuple[str, Conversation]:
    """(id, conversation) of a line's JSON value; raises BadLine."""
    if not isinstance(record, dict):
        raise BadLine(f"expected a JSON object, got {type(record).__name__}")
    messages = _plain(record)
    if messages is not None:
        conversation = Conversation(messages)
    else:
        try:
            conversation = parse_record(record)
        except ConversationError as exc:
            raise BadLine(str(exc)) from None
    rid = record.get("id")
    if type(rid) is str and rid and not rid.isspace():
        return rid, conversation
    if rid is None:
        rid = conversation_id(conversation)
    elif isinstance(rid, float):
        raise BadLine("'id' is a number that is not a 64-bit integer; write it as a string")
    elif isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise BadLine(f"'id' is {type(rid).__name__}, expected a string or integer")
    rid = str(rid)
    if not rid.strip():
        raise BadLine("'id' is empty")
    return rid, conversation


def prompts_of(rid: str, conversation: Conversation, mode: str) -> list[tuple[str, list[dict[str, Any]]]]:
    """(prompt id, messages) of every prompt one line makes in a regeneration mode."""
    if conversation.input_ids is not None:  # a rendered prompt: one prompt in every mode (scan_dataset: last only)
        return [(rid, [])]
    if mode == "each":
        prompts = [(each_id(rid, k), history) for k, history in conversation.each_prompts()]
        if conversation.messages[-1]["role"] != "assistant":  # the unanswered last turn is a prompt too
            prompts.append((each_id(rid, len(conversation.assistant_positions())), conversation.messages))
        return prompts
    if mode == "all":
        return [(rid, conversation.messages)]
    return [(rid, conversation.last_prompt())]


def digest_of(messages: list[dict[str, Any]], conversation: Conversation, mode: str) -> str:
    """The hash of a prompt ``prompts_of`` made: of its messages, except that a conversation's own id
    (``last``, ``all``) has ``conversation_hash`` in every mode (for ``last`` the same value)."""
    if mode == "all" or conversation.input_ids is not None:
        return conversation_hash(conversation)
    return prompt_hash(messages, conversation.tools)


def answers(entry: DoneEntry, digest: str, conversation: Conversation) -> bool:
    """Whether a done row was made for the prompt (of hash ``digest``) the line makes now. A row
    without a hash (written before hashes existed) is taken as it is; a row of ``--regenerate all``
    written before the hash was mode-independent carries the hash of the whole conversation."""
    if entry.prompt_hash is None or entry.prompt_hash == digest:
        return True
    return entry.regenerate == "all" and entry.prompt_hash == legacy_all_hash(conversation)


def scan_dataset(
    source: DatasetSource,
    skip_bad_lines: bool = False,
    mode: str = "last",
    done: Mapping[str, DoneEntry] | None = None,
    track: Container[str] = (),
    columns: Columns = NO_COLUMNS,
) -> DatasetIndex:
    """Validate every row; keep the unique prompt ids in file order (the first row of a record id
    wins). ``columns``: --columns, the dataset's column of each field.

    ``done``: the rows earlier runs left; a done prompt whose hash differs from what the line
    makes now is listed in ``changed``. ``track``: prompt ids whose current hash is kept in
    ``hashes`` (the partial turns of ``--regenerate all`` are checked against it).

    In modes ``last`` and ``all`` a record makes one prompt of its own id, so the scan keeps no set
    of record ids: it looks for repeated ids once at the end (``PromptOffsets.has_duplicates``) and,
    only when there are some, scans again keeping that set, to skip the later lines as they come."""
    with _no_cyclic_gc():
        if mode != "each":
            index = _scan(source, source.reader(columns), skip_bad_lines, mode, done, track, records=None)
            if not index.offsets.has_duplicates():
                return index
        return _scan(source, source.reader(columns), skip_bad_lines, mode, done, track, records=set())


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """Hold off the cyclic garbage collector during a scan. A columnar reader makes a dict a row (a
    million for a million rows); each is freed by reference counting, none is part of a cycle, yet their
    allocations trigger the collector, whose full passes walk every object of the process: about a second
    of a 1,000,000-row parquet scan (bench/README.md). Whatever a scan leaves is collected afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _scan(
    source: DatasetSource,
    reader: Reader,
    skip_bad_lines: bool,
    mode: str,
    done: Mapping[str, DoneEntry] | None,
    track: Container[str],
    records: set[str] | None,
) -> DatasetIndex:
    index = DatasetIndex(source, reader, mode=mode)
    ids, starts, linenos = index.ids, index.offsets.starts, index.offsets.lines
    quick = mode != "each" and records is None  # a row makes one prompt of its own id: ids are all it keeps
    columns = reader.columns
    mapped = bool(columns)
    for row, start, data in reader.scan():
        index.lines = row
        record: Any = _NOT_JSON
        if quick and (type(data) is dict or (type(data) is bytes and len(data) <= LONG_LINE)):
            record = _loads(data) if type(data) is bytes else data
            if mapped and type(data) is bytes and type(record) is dict:
                record = columns.apply(record)
            rid = _plain_id(record)
            if rid is not None and not (done and rid in done) and rid not in track:
                ids.append(rid)  # the common case: the whole of the loop below for it
                starts.append(start)
                linenos.append(row)
                continue
        size = _size(data)
        try:
            # A row read above is not read again (a done prompt's row is hashed below).
            parsed = _parse(data, columns) if record is _NOT_JSON else _parse_record(record)
        except BadLine as exc:
            _bad_line(index, row, exc, skip_bad_lines)
            continue
        if parsed is None:
            continue
        rid, conversation = parsed
        if conversation.input_ids is not None and mode != "last":
            raise reader.error(
                row,
                f"a row of input_ids is a prompt already rendered, with no turns to regenerate; "
                f"run this dataset with --regenerate last, not {mode}",
            )
        if records is not None:
            if rid in records:
                index.duplicates += 1
                continue
            records.add(rid)
        index.dropped_empty_system += conversation.dropped_empty_system
        for prompt_id, messages in prompts_of(rid, conversation, mode):
            ids.append(prompt_id)
            starts.append(start)
            linenos.append(row)
            if size > LONG_LINE:
                index.long_lines[prompt_id] = size
            entry = done.get(prompt_id) if done else None
            tracked = prompt_id in track
            if entry is None and not tracked:
                continue  # the hash is computed only where it is compared
            digest = digest_of(messages, conversation, mode)
            if tracked:
                index.hashes[prompt_id] = digest
            if entry is not None and not answers(entry, digest, conversation):
                index.changed.append(prompt_id)
    return index


def _size(data: RowData) -> int:
    """A JSONL line's bytes (its size is what skips a prompt too long to fit before it is read); 0 for a
    columnar row, whose size is not known before it is decoded."""
    if type(data) is bytes:
        return len(data)
    return data.size if isinstance(data, Oversize) else 0


def _parse(data: RowData, columns: Columns) -> tuple[str, Conversation] | None:
    """(id, conversation) of one row a reader gave, None for a blank line; raises BadLine."""
    if isinstance(data, Oversize):
        raise BadLine(f"the line has {data.size:,} bytes, over the {MAX_LINE >> 20} MiB a prompt line may have")
    if type(data) is not bytes:
        return _parse_record(data)
    if not columns:
        return parse_line(data)
    if not data or data.isspace():
        return None
    try:
        record = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise BadLine(f"not valid JSON ({exc})") from exc
    return _parse_record(columns.apply(record) if type(record) is dict else record)


def _bad_line(index: DatasetIndex, row: int, problem: BadLine, skip_bad_lines: bool) -> None:
    """A bad row stops the scan with its file and row, or with --skip-bad-lines is counted (a few kept to show)."""
    if not skip_bad_lines:
        fix = f"fix or remove the {index.reader.unit}, or pass --skip-bad-lines"
        raise index.reader.error(row, f"{problem}; {fix}") from None
    index.bad_lines += 1
    if len(index.first_bad) < 3:
        index.first_bad.append(f"{index.reader.where(row)}: {problem}")


def build_prompt(index: DatasetIndex, prompt_id: str, data: RowData, row: int) -> Prompt:
    """The prompt ``prompt_id`` of a row the scan recorded for it."""
    try:
        parsed = _parse(data, index.reader.columns)
    except BadLine as exc:
        raise index.reader.error(row, f"changed while the run was reading it ({exc})") from None
    if parsed is not None:
        rid, conversation = parsed
        for pid, messages in prompts_of(rid, conversation, index.mode):
            if pid == prompt_id:
                return Prompt(
                    prompt_id,
                    index.source.name,
                    tuple(messages),
                    row,
                    conversation.tools,
                    digest_of(messages, conversation, index.mode),
                    conversation if index.mode == "all" else None,
                    conversation.input_ids,
                )
    raise index.reader.error(row, "changed while the run was reading it; rerun to rescan")


class PromptReader:
    """Reads single prompts by the positions a scan recorded, in whatever order a run picks.

    Readers share a few open files (an LRU, ``readers.base.READ_POOL``): a partition of thousands of
    datasets runs under a small ``ulimit -n``, and a dataset the run has moved past holds no descriptor."""

    def __init__(self, index: DatasetIndex):
        self.index = index

    def read(self, prompt_id: str) -> Prompt:
        position, row = self.index.offsets[prompt_id]
        return build_prompt(self.index, prompt_id, self.index.reader.read(position), row)

    def close(self) -> None:
        """Close this reader's files, if they are open; a later read opens them again."""
        self.index.reader.close()
