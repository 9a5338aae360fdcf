"""Tests of the SGLang simulator itself, over real HTTP, against docs/sglang_api.md.

Every expectation here is written from the protocol reference, not read back from the
simulator's code, so a drift between the two shows up as a failure. Waits on in-flight requests
poll ``/sim/stats`` and end by an explicit ``/abort_request``; no outcome depends on timing.
"""

from __future__ import annotations

import http.client
import json
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sglang_sim import parse_length_dist, prompt_sha1
from simharness import Sim, start_sim, wait_until
from tiny_tokenizers import build_all, build_tokenizer, chat_ids, hf_tokenizer
from tokenizers import Tokenizer

CONTEXT = 4096
MAX_REQ_INPUT_LEN = CONTEXT - 1 - 5
HELLO = "hello world"
REASONING = f"Reasoning about: {HELLO}"
ANSWER = f"Answer: {HELLO}"
# Any ordinary token id: long prompts are made of it.
FILLER_ID = 100
CONTRACT_KEYS = (
    "`max_new_tokens`, `stop`, `stop_token_ids`, `stop_regex`, `temperature`, `top_p`, `top_k`, "
    "`min_p`, `frequency_penalty`, `presence_penalty`, `repetition_penalty`, `min_new_tokens`, "
    "`n`, `json_schema`, `regex`, `ebnf`, `structural_tag`, `ignore_eos`, `skip_special_tokens`, "
    "`spaces_between_special_tokens`, `no_stop_trim`, `stream_interval`, `logit_bias`, "
    "`sampling_seed`, `custom_params`, `beam_width`, `watermark`, `choice`"
)
QUEUE_FULL = {
    "object": "error",
    "message": "The request queue is full.",
    "type": "503",
    "param": None,
    "code": 503,
}
ABORTED = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
# The /sim/stats keys from before the scheduler mode; later keys are checked by their own tests.
OLD_STATS_KEYS = ("generate_requests", "completed", "in_flight", "by_outcome", "prompt_counts")


# ---------------------------------------------------------------------------------------------
# Fixtures and helpers


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    dirs = build_all(root)
    dirs["chatml-bos"] = build_tokenizer(root / "chatml-bos", bos=True)
    return dirs


@pytest.fixture(scope="module")
def shared_sim(tokenizer_dirs):
    with start_sim(tokenizer_dirs["chatml"]) as sim:
        yield sim


@pytest.fixture
def sim(shared_sim: Sim) -> Sim:
    """The default simulator (0.5.23, chatml, reasoning on) with fresh stats and no faults."""
    shared_sim.reset()
    return shared_sim


@pytest.fixture(scope="module")
def sim_0_5_14(tokenizer_dirs):
    with start_sim(tokenizer_dirs["chatml"], "--version", "0.5.14") as sim:
        yield sim


@pytest.fixture
def background():
    with ThreadPoolExecutor(max_workers=4) as pool:
        yield pool


def token_id(tokenizer_dir: Path, token: str) -> int:
    return hf_tokenizer(tokenizer_dir).convert_tokens_to_ids(token)


def generate(sim: Sim, payload: dict, headers: dict | None = None) -> httpx.Response:
    return sim.client.post("/generate", json=payload, headers=headers)


def error_message(response: httpx.Response) -> str:
    assert response.status_code == 400, response.text
    return response.json()["error"]["message"]


def start_blocked_request(sim: Sim, pool: ThreadPoolExecutor, payload: dict) -> Future:
    """Send ``payload`` from a thread and return once the simulator holds it in flight."""
    before = sim.stats()["in_flight"]
    future = pool.submit(generate, sim, payload)
    wait_until(lambda: sim.stats()["in_flight"] > before or future.done(), what="in flight")
    assert not future.done(), future.result().text
    return future


def abort(sim: Sim, rid: str = "", abort_all: bool = False) -> None:
    response = sim.client.post("/abort_request", json={"rid": rid, "abort_all": abort_all})
    assert response.status_code == 200


# ---------------------------------------------------------------------------------------------
# /generate: response shape and the fake model


def test_single_generate_returns_text_output_ids_and_meta_info(sim, tokenizer_dirs):
    ids = chat_ids(tokenizer_dirs["chatml"])
    response = generate(sim, {"input_ids": ids, "rid": "r1", "sampling_params": {"max_new_tokens": 200}})
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"text", "output_ids", "meta_info"}
    meta = body["meta_info"]
    assert list(meta) == [
        "id",
        "finish_reason",
        "prompt_tokens",
        "weight_version",
        "num_retractions",
        "reasoning_tokens",
        "completion_tokens",
        "cached_tokens",
        "weight_versions",
        "cached_tokens_details",
        "dp_rank",
        "e2e_latency",
        "response_sent_to_client_ts",
    ]  # fmt: skip  (the key order of a real 0.5.23 answer, captured on CPU)
    eos = token_id(tokenizer_dirs["chatml"], "<|im_end|>")
    assert meta["id"] == "r1"
    assert meta["finish_reason"] == {"type": "stop", "matched": eos}
    assert meta["prompt_tokens"] == len(ids)
    assert meta["completion_tokens"] == len(body["output_ids"])
    assert body["output_ids"][-1] == eos
    assert (meta["weight_version"], meta["num_retractions"], meta["reasoning_tokens"]) == (
        "default", 0, 0,
    )  # fmt: skip


def test_generate_also_answers_put(sim, tokenizer_dirs):
    response = sim.client.put("/generate", json={"input_ids": chat_ids(tokenizer_dirs["chatml"])})
    assert response.status_code == 200


def test_chatml_output_contains_both_think_tags_when_special_tokens_are_kept(sim, tokenizer_dirs):
    ids = chat_ids(tokenizer_dirs["chatml"])
    body = generate(sim, {"input_ids": ids, "sampling_params": {"skip_special_tokens": False}}).json()
    assert body["text"] == f"<think>{REASONING}</think>{ANSWER}"


