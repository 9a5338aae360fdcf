"""``--report --html FILE``: the run report's page (synthgen.report) for the chosen datasets and the timeline
of their output folder, written atomically, never into a dataset folder being read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from synthgen.errors import StoreWriteError, UsageError
from synthgen.export.config import PROG, DatasetRef, ExportRequest
from synthgen.report.folder import FolderReport, token_budgets, write_page


def write_html(request: ExportRequest, datasets: Sequence[DatasetRef], say: Callable[[str], None]) -> None:
    assert request.html is not None
    target = Path(request.html)
    for ref in datasets:
        folder = ref.path.parent.resolve()
        if target.resolve() == folder or folder in target.resolve().parents:
            raise UsageError(
                f"--html {target}: is inside the dataset folder {ref.path.parent} being read; write the page "
                f"outside it (e.g. --html {Path(request.output_dir) / 'report.html'})"
            )
    names = [ref.name for ref in datasets]
    plan = request.plan
    budgets = token_budgets(names, None, plan.caps, plan.averages) if plan else {}
    # Each dataset folder read, as a path under --output-dir: a sharded run's shards are shown one by one.
    folders = [folder_of(ref, Path(request.output_dir)) for ref in datasets]
    page = FolderReport(Path(request.output_dir), folders, budgets).page(
        None, PROG, f"{request.output_dir} ({', '.join(names)})"
    )
    try:
        write_page(target, page)
    except OSError as exc:
        raise StoreWriteError(f"--html {target}: cannot write the page ({exc.strerror or exc})") from exc
    say(f"wrote {target} (the report as a page)")


def folder_of(ref: DatasetRef, output_dir: Path) -> str:
    """``<dataset>``, or ``shard-I-of-N/<dataset>`` for one shard of a sharded run."""
    try:
        return ref.path.parent.relative_to(output_dir).as_posix()
    except ValueError:
        return ref.name
