"""Pass 2: read each kept row again by its byte offset, make its rows in the chosen format, render-check
them, write them atomically (both files complete in temp files before either is renamed into place)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

from synthgen.data.records import json_line  # a lone surrogate is written with ASCII escapes
from synthgen.data.tokenrows import ExistingSource
from synthgen.errors import EXIT_FAILURES, StoreWriteError, SynthgenError
from synthgen.export.config import ExportConfig, val_path
from synthgen.export.existing import existing_rows
from synthgen.export.formats import Exported
from synthgen.export.formats.kd import TeacherJoin, write_parquet
from synthgen.export.rendercheck import TEXT, Route, Tally, verdict
from synthgen.export.scan import DatasetScan, RowRef, reread
from synthgen.export.select import split_rows


class DriftError(SynthgenError):
    """--fail-on-drift and some exported rows do not render to the stored ids: nothing is written."""

    exit_code = EXIT_FAILURES


def check_row(tally: Tally, checker: Route, exported: Exported) -> None:
    """One exported row through the render check (see rendercheck)."""
    expected = exported.expected
    if expected is None:
        tally.no_ids += 1
        return
    row_id = str(exported.row.get("id"))
    try:
        rendering = checker.render(exported.row)
    except Exception as exc:  # a template or trainer that cannot render the row at all is drift too
        first = str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__
        tally.add(row_id, {TEXT: f"cannot render ({first})"})
        return
    tally.add(
        row_id,
        verdict(expected.ids, expected.start, expected.reasoning, rendering, checker.decode, checker.system_prompt),
    )


def tallies(scans: Sequence[DatasetScan], config: ExportConfig) -> dict[str, Tally]:
    """A fresh render-check tally per dataset that has a route, set on its scan."""
    out = {}
    for scan in scans:
        checker = config.checkers.get(scan.ref.name)
        if checker is not None and config.fmt.render_check:
            scan.render = out[scan.ref.name] = Tally(route=checker.name)
    return out


@contextmanager
def _sources() -> Iterator[dict[Path, BinaryIO]]:
    """The results files pass 2 reads, each opened once, all closed at the end."""
    handles: dict[Path, BinaryIO] = {}
    try:
        yield handles
    finally:
        for fh in handles.values():
            fh.close()


def _exported(ref: RowRef, config: ExportConfig, handles: dict[Path, BinaryIO]) -> list[Exported]:
    if ref.path not in handles:
        handles[ref.path] = open(ref.path, "rb")
    return config.fmt.rows(reread(ref, handles[ref.path]))


def check_kept(scans: Sequence[DatasetScan], config: ExportConfig) -> None:
    """The render check over every row that would be exported (the report's pass; an export checks as it
    writes)."""
    checks = tallies(scans, config)
    with _sources() as handles:
        for scan in scans:
            tally = checks.get(scan.ref.name)
            if tally is None:
                continue
            for ref in scan.kept:
                for exported in _exported(ref, config, handles):
                    check_row(tally, config.checkers[scan.ref.name], exported)


def _file_mode() -> int:
    """What a plain open() would give a new file: 0666 less the umask (mkstemp's temp files are 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _rows(
    refs: Sequence[RowRef],
    config: ExportConfig,
    handles: dict[Path, BinaryIO],
    checks: dict[str, Tally],
    merged: Iterable[dict[str, Any]] = (),
) -> Iterator[dict[str, Any]]:
    for ref in refs:
        tally = checks.get(ref.dataset)
        for exported in _exported(ref, config, handles):
            yield exported.row
            if tally is not None:
                check_row(tally, config.checkers[ref.dataset], exported)
    yield from merged  # --existing token rows


def _write_rows(
    path: Path,
    rows: Iterator[dict[str, Any]],
    join: TeacherJoin | None = None,
    fmt: str = "",
) -> tuple[str, int]:
    """Rows to a temp file beside ``path``; returns (temp path, rows written). The caller renames it.
    With a teacher ``join`` (formats/kd.py), parquet rows with the teacher's targets, else JSON lines."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    written = 0
    try:
        os.fchmod(fd, _file_mode())
        with os.fdopen(fd, "wb") as out:
            if join is not None:
                written = write_parquet(out, rows, fmt, join)
            for row in rows if join is None else ():
                out.write(json_line(row))
                written += 1
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        os.unlink(tmp)
        raise
    return tmp, written


def _refuse_drift(checks: dict[str, Tally], config: ExportConfig) -> None:
    drifting = sum(t.drifting for t in checks.values())
    if config.fail_on_drift and drifting:
        checked = sum(t.checked for t in checks.values())
        raise DriftError(
            f"{drifting:,} of {checked:,} exported rows do not render to the stored ids (kinds above); "
            "nothing written: export --format tokens for the exact ids, or drop --fail-on-drift"
        )


def write_export(
    scans: Sequence[DatasetScan],
    config: ExportConfig,
    existing: Sequence[ExistingSource] = (),
    join: TeacherJoin | None = None,
) -> dict[Path, int]:
    """Write the train file (and the validation file); returns rows written per file.

    Both files are complete in temp files before either is renamed into place, so a failure (or drift under
    --fail-on-drift) leaves the previous export as it was."""
    assert config.out is not None
    train, val = split_rows([r for s in scans for r in s.kept], config)
    targets = [(Path(config.out), train, False)]
    if config.val_fraction > 0:
        targets.append((val_path(config.out), val, True))
    checks = tallies(scans, config)
    temps: list[tuple[str, Path, int]] = []
    try:
        with _sources() as handles:
            for path, refs, validation in targets:
                merged = existing_rows(existing, config.seed, config.val_fraction, validation)
                rows = _rows(refs, config, handles, checks, merged)
                tmp, written = _write_rows(path, rows, join, config.format)
                temps.append((tmp, path, written))
        _refuse_drift(checks, config)
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
    return {path: written for _, path, written in temps}