def test_default_skip_special_tokens_strips_special_think_tags_from_text(sim, tokenizer_dirs):
    directory = tokenizer_dirs["chatml"]
    body = generate(sim, {"input_ids": chat_ids(directory)}).json()
    assert body["text"] == REASONING + ANSWER
    assert token_id(directory, "<think>") in body["output_ids"]
    assert token_id(directory, "</think>") in body["output_ids"]


def test_kimi_output_contains_only_the_closing_think_tag(tokenizer_dirs):
    directory = tokenizer_dirs["kimi"]
    with start_sim(directory) as sim:
        body = generate(
            sim,
            {"input_ids": chat_ids(directory), "sampling_params": {"skip_special_tokens": False}},
        ).json()
        assert body["text"] == f"{REASONING}</think>{ANSWER}"
        thinking_off = chat_ids(directory, thinking=False)
        body = generate(sim, {"input_ids": thinking_off}).json()
        assert body["text"] == ANSWER


def test_chatml_prompt_with_thinking_disabled_gets_only_the_answer(sim, tokenizer_dirs):
    ids = chat_ids(tokenizer_dirs["chatml"], enable_thinking=False)
    assert generate(sim, {"input_ids": ids}).json()["text"] == ANSWER


def test_non_special_think_tags_survive_default_decoding(tokenizer_dirs):
    directory = tokenizer_dirs["chatml-nonspecial"]
    with start_sim(directory) as sim:
        body = generate(sim, {"input_ids": chat_ids(directory)}).json()
    assert body["text"] == f"<think>{REASONING}</think>{ANSWER}"


def test_no_reasoning_mode_writes_only_the_answer(tokenizer_dirs):
    directory = tokenizer_dirs["chatml"]
    with start_sim(directory, "--no-reasoning") as sim:
        body = generate(sim, {"input_ids": chat_ids(directory)}).json()
    assert body["text"] == ANSWER


def test_text_input_gets_bos_added_so_a_rendered_template_has_two(tokenizer_dirs):
    directory = tokenizer_dirs["chatml-bos"]
    ids = chat_ids(directory)
    tokenizer = hf_tokenizer(directory)
    assert ids[0] == tokenizer.bos_token_id
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": HELLO}], add_generation_prompt=True, tokenize=False
    )
    with start_sim(directory) as sim:
        as_ids = generate(sim, {"input_ids": ids}).json()["meta_info"]["prompt_tokens"]
        as_text = generate(sim, {"text": rendered}).json()["meta_info"]["prompt_tokens"]
    assert (as_ids, as_text) == (len(ids), len(ids) + 1)


def test_output_longer_than_max_new_tokens_finishes_with_length(sim, tokenizer_dirs):
    ids = chat_ids(tokenizer_dirs["chatml"])
    body = generate(sim, {"input_ids": ids, "sampling_params": {"max_new_tokens": 5}}).json()
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 5}
    assert len(body["output_ids"]) == body["meta_info"]["completion_tokens"] == 5


def test_omitted_max_new_tokens_defaults_to_128(sim, tokenizer_dirs):
    ids = chat_ids(tokenizer_dirs["chatml"], user="word " * 200)
    body = generate(sim, {"input_ids": ids}).json()
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 128}


def test_batch_input_returns_a_list_in_prompt_order(sim, tokenizer_dirs):
    directory = tokenizer_dirs["chatml"]
    users = ["first prompt", "second prompt", "third prompt"]
    payload = {"input_ids": [chat_ids(directory, u) for u in users], "rid": "batch"}
    body = generate(sim, payload).json()
    assert [item["text"] for item in body] == [f"Reasoning about: {u}Answer: {u}" for u in users]
    assert [item["meta_info"]["id"] for item in body] == ["batch_0", "batch_1", "batch_2"]


def test_n_greater_than_one_returns_samples_grouped_by_prompt_with_fresh_ids(sim, tokenizer_dirs):
    directory = tokenizer_dirs["chatml"]
    payload = {
        "input_ids": [chat_ids(directory, "one"), chat_ids(directory, "two")],
        "rid": "mine",
        "sampling_params": {"n": 2},
    }
    body = generate(sim, payload).json()
    assert [item["text"] for item in body] == ["Reasoning about: oneAnswer: one"] * 2 + [
        "Reasoning about: twoAnswer: two"
    ] * 2
    ids = [item["meta_info"]["id"] for item in body]
    assert len(set(ids)) == 4 and not any(i.startswith("mine") for i in ids)
    single = generate(sim, {"input_ids": chat_ids(directory), "sampling_params": {"n": 3}}).json()
    assert isinstance(single, list) and len(single) == 3


# ---------------------------------------------------------------------------------------------
# /generate: validation


def test_input_of_context_length_is_rejected_by_the_tokenizer_check(sim):
    response = generate(sim, {"input_ids": [FILLER_ID] * CONTEXT})
    assert error_message(response) == (
        f"The input ({CONTEXT} tokens) is longer than the model's context length ({CONTEXT} tokens)."
    )


def test_explicit_max_new_tokens_beyond_the_context_is_rejected(sim):
    payload = {"input_ids": [FILLER_ID] * 4000, "sampling_params": {"max_new_tokens": 200}}
    assert error_message(generate(sim, payload)) == (
        f"Requested token count exceeds the model's maximum context length of {CONTEXT} tokens. "
        "You requested a total of 4200 tokens: 4000 tokens from the input messages and 200 tokens "
        "for the completion. Please reduce the number of tokens in the input messages or the "
        "completion to fit within the limit."
    )


def test_input_just_below_the_context_fails_the_scheduler_check(sim):
    payload = {
        "input_ids": [FILLER_ID] * MAX_REQ_INPUT_LEN,
        "sampling_params": {"max_new_tokens": 1},
    }
    assert error_message(generate(sim, payload)) == (
        f"Input length ({MAX_REQ_INPUT_LEN} tokens) exceeds the maximum allowed length "
        f"({MAX_REQ_INPUT_LEN} tokens). Use a shorter input or enable --allow-auto-truncate."
    )


