"""What a gateway's answers mean (smg 1.13 as measured, docs/sglang_api.md §11)."""

import email.utils

from synthgen.server.gateway import (
    DEFAULT_SHED_SECONDS,
    MAX_SHED_SECONDS,
    dropped_keys,
    retry_after,
    routing_key,
    shed_delay,
    worker_of,
)
from synthgen.server.gateways import GATEWAYS, Gateway, sglang_router, smg


def test_retry_after_reads_seconds_and_http_dates():
    assert retry_after("2") == 2.0
    assert retry_after(" 0.5 ") == 0.5
    assert retry_after("-3") == 0.0
    assert retry_after(None) is None
    assert retry_after("soon") is None
    date = email.utils.formatdate(1_000_030, usegmt=True)
    assert retry_after(date, now=1_000_000) == 30.0
    assert retry_after(email.utils.formatdate(999_000, usegmt=True), now=1_000_000) == 0.0


def test_a_429_or_503_with_retry_after_is_a_shed():
    assert shed_delay(429, {"Retry-After": "2"}, "too many") == 2.0
    assert shed_delay(503, {"retry-after": "7"}, "queue timeout") == 7.0
    assert shed_delay(503, {"Retry-After": "100000"}, "") == MAX_SHED_SECONDS  # waited out in steps


def test_smgs_admission_code_or_message_is_a_shed_without_retry_after():
    assert shed_delay(429, {"x-smg-error-code": "admission_queue_full"}, "") == DEFAULT_SHED_SECONDS
    message = "concurrency limit reached and queuing is disabled"
    assert shed_delay(429, {}, message) == DEFAULT_SHED_SECONDS


def test_a_bare_503_or_another_status_is_not_a_shed():
    assert shed_delay(503, {}, "Service Unavailable") is None  # a server going down: the outage path
    # SGLang's own queue-full 503 without Retry-After stays the outage path (a shed never uses up attempts)
    assert shed_delay(503, {}, "The request queue is full.") is None
    assert shed_delay(500, {"Retry-After": "2"}, "") is None
    assert shed_delay(400, {"Retry-After": "2"}, "") is None


def test_the_worker_is_smgs_header_else_the_server():
    assert worker_of({"x-smg-routed-worker-id": "http://w1:30000"}, "http://gw:8000") == "http://w1:30000"
    assert worker_of({"X-SMG-Routed-Worker-Id": " http://w2 "}, "http://gw") == "http://w2"
    assert worker_of({"content-type": "application/json"}, "http://one:30000") == "http://one:30000"


def test_a_conversation_has_one_stable_routing_key():
    key = routing_key("ultrachat", "c1")
    assert key == routing_key("ultrachat", "c1") and len(key) == 24
    assert key != routing_key("ultrachat", "c2") and key != routing_key("glaive", "c1")


def test_keys_smg_does_not_forward_are_named():
    sent = ["max_new_tokens", "temperature", "skip_special_tokens", "stream_interval", "sampling_seed", "logit_bias"]
    assert dropped_keys(sent) == [(smg.PROFILE, ["logit_bias", "stream_interval"])]
    assert {"max_new_tokens", "skip_special_tokens", "sampling_seed", "stop_token_ids"} <= smg.FORWARDED_KEYS
    assert dropped_keys(["temperature", "max_new_tokens"]) == []


def test_every_gateway_module_is_a_profile_the_readers_use():
    # A third gateway is one more module in synthgen/server/gateways/: found there, read by every reader.
    assert {g.name for g in GATEWAYS} == {smg.PROFILE.name, sglang_router.PROFILE.name}
    assert all(isinstance(g, Gateway) for g in GATEWAYS)
    assert worker_of({"X-SMG-Routed-Worker-Id": "w1"}, "http://gw") == "w1"
    assert sglang_router.PROFILE.workers_path == "/workers"
