"""Finding datasets and reading their prompt lines.

Layout: ``<prompts_dir>/<partition>/<dataset>.jsonl``. One JSON object per line, in any of:

    {"id": ..., "messages": [{"role": ..., "content": ...}, ...]}
    {"id": ..., "conversations": [{"from": "system|human|gpt", "value": ...}, ...]}
    {"id": ..., "conversations": [{"role": ..., "content": ...}, ...]}
    {"id": ..., "prompt": "...", "system": "..." (optional)}

A conversation that ends with assistant turns is cut back to the turn before them (it is
regenerated). A missing id becomes a stable hash of the messages. Files are streamed twice:
``scan_dataset`` validates every line and keeps only ids and byte offsets (so a bad line
stops the run before any request), and ``PromptReader`` reads the chosen prompts lazily.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import orjson

from .errors import InputFileError, UsageError
from .openfiles import FilePool, limit_error, pool_size

ROLE_ALIASES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "tool": "tool",
}


@dataclass(frozen=True, slots=True)
class DatasetSource:
    name: str
    partition: str
    path: Path


@dataclass(frozen=True, slots=True)
class Prompt:
    id: str
    dataset: str
    messages: tuple[dict, ...]
    line: int


@dataclass(slots=True)
class DatasetIndex:
    """What one validation pass learned about a dataset file; ids only, in file order."""

    source: DatasetSource
    ids: list[str] = field(default_factory=list)
    offsets: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (byte offset, line number)
    lines: int = 0
    duplicates: int = 0
    bad_lines: int = 0
    first_bad: list[str] = field(default_factory=list)  # a few messages, for the warning


class BadLine(ValueError):
    """One line's problem, without the location (the caller adds file:line)."""


# Open prompt files across all readers; a small share of the descriptor limit.
READ_POOL: FilePool[BinaryIO] = FilePool(pool_size(32), lambda fh: fh.close())


SUFFIX = ".jsonl"


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


def _is_hidden(path: Path) -> bool:
    """Hidden files (``.name.jsonl``, macOS's ``._name.jsonl``) are not datasets; ``..jsonl`` is no hidden file."""
    return path.name.startswith(".") and bool(path.name[: -len(SUFFIX)].strip("."))


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
        raise UsageError(f"--partition {partition!r}: give the name of one folder under {prompts_dir} "
                         "(e.g. short) or 'all', not a path")
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
            if not path.name.endswith(SUFFIX) or _is_hidden(path):
                continue
            name = path.name[: -len(SUFFIX)]
            problem = name_problem(name)
            if problem:
                raise UsageError(f"{path}: the dataset name {name!r} {problem}, so it cannot name an output "
                                 f"folder; rename the file (e.g. to {folder / 'data.jsonl'})")
            if name in sources:
                raise UsageError(
                    f"{path}: dataset '{name}' also exists as {sources[name].path}; "
                    "dataset names must be unique across partitions (their outputs share outputs/<dataset>/)"
                )
            sources[name] = DatasetSource(name, folder.name, path)
    wanted = list(dict.fromkeys(names))
    if wanted:
        unknown = [n for n in wanted if n not in sources]
        if unknown:
            known = ", ".join(sources) or "none"
            raise UsageError(f"unknown dataset {', '.join(unknown)} in partition '{partition}' (known: {known})")
        return [sources[n] for n in wanted]
    if not sources:
        raise UsageError(f"no *.jsonl datasets under {prompts_dir}/{partition if partition != 'all' else '*'}")
    return list(sources.values())