def test_omitted_max_new_tokens_is_clamped_silently_to_what_fits(sim):
    n_input = MAX_REQ_INPUT_LEN - 1
    body = generate(sim, {"input_ids": [FILLER_ID] * n_input}).json()
    fits = CONTEXT - 1 - n_input - 1
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": fits}


def test_unknown_sampling_key_gets_400_with_string_error_on_0_5_23(sim):
    response = generate(sim, {"input_ids": [1, 2], "sampling_params": {"seed": 1}})
    assert response.status_code == 400
    assert response.json() == {"error": f"unknown field `seed`, expected one of {CONTRACT_KEYS}"}


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_new_tokens", "5", 'invalid type: string "5", expected i64'),
        ("max_new_tokens", 1.0, "invalid type: floating point `1.0`, expected i64"),
    ],
)
def test_wrongly_typed_sampling_value_gets_400_invalid_type_on_0_5_23(sim, field, value, message):
    response = generate(sim, {"input_ids": [1, 2], "sampling_params": {field: value}})
    assert response.status_code == 400
    assert response.json() == {"error": message}


def test_non_boolean_stream_gets_400_invalid_type_on_0_5_23(sim):
    response = generate(sim, {"input_ids": [1, 2], "stream": "yes"})
    assert response.json() == {"error": 'invalid type: string "yes", expected a boolean'}


def test_integer_temperature_and_unknown_top_level_keys_are_accepted(sim):
    payload = {"input_ids": [1, 2], "foo": 1, "sampling_params": {"temperature": 0}}
    assert generate(sim, payload).status_code == 200


def test_unknown_sampling_key_gets_plain_500_on_0_5_14(sim_0_5_14):
    response = generate(sim_0_5_14, {"input_ids": [1, 2], "sampling_params": {"seed": 1}})
    assert response.status_code == 500
    assert response.text == "Internal Server Error"


def test_0_5_14_answers_without_reasoning_tokens_in_meta_info(sim_0_5_14, tokenizer_dirs):
    body = generate(sim_0_5_14, {"input_ids": chat_ids(tokenizer_dirs["chatml"])}).json()
    assert "reasoning_tokens" not in body["meta_info"]
    assert body["meta_info"]["num_retractions"] == 0


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"input_ids": []}, "input_ids cannot be empty."),
        ({"input_ids": [[1], []]}, "input_ids cannot be empty."),
        ({}, "Either text, input_ids or input_embeds should be provided."),
        (
            {"input_ids": [[1], [2]], "rid": ["a"]},
            "The specified rids length mismatch with the batch_size for batch processing.",
        ),
        (
            {"input_ids": [[1], [2]], "rid": ["a", "a"]},
            "Duplicate request IDs detected within the request: ['a']",
        ),
        ({"input_ids": [1], "sampling_params": {"top_p": 0}}, "top_p must be in (0, 1], got 0."),
        (
            {"input_ids": [1], "sampling_params": {"temperature": -1}},
            "temperature must be non-negative, got -1.",
        ),
        (
            {"input_ids": [1], "sampling_params": {"top_k": 0}},
            "top_k must be -1 (disable), or at least 1, got 0.",
        ),
        (
            {"input_ids": [1], "sampling_params": {"max_new_tokens": -1}},
            "max_new_tokens must be at least 0, got -1.",
        ),
    ],
)
def test_invalid_requests_get_400_with_an_error_object(sim, payload, message):
    assert error_message(generate(sim, payload)) == message


def test_rid_already_in_flight_is_rejected(sim, tokenizer_dirs, background):
    sim.configure(token_delay=600)
    ids = chat_ids(tokenizer_dirs["chatml"])
    first = start_blocked_request(sim, background, {"input_ids": ids, "rid": "dup"})
    assert error_message(generate(sim, {"input_ids": ids, "rid": "dup"})) == ("Duplicate request ID detected: dup")
    abort(sim, "dup")
    assert first.result(timeout=60).status_code == 200


# ---------------------------------------------------------------------------------------------
# Aborts and faults


def test_abort_request_ends_an_in_flight_request_with_200_and_partial_output(sim, tokenizer_dirs, background):
    sim.configure(token_delay=600)
    ids = chat_ids(tokenizer_dirs["chatml"])
    pending = start_blocked_request(sim, background, {"input_ids": ids, "rid": "job-7"})
    abort(sim, "job-7")
    response = pending.result(timeout=60)
    assert response.status_code == 200
    body = response.json()
    assert body["meta_info"]["finish_reason"] == ABORTED
    assert 0 < len(body["output_ids"]) < 10
    assert sim.stats()["by_outcome"] == {"aborted": 1}


def test_abort_request_needs_its_rid_in_flight_then_matches_the_others_by_prefix(sim, tokenizer_dirs, background):
    # Measured on 0.5.23: the tokenizer manager drops an abort whose rid is not in flight (a batch
    # "job" runs as job_0, job_1); the scheduler ends every request whose rid starts with it.
    sim.configure(token_delay=600)
    ids = chat_ids(tokenizer_dirs["chatml"])
    batch = start_blocked_request(sim, background, {"input_ids": [ids, ids], "rid": "job"})
    abort(sim, "job")
    short = start_blocked_request(sim, background, {"input_ids": ids, "rid": "row#s1"})
    longer = start_blocked_request(sim, background, {"input_ids": ids, "rid": "row#s10"})
    abort(sim, "row#s1")
    assert [r.result(timeout=60).json()["meta_info"]["finish_reason"] for r in (short, longer)] == [ABORTED] * 2
    assert not batch.done()
    abort(sim, "job_0")
    abort(sim, "job_1")
    body = batch.result(timeout=60).json()
    assert [item["meta_info"]["finish_reason"] for item in body] == [ABORTED, ABORTED]


def test_abort_all_ends_every_in_flight_request(sim, tokenizer_dirs, background):
    sim.configure(token_delay=600)
    ids = chat_ids(tokenizer_dirs["chatml"])
    first = start_blocked_request(sim, background, {"input_ids": ids})
    second = start_blocked_request(sim, background, {"input_ids": ids})
    abort(sim, abort_all=True)
    for pending in (first, second):
        assert pending.result(timeout=60).json()["meta_info"]["finish_reason"] == ABORTED


