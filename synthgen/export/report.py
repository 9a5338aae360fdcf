"""What an export found, as text (pure): the --report of each dataset (counts, drop reasons, settings sets,
the render check, length histograms), the one-line summary per dataset, and the closing notes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson

from synthgen.export.config import ExportConfig
from synthgen.export.filters import HINTS, MALFORMED, REASONS
from synthgen.export.histogram import histogram
from synthgen.export.scan import DatasetScan
from synthgen.fmt import plural

LABEL = 30


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def _tool_calls_line(counts: Counter[int]) -> str:
    parts = [f"{calls}: {counts[calls]:,}" for calls in sorted(counts)]
    return "   ".join(parts) if parts else "-"


def summary_line(scan: DatasetScan) -> str:
    """``<dataset>: K of N rows (dropped: ...; U unreadable lines)``: every line of the file is in it."""
    dropped = ", ".join(f"{n:,} {reason}" for reason, n in sorted(scan.dropped.items()) if n)
    notes = [f"dropped: {dropped}"] if dropped else []
    if scan.unreadable:
        notes.append(f"{scan.unreadable:,} unreadable line{'s' if scan.unreadable != 1 else ''} skipped")
    return f"{scan.ref.name}: {len(scan.kept):,} of {plural(scan.rows, 'row')}" + (
        f" ({'; '.join(notes)})" if notes else ""
    )


def drop_notes(scans: Sequence[DatasetScan]) -> list[str]:
    """What brings dropped rows back (or why they stay out), once per reason with its count over all datasets."""
    lines = []
    for reason, hint in HINTS.items():
        n = sum(scan.dropped[reason] for scan in scans)
        if n:
            lines.append(f"{plural(n, 'row')} dropped as {reason}: {hint}")
    return lines


def _drop_lines(scan: DatasetScan) -> list[str]:
    lines = []
    for reason, text in REASONS.items():
        if scan.dropped[reason]:
            hint = f"   ({HINTS[reason]})" if reason in HINTS else ""
            lines.append(f"    {text:<{LABEL - 2}} {scan.dropped[reason]:>9,}{hint}")
            if reason == MALFORMED and scan.malformed_example:
                lines.append(f"      first: {scan.malformed_example}")
    return lines


def format_dataset(scan: DatasetScan, config: ExportConfig) -> list[str]:
    kept, dropped = len(scan.kept), sum(scan.dropped.values())
    lines = [
        f"{scan.ref.name}  ({scan.ref.path})",
        f"  {'rows read':<{LABEL}} {scan.rows:>9,}",
        f"  {'exported':<{LABEL}} {kept:>9,}   (--format {config.format})",
        f"  {'dropped':<{LABEL}} {dropped:>9,}",
        *_drop_lines(scan),
    ]
    if scan.unreadable:
        lines.append(f"  {'unreadable lines':<{LABEL}} {scan.unreadable:>9,}   (torn or not JSON; skipped)")
    unique = scan.unique
    for text, part in (("share cut at max tokens", scan.cut), ("share with empty answer", scan.empty)):
        lines.append(f"  {text:<{LABEL}} {_share(part, unique):>9}   ({part:,} of {unique:,})")
    lines.append(f"  {'tool calls per row':<{LABEL}} {_tool_calls_line(scan.tool_calls)}")
    lines.extend(token_lines(scan.tokens))
    lines.extend(settings_lines(scan))
    lines.extend(scan.samples.lines(LABEL))
    if scan.render is not None:
        lines.extend(scan.render.lines(LABEL))
    for title, values in (
        ("completion tokens", scan.completion_tokens),
        ("prompt tokens", scan.prompt_tokens),
        ("reasoning chars", scan.reasoning_chars),
    ):
        lines.append("")
        lines.extend("  " + line for line in histogram(values, title))
    return lines


def token_lines(t: dict[str, int]) -> list[str]:
    """Where the generated tokens of a dataset's rows went, and the partial outputs still waiting."""
    lines = [f"  {'output tokens in rows':<{LABEL}} {t['tokens']:>9,}"]
    for text, rows, tokens, what in (
        ("ended in a loop", t["loop_rows"], t["loop_tokens"], "the loop guard; never exported"),
        ("cut, reasoning open", t["cut_rows"], t["cut_tokens"], "--max-tokens; --continue-cut N continues them"),
        ("continued", t["continued_rows"], t["continued_tokens"], "tokens of earlier attempts kept, not paid twice"),
        ("partial outputs waiting", t["partials"], t["partial_tokens"], "a rerun continues them"),
    ):
        if rows:
            lines.append(f"  {text:<{LABEL}} {rows:>9,}   rows, {tokens:,} tokens ({what})")
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


def settings_lines(scan: DatasetScan) -> list[str]:
    """The settings sets of a dataset's rows, with their counts, and a warning when there is more than one."""
    if not scan.settings:
        return []
    lines = [f"  {'settings sets':<{LABEL}} {len(scan.settings):>9,}"]
    for sid, rows in scan.settings.most_common():
        name = sid or "unrecorded"
        what = describe_settings(scan.settings_known.get(sid)) if sid else "(rows written before settings ids)"
        lines.append(f"    {name:<{LABEL - 2}} {rows:>9,}   {what}")
    if len(scan.settings) > 1:
        lines.append(f"  warning: {mixed_settings_warning(scan)}")
    return lines


def mixed_settings_warning(scan: DatasetScan) -> str:
    first = scan.settings.most_common(1)[0][0] or "unrecorded"
    return (
        f"{scan.ref.name}: rows of {len(scan.settings)} settings sets go into one file; "
        f"export one with --settings ID (e.g. --settings {first})"
    )


def render_notes(scans: Sequence[DatasetScan], config: ExportConfig) -> list[str]:
    """What the render check found overall, and what the trainer of this format needs to know."""
    fmt = config.fmt
    lines = [fmt.note] if fmt.note else []
    if not fmt.render_check:
        return lines
    checked = [s.render for s in scans if s.render is not None]
    if not checked:
        lines.append("render check skipped: no tokenizer; pass --tokenizer PATH (the model's tokenizer folder)")
    elif any(t.drifting for t in checked):
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
    lines.append(f"total: {kept:,} of {plural(read, 'row')} would be exported as {config.format}")
    lines.extend(render_notes(scans, config))
    return "\n".join(lines) + "\n"
