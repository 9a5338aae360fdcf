"""run/fleet.py: sheds move the in-flight target, garbage is retried then stops the run, the summary by worker."""

from __future__ import annotations

import pytest

from synthgen.errors import ServerError
from synthgen.run.concurrency import AutoConcurrency, InFlightLimit
from synthgen.run.fleet import Fleet
from synthgen.run.sickworker import WorkerHealth
from synthgen.server.client import Generation, Transient


def gen(worker, text="a fine answer", ids=None, finish="stop"):
    return Generation(text, ids or [1, 2, 3], {"type": finish}, 3, 3, 0, None, None, worker)


def fleet(target=16):
    limit = InFlightLimit(target)
    for _ in range(target):
        assert limit.try_acquire()
    messages = []
    return Fleet(limit, AutoConcurrency(initial=target), messages.append, WorkerHealth(burst=3, window=5)), messages


def shed(seconds=2.0):
    exc = Transient("shed_429", "HTTP 429: full", 429)
    exc.shed = seconds
    return exc


def test_a_shed_cuts_the_target_and_calm_answers_give_it_back_up_to_where_it_was():
    f, messages = fleet(16)
    assert f.shed(shed(3.0)) == 3.0
    assert f.limit.target == f.controller.target == 12 and f.ceiling == 16
    assert f.shed(shed()) == 2.0 and f.limit.target == 9
    assert "gateway shedding (2 sheds, target 9)" in f.status_text()
    assert len(messages) == 1 and "shedding" in messages[0]
    for _ in range(200):
        f.answered(gen("w1"))
    assert f.limit.target == 16 and f.status_text() == ""


def test_garbage_is_a_transient_naming_the_worker_and_a_burst_stops_the_run():
    f, messages = fleet()
    bang = gen("w2", "!" * 40, [7] * 40, "length")
    f.judge(gen("w1"))
    for _ in range(2):
        with pytest.raises(Transient) as caught:
            f.judge(bang)
        assert caught.value.kind == "garbage" and caught.value.worker == "w2"
    assert messages == [
        "worker w2 answered garbage (one token (id 7) repeated 40 times); such answers are retried, not written"
    ]
    assert "worker w2: 2 garbage answers" in f.status_text()
    with pytest.raises(ServerError, match="worker w2 answered garbage 3 times in 3 answers.*it is sick"):
        f.judge(bang)


def test_the_summary_breaks_answers_and_failures_down_by_worker_when_there_are_several():
    f, _ = fleet()
    f.answered(gen("w1"))
    assert f.summary_lines() == []
    f.answered(gen("w2", finish="length"))
    f.failed("w2", "http_500")
    assert f.summary_lines() == ["by worker:", "  w1: answers 1 stop", "  w2: answers 1 length; failed 1 http_500"]


def test_behind_a_gateway_the_dropped_sampling_keys_are_said_once():
    f, messages = fleet()
    f.gateway_found(["temperature", "top_p", "stream_interval", "logit_bias"])
    f.gateway_found(["temperature", "stop_regex"])
    assert len(messages) == 1
    assert "does not pass logit_bias, stream_interval on to its workers" in messages[0]
    quiet, said = fleet()
    quiet.gateway_found(["temperature", "top_p", "top_k", "max_new_tokens", "skip_special_tokens"])
    assert said == []