def test_fail_first_n_answers_503_queue_full_then_recovers(sim):
    sim.configure(fail_first_n=2)
    responses = [generate(sim, {"input_ids": [1, 2, 3]}) for _ in range(3)]
    assert [r.status_code for r in responses] == [503, 503, 200]
    assert responses[0].json() == QUEUE_FULL


def test_rate_503_answers_queue_full(sim):
    sim.configure(rate_503=1)
    response = generate(sim, {"input_ids": [1, 2, 3]})
    assert (response.status_code, response.json()) == (503, QUEUE_FULL)


def test_rate_drop_closes_the_connection_without_a_response(sim):
    sim.configure(rate_drop=1)
    with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
        generate(sim, {"input_ids": [1, 2, 3]})
    assert sim.stats()["by_outcome"] == {"dropped": 1}


def test_rate_abort_returns_200_with_abort_finish_and_partial_output(sim, tokenizer_dirs):
    sim.configure(rate_abort=1)
    ids = chat_ids(tokenizer_dirs["chatml"])
    body = generate(sim, {"input_ids": ids}).json()
    assert body["meta_info"]["finish_reason"] == ABORTED
    sim.configure(rate_abort=0)
    full = generate(sim, {"input_ids": ids}).json()
    assert 0 < len(body["output_ids"]) < len(full["output_ids"])
    assert full["output_ids"][: len(body["output_ids"])] == body["output_ids"]


def test_rate_slow_holds_the_request_until_it_is_aborted(sim, tokenizer_dirs, background):
    sim.configure(rate_slow=1, slow_seconds=600)
    pending = start_blocked_request(sim, background, {"input_ids": chat_ids(tokenizer_dirs["chatml"])})
    abort(sim, abort_all=True)
    body = pending.result(timeout=60).json()
    assert body["meta_info"]["finish_reason"] == ABORTED
    assert body["output_ids"] == []


def test_fault_decisions_repeat_for_the_same_seed_and_prompts(sim):
    sim.configure(rate_503=0.5)
    prompts = [[1, i] for i in range(40)]

    def outcomes():
        return [generate(sim, {"input_ids": p}).status_code for p in prompts]

    first = outcomes()
    assert {200, 503} <= set(first)
    sim.reset()
    sim.configure(rate_503=0.5)
    assert outcomes() == first


def test_out_of_vocabulary_id_crashes_the_server(tokenizer_dirs):
    with start_sim(tokenizer_dirs["chatml"]) as sim:
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError)):
            generate(sim, {"input_ids": [1, 2048]})
        assert sim.wait_exit() == 1
        assert "IndexError: index out of range in self" in sim.log_text()


# ---------------------------------------------------------------------------------------------
# Other endpoints, auth and the harness


def test_api_key_guards_everything_but_health(tokenizer_dirs):
    with start_sim(tokenizer_dirs["chatml"], "--api-key", "sekrit") as sim:
        payload = {"input_ids": [1, 2]}
        for headers in (None, {"Authorization": "Bearer wrong"}):
            response = generate(sim, payload, headers)
            assert (response.status_code, response.json()) == (401, {"error": "Unauthorized"})
        assert sim.client.get("/v1/models").status_code == 401
        assert generate(sim, payload, {"Authorization": "Bearer sekrit"}).status_code == 200
        for path in ("/health", "/health_generate"):
            response = sim.client.get(path)
            assert (response.status_code, response.content) == (200, b"")


def test_model_info_reports_paths_and_the_0_5_23_key_set(sim, tokenizer_dirs):
    info = sim.client.get("/model_info").json()
    assert sim.client.get("/get_model_info").json() == info
    assert set(info) == {
        "model_path", "served_model_name", "tokenizer_path", "is_generation",
        "preferred_sampling_params", "weight_version", "load_format", "reasoning_parser",
        "tool_call_parser", "disaggregation_mode", "has_image_understanding",
        "has_audio_understanding", "model_type", "architectures",
    }  # fmt: skip
    assert info["tokenizer_path"] == str(tokenizer_dirs["chatml"])
    assert info["preferred_sampling_params"] is None and info["reasoning_parser"] is None


def test_model_info_is_404_on_0_5_14_and_get_model_info_has_the_s14_keys(sim_0_5_14):
    assert sim_0_5_14.client.get("/model_info").status_code == 404
    info = sim_0_5_14.client.get("/get_model_info").json()
    assert set(info) == {
        "model_path", "tokenizer_path", "is_generation", "preferred_sampling_params",
        "weight_version", "has_image_understanding", "has_audio_understanding", "model_type",
        "architectures",
    }  # fmt: skip


def test_tokenizer_path_report_and_served_model_name_are_what_info_endpoints_show(tokenizer_dirs):
    args = ("--tokenizer-path-report", "org/model", "--served-model-name", "tiny")
    with start_sim(tokenizer_dirs["chatml"], *args) as sim:
        info = sim.client.get("/model_info").json()
        models = sim.client.get("/v1/models").json()
    assert (info["model_path"], info["tokenizer_path"], info["served_model_name"]) == (
        "org/model", "org/model", "tiny",
    )  # fmt: skip
    assert models["data"][0]["id"] == "tiny"


def test_v1_models_and_server_info_report_the_context_length(sim):
    card = sim.client.get("/v1/models").json()["data"][0]
    assert card["max_model_len"] == CONTEXT
    assert (card["object"], card["owned_by"]) == ("model", "sglang")
    info = sim.client.get("/server_info").json()
    # As on the real server: context_length is the launch argument (null here), not the model's.
    assert (info["context_length"], info["max_req_input_len"]) == (None, MAX_REQ_INPUT_LEN)
    assert sim.client.get("/get_server_info").json()["version"] == "0.5.23"


def test_flush_cache_answers_200_text(sim):
    response = sim.client.post("/flush_cache")
    assert response.status_code == 200
    assert response.text.startswith("Cache flushed.")


