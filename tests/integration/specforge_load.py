"""Load exported files with SpecForge's own data code; run by the demo venv's python (torch, specforge).

    python specforge_load.py < REQUESTS   ->  per request: one JSON line per input file, then "done"

One process serves every request it reads (one JSON object a line on stdin), so torch, SpecForge and
speculators are imported once for a whole test module rather than once per load.
REQUEST: {"tokenizer": DIR, "template": NAME, "files": [FILE, ...], "route": bool, "speculators": bool}.
Each file is loaded the way SpecForge's online training loads ``data.prompts_path`` / ``data.train_data_path``
(specforge.data.prompt_builder.prepare_prompt_tasks: pre-tokenized rows as they are, conversation rows
through datasets.load_dataset("json") and build_eagle3_dataset) with ``train_only_last_turn`` true, and the
payloads are printed: {"file", "rows": [{"input_ids", "loss_mask"}, ...]}. With "route", a conversation
file's one row is also rendered by synthgen's render check (SpecForgeRoute) for comparison ("route": {...}).
With "speculators", each (pre-tokenized) file also goes through speculators' data preparation
(build_speculator_training_dataset), its rows in "speculators": [{"input_ids", "loss_mask"}, ...].
"""

from __future__ import annotations

import json
import sys
import warnings

from specforge.data.prompt_builder import prepare_prompt_tasks
from transformers import AutoTokenizer

warnings.simplefilter("ignore")


DONE = "done"


def load(request: dict) -> None:
    tokenizer = AutoTokenizer.from_pretrained(request["tokenizer"])
    route = None
    if request.get("route"):
        from synthgen.export.rendercheck import SpecForgeRoute

        route = SpecForgeRoute(tokenizer, request["template"])
    for path in request["files"]:
        prompts = prepare_prompt_tasks(
            path,
            tokenizer,
            chat_template=request["template"],
            max_length=1 << 20,
            is_preformatted=False,
            train_only_last_turn=True,
            cache_dir=None,
            cache_key=None,
            num_proc=None,
            min_loss_tokens=1,
        )
        out: dict = {"file": path, "rows": [dict(p["payload"]) for p in prompts]}
        if route is not None:
            [row] = [json.loads(line) for line in open(path)]
            rendering = route.render(row)
            out["route"] = {"input_ids": rendering.ids, "loss_mask": rendering.mask}
        if request.get("speculators"):
            from datasets import load_dataset
            from speculators.data_generation.preprocessing import build_speculator_training_dataset

            built = build_speculator_training_dataset(
                load_dataset("json", data_files=path, split="train"), tokenizer, max_length=1 << 20, num_proc=1
            )
            out["speculators"] = [
                {"input_ids": r["input_ids"].tolist(), "loss_mask": r["loss_mask"].tolist()} for r in built
            ]
        print(json.dumps(out), flush=True)


def main() -> None:
    for line in sys.stdin:
        load(json.loads(line))
        print(DONE, flush=True)


if __name__ == "__main__":
    main()
