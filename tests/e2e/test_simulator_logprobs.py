"""The simulator's top-k logprobs (sim_logprobs.py) as SGLang 0.5.23 sends them: nested triples with the
leading null, flat, base64; the scoring request (max_new_tokens 0, logprob_start_len); and the error a flat
output-side request gets with stream: true (an HTTP 200 event stream with one error event)."""

from __future__ import annotations

import base64
import json

import numpy as np
import sim_logprobs

PROMPT = [5, 9, 14, 20, 33, 41, 7, 8]


def score(sim, k: int = 4, start: int = 5, **extra) -> dict:
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 0},
        "return_logprob": True,
        "logprob_start_len": start,
        "top_logprobs_num": k,
        **extra,
    }
    response = sim.client.post("/generate", json=body)
    assert response.status_code == 200, response.text
    return response.json()["meta_info"]


def test_scoring_request_gives_one_topk_row_per_token_after_the_start_in_all_three_shapes(make_sim):
    sim = make_sim("chatml")
    nested = score(sim)
    rows = nested["input_top_logprobs"]
    assert rows[0] is None and len(rows) == len(PROMPT) - 5
    assert [t[1] for t in nested["input_token_logprobs"]] == PROMPT[5:]
    assert nested["input_token_logprobs"][0][0] is None
    assert len(nested["output_top_logprobs"]) == 1  # the distribution after the last token
    for row in rows[1:]:
        values = [t[0] for t in row]
        assert values == sorted(values, reverse=True) and len(row) == 4
    flat = score(sim, return_flat_raw_top_logprobs=True)
    assert "input_top_logprobs" not in flat
    assert flat["input_top_logprobs_shape"] == [len(PROMPT) - 6, 4] and flat["input_top_logprobs_null_prefix"] == 1
    assert flat["input_top_logprobs_val_flat"] == [t[0] for row in rows[1:] for t in row]
    assert flat["input_top_logprobs_idx_flat"] == [t[1] for row in rows[1:] for t in row]
    b64 = score(sim, return_flat_raw_top_logprobs=True, return_flat_raw_top_logprobs_b64=True)
    values = np.frombuffer(base64.b64decode(b64["input_top_logprobs_val_flat_b64"]), dtype="<f4")
    ids = np.frombuffer(base64.b64decode(b64["input_top_logprobs_idx_flat_b64"]), dtype="<i4")
    assert ids.tolist() == flat["input_top_logprobs_idx_flat"]
    assert np.allclose(values, flat["input_top_logprobs_val_flat"], atol=1e-6)
    assert b64["input_top_logprobs_val_flat_b64_dtype"] == "float32"


def test_logprobs_are_deterministic_and_the_token_logprob_matches_the_toy_model(make_sim, tokenizers):
    sim = make_sim("chatml")
    vocab_size = json.loads((tokenizers["chatml"] / "config.json").read_text())["vocab_size"]
    first, again = score(sim), score(sim)
    assert first["input_top_logprobs"] == again["input_top_logprobs"]
    for position, entry in zip(range(6, len(PROMPT)), first["input_token_logprobs"][1:], strict=True):
        top = first["input_top_logprobs"][position - 5]
        if entry[1] in [t[1] for t in top]:
            assert entry[0] == next(t[0] for t in top if t[1] == entry[1])
        assert entry[0] <= top[0][0]
    assert first["input_token_logprobs"][1][0] == sim_logprobs.logprob_of(PROMPT, 6, vocab_size)


def test_flat_output_side_with_stream_is_an_error_event_in_a_200_stream(make_sim):
    sim = make_sim("chatml")
    body = {
        "input_ids": PROMPT,
        "sampling_params": {"max_new_tokens": 4},
        "return_logprob": True,
        "top_logprobs_num": 2,
        "return_flat_raw_output_top_logprobs": True,
        "stream": True,
    }
    response = sim.client.post("/generate", json=body)
    assert response.status_code == 200
    events = [line[len("data: ") :] for line in response.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    error = json.loads(events[0])["error"]
    assert error["code"] == 400 and "does not support stream=True" in error["message"]
    assert len(events) == 2


def test_b64_without_a_flat_flag_is_a_400(make_sim):
    sim = make_sim("chatml")
    body = {"input_ids": PROMPT, "return_logprob": True, "return_flat_raw_top_logprobs_b64": True}
    response = sim.client.post("/generate", json=body)
    assert response.status_code == 400
    assert "requires return_flat_raw_top_logprobs" in response.json()["error"]["message"]
