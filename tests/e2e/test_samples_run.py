"""Several samples per prompt and weighted recipes, through the simulator over loopback HTTP."""

from __future__ import annotations

import pytest
from simharness import start_sim

from synthgen.data.samples import sample_seed


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    from tiny_tokenizers import build_all

    tokenizers = build_all(tmp_path_factory.mktemp("tokenizers"))
    with start_sim(tokenizers["chatml"]) as running:
        yield running


def answer(sim, params: dict) -> list[int]:
    body = {"input_ids": [1, 100, 101, 102], "sampling_params": {"max_new_tokens": 64, **params}}
    reply = sim.client.post("/generate", json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()["output_ids"]


def test_the_simulator_gives_a_seeded_sample_the_same_answer_every_time_and_other_seeds_other_answers(sim):
    seeds = [sample_seed(0, "p", k) for k in range(8)]
    first = [answer(sim, {"temperature": 0.8, "sampling_seed": s}) for s in seeds]
    assert first == [answer(sim, {"temperature": 0.8, "sampling_seed": s}) for s in seeds]
    assert len({len(ids) for ids in first}) > 1


def test_the_simulator_answers_greedy_or_unseeded_requests_as_before(sim):
    plain = answer(sim, {})
    assert answer(sim, {"temperature": 0.0, "sampling_seed": 5}) == plain
    assert answer(sim, {"sampling_seed": 5}) == plain  # temperature not sent: the model's default
    assert answer(sim, {"temperature": 0.8}) == plain
