"""Progress fed as a run feeds it: the tally it reads (which a run's writer changes) and a prompt answered."""

from __future__ import annotations

from synthgen.run.progress import DatasetStats, Progress, Tally


def watched(progress: Progress) -> DatasetStats:
    """The tally ``progress`` reads (a run's writer changes it, then tells progress)."""
    tally = DatasetStats("d")
    progress.watch(Tally([tally]))
    return tally


def answered(progress: Progress, tally: DatasetStats, tokens: int) -> None:
    """A prompt answered with ``tokens`` output tokens, counted as the writer counts it."""
    tally.done += 1
    tally.completion_tokens += tokens
    progress.finished(tokens)
