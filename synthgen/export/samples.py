"""The report's view of a training mix: how many prompts have how many samples, the share of prompts whose
samples differ, and the length spread per recipe (pure; filled by ``scan.scan_dataset``).

Only rows a run with several samples or a mix wrote (they carry ``sample``) are counted; a dataset without
them adds nothing to the report.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from synthgen.data.rowread import Row


@dataclass
class SampleStats:
    outputs: dict[str, set[bytes]] = field(default_factory=lambda: defaultdict(set))  # id -> its answers' digests
    samples: Counter[str] = field(default_factory=Counter)  # id -> samples found
    lengths: dict[int | None, list[int]] = field(default_factory=lambda: defaultdict(list))  # recipe -> tokens

    def add(self, row: Row) -> None:
        self.samples[row.id] += 1
        text = row.record.output_text
        digest = hashlib.blake2b(str(text).encode("utf-8", "surrogatepass"), digest_size=8).digest()
        self.outputs[row.id].add(digest)
        recipe = row.record.recipe
        index = recipe.get("index") if isinstance(recipe, dict) else None
        self.lengths[index if isinstance(index, int) else None].append(row.output_tokens)

    def lines(self, label: int) -> list[str]:
        if not self.samples:
            return []
        per_prompt = Counter(self.samples.values())
        spread = ", ".join(f"{n} samples: {count:,}" for n, count in sorted(per_prompt.items(), reverse=True))
        several = [pid for pid, n in self.samples.items() if n > 1]
        differ = sum(1 for pid in several if len(self.outputs[pid]) > 1)
        share = f"{differ / len(several):.1%}" if several else "-"
        lines = [
            f"  {'prompts by samples':<{label}} {len(self.samples):>9,}   ({spread})",
            f"  {'samples differ':<{label}} {share:>9}   ({differ:,} of {len(several):,} prompts with 2+ samples)",
        ]
        for index in sorted(self.lengths, key=lambda i: -1 if i is None else i):
            values = sorted(self.lengths[index])
            name = "no recipe" if index is None else f"recipe {index}"
            p10, p50, p90 = (values[min(len(values) - 1, len(values) * p // 100)] for p in (10, 50, 90))
            lines.append(
                f"  {name:<{label}} {len(values):>9,}   completion tokens p10 {p10:,}, p50 {p50:,}, p90 {p90:,}, "
                f"max {values[-1]:,}"
            )
        return lines
