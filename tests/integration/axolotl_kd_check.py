"""axolotl's own KD code on an axolotl-kd export; run by the real server's venv python (torch, transformers,
and axolotl, pinned in tests/support/demo_trainers.py and on PYTHONPATH), never imported by the tests.

    python axolotl_kd_check.py MODEL_DIR < REQUEST   ->  one JSON line

axolotl's package imports pull in its whole trainer stack (peft, ...), which that venv does not have, so the
two KD pieces are loaded from the installed package's files by path: ``topk_logprob/forward_kl.py`` (only
torch) as a module, and ``ChatTemplateStrategyWithKD.transform_logprobs`` from ``chat_template.py`` (the
method's own code, compiled with torch as its only global).

REQUEST: {"rows": [exported axolotl-kd row, ...], "side": {id: side-file row}}. For each row, with the
tiny model's own logits (the teacher's weights) as the student's:
- ``aligned``: forward_kl.loss on the row as exported;
- ``shifted``: the same with the targets moved one position later (the other alignment);
- ``transform``: transform_logprobs fed the side file's rows in its input form (``token_id:N`` entries, one
  list per scored token); its target_token_ids / target_logprobs at the scored positions are compared
  with the export's one position earlier (``transform_max_diff``, ``transform_ids_equal``), and where its
  target_mask puts ones (``transform_mask_first``).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path

import axolotl
import torch
from transformers import AutoModelForCausalLM

KD = Path(axolotl.__path__[0]) / "integrations" / "kd"


def load_forward_kl():
    spec = importlib.util.spec_from_file_location("axolotl_forward_kl", KD / "topk_logprob" / "forward_kl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_transform():
    tree = ast.parse((KD / "chat_template.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ChatTemplateStrategyWithKD")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "transform_logprobs")
    scope: dict = {"torch": torch}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), str(KD / "chat_template.py"), "exec"), scope)

    class Strategy:
        logprobs_field = "logprobs"
        gen_temperature = 1.0
        kd_temperature = 1.0

    Strategy.transform_logprobs = scope["transform_logprobs"]
    return Strategy()


def main() -> None:
    model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32).eval()
    forward_kl, strategy = load_forward_kl(), load_transform()
    request = json.loads(sys.stdin.read())
    out = []
    for row in request["rows"]:
        ids = torch.tensor([row["input_ids"]])
        with torch.no_grad():
            logits = model(ids).logits.float()
        tids = torch.tensor([row["target_token_ids"]])
        tlps = torch.tensor([row["target_logprobs"]])
        tmask = torch.tensor([row["target_mask"]])
        aligned = forward_kl.loss(logits, tids, tlps, tmask).item()
        shifted = forward_kl.loss(
            logits, torch.roll(tids, 1, dims=1), torch.roll(tlps, 1, dims=1), torch.roll(tmask, 1, dims=1)
        ).item()
        side = request["side"][row["id"]]
        sample = {
            "input_ids": row["input_ids"],
            "labels": row["labels"],
            "logprobs": [
                [{"token": f"token_id:{t}", "logprob": v} for t, v in zip(top_ids, top_lps, strict=True)]
                for top_ids, top_lps in zip(side["topk_ids"], side["topk_logprobs"], strict=True)
            ],
        }
        done = strategy.transform_logprobs(sample)
        start = side["start"]
        theirs_ids = done["target_token_ids"][start:]
        theirs_lps = torch.tensor(done["target_logprobs"][start:])
        ours_ids = row["target_token_ids"][start - 1 : len(row["input_ids"]) - 1]
        ours_lps = torch.tensor(row["target_logprobs"][start - 1 : len(row["input_ids"]) - 1])
        out.append(
            {
                "id": row["id"],
                "aligned": aligned,
                "shifted": shifted,
                "transform_ids_equal": theirs_ids == ours_ids,
                "transform_max_diff": (theirs_lps - ours_lps).abs().max().item(),
                "transform_mask_first": next(i for i, m in enumerate(done["target_mask"]) if m[0]),
                "start": start,
            }
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