def test_sim_stats_count_requests_outcomes_and_prompts(sim):
    generate(sim, {"input_ids": [1, 2, 3]})
    generate(sim, {"input_ids": [[1, 2, 3], [4, 5]]})
    generate(sim, {"input_ids": []})
    stats = sim.stats()
    assert {key: stats[key] for key in OLD_STATS_KEYS} == {
        "generate_requests": 3,
        "completed": 2,
        "in_flight": 0,
        "by_outcome": {"ok": 2, "http_400": 1},
        "prompt_counts": {prompt_sha1([1, 2, 3]): 2, prompt_sha1([4, 5]): 1},
    }


def test_request_log_gets_one_json_line_per_generate_request(tokenizer_dirs, tmp_path):
    log_file = tmp_path / "requests.jsonl"
    with start_sim(tokenizer_dirs["chatml"], "--request-log", str(log_file)) as sim:
        generate(sim, {"input_ids": [1, 2, 3], "rid": "a"})
        generate(sim, {"input_ids": [1, 2, 3], "sampling_params": {"top_p": 2}})
    lines = [json.loads(line) for line in log_file.read_text().splitlines()]
    assert [(x["prompt_sha1"], x["rid"], x["outcome"]) for x in lines] == [
        ([prompt_sha1([1, 2, 3])], "a", "ok"),
        ([], None, "http_400"),
    ]


def test_concurrent_requests_are_all_answered_and_counted(sim, background):
    prompts = [[1, 2, i] for i in range(32)]
    responses = list(background.map(lambda p: generate(sim, {"input_ids": p}), prompts))
    assert [r.status_code for r in responses] == [200] * 32
    stats = sim.stats()
    assert (stats["completed"], stats["in_flight"], len(stats["prompt_counts"])) == (32, 0, 32)


def test_keep_alive_serves_several_requests_on_one_connection(sim):
    connection = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=60)
    try:
        sockets = []
        for method, path, body in [
            ("POST", "/generate", b'{"input_ids": [1, 2]}'),
            ("GET", "/health", None),
            ("POST", "/generate", b'{"input_ids": []}'),
        ]:
            connection.request(method, path, body=body)
            response = connection.getresponse()
            assert int(response.headers["Content-Length"]) == len(response.read())
            sockets.append(connection.sock)
        assert sockets[0] is not None and sockets.count(sockets[0]) == 3
    finally:
        connection.close()


def test_restart_brings_the_server_back_on_the_same_port(tokenizer_dirs):
    with start_sim(tokenizer_dirs["chatml"]) as sim:
        url, old_pid = sim.url, sim.pid
        sim.restart()
        assert (sim.url, sim.client.get("/health").status_code) == (url, 200)
        assert sim.pid != old_pid


def test_sigterm_stops_the_server_cleanly(tokenizer_dirs):
    sim = start_sim(tokenizer_dirs["chatml"])
    assert sim.stop() == 0
    sim.close()


