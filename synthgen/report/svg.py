"""Inline SVG charts, pure strings: a stacked histogram, horizontal bars, lines over time.

Ours rather than a plotting library's: the charts are three shapes (rectangles, polylines, a few labels),
which take ~200 lines; matplotlib (tens of MB, with numpy) or a JavaScript library (a script in the page)
would cost more than they bring. Every chart is ``role="img"`` with a ``<title>`` and a ``<desc>`` that
say what it shows in words, and the page puts the numbers beside it in a table. Colours come from CSS
classes (``s-stop``, ``s-length``, ...) so the page's stylesheet decides them, for print too.

Coordinates are in a fixed ``viewBox``; the page scales the chart to its column (``width: 100%``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from html import escape

from synthgen.report.figures import Bins

WIDTH, HEIGHT = 640, 220
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 34


def fmt_count(value: float) -> str:
    """12, 1.2k, 3.4M: an axis label."""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            text = f"{value / size:.1f}".rstrip("0").rstrip(".")
            return text + unit
    return f"{value:g}" if value != int(value) else f"{int(value)}"


TICKS = 4  # grid intervals on a value axis


def nice_max(value: float) -> float:
    """The axis top for ``value``: ``TICKS`` steps of 1, 2 or 5 times a power of ten (at least 1), so every
    tick is a round number and a count axis never shows a fraction (4 for nothing)."""
    if value <= 0:
        return float(TICKS)
    need = value / TICKS
    power = 10 ** math.floor(math.log10(need)) if need >= 1 else 1
    for step in (1, 2, 5, 10):
        if step * power >= need:
            return float(TICKS * step * power)
    return float(TICKS * 10 * power)


def _open(ident: str, title: str, desc: str, height: int = HEIGHT) -> list[str]:
    return [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-labelledby="{ident}-t {ident}-d" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="{ident}-t">{escape(title)}</title>',
        f'<desc id="{ident}-d">{escape(desc)}</desc>',
    ]


def _y_axis(top: float, height: float = HEIGHT) -> list[str]:
    """Grid lines and labels for 0..top on the plot's left."""
    out = []
    bottom = height - BOTTOM
    for i in range(TICKS + 1):
        value = top * i / TICKS
        y = bottom - (bottom - TOP) * i / TICKS
        out.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        out.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{fmt_count(value)}</text>')
    return out


