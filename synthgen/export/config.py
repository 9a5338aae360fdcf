"""What an export is asked to do (ExportRequest: the arguments, as the CLI parsed them) and what it does
(ExportConfig: the datasets found, the format's table entry, the tokenizer and render-check routes loaded).

    request = ExportRequest(partition="short", out=Path("train.jsonl"))   # the CLI builds this
    datasets, missing = select.choose_datasets(request, note)            # pipeline.configure does these
    config = routes.resolve(request, datasets, note)                     # the tokenizers and routes loaded
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from synthgen.data.tokenrows import ExistingSource
from synthgen.errors import UsageError
from synthgen.export import formats
from synthgen.export.existing import FORMAT as EXISTING_FORMAT
from synthgen.export.existing import TOKEN_FORMATS, check_existing
from synthgen.export.rendercheck import Route

PROG = "export_training.py"  # the script, named in pages and messages
DEFAULT_PROMPTS_DIR = Path("prompts")
DEFAULT_OUTPUT_DIR = Path("outputs")


@dataclass(frozen=True, slots=True)
class DatasetRef:
    name: str
    path: Path  # its raw_responses.jsonl


@dataclass(frozen=True, slots=True)
class Plan:
    """What the CLI read of a compute_budget.py plan file: its datasets, caps and expected lengths."""

    names: tuple[str, ...]
    caps: Mapping[str, int] = field(default_factory=dict)
    averages: Mapping[str, float] = field(default_factory=dict)
    # its --existing datasets: name -> the token file it recorded (None: a plan file that predates recording it)
    existing: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class ExportRequest:
    """export_training.py's arguments, grouped as --help shows them (defaults: the CLI's)."""

    # which datasets (none of the three: every dataset with results under output_dir)
    partition: str | None = None
    datasets: tuple[str, ...] = ()
    budget: Path | None = None  # the plan file, named in errors and refused as a destination
    plan: Plan | None = None  # what the CLI read of it
    prompts_dir: Path = DEFAULT_PROMPTS_DIR
    output_dir: Path = DEFAULT_OUTPUT_DIR
    # output
    format: str = formats.DEFAULT
    out: Path | None = None  # None: report only
    val_fraction: float = 0.0
    shuffle: bool = False
    seed: int = 0
    settings: str | None = None  # a settings id; "" the rows written before settings ids
    keep_truncated: bool = False
    # report and render check
    report: bool = False
    html: Path | None = None
    tokenizer: str | None = None
    specforge_template: str | None = None
    fail_on_drift: bool = False
    render_check: bool = True
    trust_remote_code: bool = False
    existing: tuple[ExistingSource, ...] = ()  # --existing: token files merged into a tokens export

    def check(self) -> None:
        """The argument combinations that cannot work, refused before anything is read."""
        check_existing(self.existing, self.format)
        if self.html is not None and not self.report:
            raise UsageError("--html FILE goes with --report (e.g. --report --html outputs/report.html)")
        if self.out is None and not self.report:
            raise UsageError("--out FILE is required (or --report to only see what would be exported)")
        if not 0 <= self.val_fraction < 1:
            raise UsageError(f"--val-fraction must be at least 0 and below 1, got {self.val_fraction}")
        if self.out is not None and self.val_fraction > 0 and val_path(self.out) == Path(self.out):
            raise UsageError(f"--out {self.out}: cannot name the validation file beside it; give FILE a name")

    def merged_existing(self) -> tuple[tuple[ExistingSource, ...], list[str]]:
        """The token files this export merges: --existing, and the plan's own --existing files in a --format
        tokens export; with what is left out of the plan's, each as a note naming the file and the fix."""
        merged = {source.name: source for source in self.existing}
        notes = []
        for name, where in (self.plan.existing if self.plan else {}).items():
            given = merged.get(name)
            if given is not None:
                if where is not None and Path(where) != given.path:
                    raise UsageError(
                        f"--existing {name}={given.path}: the plan {self.budget} has '{name}' as {where}; "
                        "drop the flag to use the plan's file, or rename one"
                    )
                continue
            if where is None:
                notes.append(
                    f"{name}: left out: {self.budget} does not record this --existing dataset's file (an older "
                    f"compute_budget.py wrote it); add --existing {name}=FILE, or rerun compute_budget.py"
                )
            elif self.format not in TOKEN_FORMATS:
                notes.append(
                    f"{name}: left out: the plan's token file {where} joins a --format {EXISTING_FORMAT} export "
                    f"only (this one is --format {self.format})"
                )
            else:
                merged[name] = ExistingSource(name, Path(where))
        return tuple(merged.values()), notes

    def targets(self) -> list[Path]:
        """The files an export writes: --out and, with --val-fraction, its validation file."""
        if self.out is None:
            return []
        return [Path(self.out)] + ([val_path(self.out)] if self.val_fraction > 0 else [])


@dataclass(frozen=True)
class ExportConfig:
    """What to export and how, resolved (routes.resolve): the datasets with results, the vocabulary of each
    (ids at or above it are malformed) and the render check's route of each."""

    datasets: tuple[DatasetRef, ...]
    format: str = formats.DEFAULT
    out: Path | None = None  # None: report only
    keep_truncated: bool = False
    shuffle: bool = False
    seed: int = 0
    val_fraction: float = 0.0
    vocabs: dict[str, int] = field(default_factory=dict)  # dataset -> vocabulary size, when known
    settings: str | None = None  # export only the rows of this settings set (its id)
    # the render check: dataset -> its route (rendercheck.TemplateRoute / SpecForgeRoute); absent: not checked
    checkers: dict[str, Route] = field(default_factory=dict)
    fail_on_drift: bool = False

    @property
    def fmt(self) -> formats.Format:
        return formats.get(self.format)


def val_path(out: Path) -> Path:
    """train.jsonl -> train.val.jsonl; a name without an extension gets .val at its end."""
    out = Path(out)
    return out.with_name(f"{out.stem}.val{out.suffix}") if out.suffix else out.with_name(f"{out.name}.val")