def test_text_and_input_ids_together_use_the_ids_as_the_real_server_does(sim):
    response = sim.client.post(
        "/generate", json={"text": "ignored", "input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 1}}
    )
    assert response.status_code == 200
    assert response.json()["meta_info"]["prompt_tokens"] == 3


# ---------------------------------------------------------------------------------------------
# Scheduler mode (--max-total-tokens): queue, admission, retraction, step time


def messages_ids(tokenizer_dir: Path, messages: list[dict]) -> list[int]:
    return hf_tokenizer(tokenizer_dir).apply_chat_template(messages, add_generation_prompt=True)["input_ids"]


def queue_while_paused(sim: Sim, pool: ThreadPoolExecutor, payloads: list[dict]) -> list[Future]:
    """Pause the engine, queue ``payloads`` in this order, and return their pending answers."""
    sim.pause()
    futures = []
    for payload in payloads:
        before = sim.stats()["http_in_flight"]
        futures.append(pool.submit(generate, sim, payload))
        wait_until(
            lambda before=before: sim.stats()["waiting"] + sim.stats()["running"] > before or futures[-1].done(),
            what="queued",
        )
        assert not futures[-1].done(), futures[-1].result().text
    return futures


def test_scheduler_runs_at_most_max_running_requests_and_queues_the_rest(tokenizer_dirs, background):
    directory = tokenizer_dirs["chatml"]
    args = ("--max-total-tokens", "4096", "--max-running-requests", "2")
    with start_sim(directory, *args) as sim:
        payloads = [{"input_ids": chat_ids(directory, f"q{i}"), "rid": f"r{i}"} for i in range(4)]
        pending = queue_while_paused(sim, background, payloads)
        loads = sim.client.get("/v1/loads").json()["loads"][0]
        assert (loads["num_running_reqs"], loads["num_waiting_reqs"], loads["max_running_requests"]) == (0, 4, 2)
        sim.resume()
        bodies = [f.result(timeout=60).json() for f in pending]
        stats = sim.stats()
    assert [b["text"] for b in bodies] == [f"Reasoning about: q{i}Answer: q{i}" for i in range(4)]
    assert (stats["mode"], stats["peak_running"], stats["peak_waiting"], stats["retractions"]) == (
        "scheduler", 2, 4, 0,
    )  # fmt: skip
    assert stats["queue_time_max"] > 0 and stats["queue_time_total"] >= stats["queue_time_max"]
    assert stats["tokens_generated"] == sum(len(b["output_ids"]) for b in bodies)
    assert stats["peak_in_flight"] == 4 and stats["busy_time"] > 0
    assert stats["first_request_at"] <= stats["last_finish_at"]


def test_scheduler_retracts_requests_when_the_kv_pool_runs_out_and_still_finishes_them(tokenizer_dirs, background):
    # Pool 200: the first request (10 + 100 reserved) is admitted alone; one step later the
    # running one reserves only 70 % of its rest, so a second fits, and both outgrow the pool.
    directory = tokenizer_dirs["chatml"]
    with start_sim(directory, "--max-total-tokens", "200", "--output-len-dist", "fixed:95") as sim:
        payloads = [
            {"input_ids": [FILLER_ID] * 10, "rid": f"r{i}", "sampling_params": {"max_new_tokens": 100}}
            for i in range(3)
        ]
        pending = queue_while_paused(sim, background, payloads)
        sim.resume()
        bodies = [f.result(timeout=60).json() for f in pending]
        stats = sim.stats()
    retractions = [b["meta_info"]["num_retractions"] for b in bodies]
    assert sum(retractions) == stats["retractions"] > 0
    for body in bodies:
        assert len(body["output_ids"]) == 95
        assert body["meta_info"]["finish_reason"]["type"] == "stop"
    assert stats["peak_running"] >= 2 and stats["tokens_generated"] == 285


def test_scheduler_step_time_grows_with_the_batch(tokenizer_dirs):
    directory = tokenizer_dirs["chatml"]
    args = (
        "--max-total-tokens",
        "4096",
        "--step-time",
        "0.01",
        "--step-time-per-req",
        "0.01",
        "--output-len-dist",
        "fixed:5",
    )
    with start_sim(directory, *args) as sim:
        body = generate(sim, {"input_ids": [1, 2, 3]}).json()
        stats = sim.stats()
    # Five steps of at least 0.01 + 0.01 * 1 seconds each: lower bounds only.
    assert body["meta_info"]["e2e_latency"] >= 0.1
    assert stats["busy_time"] >= 0.1 and stats["decode_steps"] == 5
    # One sequence running: its running time (sequence-seconds) is the busy time.
    assert 0.1 <= stats["running_time"] <= stats["busy_time"] + 0.001


def test_scheduler_abort_in_the_waiting_queue_answers_200_with_the_waiting_queue_reason(tokenizer_dirs, background):
    with start_sim(tokenizer_dirs["chatml"], "--max-total-tokens", "4096") as sim:
        (pending,) = queue_while_paused(sim, background, [{"input_ids": [1, 2, 3], "rid": "w1"}])
        abort(sim, "w1")
        response = pending.result(timeout=60)
        sim.resume()
    assert response.status_code == 200
    body = response.json()
    assert body["meta_info"]["finish_reason"] == {"type": "abort", "message": "Abort in waiting queue"}
    assert body["output_ids"] == []


def test_scheduler_abort_of_a_running_request_returns_partial_output(tokenizer_dirs, background):
    with start_sim(tokenizer_dirs["chatml"], "--max-total-tokens", "4096") as sim:
        sim.configure(token_delay=600)
        pending = start_blocked_request(
            sim, background, {"input_ids": chat_ids(tokenizer_dirs["chatml"]), "rid": "run-1"}
        )
        wait_until(lambda: sim.stats()["running"] == 1, what="running")
        abort(sim, "run-1")
        body = pending.result(timeout=60).json()
    assert body["meta_info"]["finish_reason"] == ABORTED
    assert len(body["output_ids"]) < 5


def test_pause_in_place_holds_a_per_request_generation_until_continue(sim, background):
    sim.pause()
    try:
        pending = start_blocked_request(sim, background, {"input_ids": [1, 2, 3]})
        assert sim.stats()["in_flight"] == 1
    finally:
        sim.resume()
    assert pending.result(timeout=60).status_code == 200


# ---------------------------------------------------------------------------------------------
# /v1/loads, /server_info, /model_info

LOAD_CORE_KEYS = {
    "timestamp", "dp_rank", "num_running_reqs", "num_waiting_reqs", "num_waiting_uncached_tokens",
    "num_used_tokens", "num_total_tokens", "num_active_tokens", "num_prealloc_ready_tokens",
    "max_total_num_tokens", "max_running_requests", "token_usage", "gen_throughput", "cache_hit_rate",
    "utilization", "total_prefill_uncached_tokens", "total_prefill_busy_us", "decode_moments",
}  # fmt: skip


def test_v1_loads_reports_in_flight_requests_as_running_without_the_scheduler(sim, background):
    sim.configure(token_delay=600)
    pending = start_blocked_request(sim, background, {"input_ids": [1, 2, 3]})
    body = sim.client.get("/v1/loads").json()
    abort(sim, abort_all=True)
    pending.result(timeout=60)
    assert set(body) == {"timestamp", "version", "accelerator", "num_accelerators", "loads"}
    (load,) = body["loads"]
    assert set(load) == LOAD_CORE_KEYS | {"memory", "disaggregation", "queues"}
    assert (load["num_running_reqs"], load["num_waiting_reqs"], load["max_total_num_tokens"]) == (1, 0, 65536)
    core = sim.client.get("/v1/loads", params={"include": "core"}).json()["loads"][0]
    assert set(core) == LOAD_CORE_KEYS
    assert sim.client.get("/v1/loads", params={"include": "bogus"}).status_code == 400


def test_v1_loads_is_404_when_the_server_is_started_as_an_older_one(tokenizer_dirs):
    with start_sim(tokenizer_dirs["chatml"], "--no-v1-loads") as sim:
        assert sim.client.get("/v1/loads").status_code == 404


def test_server_info_reports_the_kv_pool_and_the_effective_max_running_requests(tokenizer_dirs):
    args = (
        "--max-total-tokens",
        "1000",
        "--max-running-requests",
        "8",
        "--reasoning-parser",
        "qwen3",
        "--tool-call-parser",
        "qwen25",
        "--weight-version",
        "v7",
    )
    with start_sim(tokenizer_dirs["chatml"], *args) as sim:
        info = sim.client.get("/server_info").json()
        model = sim.client.get("/model_info").json()
        meta = generate(sim, {"input_ids": [1, 2, 3]}).json()["meta_info"]
    assert (info["max_total_num_tokens"], info["max_req_input_len"]) == (1000, 1000 - 1 - 5)
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 8
    assert (info["reasoning_parser"], info["tool_call_parser"]) == ("qwen3", "qwen25")
    assert (model["reasoning_parser"], model["tool_call_parser"], model["weight_version"]) == ("qwen3", "qwen25", "v7")
    assert meta["weight_version"] == "v7"


def test_server_info_parsers_are_null_by_default(sim):
    info = sim.client.get("/server_info").json()
    assert (info["reasoning_parser"], info["tool_call_parser"]) == (None, None)
    assert info["internal_states"][0]["effective_max_running_requests_per_dp"] == 4096


# ---------------------------------------------------------------------------------------------
# Output styles, multi-turn prompts, lengths, reasoning_tokens

KEEP_SPECIAL = {"skip_special_tokens": False}
QWEN_CALL = '<tool_call>\n{"name": "lookup", "arguments": {"query": "hello world"}}\n</tool_call>'
KIMI_CALL = (
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.lookup:0<|tool_call_argument_begin|>"
    '{"query": "hello world"}<|tool_call_end|><|tool_calls_section_end|>'
)
THINK = f"<think>{REASONING}</think>"
HARMONY = (
    f"<|channel|>analysis<|message|>{REASONING}<|end|><|start|>assistant<|channel|>final<|message|>{ANSWER}<|return|>"
)


@pytest.mark.parametrize(
    ("style", "expected"),
    [
        ("think", THINK + ANSWER),
        ("qwen_tool", THINK + QWEN_CALL),
        ("kimi_tool", THINK + KIMI_CALL),
        ("harmony", HARMONY),
    ],
)
def test_output_style_writes_the_documented_text(tokenizer_dirs, style, expected):
    directory = tokenizer_dirs["chatml"]
    with start_sim(directory, "--output-style", style) as sim:
        body = generate(sim, {"input_ids": chat_ids(directory), "sampling_params": KEEP_SPECIAL}).json()
    assert body["text"] == expected
    assert body["output_ids"][-1] == token_id(directory, "<|im_end|>")


def test_tool_styles_answer_a_tool_result_with_text(tokenizer_dirs):
    directory = tokenizer_dirs["chatml"]
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": QWEN_CALL},
        {"role": "tool", "content": " 21 C "},
    ]
    with start_sim(directory, "--output-style", "qwen_tool", "--no-reasoning") as sim:
        body = generate(sim, {"input_ids": messages_ids(directory, messages)}).json()
    assert body["text"] == "Answer: 21 C"


