"""The retry policy of one prompt, as a value (the shape of urllib3's ``Retry``): counters per cause,
the backoff, and a pure ``after(failure)`` that says what comes next.

    RetryPolicy.of(cfg)      a prompt's fresh policy: --max-attempts, --retry-backoff, --server-wait
    policy.attempt           the number of the attempt being sent (what a row or an error records)
    policy.after(failure)    -> Step: wait (then send again), again (at once), or give up; with the
                             policy as it stands after the failure (the old one is unchanged)
    policy.answered()        the policy once an answer came back and the prompt goes on (a cut
                             answer extended by --continue-cut is one more attempt)

The causes, each with its own counter:

- ``error``: a failed attempt (timeout, a 5xx that is no outage, a bad answer); counts against
  --max-attempts; the wait before the next is the exponential backoff, jittered.
- ``shed``: a gateway's backpressure (429/503 with Retry-After): waited out as it asks and no attempt,
  up to --server-wait of sheds for one prompt; past that, an ``error``.
- ``outage``: the server was down under the request (confirmed by its health, or a server of several
  taken out): no attempt, sent again once it is back; a prompt in flight at OUTAGES_PER_PROMPT server
  deaths gives up (it may be what kills the server).
- ``rejected``: the server refused the prompt (a 4xx): given up at once.

Nothing here waits, sends or records: run/request.py does, from the step.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from synthgen.config import RunConfig

# A prompt in flight at this many server deaths is recorded as failed rather than retried forever.
OUTAGES_PER_PROMPT = 3

Cause = Literal["error", "shed", "outage", "rejected"]
Action = Literal["wait", "again", "give_up"]


def full_jitter() -> float:
    """Retries from many requests do not arrive together: each waits 50-100% of the backoff."""
    return random.uniform(0.5, 1.0)


@dataclass(frozen=True, slots=True)
class Failure:
    """One attempt's failure as the policy sees it: its cause, and the wait a shed asked for."""

    cause: Cause
    retry_after: float = 0.0  # a shed: the seconds the gateway's Retry-After asked for

    @classmethod
    def of(cls, shed: float | None, outage: bool, rejected: bool = False) -> Failure:
        if rejected:
            return cls("rejected")
        if shed is not None:
            return cls("shed", shed)
        return cls("outage" if outage else "error")


@dataclass(frozen=True, slots=True)
class Step:
    """What comes after a failure: ``wait`` seconds then send again, send ``again`` at once, or
    ``give_up`` (``cause`` says which counter ran out); ``policy`` holds the counters after it."""

    action: Action
    cause: Cause
    policy: RetryPolicy
    wait: float = 0.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int
    backoff_base: float
    backoff_max: float
    shed_budget: float  # seconds of sheds one prompt waits out before a shed counts as an attempt
    max_outages: int = OUTAGES_PER_PROMPT
    attempts: int = 0  # attempts that counted and failed
    outages: int = 0  # server deaths while the prompt was in flight
    sheds: int = 0
    shed_waited: float = 0.0
    jitter: Callable[[], float] = field(default=full_jitter, compare=False, repr=False)

    @classmethod
    def of(cls, cfg: RunConfig, sheds: bool = True) -> RetryPolicy:
        """``sheds`` False: a shed is an ordinary failed attempt (nothing watches the gateway)."""
        return cls(cfg.max_attempts, cfg.backoff_base, cfg.backoff_max, cfg.server_wait if sheds else 0.0)

    @property
    def attempt(self) -> int:
        """The number of the attempt being sent: the failed ones that counted, plus this one."""
        return self.attempts + 1

    def backoff(self, attempt: int) -> float:
        """The wait after the ``attempt``-th failed attempt, before the jitter."""
        return float(min(self.backoff_max, self.backoff_base * 2 ** (attempt - 1)))

    def answered(self) -> RetryPolicy:
        return replace(self, attempts=self.attempts + 1)

    def after(self, failure: Failure) -> Step:
        cause = failure.cause
        if cause == "rejected":
            return Step("give_up", cause, replace(self, attempts=self.attempt))
        if cause == "shed" and self.shed_waited < self.shed_budget:
            wait = failure.retry_after
            return Step("wait", cause, replace(self, sheds=self.sheds + 1, shed_waited=self.shed_waited + wait), wait)
        if cause == "outage":
            outages = self.outages + 1
            if outages >= self.max_outages:
                return Step("give_up", cause, replace(self, outages=outages, attempts=self.attempt))
            return Step("again", cause, replace(self, outages=outages))
        # An error, or a shed past the budget: an attempt that counts.
        policy = replace(self, attempts=self.attempt)
        if policy.attempts >= self.max_attempts:
            return Step("give_up", "error", policy)
        return Step("wait", "error", policy, self.backoff(policy.attempts) * self.jitter())
