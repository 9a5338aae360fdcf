"""The simulator's HTTP side: the server, the request handler, the /generate payload handling and the routes."""

from __future__ import annotations

import hmac
import json
import os
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs

from sim_config import (
    AUTH_EXEMPT_PREFIXES,
    INTERNAL_SERVER_ERROR,
    NO_WORKERS_TEXT,
    PAUSE_MODES,
    QUEUE_FULL_BODY,
    Faults,
    HttpError,
    Settings,
    log,
    value_error,
)
from sim_generation import SHED_CODE, malform, response_item, run_generation
from sim_model import FakeModel
from sim_requests import parse_generate
from sim_scheduler import Scheduler
from sim_state import Job, SimState
from sim_streaming import STREAM_POLL, ChunkStream, Watch

# generate()'s body when it has written a streamed answer itself.
STREAMED = object()


def is_value_error(error: HttpError) -> bool:
    """A 400 of SGLang's ValueError shape (``value_error``), not the request contract's."""
    body = error.body
    return error.status == 400 and isinstance(body, dict) and isinstance(body.get("error"), dict)


def logged_answers(job: Job, items: list[dict]) -> list[dict]:
    """What ``--request-log`` keeps of a 200 answer, one entry per sequence."""
    return [
        {
            "rid": seq.rid,
            "input_ids": seq.input_ids,
            "output_ids": item["output_ids"],
            "text": item["text"],
            "finish_reason": item["meta_info"]["finish_reason"],
            "prompt_tokens": item["meta_info"].get("prompt_tokens"),
            "cached_tokens": item["meta_info"].get("cached_tokens"),
        }
        for seq, item in zip(job.sequences, items, strict=True)
    ]


class DropConnection(Exception):
    """Close the socket without answering (simulates a worker or proxy dying mid-request)."""


class SimServer(ThreadingHTTPServer):
    daemon_threads = True
    # Many concurrent clients connect at once; the default backlog of 5 would refuse some.
    request_queue_size = 1024

    def __init__(self, address, settings: Settings, faults: Faults, model: FakeModel):
        super().__init__(address, SimHandler)
        self.settings = settings
        self.state = SimState(settings, faults)
        self.model = model
        self.started = time.time()
        self.scheduler: Scheduler | None = None
        if settings.scheduler:
            self.scheduler = self.state.scheduler = Scheduler(settings.scheduler, self.state)
            self.scheduler.start()


class SimHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, the client's delayed ACK would add
    # ~40 ms to every response on a kept-alive connection.
    disable_nagle_algorithm = True
    server: SimServer

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def log_message(self, fmt, *args):
        log.info("%s %s", self.address_string(), fmt % args)

    # -- plumbing

    def _dispatch(self, method: str) -> None:
        path, _, query = self.path.partition("?")
        self.query = {key: values[-1] for key, values in parse_qs(query).items()}
        self.extra_headers: dict[str, str] = {}
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            status, body = self._route(method, path, raw)
        except HttpError as error:
            status, body = error.status, error.body
        except DropConnection:
            self.close_connection = True
            return
        except Exception:
            log.exception("unhandled error on %s %s", method, path)
            status, body = INTERNAL_SERVER_ERROR.status, INTERNAL_SERVER_ERROR.body
        if body is STREAMED:
            return
        try:
            self._send(status, body)
        except ConnectionError:
            # The client gave up (its own timeout, say) before the answer was ready.
            log.info("client went away before the %s %s answer", method, path)
            self.close_connection = True

    def _route(self, method: str, path: str, raw: bytes):
        # SGLang's auth middleware runs before routing, so even unknown paths answer 401.
        if not self._authorized(path):
            raise HttpError(401, {"error": "Unauthorized"})
        routes = ROUTES.get(path)
        if routes is None or (path in VERSION_GATED and self.server.settings.version != "0.5.23"):
            raise HttpError(404, {"detail": "Not Found"})
        handler = routes.get(method)
        if handler is None:
            raise HttpError(405, {"detail": "Method Not Allowed"})
        return handler(self, raw)

    def _authorized(self, path: str) -> bool:
        key = self.server.settings.api_key
        if key is None or path.startswith(AUTH_EXEMPT_PREFIXES):
            return True
        given = self.headers.get("Authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {key}".encode())

    def _send(self, status: int, body) -> None:
        """Send a whole response: None is an empty body, a str plain text, anything else JSON."""
        if body is None:
            payload, content_type = b"", None
        elif isinstance(body, str):
            payload, content_type = body.encode(), "text/plain; charset=utf-8"
        else:
            payload = json.dumps(body, separators=(",", ":")).encode()
            content_type = "application/json"
        self.send_response(status)
        if content_type:
            self.send_header("Content-Type", content_type)
        for name, value in self.extra_headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    @staticmethod
    def _json(raw: bytes):
        try:
            return json.loads(raw or b"{}")
        except ValueError as exc:
            # FastAPI's binding-error shape; the exact message is not SGLang's.
            raise HttpError(
                400,
                {
                    "object": "error",
                    "message": f"Invalid JSON body: {exc}",
                    "type": "Bad Request",
                    "param": None,
                    "code": 400,
                },
            ) from exc

    # -- SGLang endpoints

    def health(self, raw):
        return 200, None

    def model_info(self, raw):
        s = self.server.settings
        info = {
            "model_path": s.model_path,
            "served_model_name": s.served_model_name,
            "tokenizer_path": s.tokenizer_path or s.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": s.weight_version,
            "load_format": "auto",
            "reasoning_parser": s.reasoning_parser,
            "tool_call_parser": s.tool_call_parser,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": s.model_type,
            "architectures": ["Qwen2ForCausalLM"],
        }
        if s.version == "0.5.14":
            info = {key: info[key] for key in S14_MODEL_INFO_KEYS}
        return 200, info

    def server_info(self, raw):
        s = self.server.settings
        args = {
            "model_path": s.model_path,
            "tokenizer_path": s.tokenizer_path or s.model_path,
            "served_model_name": s.served_model_name,
            # The launch argument, not the model's length: null unless --context-length was given
            # (as the real server reports); clients read the length from /v1/models.
            "context_length": None,
            "tp_size": 1,
            "dp_size": 1,
            "max_running_requests": s.max_running_requests,
            "max_queued_requests": None,
            "max_total_tokens": s.scheduler.max_total_tokens if s.scheduler else None,
            "page_size": 1,
            "schedule_policy": "fcfs",
            "schedule_conservativeness": 1.0,
            "reasoning_parser": s.reasoning_parser,
            "tool_call_parser": s.tool_call_parser,
            "weight_version": s.weight_version,
        }
        internal_state = {
            **args,
            "world_size": 1,
            "startup_time": self.server.started,
            "effective_max_running_requests_per_dp": s.max_running_requests,
            "last_gen_throughput": self._gen_throughput(),
        }
        return 200, {
            **args,
            "max_total_num_tokens": s.kv_pool_tokens,
            "max_req_input_len": s.max_req_input_len,
            "startup_time": self.server.started,
            "internal_states": [internal_state],
            "version": s.version,
            "frontend": "python",
        }

    def _gen_throughput(self) -> float:
        if self.server.scheduler:
            return self.server.scheduler.load()["gen_throughput"]
        state = self.server.state
        with state.lock:
            return round(state.throughput.rate(time.monotonic()), 2)

    def loads(self, raw):
        """GET /v1/loads as 0.5.23's v1_loads.py answers it for one DP rank on a CPU."""
        s = self.server.settings
        if not s.v1_loads:
            raise HttpError(404, {"detail": "Not Found"})
        include = self.query.get("include")
        sections = {part.strip() for part in include.split(",")} if include else None
        valid = {"core", "memory", "spec", "lora", "disagg", "queues", "all"}
        if sections is not None and not sections <= valid:
            raise HttpError(
                400,
                {"detail": f"Invalid include sections: {sections - valid}. Valid options: {sorted(valid)}"},
            )
        dp_rank = self.query.get("dp_rank")
        loads = [] if dp_rank not in (None, "0") else [self._load(sections)]
        return 200, {
            "timestamp": datetime.now(UTC).isoformat(),
            "version": s.version,
            "accelerator": None,
            "num_accelerators": 1,
            "loads": loads,
        }

    def _load(self, sections: set[str] | None) -> dict:
        s = self.server.settings
        if self.server.scheduler:
            current = self.server.scheduler.load()
        else:
            # The per-thread engine has no queue: everything in flight is running.
            running = self.server.state.running_sequences()
            used = sum(len(seq.input_ids) for seq in running)
            current = {
                "num_running_reqs": len(running),
                "num_waiting_reqs": 0,
                "num_waiting_uncached_tokens": 0,
                "num_used_tokens": used,
                "num_total_tokens": used,
                "num_active_tokens": used,
                "token_usage": round(used / s.kv_pool_tokens, 4),
                "gen_throughput": self._gen_throughput(),
                "retracted": 0,
            }
        load = {
            "timestamp": time.time(),
            "dp_rank": 0,
            "num_running_reqs": current["num_running_reqs"],
            "num_waiting_reqs": current["num_waiting_reqs"],
            "num_waiting_uncached_tokens": current["num_waiting_uncached_tokens"],
            "num_used_tokens": current["num_used_tokens"],
            "num_total_tokens": current["num_total_tokens"],
            "num_active_tokens": current["num_active_tokens"],
            "num_prealloc_ready_tokens": 0,
            "max_total_num_tokens": s.kv_pool_tokens,
            "max_running_requests": s.max_running_requests,
            "token_usage": current["token_usage"],
            "gen_throughput": current["gen_throughput"],
            "cache_hit_rate": 0.0,
            # 0.5.23 never sets max_running_requests_under_SLO, so its utilization stays 0.
            "utilization": 0.0,
            "total_prefill_uncached_tokens": 0,
            "total_prefill_busy_us": 0,
            "decode_moments": None,
        }
        if sections == {"core"}:
            return load
        chosen = sections or {"all"}
        every = "all" in chosen
        if every or "memory" in chosen:
            load["memory"] = {"weight_gb": 0.0, "kv_cache_gb": 0.0, "graph_gb": 0.0, "token_capacity": s.kv_pool_tokens}
        if every or "disagg" in chosen:
            load["disaggregation"] = {
                "mode": "null", "prefill_bootstrap_queue_reqs": 0, "prefill_inflight_queue_reqs": 0,
                "decode_prealloc_queue_reqs": 0, "decode_transfer_queue_reqs": 0,
                "decode_retracted_queue_reqs": 0, "kv_transfer_speed_gb_s": 0.0, "kv_transfer_latency_ms": 0.0,
            }  # fmt: skip
        if every or "queues" in chosen:
            load["queues"] = {
                "waiting": current["num_waiting_reqs"], "grammar": 0, "paused": 0,
                "retracted": current["retracted"], "prealloc_ready": 0,
            }  # fmt: skip
        return load

    def models(self, raw):
        s = self.server.settings
        card = {
            "id": s.served_model_name,
            "object": "model",
            "created": int(self.server.started),
            "owned_by": "sglang",
            "root": s.served_model_name,
            "parent": None,
            "max_model_len": s.context_length,
        }
        return 200, {"object": "list", "data": [card]}

    def flush_cache(self, raw):
        # Same text either way; the status says whether it happened (not with requests running).
        status = 400 if self.server.state.busy() else 200
        return status, (
            "Cache flushed.\nPlease check backend logs for more details. (When there are running "
            "or waiting requests, the operation will not be performed.)\n"
        )

    def abort_request(self, raw):
        if not self.server.settings.abort_request:
            raise HttpError(404, {"detail": "Not Found"})
        body = self._json(raw)
        self.server.state.abort(body.get("rid") or "", bool(body.get("abort_all")))
        return 200, None

    def pause_generation(self, raw):
        body = self._json(raw)
        mode = body.get("mode", "abort") if isinstance(body, dict) else None
        if mode not in PAUSE_MODES:
            raise HttpError(400, {"error": f"mode must be one of {list(PAUSE_MODES)}"})
        state = self.server.state
        if self.server.scheduler:
            self.server.scheduler.pause(mode)
        else:
            # The per-thread engine has no queue to retract into: retract behaves like in_place.
            state.set_paused(True)
            if mode == "abort":
                state.abort("", True)
        return 200, {"message": "Generation paused successfully.", "status": "ok"}

    def continue_generation(self, raw):
        if self.server.scheduler:
            self.server.scheduler.resume()
        self.server.state.set_paused(False)
        return 200, {"message": "Generation continued successfully.", "status": "ok"}

    def generate(self, raw):
        started = time.monotonic()
        state, settings, model = self.server.state, self.server.settings, self.server.model
        arrival = state.arrive()
        if settings.exit_after is not None and arrival >= settings.exit_after:
            log.error("exiting on /generate request %d (--exit-after %d)", arrival, settings.exit_after)
            os._exit(1)
        outcome, prompts, rid, logged = "http_500", [], None, None
        streamed = False
        try:
            faults = state.current_faults()
            if faults.no_workers:
                raise HttpError(503, NO_WORKERS_TEXT)
            if faults.reject_all:
                raise value_error("The request is rejected (the simulator's reject_all)")
            workers = [w for w in faults.worker_ids.split(",") if w]
            if workers:
                self.extra_headers["x-smg-routed-worker-id"] = workers[arrival % len(workers)]
            if faults.shed_first_n and state.take_shed():
                self.extra_headers |= {"Retry-After": f"{faults.shed_retry_after:g}", "x-smg-error-code": SHED_CODE}
                raise HttpError(429, {"error": {"message": "Admission queue is full", "code": SHED_CODE}})
            body = self._json(raw)
            rid = body.get("rid") if isinstance(body, dict) else None
            streamed = isinstance(body, dict) and body.get("stream") is True
            parsed = parse_generate(body, settings, model)
            prompts = parsed.prompts
            job = Job(parsed.sequences, streamed=parsed.stream)
            sick = not workers or self.extra_headers.get("x-smg-routed-worker-id") == workers[-1]
            if faults.garbage_after is not None and sick and state.sick_answer():
                for seq in job.sequences:
                    seq.garbled = True
            # The tokenizer manager rejects an in-flight rid before the scheduler sees anything.
            state.register(job)
            try:
                plan = state.plan(prompts)
                if plan.outcome == "drop":
                    outcome = "dropped"
                    raise DropConnection
                if plan.outcome == "503":
                    raise HttpError(503, QUEUE_FULL_BODY)
                self._crash_on_out_of_vocab(prompts)
                watch = self._watch(job, started)
                if self.server.scheduler:
                    for seq in job.sequences:
                        seq.planned = model.planned(seq)
                    if plan.slow:
                        job.wake.wait(faults.slow_seconds)
                    self.server.scheduler.run_job(job, abort_at_half=plan.outcome == "abort", watch=watch)
                else:
                    run_generation(job, model, plan, faults, state, watch)
            finally:
                state.unregister(job)
            items = [response_item(seq, model, settings, started) for seq in job.sequences]
            logged = logged_answers(job, items)
            outcome = "aborted" if any(seq.aborted for seq in job.sequences) else "ok"
            if watch.gone:
                outcome = "disconnected"
                raise DropConnection
            kind = state.current_faults().malformed
            if kind:
                items = [malform(item, kind) for item in items]
            if watch.stream:
                seq = job.sequences[0]
                watch.stream.finish(items[0], len(seq.planned), waiting_abort=seq.aborted_waiting)
                return 200, STREAMED
            if kind == "bad_gzip":
                self.extra_headers["Content-Encoding"] = "gzip"
            return 200, items if parsed.returns_list else items[0]
        except HttpError as error:
            outcome = f"http_{error.status}"
            if streamed and is_value_error(error):
                # Checks past the request contract run once the stream began: an error event.
                self._stream_error(error.body["error"].get("message", ""))
                return 200, STREAMED
            raise
        finally:
            state.record(outcome, prompts, rid, logged)

    def _watch(self, job: Job, started: float) -> Watch:
        """The request's client check, and for a streamed request its chunk stream (whose 200
        head goes out now: the faults decided before this point answered without one)."""
        settings, model = self.server.settings, self.server.model
        if not job.streamed:
            return Watch(self.connection, settings.disconnect_check)
        seq = job.sequences[0]
        self._stream_head()
        stream = ChunkStream(
            self.wfile,
            seq.stream_interval,
            settings.incremental_streaming_output,
            lambda count: response_item(seq, model, settings, started, count),
        )
        kind = self.server.state.current_faults().malformed
        if kind:
            stream.transform = lambda item: malform(item, kind)
        return Watch(self.connection, STREAM_POLL, stream)

    def _stream_head(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        for name, value in self.extra_headers.items():  # smg's worker header (Faults.worker_ids)
            self.send_header(name, value)
        if self.server.state.current_faults().malformed == "bad_gzip":
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _stream_error(self, message: str) -> None:
        self._stream_head()
        stream = ChunkStream(self.wfile, 1, False, lambda count: {})
        error = {"message": message, "type": "invalid_request_error", "code": 400, "retryable": False}
        stream.event(json.dumps({"error": error}, separators=(",", ":")).encode())
        stream.event(b"[DONE]")
        stream.write(b"0\r\n\r\n")

    def _crash_on_out_of_vocab(self, prompts: list[list[int]]) -> None:
        # The real scheduler dies in F.embedding and takes the whole server down with it.
        limit = self.server.settings.max_vocab
        for prompt in prompts:
            bad = next((i for i in prompt if i < 0 or i >= limit), None)
            if bad is not None:
                log.error("token id %d is outside the model vocab (%d): scheduler crashed", bad, limit)
                print("IndexError: index out of range in self", file=sys.stderr, flush=True)
                os._exit(1)

    # -- simulator control (/sim/*)

    def sim_stats(self, raw):
        return 200, self.server.state.stats()

    def sim_config_get(self, raw):
        return 200, asdict(self.server.state.current_faults())

    def sim_config_set(self, raw):
        changes = self._json(raw)
        if not isinstance(changes, dict):
            raise HttpError(400, {"error": "expected a JSON object"})
        return 200, self.server.state.configure(changes)

    def sim_reset(self, raw):
        self.server.state.reset()
        return 200, {}


ROUTES = {
    "/health": {"GET": SimHandler.health},
    "/health_generate": {"GET": SimHandler.health},
    "/model_info": {"GET": SimHandler.model_info},
    "/get_model_info": {"GET": SimHandler.model_info},
    "/server_info": {"GET": SimHandler.server_info},
    "/get_server_info": {"GET": SimHandler.server_info},
    "/v1/models": {"GET": SimHandler.models},
    "/flush_cache": {"GET": SimHandler.flush_cache, "POST": SimHandler.flush_cache},
    "/abort_request": {"POST": SimHandler.abort_request},
    "/pause_generation": {"POST": SimHandler.pause_generation},
    "/continue_generation": {"POST": SimHandler.continue_generation},
    "/v1/loads": {"GET": SimHandler.loads},
    "/generate": {"POST": SimHandler.generate, "PUT": SimHandler.generate},
    "/sim/stats": {"GET": SimHandler.sim_stats},
    "/sim/config": {"GET": SimHandler.sim_config_get, "POST": SimHandler.sim_config_set},
    "/sim/reset": {"POST": SimHandler.sim_reset},
}
S14_MODEL_INFO_KEYS = (
    "model_path", "tokenizer_path", "is_generation", "preferred_sampling_params",
    "weight_version", "has_image_understanding", "has_audio_understanding", "model_type",
    "architectures",
)  # fmt: skip
# The un-prefixed names are new in [S23]; older servers only answer the /get_ forms.
VERSION_GATED = {"/model_info", "/server_info"}
