"""The retry policy of one prompt: from a table of failures in order, what comes after each."""

from __future__ import annotations

import pytest

from synthgen.run.retry import OUTAGES_PER_PROMPT, Failure, RetryPolicy

ERROR, OUTAGE, REJECTED = Failure("error"), Failure("outage"), Failure("rejected")


def shed(seconds: float) -> Failure:
    return Failure("shed", seconds)


def policy(max_attempts: int = 3, shed_budget: float = 10.0) -> RetryPolicy:
    # No jitter: the waits are the backoff itself (1, 2, 4, ... capped at 5 s).
    return RetryPolicy(max_attempts, backoff_base=1.0, backoff_max=5.0, shed_budget=shed_budget, jitter=lambda: 1.0)


# (policy, the failures in order, the (action, cause, wait) after each, the attempts counted at the end:
# what a give-up records)
TABLE = [
    ("errors back off, then give up at --max-attempts", policy(3), [ERROR, ERROR, ERROR],
     [("wait", "error", 1.0), ("wait", "error", 2.0), ("give_up", "error", 0.0)], 3),
    ("the backoff is capped", policy(6), [ERROR] * 5,
     [("wait", "error", 1.0), ("wait", "error", 2.0), ("wait", "error", 4.0), ("wait", "error", 5.0),
      ("wait", "error", 5.0)], 5),
    ("--max-attempts 1: the first error gives up", policy(1), [ERROR], [("give_up", "error", 0.0)], 1),
    ("a rejection gives up at once", policy(3), [ERROR, REJECTED],
     [("wait", "error", 1.0), ("give_up", "rejected", 0.0)], 2),
    ("outages are no attempts: sent again at once", policy(1), [OUTAGE, OUTAGE],
     [("again", "outage", 0.0), ("again", "outage", 0.0)], 0),
    ("a prompt in flight at three server deaths gives up", policy(5), [OUTAGE, ERROR, OUTAGE, OUTAGE],
     [("again", "outage", 0.0), ("wait", "error", 1.0), ("again", "outage", 0.0), ("give_up", "outage", 0.0)], 2),
    ("sheds wait as the gateway asks, no attempt", policy(1), [shed(2.0), shed(3.0)],
     [("wait", "shed", 2.0), ("wait", "shed", 3.0)], 0),
    ("past --server-wait of sheds, a shed is an attempt", policy(2, shed_budget=4.0),
     [shed(2.0), shed(2.0), shed(2.0), shed(2.0)],
     [("wait", "shed", 2.0), ("wait", "shed", 2.0), ("wait", "error", 1.0), ("give_up", "error", 0.0)], 2),
    ("no gateway watched: a shed is an attempt", policy(2, shed_budget=0.0), [shed(2.0), shed(2.0)],
     [("wait", "error", 1.0), ("give_up", "error", 0.0)], 2),
]  # fmt: skip


@pytest.mark.parametrize(
    ("start", "failures", "steps", "attempts"), [row[1:] for row in TABLE], ids=[r[0] for r in TABLE]
)
def test_what_comes_after_each_failure(start, failures, steps, attempts):
    current, seen = start, []
    for failure in failures:
        step = current.after(failure)
        assert current.after(failure) == step  # pure: the policy it was asked of is unchanged
        seen.append((step.action, step.cause, step.wait))
        current = step.policy
    assert seen == steps
    assert current.attempts == attempts


def test_counters_per_cause():
    current = policy(9)
    for failure in [shed(1.0), OUTAGE, ERROR, shed(2.5), ERROR]:
        current = current.after(failure).policy
    assert (current.attempts, current.outages, current.sheds, current.shed_waited) == (2, 1, 2, 3.5)
    assert current.attempt == 3  # the next attempt's number


def test_an_answer_that_goes_on_is_one_more_attempt():
    assert policy().answered().attempt == 2


def test_the_jitter_scales_the_backoff():
    jittered = RetryPolicy(3, 1.0, 60.0, 0.0, jitter=lambda: 0.5)
    assert jittered.after(ERROR).wait == 0.5
    assert OUTAGES_PER_PROMPT == 3


def test_a_failure_from_what_the_client_raised():
    assert Failure.of(shed=None, outage=False) == ERROR
    assert Failure.of(shed=None, outage=True) == OUTAGE
    assert Failure.of(shed=2.0, outage=False) == shed(2.0)
    assert Failure.of(shed=None, outage=False, rejected=True) == REJECTED
