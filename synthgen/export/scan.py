"""Pass 1: read a results file, drop rows (counted per reason), keep where each kept row is; and pass 2's
reading of one kept row again by its byte offset.

Rows are never held in memory all at once: pass 1 keeps (file, offset, length) of each kept row, so a
shuffled export of a few million long reasoning rows costs a few hundred bytes per row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from synthgen.data.partials import TOKEN_KEYS, add_row_tokens, add_waiting
from synthgen.data.provenance import recorded_sets
from synthgen.data.records import ResultRecord, parse_line
from synthgen.data.samples import row_sample, sample_key
from synthgen.errors import InputFileError
from synthgen.export.config import DatasetRef, ExportConfig
from synthgen.export.fields import as_int, as_text
from synthgen.export.filters import (
    DUPLICATE,
    MALFORMED,
    OTHER_SETTINGS,
    conversation_key,
    drop_reason,
    is_empty_answer,
    malformed,
    tool_calls,
)
from synthgen.export.rendercheck import Tally
from synthgen.export.samples import SampleStats


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
    samples: SampleStats = field(default_factory=SampleStats)  # the training mix's rows (with a sample)
    # where the generated tokens went (data.partials.token_report): loops, cut, continued, partials waiting
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KEYS, 0))

    @property
    def unique(self) -> int:
        return len(self.completion_tokens)


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


def load_row(line: bytes) -> dict[str, Any] | None:
    r"""One results line as a dict, or None for a torn or non-JSON line (``records.parse_line``, which also
    reads the ASCII-escaped line a row with a lone surrogate, ``"\ud83d"``, is written as)."""
    try:
        return parse_line(line)
    except RecursionError:  # a hostile line nested thousands deep
        return None


def scan_dataset(ref: DatasetRef, config: ExportConfig) -> DatasetScan:
    scan = DatasetScan(ref)
    scan.settings_known = {s["id"]: s["settings"] for s in recorded_sets(ref.path.parent)}
    vocab = config.vocabs.get(ref.name)
    fmt = config.fmt
    seen: set[str] = set()
    for offset, line in iter_lines(ref.path):
        if not line.strip():
            continue
        row = load_row(line)
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
        key = sample_key(record.id, row_sample(row))  # each sample of a prompt is a row of its own
        if key in seen:
            scan.dropped[DUPLICATE] += 1
            continue
        seen.add(key)
        record.dataset = ref.name  # rows copied between folders still belong to the folder they are in
        settings = record.settings if isinstance(record.settings, str) else ""
        scan.settings[settings] += 1
        if config.settings is not None and settings != config.settings:
            scan.dropped[OTHER_SETTINGS] += 1
            continue
        _measure(scan, record)
        add_row_tokens(scan.tokens, record)
        if "sample" in row:
            scan.samples.add(record.id, row, max(0, as_int(record.completion_tokens) or 0))
        reason = drop_reason(record, fmt, config.keep_truncated)
        if reason is not None:
            scan.dropped[reason] += 1
            continue
        scan.kept.append(RowRef(ref.name, record.id, ref.path, offset, len(line), conversation_key(record)))
    add_waiting(scan.tokens, ref.path.parent)
    return scan


def _measure(scan: DatasetScan, record: ResultRecord) -> None:
    turns = record.finished_turns
    scan.completion_tokens.append(max(0, as_int(record.completion_tokens) or 0))
    scan.prompt_tokens.append(max(0, as_int(record.prompt_tokens) or 0))
    scan.reasoning_chars.append(sum(len(as_text(t.get("reasoning_content"))) for t in turns))
    scan.tool_calls[sum(tool_calls(t) for t in turns)] += 1
    scan.cut += any(t.get("finish_reason") == "length" for t in turns)
    scan.empty += any(is_empty_answer(t) for t in turns)


def read_row(ref: RowRef, fh: BinaryIO) -> ResultRecord:
    """A kept row again, by the offset pass 1 found it at."""
    fh.seek(ref.offset)
    row = load_row(fh.read(ref.length))
    if row is None:  # the file changed under the export (a run appending is fine; this is not)
        raise InputFileError(ref.path, None, f"the row '{ref.id}' changed while exporting; export again")
    record = ResultRecord.from_dict(row)
    record.dataset = ref.dataset
    return record
