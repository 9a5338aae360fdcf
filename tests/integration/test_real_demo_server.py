"""The demo server's flags against the real SGLang server on CPU (issue 30 point 13): its load report
carries the decode rate the status line shows."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.real_sglang


def test_the_load_report_carries_the_servers_decode_rate_after_an_answer(real_server):
    # 60 decode steps: past SGLang's decode-log interval (40), where the rate is computed.
    body = {"input_ids": [1, 10, 11, 12], "sampling_params": {"max_new_tokens": 60, "ignore_eos": True}}
    answer = real_server.post("/generate", body)
    assert answer.status_code == 200 and answer.json()["meta_info"]["completion_tokens"] == 60
    loads = real_server.get("/v1/loads").json()["loads"]
    assert sum(entry["gen_throughput"] for entry in loads) > 0, loads