def test_qwen3_tool_response_inside_a_user_turn_is_read_as_the_tool_result(sim, tokenizer_dirs):
    directory = tokenizer_dirs["chatml"]
    messages = [
        {"role": "user", "content": "weather?"},
        {
            "role": "user",
            "content": "<tool_response>\nfirst\n</tool_response>\n<tool_response>\nsunny\n</tool_response>",
        },
    ]
    body = generate(sim, {"input_ids": messages_ids(directory, messages)}).json()
    assert body["text"] == "Reasoning about: sunnyAnswer: sunny"


def test_multi_turn_prompt_is_answered_from_the_last_user_message(sim, tokenizer_dirs):
    directory = tokenizer_dirs["chatml"]
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "Answer: first"},
        {"role": "user", "content": "second"},
    ]
    body = generate(sim, {"input_ids": messages_ids(directory, messages)}).json()
    assert body["text"] == "Reasoning about: secondAnswer: second"


def test_harmony_return_is_the_stop_token_when_the_tokenizer_has_it(tokenizer_dirs, tmp_path):
    # Any HF tokenizer folder works: here one with gpt-oss's <|return|> as a special stop id.
    directory = tmp_path / "harmony"
    shutil.copytree(tokenizer_dirs["chatml"], directory)
    tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
    tokenizer.add_special_tokens(["<|channel|>", "<|message|>", "<|end|>", "<|start|>", "<|return|>"])
    tokenizer.save(str(directory / "tokenizer.json"))
    return_id = tokenizer.token_to_id("<|return|>")
    eos_id = tokenizer.token_to_id("<|im_end|>")
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [return_id, eos_id]}))
    ids = chat_ids(tokenizer_dirs["chatml"])
    with start_sim(directory, "--output-style", "harmony") as sim:
        body = generate(sim, {"input_ids": ids, "sampling_params": KEEP_SPECIAL}).json()
        stripped = generate(sim, {"input_ids": ids}).json()
    assert body["output_ids"][-1] == return_id
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": return_id}
    assert body["text"] == HARMONY.removesuffix("<|return|>")
    assert stripped["text"] == f"analysis{REASONING}assistantfinal{ANSWER}"


@pytest.mark.parametrize(
    ("dist", "low", "high"), [("fixed:7", 7, 7), ("uniform:3-40", 3, 40), ("longtail:3-40", 3, 40)]
)
def test_output_len_dist_sets_a_per_prompt_length_that_repeats(tokenizer_dirs, dist, low, high):
    with start_sim(tokenizer_dirs["chatml"], "--output-len-dist", dist) as sim:
        lengths = [
            [generate(sim, {"input_ids": [1, i]}).json()["meta_info"]["completion_tokens"] for i in range(2, 10)]
            for _ in range(2)
        ]
    assert lengths[0] == lengths[1]
    assert all(low <= n <= high for n in lengths[0])


def test_a_longtail_length_is_mostly_short_with_a_few_many_times_longer():
    dist = parse_length_dist("longtail:16-640")
    lengths = sorted(dist.length(prompt_sha1([1, i])) for i in range(10_000))
    assert lengths[0] >= 16 and lengths[-1] == 640
    assert 22 <= lengths[5_000] <= 29  # median 1.6 x 16
    assert 60 <= sum(n > 21 * 16 for n in lengths) <= 140  # one in a hundred over 21 x LO


def test_reasoning_tokens_count_through_the_think_end_with_require_reasoning(tokenizer_dirs):
    directory = tokenizer_dirs["chatml"]
    with start_sim(directory, "--reasoning-parser", "qwen3") as sim:
        body = generate(sim, {"input_ids": chat_ids(directory), "require_reasoning": True}).json()
        plain = generate(sim, {"input_ids": chat_ids(directory)}).json()
    end = body["output_ids"].index(token_id(directory, "</think>"))
    assert body["meta_info"]["reasoning_tokens"] == end + 1
    assert plain["meta_info"]["reasoning_tokens"] == 0


# ---------------------------------------------------------------------------------------------
# Request log, crashes and restarts, malformed answers, the router's no-workers answer


