"""The simulator's generation: one request's tokens over time, in either engine, and its answer items."""

from __future__ import annotations

import time

import sim_logprobs
from sim_config import ABORTED, ABORTED_WAITING, Faults, Settings
from sim_model import FakeModel
from sim_requests import Sequence
from sim_state import Job, Plan, SimState
from sim_streaming import Watch


def run_generation(
    job: Job, model: FakeModel, plan: Plan, faults: Faults, state: SimState, watch: Watch | None = None
) -> None:
    """Produce every sequence's output, one token per step, honouring delays and aborts.

    The sequences of a request advance in lockstep, as they would in one scheduler batch.
    Waits are on the job's wake event, so /abort_request cuts a slow or delayed request short.
    While /pause_generation holds the engine, requests stop between tokens. A ``watch`` sends a
    streamed request's chunks as tokens pass and aborts the request once its client is gone.
    """
    for seq in job.sequences:
        seq.planned = model.planned(seq)
    if plan.slow:
        job.wake.wait(faults.slow_seconds)
    produced = 0
    pending = list(job.sequences)
    while pending:
        still_running = []
        for seq in pending:
            target = seq.target
            fault_abort = plan.outcome == "abort" and produced >= target // 2
            if seq.aborted or fault_abort:
                seq.aborted = True
                seq.planned = seq.planned[:produced]
            elif produced >= target:
                seq.planned = seq.planned[:target]
            else:
                still_running.append(seq)
        pending = still_running
        while pending and state.is_paused() and not any(seq.aborted for seq in pending):
            job.wake.wait()
            job.wake.clear()
        if pending and faults.token_delay > 0:
            # One wait through the tokens up to the next event (a sequence's end, or the abort
            # fault's half-way point), not one per token: at 1,000 requests in flight, per-token
            # wake-ups would make the simulator, not the client, the bottleneck. An abort or a
            # pause wakes it early; the tokens produced are those whose time has begun, as before.
            ends = [seq.target for seq in pending]
            if plan.outcome == "abort":
                ends += [seq.target // 2 for seq in pending]
            due = watch.due() if watch else None
            if due is not None:
                ends.append(due)
            steps = max(1, min((end for end in ends if end > produced), default=produced + 1) - produced)
            produced += wait_tokens(job, steps, faults.token_delay, watch)
        elif pending:
            produced += 1
        if watch and pending and not watch.step(min(produced, min(seq.target for seq in pending) - 1)):
            for seq in pending:
                seq.aborted = True


def wait_tokens(job: Job, steps: int, delay: float, watch: Watch | None) -> int:
    """Wait out ``steps`` tokens of ``delay`` seconds; returns how many began. An abort or a pause
    wakes it early, and so does a client gone (looked at every ``watch.poll`` seconds)."""
    began = time.monotonic()
    deadline = began + steps * delay
    while (remaining := deadline - time.monotonic()) > 0:
        if job.wake.wait(min(remaining, watch.poll) if watch else remaining):
            job.wake.clear()
            break
        if watch and not watch.check():
            break
    else:
        return steps
    return min(steps, 1 + int((time.monotonic() - began) / delay))


def response_item(
    seq: Sequence, model: FakeModel, settings: Settings, started: float, count: int | None = None
) -> dict:
    """The answer item of a finished sequence, or with ``count`` a streamed chunk's: the first
    ``count`` output ids, no finish reason yet."""
    output = seq.planned if count is None else seq.planned[:count]
    text_ids = output
    if seq.aborted_waiting and count is None:
        # The tokenizer manager answers a waiting-queue abort itself, with fewer meta_info keys.
        return {
            "text": model.decode(output, skip_special_tokens=seq.skip_special_tokens),
            "output_ids": output,
            "meta_info": {
                "id": seq.rid,
                "finish_reason": dict(ABORTED_WAITING),
                "weight_version": settings.weight_version,
                "e2e_latency": time.monotonic() - started,
                "completion_tokens": len(output),
            },
        }
    finish: dict[str, str | int | None] | None
    if count is not None:
        finish = None
    elif seq.aborted:
        finish = dict(ABORTED)
    elif len(output) >= seq.max_new_tokens:
        # SGLang checks the length limit before EOS, so an EOS landing on the last allowed token
        # still reports "length" and stays in the text.
        finish = {"type": "length", "length": seq.max_new_tokens}
    else:
        finish = {"type": "stop", "matched": output[-1]}
        text_ids = output[:-1]
    meta = {
        "id": seq.rid,
        "finish_reason": finish,
        "prompt_tokens": len(seq.input_ids),
        "weight_version": settings.weight_version,
        "num_retractions": seq.retractions,
    }
    if settings.version == "0.5.23":
        meta["reasoning_tokens"] = model.reasoning_tokens(output) if seq.require_reasoning else 0
    meta |= {
        "completion_tokens": len(output),
        "cached_tokens": seq.cached,
    }
    if settings.version == "0.5.23":
        # Seen in the real 0.5.23 server's answers (CPU run), though not in the source notes.
        meta |= {
            "weight_versions": [{"version": settings.weight_version, "start": 0, "end": len(output)}],
            "cached_tokens_details": None,
            "dp_rank": None,
        }
    if seq.logprobs is not None and count is None:
        meta |= sim_logprobs.meta_fields(seq.logprobs, seq.input_ids, output, settings.max_vocab)
    meta |= {
        "e2e_latency": time.monotonic() - started,
        "response_sent_to_client_ts": time.time(),
    }
    return {
        "text": model.decode(text_ids, skip_special_tokens=seq.skip_special_tokens),
        "output_ids": output,
        "meta_info": meta,
    }


SHED_CODE = "admission_queue_full"


def malform(item: dict, kind: str) -> dict:
    """Break one /generate answer item the way ``kind`` says (see MALFORMED_KINDS)."""
    meta = item.get("meta_info", {})
    if kind == "finish_reason_list":
        meta["finish_reason"] = [meta.get("finish_reason")]
    elif kind == "prompt_tokens_string":
        meta["prompt_tokens"] = str(meta.get("prompt_tokens"))
    elif kind == "no_finish_reason":
        meta.pop("finish_reason", None)
    elif kind == "negative_completion_tokens":
        meta["completion_tokens"] = -max(1, len(item["output_ids"]))
    elif kind == "no_meta_info":
        item.pop("meta_info", None)
    return item
