"""The producer: every prompt prepared once, in the mixed send order, in batches per trip to the
worker thread — also when the sender takes prompts one at a time at a steady pace."""

import asyncio
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import SimpleNamespace

from synthgen.run.concurrency import interleave
from synthgen.run.producer import PREPARE_BATCH, Producer


@dataclass
class FakeRun:
    name: str
    pending: list[str]
    closed: bool = False
    selection: SimpleNamespace = field(init=False)

    def __post_init__(self):
        self.selection = SimpleNamespace(pending=self.pending)


class FakePreparer:
    def __init__(self):
        self.done: list[str] = []

    def prepare(self, run, prompt_id):
        return (run.name, prompt_id)

    def done_with(self, run):
        self.done.append(run.name)


class CountingExecutor(ThreadPoolExecutor):
    """Records the size of each batch handed to the worker thread."""

    def __init__(self):
        super().__init__(max_workers=1)
        self.trips: list[int] = []

    def submit(self, fn, /, *args, **kwargs):
        self.trips.append(len(args[0]))
        return super().submit(fn, *args, **kwargs)


def produce_all(runs, ahead, pace):
    """Run the producer against a sender that takes one prompt, then lets the loop turn ``pace``
    times (a request going out); returns the prompts in the order taken and the batch sizes."""
    stop = SimpleNamespace(is_set=lambda: False)
    preparer, executor = FakePreparer(), CountingExecutor()

    async def scenario():
        producer = Producer(SimpleNamespace(), runs, preparer, executor, stop, ahead, lambda outcome: None)
        task = asyncio.create_task(producer.produce())
        taken = []
        while (item := await producer.take()) is not None:
            taken.append(item)
            for _ in range(pace):
                await asyncio.sleep(0)
        await task
        return taken

    try:
        taken = asyncio.run(scenario())
    finally:
        executor.shutdown()
    return taken, executor.trips, preparer.done


def three_datasets(size=300):
    return [FakeRun(f"ds{d}", [f"ds{d}-{i}" for i in range(size)]) for d in range(3)]


def test_every_prompt_is_taken_once_in_the_interleaved_order():
    runs = three_datasets()
    taken, _, done = produce_all(runs, ahead=48, pace=3)
    order = [runs[i].name for i in interleave([300, 300, 300])]
    assert [name for name, _ in taken] == order
    assert sorted(prompt for _, prompt in taken) == sorted(p for run in runs for p in run.pending)
    assert sorted(done) == ["ds0", "ds1", "ds2"]


def test_a_steady_sender_gets_its_prompts_prepared_in_batches_not_one_trip_each():
    taken, trips, _ = produce_all(three_datasets(), ahead=48, pace=3)
    assert trips[0] == 1  # the first request goes out at once
    assert sum(trips) == len(taken) == 900
    assert max(trips) <= PREPARE_BATCH
    assert len(trips) <= 900 // 12  # batches of a third of the bound (16 here), not one prompt each


def test_closed_datasets_are_skipped_and_let_go():
    runs = three_datasets(20)
    runs[1].closed = True
    taken, _, done = produce_all(runs, ahead=16, pace=1)
    assert {name for name, _ in taken} == {"ds0", "ds2"} and len(taken) == 40
    assert sorted(done) == ["ds0", "ds1", "ds2"]
