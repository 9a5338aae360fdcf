"""The page's teacher section: per dataset with a side file, what its ``teacher.json`` says (the teacher, K,
the logprobs' temperature) and its record of the last scoring pass (score_teacher.py): when it ended, the rows
scored, failed and left out, the server it asked and the signal that stopped it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from synthgen.data import teacherfile
from synthgen.data.teacherfile import left_out_text
from synthgen.report.figures import share


def teacher_records(output_dir: Path, names: Iterable[str]) -> list[tuple[str, dict[str, Any]]]:
    """(dataset, its teacher.json) for each dataset of ``names`` that has one."""
    out = []
    for name in names:
        meta = teacherfile.read_meta(teacherfile.meta_path(output_dir, name))
        if meta is not None:
            out.append((name, meta))
    return out


def _left_out(last: dict[str, Any]) -> str:
    left = last.get("left_out")
    if not isinstance(left, dict) or not left:
        return "none"
    return left_out_text({k: n for k, n in left.items() if isinstance(n, int)}) or "none"


def _row(name: str, meta: dict[str, Any]) -> str:
    found = meta.get("last_pass")
    last: dict[str, Any] = found if isinstance(found, dict) else {}
    units = last.get("units")
    done = (last.get("scored_before") or 0) + (last.get("scored") or 0)
    scored = f"{done:,} of {units:,} ({share(done, units)})" if isinstance(units, int) and units else "-"
    servers = last.get("server")
    server = ", ".join(servers) if isinstance(servers, list) else "none (nothing to send)"
    ended = str(last.get("ended") or "-") + (f", stopped by {last['stopped_by']}" if last.get("stopped_by") else "")
    cells = [
        escape(name),
        escape(str(meta.get("model") or "?")),
        escape(str(meta.get("top_k", "?"))),
        escape(str(meta.get("logprob_temperature", "?"))),
        f'<span data-stat="teacher/{escape(name)}/scored">{escape(scored)}</span>',
        f'<span data-stat="teacher/{escape(name)}/now">{last.get("scored", 0) or 0:,}</span>',
        f'<span data-stat="teacher/{escape(name)}/failed">{last.get("failed", 0) or 0:,}</span>',
        f'<span data-stat="teacher/{escape(name)}/left_out">{escape(_left_out(last))}</span>',
        escape(ended),
        escape(server),
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def teacher_section(records: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """The section, or nothing when no dataset has been scored."""
    if not records:
        return ""
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "dataset",
            "teacher",
            "K",
            "logprob temperature",
            "rows scored",
            "in the last pass",
            "failed",
            "left out",
            "last pass ended (UTC)",
            "server",
        )
    )
    body = "".join(_row(name, meta) for name, meta in records)
    return (
        '<section id="teacher"><h2>Teacher distributions</h2><p>The top-k teacher logprobs '
        "<code>score_teacher.py</code> keeps in each dataset's <code>teacher/</code> side file, from its "
        "<code>teacher.json</code>: rows scored and left out (with the reason) as its last pass counted them.</p>"
        f'<div class="scroll"><table class="teacher"><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
        "</table></div></section>"
    )
