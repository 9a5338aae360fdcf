"""The simulator's scheduler mode: continuous batching with a KV pool, as SGLang's scheduler does it."""

from __future__ import annotations

import threading
import time
from collections import deque

from sim_config import (
    CLIP_MAX_NEW_TOKENS,
    INIT_NEW_TOKEN_RATIO,
    MIN_NEW_TOKEN_RATIO,
    NEW_TOKEN_RATIO_DECAY,
    RETRACT_DECODE_STEPS,
    SchedulerConfig,
    log,
)
from sim_requests import Sequence
from sim_state import BusyClock, CountClock, Job, SimState, Throughput
from sim_streaming import Watch


class Scheduler:
    """SGLang's continuous batching, reduced to what matters for a client's concurrency control.

    One thread loops over steps. Each step:

    1. drops aborted requests (running ones answer ``Aborted`` with their partial output, waiting
       ones ``Abort in waiting queue``) and those the rate_abort fault ends;
    2. admits waiting requests in FCFS order, stopping at the first that does not fit
       (head-of-line blocking, as SGLang's PrefillAdder): at most ``max_running_requests`` run,
       and a request is admitted only if ``prompt + produced + min(max_new - produced, 4096)``
       is below the pool's free tokens minus what running requests hold in reserve, which is
       ``min(max_new - produced, 4096) * new_token_ratio`` each, while a request admitted in the
       same step reserves its whole clipped estimate;
    3. retracts running requests while the pool cannot hold one more token for each (fewest
       output tokens first, longest prompt among equals, always keeping one), sending them back
       to the end of the waiting queue with their output kept (re-admission needs prompt +
       output tokens) and resetting new_token_ratio from the remaining requests, as SGLang does;
    4. waits ``step_time + step_time_per_req * batch + prefill_time_per_token * admitted prompt
       tokens + token_delay`` (an abort cuts the wait short), then gives every running request
       one token and finishes those at their stop id or max_new_tokens.

    new_token_ratio starts at 0.7, decays to 0.098 over 600 steps without retraction and resets
    when the server goes idle (SGLang's defaults). Simplifications: page size 1, no prefix cache
    (``cached_tokens`` stays 0), no chunked prefill or prefill token budget, and the prefill of
    an admitted request shares its step with the decode of the others.
    """

    def __init__(self, config: SchedulerConfig, state: SimState):
        self.config = config
        self.state = state
        self.cond = threading.Condition()
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.used = 0  # KV tokens held by running requests
        self.ratio = INIT_NEW_TOKEN_RATIO
        self.paused = False
        self.abort_pending = False
        self.busy_clock = BusyClock()
        self.running_clock = CountClock()
        self.throughput = Throughput()
        self._zero_stats()

    def _zero_stats(self) -> None:
        self.retractions = 0
        self.decode_steps = 0
        self.tokens_decoded = 0  # every token a decode step made, answered or not (bench/bench_waste.py)
        self.queue_time_total = 0.0
        self.queue_time_max = 0.0
        self.peak_running = len(self.running)
        self.peak_waiting = len(self.waiting)
        self.busy_clock.reset(time.monotonic())
        self.running_clock.reset(time.monotonic())

    def reset_stats(self) -> None:
        with self.cond:
            self._zero_stats()

    def start(self) -> None:
        threading.Thread(target=self._loop, name="scheduler", daemon=True).start()

    # -- called from handler threads

    def run_job(self, job: Job, abort_at_half: bool, watch: Watch | None = None) -> None:
        """Queue the job's sequences and block until every one has finished; with a ``watch``,
        its chunks go out as the steps pass and a client gone aborts the job."""
        now = time.monotonic()
        with self.cond:
            for seq in job.sequences:
                seq.job = job
                if abort_at_half:
                    seq.abort_at = seq.target // 2
                if seq.aborted:  # aborted while a slow fault held it back
                    seq.planned = []
                    continue
                seq.enqueued_at = now
                job.unfinished += 1
                self.waiting.append(seq)
            self.peak_waiting = max(self.peak_waiting, len(self.waiting))
            if job.unfinished == 0:
                job.done.set()
            self.cond.notify()
        if watch is None:
            job.done.wait()
            return
        while not job.done.is_set():
            job.due = watch.due() or 1
            job.advanced.wait(watch.poll)
            job.advanced.clear()
            if not job.done.is_set() and not watch.step(job.sequences[0].produced):
                for seq in job.sequences:
                    seq.aborted = True
                self.notice_aborts()
                job.done.wait()

    def notice_aborts(self) -> None:
        with self.cond:
            self.abort_pending = True
            self.cond.notify()

    def pause(self, mode: str) -> None:
        with self.cond:
            self.paused = True
            if mode == "retract":
                now = time.monotonic()
                for seq in sorted(self.running, key=lambda s: s.enqueued_at):
                    self._retract_locked(seq, now)
                self.running = []
                self._after_change_locked(now)
        if mode == "abort":
            self.state.abort("", True)

    def resume(self) -> None:
        with self.cond:
            self.paused = False
            self.cond.notify()

    def stats(self) -> dict:
        now = time.monotonic()
        with self.cond:
            return {
                "running": len(self.running),
                "waiting": len(self.waiting),
                "peak_running": self.peak_running,
                "peak_waiting": self.peak_waiting,
                "busy_time": self.busy_clock.read(now),
                "running_time": self.running_clock.read(now),
                "queue_time_total": self.queue_time_total,
                "queue_time_max": self.queue_time_max,
                "retractions": self.retractions,
                "decode_steps": self.decode_steps,
                "tokens_decoded": self.tokens_decoded,
                "token_usage": round(self.used / self.config.max_total_tokens, 4),
            }

    def load(self) -> dict:
        """The scheduler's part of a /v1/loads entry."""
        now = time.monotonic()
        with self.cond:
            waiting_tokens = sum(len(s.input_ids) + s.produced for s in self.waiting)
            return {
                "num_running_reqs": len(self.running),
                "num_waiting_reqs": len(self.waiting),
                "num_waiting_uncached_tokens": waiting_tokens,
                "num_used_tokens": self.used,
                "num_total_tokens": self.used + waiting_tokens,
                "num_active_tokens": self.used + waiting_tokens,
                "token_usage": round(self.used / self.config.max_total_tokens, 4),
                "gen_throughput": round(self.throughput.rate(now), 2),
                "retracted": sum(1 for s in self.waiting if s.retractions),
            }

    # -- the scheduler thread

    def _loop(self) -> None:
        while True:
            with self.cond:
                while self.paused or not (self.running or self.waiting):
                    self._drop_aborted_locked(time.monotonic())
                    if not (self.running or self.waiting):
                        self.ratio = INIT_NEW_TOKEN_RATIO
                    self.cond.wait()
                now = time.monotonic()
                self._drop_aborted_locked(now)
                admitted_tokens = self._admit_locked(now)
                self._retract_for_decode_locked(now)
                faults = self.state.current_faults()
                config = self.config
                step = (
                    config.step_time
                    + config.step_time_per_req * len(self.running)
                    + config.prefill_time_per_token * admitted_tokens
                    + faults.token_delay
                )
                deadline = now + step
                while self.running and not self.paused:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self.cond.wait(remaining)
                    self._drop_aborted_locked(time.monotonic())
                if not self.paused:
                    self._decode_locked(time.monotonic())
            if step <= 0:
                time.sleep(0)  # let handler threads take the lock between zero-time steps

    def _drop_aborted_locked(self, now: float) -> None:
        for seq in [s for s in self.running if s.aborted or (s.abort_at is not None and s.produced >= s.abort_at)]:
            seq.aborted = True
            self.running.remove(seq)
            self.used -= len(seq.input_ids) + seq.produced
            self._finish_locked(seq)
        if self.abort_pending:
            self.abort_pending = False
            aborted = [s for s in self.waiting if s.aborted]
            if aborted:
                self.waiting = deque(s for s in self.waiting if not s.aborted)
                for seq in aborted:
                    seq.aborted_waiting = True
                    self._account_queue_time(seq, now)
                    self._finish_locked(seq)
        self._after_change_locked(now)

    def _admit_locked(self, now: float) -> int:
        config = self.config
        reserved = sum(min(s.max_new_tokens - s.produced, CLIP_MAX_NEW_TOKENS) for s in self.running) * self.ratio
        free = config.max_total_tokens - self.used - reserved
        admitted_tokens = 0
        while self.waiting and len(self.running) < config.max_running_requests:
            seq = self.waiting[0]
            held = len(seq.input_ids) + seq.produced
            need = held + min(seq.max_new_tokens - seq.produced, CLIP_MAX_NEW_TOKENS)
            if need >= free:
                break
            free -= need
            self.waiting.popleft()
            self._account_queue_time(seq, now)
            if seq.target <= seq.produced or seq.abort_at == 0:
                # max_new_tokens 0 (n>1 warm-up) or a fault abort before the first token.
                seq.aborted = seq.aborted or seq.abort_at == 0
                self._finish_locked(seq)
                continue
            self.running.append(seq)
            self.used += held
            admitted_tokens += held
        self._after_change_locked(now)
        return admitted_tokens

    def _retract_for_decode_locked(self, now: float) -> None:
        if self.used + len(self.running) <= self.config.max_total_tokens:
            return
        # SGLang retracts from the end of this order: fewest output tokens, then longest prompt.
        order = sorted(self.running, key=lambda s: (s.produced, -len(s.input_ids)), reverse=True)
        while len(order) > 1 and self.used + len(order) > self.config.max_total_tokens:
            self._retract_locked(order.pop(), now)
        self.running = [s for s in self.running if s in order]
        decoded = sum(s.produced for s in self.running)
        wanted = sum(s.max_new_tokens for s in self.running)
        self.ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / (wanted + 1))
        self._after_change_locked(now)

    def _retract_locked(self, seq: Sequence, now: float) -> None:
        self.used -= len(seq.input_ids) + seq.produced
        seq.retractions += 1
        seq.enqueued_at = now
        self.retractions += 1
        self.waiting.append(seq)
        log.info("retracted %s after %d tokens", seq.rid, seq.produced)

    def _decode_locked(self, now: float) -> None:
        if not self.running:
            return
        self.decode_steps += 1
        self.tokens_decoded += len(self.running)
        self.ratio = max(self.ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
        self.used += len(self.running)
        self.throughput.add(now, len(self.running))
        still_running = []
        for seq in self.running:
            seq.produced += 1
            if seq.job is not None and seq.job.streamed and seq.produced >= seq.job.due:
                seq.job.advanced.set()
            if seq.abort_at is not None and seq.produced >= seq.abort_at:
                seq.aborted = True
            if seq.aborted or seq.produced >= seq.target:
                self.used -= len(seq.input_ids) + seq.produced
                self._finish_locked(seq)
            else:
                still_running.append(seq)
        self.running = still_running
        self._after_change_locked(now)

    def _finish_locked(self, seq: Sequence) -> None:
        seq.planned = seq.planned[: seq.produced]
        job = seq.job
        assert job is not None
        job.unfinished -= 1
        if job.unfinished == 0:
            job.done.set()
            job.advanced.set()

    def _account_queue_time(self, seq: Sequence, now: float) -> None:
        waited = now - seq.enqueued_at
        seq.queue_time += waited
        self.queue_time_total += waited
        self.queue_time_max = max(self.queue_time_max, seq.queue_time)

    def _after_change_locked(self, now: float) -> None:
        self.peak_running = max(self.peak_running, len(self.running))
        self.peak_waiting = max(self.peak_waiting, len(self.waiting))
        self.busy_clock.update(bool(self.running), now)
        self.running_clock.update(len(self.running), now)
