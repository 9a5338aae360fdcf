"""A training mix on the page (pure): output lengths per recipe (``--sampling-mix``) and per sample
(``--samples-per-prompt``), how many prompts have how many samples and the share whose samples differ, the
figures of ``export_training.py --report``'s text (``export/samples.py``) for the rows the page counts.

    MixFigures.add(row)   a counted row; only rows a run with samples or a mix wrote (they carry ``sample``)
    mix_section(name, m)  its HTML, nothing for a dataset without such rows

Whether two samples differ is judged by a 64-bit hash of each answer's whole text (``output_text``), kept
per prompt: the first sample's hash, and whether any other differed.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field
from html import escape

from synthgen.data.rowread import Row

NO_RECIPE = -1


def _digest(text: object) -> int:
    data = str(text).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


@dataclass
class MixFigures:
    recipes: dict[int, list[int]] = field(default_factory=dict)  # recipe index (NO_RECIPE) -> output tokens
    samples: dict[int, list[int]] = field(default_factory=dict)  # sample number -> output tokens
    per_prompt: Counter[str] = field(default_factory=Counter)  # prompt id -> samples found
    _first: dict[str, int] = field(default_factory=dict, repr=False)  # prompt id -> its first answer's hash
    _differ: set[str] = field(default_factory=set, repr=False)  # prompts with two samples that differ

    def add(self, row: Row) -> None:
        fields = row.fields
        if fields.get("sample") is None:
            return
        recipe = fields.get("recipe")
        index = recipe.get("index") if isinstance(recipe, dict) else None
        index = index if isinstance(index, int) and not isinstance(index, bool) else NO_RECIPE
        self.recipes.setdefault(index, []).append(row.output_tokens)
        self.samples.setdefault(row.sample, []).append(row.output_tokens)
        self.per_prompt[row.id] += 1
        digest = _digest(fields.get("output_text") or "")
        if self._first.setdefault(row.id, digest) != digest:
            self._differ.add(row.id)

    @property
    def differ(self) -> tuple[int, int]:
        """(prompts whose samples differ, prompts with two samples or more)."""
        several = sum(1 for n in self.per_prompt.values() if n > 1)
        return len(self._differ), several


def _pick(values: list[int], q: int) -> int:
    """The nearest-rank percentile ``q`` of sorted ``values`` (as the text report's)."""
    return values[min(len(values) - 1, len(values) * q // 100)]


def _rows(name: str, kind: str, groups: dict[int, list[int]], label: str) -> str:
    out = []
    for key in sorted(groups):
        values = sorted(groups[key])
        what = "no recipe" if key == NO_RECIPE else f"{label} {key}"
        stat = f"{name}/{kind}/{'none' if key == NO_RECIPE else key}"
        cells = [f'<td data-stat="{escape(stat)}/n">{len(values):,}</td>']
        cells += [f'<td data-stat="{escape(stat)}/p{q}">{_pick(values, q):,}</td>' for q in (10, 50, 90)]
        cells.append(f'<td data-stat="{escape(stat)}/max">{values[-1]:,}</td>')
        out.append(f"<tr><td>{escape(what)}</td>{''.join(cells)}</tr>")
    return "".join(out)


def mix_section(name: str, mix: MixFigures) -> str:
    if not mix.per_prompt:
        return ""
    spread = ", ".join(
        f"{count:,} with {n} sample{'s' if n != 1 else ''}"
        for n, count in sorted(Counter(mix.per_prompt.values()).items(), reverse=True)
    )
    differ, several = mix.differ
    share = f"{100 * differ / several:.1f}%" if several else "-"
    head = "<tr><th>output tokens</th><th>rows</th><th>p10</th><th>p50</th><th>p90</th><th>max</th></tr>"
    recipes = _rows(name, "recipe", mix.recipes, "recipe") if set(mix.recipes) != {NO_RECIPE} else ""
    return (
        f'<div class="mix"><h4>Samples and recipes</h4><ul class="facts"><li>'
        f'<span data-stat="{escape(name)}/prompts_sampled">{len(mix.per_prompt):,}</span> prompts: {spread}</li>'
        f'<li>samples differ: <span data-stat="{escape(name)}/samples_differ">{share}</span> ({differ:,} of '
        f"{several:,} prompts with 2 or more samples; by the hash of each answer's text)</li></ul>"
        f'<div class="scroll"><table><thead>{head}</thead><tbody>{recipes}'
        f"{_rows(name, 'sample', mix.samples, 'sample')}</tbody></table></div></div>"
    )
