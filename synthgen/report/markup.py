"""Small pieces of the page's HTML every section uses (pure): a number a test can find, a time, a legend,
a table cell."""

from __future__ import annotations

from datetime import datetime, timezone
from html import escape
from typing import Any


def stat(key: str, text: str, tag: str = "span") -> str:
    return f'<{tag} data-stat="{escape(key)}">{escape(text)}</{tag}>'


def utc(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def legend_of(*items: tuple[str, str], lead: str = "") -> str:
    keys = "".join(
        f'<span class="item"><span class="key {escape(css)}"></span>{escape(text)}</span>' for css, text in items
    )
    return f'<p class="legend">{escape(lead)}{keys}</p>'


def cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}"
    return "" if value is None else escape(f"{value:,}" if isinstance(value, int) else str(value))
