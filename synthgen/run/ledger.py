"""Where the output tokens went: every token the server generated for a run, per dataset and for the
run, by where it ended (rows, partial outputs kept to continue, or lost, and why).

A crash of the server or of the run loses what was generated since the last answer (or checkpoint)
without the client ever seeing it: that loss is not in these figures (bench/bench_waste.py measures
it against the server's own count).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass
class TokenLedger:
    generated: int = 0  # output tokens the server returned to this run (answers, aborts, bad answers)
    rows: int = 0  # of them: in rows written (a continued row's earlier segments are in ``earlier``)
    partials: int = 0  # of them: kept as partial outputs, continued by a later attempt or run
    stopped: int = 0  # of them: ended by a stop and not kept (--keep-partials off, or not continuable)
    failed: int = 0  # of them: in failed attempts (unreadable answers, aborts that restart)
    loops: int = 0  # of them: rows ended by the loop guard (left out of exports)
    cut: int = 0  # part of ``rows``: rows cut at --max-tokens with their reasoning open (exports drop them)
    earlier: int = 0  # partial outputs of earlier runs continued into rows this run
    discarded: int = 0  # partial outputs of earlier runs discarded (prompt or settings changed, past max tokens)
    extended: int = 0  # rows (turns), not tokens: cut answers continued by --continue-cut

    @property
    def lost(self) -> int:
        return self.stopped + self.failed + self.loops

    @property
    def kept(self) -> int:
        """What the exports can use: rows (but those cut before their answer) and partial outputs to continue;
        ``--status``'s *kept* by the same rule."""
        return self.rows + self.partials - self.cut

    def add(self, other: TokenLedger) -> TokenLedger:
        return TokenLedger(*(a + b for a, b in zip(self.values(), other.values(), strict=True)))

    def values(self) -> tuple[int, ...]:
        return dataclasses.astuple(self)

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    def status(self) -> str:
        """A short part of the status line: how much of what was generated is kept."""
        if not self.generated:
            return ""
        return f"kept {self.kept / self.generated:.0%} of {self.generated:,} tokens"

    def line(self) -> str:
        """The summary's line: generated, and where it went."""
        parts = [f"{self.rows:,} in rows" + (f" ({self.cut:,} of them cut with reasoning open)" if self.cut else "")]
        parts.append(f"{self.partials:,} kept as partial outputs to continue")
        lost = {"stop": self.stopped, "failed attempts": self.failed, "loops": self.loops}
        shown = ", ".join(f"{n:,} {why}" for why, n in lost.items() if n)
        parts.append(f"{self.lost:,} lost" + (f" ({shown})" if shown else ""))
        text = f"tokens generated this run: {self.generated:,}: " + "; ".join(parts)
        if self.earlier:
            text += f"; plus {self.earlier:,} of earlier runs' partial outputs continued into rows"
        if self.extended:
            text += f"; {self.extended:,} cut answers continued by --continue-cut"
        if self.discarded:
            why = "prompt or settings changed, or past the turn's max tokens"
            text += f"; {self.discarded:,} of earlier partial outputs discarded ({why})"
        return text
