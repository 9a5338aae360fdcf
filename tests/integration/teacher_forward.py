"""A plain forward pass of the tiny model's weights: top-k logprobs at every position; run by the real
server's venv python (torch, transformers), never imported by the tests.

    python teacher_forward.py MODEL_DIR < REQUESTS   ->  one JSON line per request, then exit at EOF

REQUEST: {"ids": [...], "k": K, "gather": {"P": [ids...], ...}}. ANSWER: {"top_ids": [[...K]...],
"top_logprobs": [[...K]...], "gathered": {"P": [logprobs...]}}, one top row per position p = 0..len-1: the
log_softmax of the logits at p (float32 weights as stored, bfloat16 -> float32), i.e. the distribution of the
token at p + 1; ``gathered`` gives the logprobs of the named tokens at the named positions.
"""

from __future__ import annotations

import json
import sys

import torch
from transformers import AutoModelForCausalLM


def main() -> None:
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
    model.eval()
    for line in sys.stdin:
        request = json.loads(line)
        with torch.no_grad():
            logits = model(torch.tensor([request["ids"]])).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        values, ids = logprobs.topk(request["k"], dim=-1)
        gathered = {p: logprobs[int(p)][wanted].tolist() for p, wanted in request.get("gather", {}).items()}
        print(json.dumps({"top_ids": ids.tolist(), "top_logprobs": values.tolist(), "gathered": gathered}), flush=True)


if __name__ == "__main__":
    main()
