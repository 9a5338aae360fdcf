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
from synthgen.data.records import ResultRecord
from synthgen.data.rowread import Malformed, Row, Unreadable, read_row
from synthgen.errors import InputFileError
from synthgen.export.config import DatasetRef, ExportConfig
from synthgen.export.filters import DUPLICATE, MALFORMED, OTHER_SETTINGS, conversation_key, drop_reason, vocab_problem
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


def scan_dataset(ref: DatasetRef, config: ExportConfig) -> DatasetScan:
    scan = DatasetScan(ref)
    scan.settings_known = {s["id"]: s["settings"] for s in recorded_sets(ref.path.parent)}
    vocab = config.vocabs.get(ref.name)
    fmt = config.fmt
    seen: set[str] = set()
    for offset, line in iter_lines(ref.path):
        if line.isspace():
            continue
        row = read_row(line)
        if isinstance(row, Unreadable):
            scan.unreadable += 1
            continue
        scan.rows += 1
        why = row.reason if isinstance(row, Malformed) else vocab_problem(row, vocab)
        if isinstance(row, Malformed) or why is not None:
            scan.dropped[MALFORMED] += 1
            scan.malformed_example = scan.malformed_example or f"line at byte {offset:,}: {why}"
            continue
        if row.key in seen:  # each sample of a prompt is a row of its own
            scan.dropped[DUPLICATE] += 1
            continue
        seen.add(row.key)
        record = row.record
        record.dataset = ref.name  # rows copied between folders still belong to the folder they are in
        settings = record.settings if isinstance(record.settings, str) else ""
        scan.settings[settings] += 1
        if config.settings is not None and settings != config.settings:
            scan.dropped[OTHER_SETTINGS] += 1
            continue
        _measure(scan, row)
        add_row_tokens(scan.tokens, row)
        if record.sample is not None:
            scan.samples.add(row)
        reason = drop_reason(row, fmt, config.keep_truncated)
        if reason is not None:
            scan.dropped[reason] += 1
            continue
        scan.kept.append(RowRef(ref.name, record.id, ref.path, offset, len(line), conversation_key(record)))
    add_waiting(scan.tokens, ref.path.parent)
    return scan


def _measure(scan: DatasetScan, row: Row) -> None:
    scan.completion_tokens.append(row.output_tokens)
    scan.prompt_tokens.append(row.prompt_tokens)
    scan.reasoning_chars.append(sum(len(t.reasoning_content) for t in row.turns))
    scan.tool_calls[sum(len(t.tool_calls or ()) for t in row.turns)] += 1
    scan.cut += row.cut
    scan.empty += row.empty_answer


def reread(ref: RowRef, fh: BinaryIO) -> ResultRecord:
    """A kept row again, by the offset pass 1 found it at."""
    fh.seek(ref.offset)
    row = read_row(fh.read(ref.length))
    if not isinstance(row, Row):  # the file changed under the export (a run appending is fine; this is not)
        raise InputFileError(ref.path, None, f"the row '{ref.id}' changed while exporting; export again")
    row.record.dataset = ref.dataset
    return row.record