def _text(value, what: str) -> str:
    """Message content as a string: plain text, or a list of OpenAI-style text parts."""
    if isinstance(value, list):
        parts = []
        for part in value:
            if not (isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise BadLine(f"{what} has a content part that is not text; only text prompts are supported")
            parts.append(part["text"])
        value = "".join(parts)
    if not isinstance(value, str):
        raise BadLine(f"{what} is {type(value).__name__}, expected a string")
    if not value.strip():
        raise BadLine(f"{what} is empty")
    return value


def _messages(record: dict) -> list[dict]:
    if "messages" in record:
        raw, key = record["messages"], "messages"
    elif "conversations" in record:
        raw, key = record["conversations"], "conversations"
    elif "prompt" in record:
        messages = []
        if record.get("system") is not None:
            messages.append({"role": "system", "content": _text(record["system"], "'system'")})
        messages.append({"role": "user", "content": _text(record["prompt"], "'prompt'")})
        return messages
    else:
        raise BadLine("no 'messages', 'conversations' or 'prompt' field")
    if not isinstance(raw, list) or not raw:
        raise BadLine(f"'{key}' must be a non-empty list of messages")
    messages = []
    for i, message in enumerate(raw):
        where = f"{key}[{i}]"
        if not isinstance(message, dict):
            raise BadLine(f"{where} is {type(message).__name__}, expected an object")
        role_key, content_key = ("from", "value") if "from" in message else ("role", "content")
        role = message.get(role_key)
        if not isinstance(role, str) or role.lower() not in ROLE_ALIASES:
            shown = repr(role) if len(repr(role)) <= 40 else repr(role)[:37] + "..."
            raise BadLine(f"{where} has unknown role {shown} (expected one of {', '.join(ROLE_ALIASES)})")
        content = _text(message.get(content_key), f"{where} content")
        messages.append({"role": ROLE_ALIASES[role.lower()], "content": content})
    # A conversation that ends with the answer is regenerated from the turn before it.
    while messages and messages[-1]["role"] == "assistant":
        messages.pop()
    if not any(m["role"] == "user" for m in messages):
        raise BadLine(f"'{key}' has no user turn to answer")
    return messages


def stable_id(messages: list[dict]) -> str:
    digest = hashlib.sha256(orjson.dumps(messages, option=orjson.OPT_SORT_KEYS)).hexdigest()
    return f"auto-{digest[:20]}"


def parse_line(line: bytes) -> tuple[str, list[dict]] | None:
    """(id, messages) for one line, None for a blank line; raises BadLine."""
    if not line.strip():
        return None
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise BadLine(f"not valid JSON ({exc})") from exc
    if not isinstance(record, dict):
        raise BadLine(f"expected a JSON object, got {type(record).__name__}")
    messages = _messages(record)
    rid = record.get("id")
    if rid is None:
        rid = stable_id(messages)
    elif isinstance(rid, float):
        raise BadLine("'id' is a number that is not a 64-bit integer; write it as a string")
    elif isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise BadLine(f"'id' is {type(rid).__name__}, expected a string or integer")
    rid = str(rid)
    if not rid.strip():
        raise BadLine("'id' is empty")
    return rid, messages


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    try:
        with open(path, "rb") as fh:
            yield from enumerate(fh, start=1)
    except OSError as exc:
        raise limit_error(exc, path) or InputFileError(path, None, f"cannot read ({exc.strerror})") from exc


def scan_dataset(source: DatasetSource, skip_bad_lines: bool = False) -> DatasetIndex:
    """Validate every line; keep the unique ids in file order (first occurrence wins)."""
    index = DatasetIndex(source)
    seen = index.offsets
    offset = 0
    for lineno, line in _lines(source.path):
        index.lines = lineno
        start, offset = offset, offset + len(line)
        try:
            parsed = parse_line(line)
        except BadLine as exc:
            if not skip_bad_lines:
                fix = "fix or remove the line, or pass --skip-bad-lines"
                raise InputFileError(source.path, lineno, f"{exc}; {fix}") from None
            index.bad_lines += 1
            if len(index.first_bad) < 3:
                index.first_bad.append(f"{source.path}:{lineno}: {exc}")
            continue
        if parsed is None:
            continue
        rid = parsed[0]
        if rid in seen:
            index.duplicates += 1
            continue
        seen[rid] = (start, lineno)
        index.ids.append(rid)
    return index


class PromptReader:
    """Reads single prompts by the byte offsets a scan recorded, in whatever order a run picks.

    Readers share a few open files (an LRU, ``READ_POOL``): a partition of thousands of datasets
    runs under a small ``ulimit -n``, and a dataset the run has moved past holds no descriptor."""

    def __init__(self, index: DatasetIndex):
        self.index = index

    def read(self, prompt_id: str) -> Prompt:
        offset, lineno = self.index.offsets[prompt_id]
        path = self.index.source.path
        try:
            with READ_POOL.use(self, lambda: open(path, "rb")) as fh:
                fh.seek(offset)
                line = fh.readline()
        except OSError as exc:
            raise limit_error(exc, path) or InputFileError(path, lineno, f"cannot read ({exc.strerror})") from exc
        try:
            parsed = parse_line(line)
        except BadLine as exc:
            raise InputFileError(path, lineno, f"changed while the run was reading it ({exc})") from None
        if parsed is None or parsed[0] != prompt_id:
            raise InputFileError(path, lineno, "changed while the run was reading it; rerun to rescan")
        return Prompt(prompt_id, self.index.source.name, tuple(parsed[1]), lineno)

    def close(self) -> None:
        """Close this reader's file, if it is open; a later read opens it again."""
        READ_POOL.release(self)
