"""What the first stop signal says and ends: the requests whose output is kept are ended at once, the others
(a recipe that restarts) are waited for, and the message names each part truthfully."""

from __future__ import annotations

import asyncio
import signal
from types import SimpleNamespace

import pytest

from synthgen.run.stopping import RunStop


class Said:
    def __init__(self, in_flight: int):
        self.tally, self.lines = SimpleNamespace(in_flight=in_flight), []

    def message(self, text: str) -> None:
        self.lines.append(text)


class Pool:
    def __init__(self, keeps: bool, kept: int, others: int):
        self.tasks: set[asyncio.Task[None]] = set()
        self.keeps, self.kept, self.others, self.ended = keeps, kept, others, []

    def stop_preparing(self) -> None:
        pass

    def server_down(self) -> bool:
        return False

    def keeps_partials(self) -> bool:
        return self.keeps

    def in_flight_kept(self) -> tuple[int, int]:
        return self.kept, self.others

    async def end_in_flight(self, kept_only: bool = False) -> int:
        self.ended.append(kept_only)
        return self.kept if kept_only else self.kept + self.others


def first_signal(pool: Pool) -> str:
    said = Said(pool.kept + pool.others)

    async def go() -> None:
        stop = RunStop(said, 30.0)  # type: ignore[arg-type]
        stop.attach(pool)
        stop.on_signal(signal.SIGTERM)
        await asyncio.sleep(0)  # the ending task runs
        stop.close()

    asyncio.run(go())
    return said.lines[-1]


@pytest.mark.parametrize(
    "pool, ended, said",
    [
        (Pool(True, 4, 0), [False], "ending the 4 in flight through /abort_request, their output so far kept"),
        (
            Pool(True, 3, 1),
            [True],
            "ending the 3 in flight whose output is kept through /abort_request (kept for the next run to continue); "
            "waiting up to 30s for the other 1, whose output would not be kept (their recipe restarts",
        ),
        (Pool(True, 0, 2), [], "waiting up to 30s for 2 in flight, whose output would not be kept (their recipe"),
        (Pool(False, 0, 2), [], "SIGTERM: no new requests; waiting up to 30s for 2 in flight (send SIGTERM again"),
    ],
)
def test_the_first_signal_ends_what_is_kept_waits_for_the_rest_and_says_which_is_which(pool, ended, said):
    assert said in first_signal(pool)
    assert pool.ended == ended
