"""The demo server's flags against the real SGLang server on CPU: while it decodes,
its load report carries the decode rate that the status line shows (SGLang fills it only with
--enable-metrics; without it the status line read 0 tok/s all run)."""

from __future__ import annotations

import threading

import pytest
from simharness import wait_until

pytestmark = pytest.mark.real_sglang


def test_the_load_report_carries_the_decode_rate_while_the_server_decodes(real_server):
    # A long answer (no stop at EOS), aborted once seen: the rate is computed every 40 decode steps and
    # reported while requests run (an idle server reports 0).
    body = {
        "rid": "decode-rate-check",
        "input_ids": [1, 10, 11, 12],
        "sampling_params": {"max_new_tokens": 1500, "ignore_eos": True},
    }
    answers: list[dict] = []
    request = threading.Thread(target=lambda: answers.append(real_server.post("/generate", body).json()))
    request.start()
    try:

        def decoding_rate() -> float:
            loads = real_server.get("/v1/loads").json()["loads"]
            return sum(entry["gen_throughput"] for entry in loads if entry["num_running_reqs"] > 0)

        assert wait_until(decoding_rate, timeout=600, interval=0.5, what="a decode rate in /v1/loads") > 0
    finally:
        real_server.post("/abort_request", {"rid": "decode-rate-check"})
        request.join(120)
    assert answers and answers[0]["meta_info"]["finish_reason"]["type"] == "abort"
