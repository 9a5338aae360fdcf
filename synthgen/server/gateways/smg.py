"""smg (PyPI ``smg``, the maintained successor of sglang-router), as measured on smg 1.13
(``docs/server.md``, ``docs/sglang_api.md`` §11):

- **Sheds.** Admission control answers 429 (queue full, or concurrency limit with queueing off) or 503
  (queue timeout) with ``Retry-After: 2`` and an ``x-smg-error-code``.
- **The worker.** Every answer names the replica that served it in ``x-smg-routed-worker-id``.
- **Sticky routing.** ``X-SMG-Routing-Key: K`` pins requests with one key to one worker (under
  ``consistent_hashing``, ``manual`` or ``round_robin --sticky-sessions``).
- **Keys it forwards.** smg models a fixed set of sampling keys and drops the rest silently.
- It answers ``/abort_request`` 404 (it does not pass it on): a streamed request is ended by closing it.
"""

from __future__ import annotations

from synthgen.data.sampling_keys import SMG_FORWARDED
from synthgen.server.gateways import Gateway

# The sampling keys smg 1.13 forwards to a worker's /generate: the ``smg`` column of the sampling-key table
# (synthgen/data/sampling_keys.py, measured by sending every key SGLang 0.5.23 accepts through smg to a server
# that prints what it receives). The others (stream_interval, stop_regex, logit_bias, ...) are dropped
# without a word.
FORWARDED_KEYS = SMG_FORWARDED

PROFILE = Gateway(
    name="smg 1.13",
    worker_header="x-smg-routed-worker-id",
    routing_key_header="X-SMG-Routing-Key",
    shed_code_header="x-smg-error-code",
    shed_codes=frozenset({"admission_queue_full", "admission_queue_timeout", "concurrency_limit", "rate_limited"}),
    shed_messages=("concurrency limit reached", "queue is full", "queue timeout", "rate limit"),
    forwarded_keys=FORWARDED_KEYS,
)