def test_request_log_records_what_a_200_received_and_returned(tokenizer_dirs, tmp_path):
    log_file = tmp_path / "requests.jsonl"
    directory = tokenizer_dirs["chatml"]
    with start_sim(directory, "--request-log", str(log_file)) as sim:
        body = generate(sim, {"input_ids": chat_ids(directory), "rid": "logged"}).json()
    (line,) = [json.loads(x) for x in log_file.read_text().splitlines()]
    assert line["answers"] == [{
        "rid": "logged", "input_ids": chat_ids(directory), "output_ids": body["output_ids"],
        "text": body["text"], "finish_reason": body["meta_info"]["finish_reason"],
        "prompt_tokens": len(chat_ids(directory)), "cached_tokens": 0,
    }]  # fmt: skip
    assert line["answers"][0]["output_ids"][-1] == token_id(directory, "<|im_end|>")


def test_with_a_prefix_cache_cached_tokens_is_the_longest_prefix_of_earlier_requests_ids_but_the_last(
    tokenizer_dirs,
):
    directory = tokenizer_dirs["chatml"]
    prompt = chat_ids(directory)
    with start_sim(directory) as plain:
        generate(plain, {"input_ids": prompt})
        assert generate(plain, {"input_ids": prompt}).json()["meta_info"]["cached_tokens"] == 0  # no cache: 0
    with start_sim(directory, "--prefix-cache") as sim:
        first = generate(sim, {"input_ids": prompt}).json()
        assert first["meta_info"]["cached_tokens"] == 0
        again = generate(sim, {"input_ids": prompt}).json()["meta_info"]
        assert (again["prompt_tokens"], again["cached_tokens"]) == (len(prompt), len(prompt) - 1)  # one computed
        # A continuation: the prompt and part of the answer, all found, the last id computed.
        more = [*prompt, *first["output_ids"][:5]]
        assert generate(sim, {"input_ids": more}).json()["meta_info"]["cached_tokens"] == len(more) - 1
        # Another ending of the prompt: only the shared start is found.
        other = [*prompt[:4], 7, 8, 9]
        assert generate(sim, {"input_ids": other}).json()["meta_info"]["cached_tokens"] == 4


def test_exit_after_crashes_on_the_nth_request_and_restart_can_bring_another_model(tokenizer_dirs):
    with start_sim(tokenizer_dirs["chatml"], "--exit-after", "2") as sim:
        assert generate(sim, {"input_ids": [1, 2]}).status_code == 200
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError)):
            generate(sim, {"input_ids": [1, 2]})
        assert sim.wait_exit() == 1
        sim.restart("--served-model-name", "other", "--tokenizer-path-report", "org/other")
        info = sim.client.get("/model_info").json()
        assert (info["served_model_name"], info["model_path"]) == ("other", "org/other")
        assert generate(sim, {"input_ids": [1, 2]}).status_code == 200


@pytest.mark.parametrize(
    ("kind", "check"),
    [
        ("finish_reason_list", lambda body: isinstance(body["meta_info"]["finish_reason"], list)),
        ("prompt_tokens_string", lambda body: body["meta_info"]["prompt_tokens"] == "3"),
        ("no_finish_reason", lambda body: "finish_reason" not in body["meta_info"]),
        ("negative_completion_tokens", lambda body: body["meta_info"]["completion_tokens"] < 0),
        ("no_meta_info", lambda body: "meta_info" not in body and "output_ids" in body),
    ],
)
def test_malformed_answers_break_the_documented_field(sim, kind, check):
    sim.configure(malformed=kind)
    assert check(generate(sim, {"input_ids": [1, 2, 3]}).json())


def test_malformed_bad_gzip_claims_gzip_for_a_plain_body(sim):
    sim.configure(malformed="bad_gzip")
    with pytest.raises(httpx.DecodingError):
        generate(sim, {"input_ids": [1, 2, 3]})
    connection = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=60)
    try:
        connection.request("POST", "/generate", body=b'{"input_ids": [1, 2]}')
        response = connection.getresponse()
        assert response.headers["Content-Encoding"] == "gzip"
        assert "meta_info" in json.loads(response.read())
    finally:
        connection.close()


def test_malformed_kind_is_validated_and_can_be_switched_off(sim):
    assert sim.client.post("/sim/config", json={"malformed": "nonsense"}).status_code == 400
    sim.configure(malformed="no_meta_info")
    sim.configure(malformed=None)
    assert "meta_info" in generate(sim, {"input_ids": [1, 2]}).json()


def test_no_workers_answers_like_sglang_router_with_plain_text_503(tokenizer_dirs):
    with start_sim(tokenizer_dirs["chatml"], "--no-workers") as sim:
        response = generate(sim, {"input_ids": [1, 2]})
        sim.configure(no_workers=False)
        recovered = generate(sim, {"input_ids": [1, 2]})
    assert (response.status_code, response.text) == (503, "No available workers (all circuits open or unhealthy)")
    assert response.headers["content-type"].startswith("text/plain")
    assert recovered.status_code == 200


def test_scheduler_keeps_fault_aborts_zero_token_requests_and_batches_working(tokenizer_dirs):
    directory = tokenizer_dirs["chatml"]
    ids = chat_ids(directory)
    with start_sim(directory, "--max-total-tokens", "4096") as sim:
        full = generate(sim, {"input_ids": ids}).json()
        empty = generate(sim, {"input_ids": ids, "sampling_params": {"max_new_tokens": 0}}).json()
        batch = generate(sim, {"input_ids": [ids, ids], "rid": "b"}).json()
        sim.configure(rate_abort=1)
        cut = generate(sim, {"input_ids": ids}).json()
    assert (empty["output_ids"], empty["meta_info"]["finish_reason"]) == ([], {"type": "length", "length": 0})
    assert [item["output_ids"] for item in batch] == [full["output_ids"]] * 2
    assert cut["meta_info"]["finish_reason"] == ABORTED
    assert cut["output_ids"] == full["output_ids"][: len(full["output_ids"]) // 2]