def histogram(ident: str, b: Bins, order: Sequence[str], title: str, desc: str, x_label: str) -> str:
    """Bars of ``b``'s bins, each stacked by series in ``order`` (bottom first)."""
    out = _open(ident, title, desc)
    if not b.edges:
        out.append(f'<text class="empty" x="{WIDTH / 2}" y="{HEIGHT / 2}" text-anchor="middle">no rows</text>')
        return "\n".join([*out, "</svg>"])
    totals = [sum(b.counts[k][i] for k in b.counts) for i in range(len(b.edges))]
    top = nice_max(max(totals))
    out += _y_axis(top)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    step = plot_w / len(b.edges)
    for i, (lo, hi) in enumerate(b.edges):
        y = float(HEIGHT - BOTTOM)
        for key in [k for k in order if k in b.counts] + [k for k in b.counts if k not in order]:
            n = b.counts[key][i]
            if not n:
                continue
            h = plot_h * n / top
            y -= h
            x, w = LEFT + i * step + 1, max(step - 2, 1)
            out.append(
                f'<rect class="s-{escape(key)}" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}">'
                f"<title>{lo:,}-{hi:,}: {n:,} {escape(key)}</title></rect>"
            )
    for i in range(0, len(b.edges), max(1, len(b.edges) // 5)):
        x = LEFT + i * step
        out.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - BOTTOM + 14}">{fmt_count(b.edges[i][0])}</text>')
    out.append(f'<text class="label" x="{WIDTH - RIGHT}" y="{HEIGHT - 4}" text-anchor="end">{escape(x_label)}</text>')
    return "\n".join([*out, "</svg>"])


@dataclass(frozen=True)
class Bar:
    label: str
    value: int
    mark: int | None = None  # e.g. the dataset's budget, drawn as a tick
    over: bool = False  # drawn in the warning colour


def bars(ident: str, items: Sequence[Bar], title: str, desc: str) -> str:
    """One horizontal bar per item, labelled, with an optional mark (a budget) across it."""
    row = 22
    height = TOP + row * max(len(items), 1) + BOTTOM
    out = _open(ident, title, desc, height)
    top = nice_max(max([b.value for b in items] + [b.mark or 0 for b in items] + [1]))
    left = 150
    plot_w = WIDTH - left - RIGHT
    for i, item in enumerate(items):
        y = TOP + i * row
        w = plot_w * item.value / top
        label = item.label if len(item.label) <= 22 else item.label[:21] + "…"
        out.append(f'<text class="tick" x="{left - 6}" y="{y + 15}" text-anchor="end">{escape(label)}</text>')
        css = "s-length" if item.over else "s-stop"
        out.append(
            f'<rect class="{css}" x="{left}" y="{y + 3}" width="{w:.1f}" height="{row - 6}">'
            f"<title>{escape(item.label)}: {item.value:,}</title></rect>"
        )
        out.append(f'<text class="value" x="{left + w + 4:.1f}" y="{y + 15}">{fmt_count(item.value)}</text>')
        if item.mark is not None:
            x = left + plot_w * item.mark / top
            out.append(
                f'<line class="mark" x1="{x:.1f}" x2="{x:.1f}" y1="{y + 1}" y2="{y + row - 1}">'
                f"<title>budget {item.mark:,}</title></line>"
                f'<text class="tick" x="{x + 3:.1f}" y="{y + 15}">budget {fmt_count(item.mark)}</text>'
            )
    for i in range(TICKS + 1):
        x = left + plot_w * i / TICKS
        out.append(
            f'<text class="tick" x="{x:.1f}" y="{height - BOTTOM + 16}" text-anchor="middle">'
            f"{fmt_count(top * i / TICKS)}</text>"
        )
    return "\n".join([*out, "</svg>"])


@dataclass(frozen=True)
class Series:
    name: str
    css: str
    points: Sequence[tuple[float, float | None]]  # (unix time, value); None breaks the line


TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def time_ticks(t0: float, t1: float, most: int = 6) -> list[float]:
    """Round times (5 s, 15 s, ... for a run of seconds; whole minutes, quarter hours, hours, ...) between t0
    and t1, at most ``most``."""
    step = next((s for s in TIME_STEPS if (t1 - t0) / s <= most - 1), 86400 * math.ceil((t1 - t0) / 86400 / (most - 1)))
    first = math.ceil(t0 / step) * step
    return [float(t) for t in range(int(first), int(t1) + 1, int(step))]


def clock(t: float, seconds: bool = False) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%H:%M:%S" if seconds else "%H:%M")


def lines(
    ident: str,
    series: Sequence[Series],
    span: tuple[float, float],
    title: str,
    desc: str,
    bands: Sequence[tuple[float, float]] = (),
    marks: Sequence[tuple[float, str, str]] = (),
) -> str:
    """Lines over time (UTC on the axis); ``bands`` shaded (outages), ``marks`` (time, css class, words) as
    labelled vertical lines (a server restart, a run stopped or resumed)."""
    out = _open(ident, title, desc)
    t0, t1 = span
    t1 = max(t1, t0 + 1)
    values = [v for s in series for _, v in s.points if v is not None]
    top = nice_max(max(values, default=0))
    out += _y_axis(top)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + plot_w * (t - t0) / (t1 - t0)

    def y(v: float) -> float:
        return HEIGHT - BOTTOM - plot_h * v / top

    for a, b in bands:
        out.append(
            f'<rect class="outage" x="{x(a):.1f}" y="{TOP}" width="{max(x(b) - x(a), 2):.1f}" height="{plot_h}">'
            f"<title>server down {clock(a, True)}-{clock(b, True)} UTC</title></rect>"
        )
    for t, css, label in marks:
        out.append(
            f'<line class="{escape(css)}" x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}">'
            f"<title>{escape(label)} {clock(t, True)} UTC</title></line>"
        )
    for s in series:
        runs: list[list[str]] = [[]]
        for t, v in s.points:
            if v is None:
                runs.append([])
            else:
                runs[-1].append(f"{x(t):.1f},{y(v):.1f}")
        for run in runs:
            if len(run) == 1:
                cx, cy = run[0].split(",")
                out.append(f'<circle class="{s.css} dot" cx="{cx}" cy="{cy}" r="2.5"/>')
            elif run:
                out.append(
                    f'<polyline class="{s.css} line" points="{" ".join(run)}">'
                    f"<title>{escape(s.name)}</title></polyline>"
                )
    ticks = time_ticks(t0, t1)
    seconds = len(ticks) > 1 and ticks[1] - ticks[0] < 60
    for t in ticks:
        out.append(
            f'<line class="grid" x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{HEIGHT - BOTTOM}" y2="{HEIGHT - BOTTOM + 4}"/>'
            f'<text class="tick" x="{x(t):.1f}" y="{HEIGHT - BOTTOM + 15}" text-anchor="middle">'
            f"{clock(t, seconds)}</text>"
        )
    out.append(f'<text class="label" x="{WIDTH - RIGHT}" y="{HEIGHT - 4}" text-anchor="end">time (UTC)</text>')
    return "\n".join([*out, "</svg>"])
