"""run_inference.py through the real sglang-router (0.3.2, round robin) in front of two real
SGLang servers: what the runner sends must survive the router, which re-serializes a typed
request (a single `text` or `input_ids`; sampling keys it does not model are dropped).
"""

from __future__ import annotations

import pytest
from workspace import Workspace

from tests.integration import realserver

pytestmark = [pytest.mark.router, pytest.mark.real_sglang]


def chat_ids(tokenizer, content: str) -> list[int]:
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_a_partition_runs_through_the_router_with_every_sampling_key_intact(ws: Workspace, real_router, real_tokenizer):
    router, a, b = real_router
    alpha = ws.dataset("short", "alpha", 8)
    beta = ws.dataset("short", "beta", 6)
    marks = a.mark(), b.mark()

    result = ws.run(
        "--server-url", router.url, "--temperature", "0", "--top-k", "1", "--max-tokens", "16", "--concurrency", "4"
    )
    assert result.returncode == 0, result.stderr
    # The router answers /model_info with 404; the runner falls back to /get_model_info, which
    # it proxies to a worker.
    model = str(realserver.model_dir())
    assert f"model {model}; tokenizer {model}; context " in result.stderr

    rows = ws.assert_exactly_once("alpha", alpha) + ws.assert_exactly_once("beta", beta)
    per_worker = a.generate_requests(marks[0]), b.generate_requests(marks[1])
    assert sum(per_worker) == len(rows) and min(per_worker) > 0, per_worker  # round robin: both did work

    sent = {"max_new_tokens": 16, "skip_special_tokens": False, "temperature": 0.0, "top_k": 1}
    for row in rows:
        assert row["sampling_params"] == sent
        # Asked directly, a worker gives the same greedy answer. Had the router dropped
        # temperature or max_new_tokens, the worker's defaults (temperature 1, 128 tokens)
        # would have produced another text.
        ids = chat_ids(real_tokenizer, row["messages"][0]["content"])
        direct = a.post("/generate", {"input_ids": ids, "sampling_params": sent})
        assert direct.status_code == 200, direct.text
        answer = direct.json()
        assert row["output_text"] == answer["text"]
        assert row["finish_detail"] == answer["meta_info"]["finish_reason"]
        assert row["completion_tokens"] == answer["meta_info"]["completion_tokens"]
        assert row["prompt_tokens"] == len(ids)


def test_through_the_router_max_new_tokens_is_still_fitted_to_the_context(ws: Workspace, real_router, real_tokenizer):
    router, _, _ = real_router
    text = "~" * 1990  # one token per "~": about 2000 tokens, leaving less room than --max-tokens
    n = len(chat_ids(real_tokenizer, text))
    ws.dataset("short", "d", [{"id": "near-limit", "prompt": text}])
    result = ws.run("--server-url", router.url, "--max-tokens", "100")
    assert result.returncode == 0, result.stderr
    (row,) = ws.assert_exactly_once("d", ["near-limit"])
    assert row["sampling_params"]["max_new_tokens"] == 2048 - n - 1


def test_the_router_drops_unknown_sampling_keys_and_refuses_batched_text(real_router):
    # Why the runner sends one prompt per request as input_ids, with only keys both understand:
    # an unknown key is refused by SGLang but silently lost behind the router, and a list of
    # texts (SGLang's batch form) does not get through the router at all.
    router, a, _ = real_router
    body = {"input_ids": [1, 300, 301], "sampling_params": {"max_new_tokens": 4, "bogus_param": 1}}

    worker = a.post("/generate", body)
    assert worker.status_code == 400
    assert worker.json()["error"].startswith("unknown field `bogus_param`, expected one of `max_new_tokens`")
    routed = router.post("/generate", body)
    assert routed.status_code == 200, routed.text
    assert routed.json()["meta_info"]["completion_tokens"] == 4

    batch = {"text": ["one", "two"], "sampling_params": {"max_new_tokens": 4}}
    assert a.post("/generate", batch).status_code == 200
    refused = router.post("/generate", batch)
    assert refused.status_code == 422
    assert "text: invalid type: sequence, expected a string" in refused.text
