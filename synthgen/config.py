"""The one configuration object of a run, validated once, with derived defaults in one place.

Usage::

    config = RunConfig(partition="short", server_url="http://127.0.0.1:30000").validate()
    # validate() raises UsageError with a one-line fix, or returns a new config with the derived
    # values filled in (the server log's path, the API key stripped); a RunConfig never changes.
    default_of("max_tokens")  # 32768: the one source of every default, the CLI's included
    flag_of("backoff_base")  # "--retry-backoff": every message names a field by its flag

A field's flag is ``--`` and its name with ``-`` for ``_`` unless its ``flag`` metadata says otherwise
(None: no flag). The sampling flags are rows of synthgen.data.sampling_keys: ``max_tokens`` is a field of
its own, the others are ``sampling_flags`` entries by their option name.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import httpx

from synthgen.chat.parsers import KNOWN_REASONING, KNOWN_TOOL_CALL, unsupported_note
from synthgen.data.mix import SamplingMix
from synthgen.data.prompts import REGENERATE_MODES
from synthgen.data.readers.base import NO_COLUMNS, Columns
from synthgen.data.samples import MAX_SAMPLES_PER_PROMPT
from synthgen.data.sampling_keys import BY_NAME, FLAGGED, reserved
from synthgen.data.selection import SAMPLE_MODES
from synthgen.data.shards import Shard
from synthgen.errors import UsageError
from synthgen.redact import redact, remember

CHANGED_PROMPTS = ("refuse", "keep", "regenerate")
# With --launch-server, --server-wait covers a start-up plus this: the restart's stop grace (30 s)
# and its longest backoff (30 s), with room to spare.
RESTART_ALLOWANCE = 120.0


@dataclass(frozen=True)
class RunConfig:
    # --- what to run -----------------------------------------------------------------------
    partition: str = "all"  # a folder under prompts_dir, or all
    datasets: tuple[str, ...] = field(default=(), metadata={"flag": "--dataset"})  # empty: every dataset
    prompts_dir: Path = Path("prompts")
    output_dir: Path = Path("outputs")
    skip_bad_lines: bool = False
    columns: Columns = NO_COLUMNS  # --columns: the dataset's column of each record field (data/readers/base.py)

    # --- how many of each dataset ------------------------------------------------------------
    max_samples: int | None = None  # overrides the budget file for every dataset
    budget: dict[str, int] = field(default_factory=dict)  # dataset -> max_samples, from --budget
    budget_path: Path | None = field(default=None, metadata={"flag": "--budget"})
    # dataset -> mean completion, from --budget
    expected_tokens: dict[str, float] = field(default_factory=dict, metadata={"flag": "--budget"})
    max_tokens_per_dataset: int | None = None  # precise output-token cap per dataset
    sample: str = "first"  # first | random
    seed: int = 0  # of --sample random, and of each sample's sampling_seed and recipe draw
    samples_per_prompt: int = 1  # N rows of each selected prompt (synthgen.data.samples)
    sampling_mix: SamplingMix | None = None  # --sampling-mix: weighted recipes (synthgen.data.mix)
    shard: Shard | None = None  # --shard I/N: this run's slice of every dataset (synthgen.data.shards)

    # --- server --------------------------------------------------------------------------------
    server_url: str = "http://127.0.0.1:30000"  # the first of server_urls
    # --server-url more than once: several servers without a gateway (run/serverset.py); () means server_url.
    # Where the rows are made, not what makes them: settings.jsonl records neither.
    server_urls: tuple[str, ...] = field(default=(), metadata={"flag": "--server-url"})
    api_key: str | None = field(default=None, repr=False)  # never printed

    # --- launching the server (synthgen.launch.supervisor) ----------------------------------------------
    launch_server: str | None = None  # a shell-style command, or "demo"; None: the server is the user's
    server_log: Path | None = None  # None: <output_dir>/server.log
    server_start_timeout: float = 1800.0  # a large model loads for many minutes
    server_restarts: int = 3
    keep_server: bool = False  # leave the launched server running after the run

    # --- model and template --------------------------------------------------------------------
    tokenizer: str | None = None  # None: the server's /model_info tokenizer_path
    trust_remote_code: bool = False
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    think_start: str = "<think>"
    think_end: str = "</think>"
    chat_template: Path | None = None  # a Jinja file (or tokenizer_config.json) instead of the tokenizer's
    reasoning_parser: str | None = None  # SGLang's name; None: what the server reports, else the <think> rule
    tool_call_parser: str | None = None  # SGLang's name; None: what the server reports, else none
    regenerate: str = "last"  # last | each | all: which assistant turns are generated

    # --- what earlier runs left ----------------------------------------------------------------
    allow_mixed_settings: bool = False  # write rows under other settings than the recorded ones
    changed_prompts: str = "refuse"  # refuse | keep | regenerate: done prompts whose text changed
    # --redo repetition: rows the loop guard ended are moved aside and generated again
    redo_loops: bool = field(default=False, metadata={"flag": "--redo"})

    # --- sampling (only what the user sets is sent, so the model's preferred params apply) -----
    max_tokens: int = 32768
    max_seq_len: int | None = None  # None: the server's max_model_len from /v1/models
    # The other sampling flags the user set, by option name (synthgen.data.sampling_keys): {"top_p": 0.95}
    sampling_flags: dict[str, Any] = field(default_factory=dict, metadata={"flag": None})
    # --sampling-params: more SGLang sampling keys
    extra_sampling: dict[str, Any] = field(default_factory=dict, metadata={"flag": "--sampling-params"})

    # --- execution -------------------------------------------------------------------------------
    concurrency: int | None = None  # None: auto, driven by the server's load (concurrency.LoadMonitor)
    max_concurrency: int = 1024  # the bound of auto
    request_timeout: float = 3600.0  # one generation may take many minutes
    connect_timeout: float = field(default=10.0, metadata={"flag": None})
    max_attempts: int = 5  # per prompt, per run; outage retries do not count
    backoff_base: float = field(default=1.0, metadata={"flag": "--retry-backoff"})
    backoff_max: float = field(default=60.0, metadata={"flag": None})
    server_wait: float = 600.0  # give up after this long of continuous outage
    drain_timeout: float = 30.0  # grace for in-flight requests after SIGTERM/SIGINT
    status_interval: float = 10.0  # seconds between status lines when stderr is not a TTY
    log_file: Path | None = None
    keep_partials: bool = True  # a stopped or aborted request's output so far is kept and continued
    continue_cut: int = 0  # an answer cut at max tokens with its reasoning open gets this many more, once
    checkpoint_tokens: int = 256  # streamed requests save their partial output every N tokens (0: not streamed)
    loop_guard: bool = True  # a streamed answer that falls into a repetition loop is ended and kept as such
    report_interval: float = 300.0  # <output-dir>/report.html rewritten this often while the run goes (0: at the end)
    dry_run: bool = False

    def validate(self) -> RunConfig:
        """This config checked (UsageError naming the fix), as a new config with the derived values."""
        self._check_sampling()
        positive = ("concurrency", "max_concurrency", "max_attempts", "request_timeout", "status_interval")
        for option in (*positive, "backoff_base"):
            value = 1 if option == "concurrency" and self.concurrency is None else getattr(self, option)
            if value is None or value <= 0 or (isinstance(value, float) and not math.isfinite(value)):
                raise UsageError(f"{flag_of(option)} must be a positive number, got {value}")
        for option in ("max_seq_len", "max_tokens_per_dataset"):
            limit = getattr(self, option)
            if limit is not None and limit <= 0:
                raise UsageError(f"{flag_of(option)} must be a positive number, got {limit}")
        if self.max_samples is not None and self.max_samples < 0:
            raise UsageError(f"{flag_of('max_samples')} must be 0 or more, got {self.max_samples}")
        for option in ("server_wait", "drain_timeout", "report_interval"):
            value = getattr(self, option)
            if not (value >= 0 and math.isfinite(value)):  # nan compares false to everything
                raise UsageError(f"{flag_of(option)} must be a number of seconds, 0 or more, got {value}")
        if not 1 <= self.samples_per_prompt <= MAX_SAMPLES_PER_PROMPT:
            raise UsageError(
                f"{flag_of('samples_per_prompt')} must be between 1 and {MAX_SAMPLES_PER_PROMPT:,}, "
                f"got {self.samples_per_prompt}"
            )
        for option, value, modes in (
            ("sample", self.sample, SAMPLE_MODES),
            ("regenerate", self.regenerate, REGENERATE_MODES),
            ("changed_prompts", self.changed_prompts, CHANGED_PROMPTS),
        ):
            if value not in modes:
                raise UsageError(f"{flag_of(option)} must be one of {', '.join(modes)}")
        for flag, kind, name, known in (
            (flag_of("reasoning_parser"), "reasoning", self.reasoning_parser, KNOWN_REASONING),
            (flag_of("tool_call_parser"), "tool-call", self.tool_call_parser, KNOWN_TOOL_CALL),
        ):
            if name is not None and name not in known:
                # Why (left out on purpose, or no SGLang name), the closest name, and every name this tool applies.
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise UsageError(
                    f"{flag}: {unsupported_note(kind, name)}{hint} (names this tool applies: {', '.join(known)})"
                )
        for option in ("continue_cut", "checkpoint_tokens"):
            if getattr(self, option) < 0:
                raise UsageError(f"{flag_of(option)} must be 0 or more, got {getattr(self, option)}")
        if not self.think_start or not self.think_end:
            raise UsageError(f"{flag_of('think_start')} and {flag_of('think_end')} must not be empty")
        urls = self.urls
        api_key = self._check_server(urls)
        return replace(self, server_url=urls[0], server_urls=urls, api_key=api_key, **self._check_launch())

    def _check_sampling(self) -> None:
        """The sampling flags (each row's range) and --sampling-params (no key the run sets itself)."""
        unknown = self.sampling_flags.keys() - BY_NAME.keys() - {"max_tokens"}
        if unknown:
            raise KeyError(f"sampling_flags has no row for {', '.join(sorted(unknown))}")
        for row in FLAGGED:
            value = self.max_tokens if row.name == "max_tokens" else self.sampling_flags.get(row.name or "")
            problem = None if value is None else row.problem(value)
            if problem:
                raise UsageError(f"{row.flag} {problem}, got {value}")
        taken = set(reserved(samples=False)) & self.extra_sampling.keys()
        if taken:
            raise UsageError(f"{flag_of('extra_sampling')}: {', '.join(sorted(taken))} is set by the run; leave it out")

    @property
    def urls(self) -> tuple[str, ...]:
        """Every server's URL: ``server_urls`` when several were given, else ``server_url``."""
        return self.server_urls if len(self.server_urls) > 1 else (self.server_url,)

    @property
    def display_url(self) -> str:
        """The server URL as every message prints it: a credential in it (user part, key in the query) is ***;
        several servers' URLs joined by commas."""
        return ", ".join(redact(url) for url in self.urls)

    def _check_server(self, urls: tuple[str, ...]) -> str | None:
        """The API key as it is sent (stripped), once the URLs and the key are checked."""
        for one in urls:
            check_url(one)
        seen: set[str] = set()
        for one in urls:
            if one.rstrip("/") in seen:
                raise UsageError(f"--server-url {redact(one)!r} is given twice; give each server once")
            seen.add(one.rstrip("/"))
        if len(urls) > 1 and self.launch_server is not None:
            raise UsageError(
                "--launch-server starts one server: give one --server-url with it, or start the servers yourself"
            )
        api_key = self.api_key
        if api_key is not None:
            # A key from a file or $(cat key) ends with a newline the server would not recognise.
            api_key = api_key.strip() or None
            remember(api_key)  # never printed, even where a message quotes it (a server's echo)
        if api_key is not None and not all(" " <= ch <= "~" for ch in api_key):
            raise UsageError(
                "the API key ($SGLANG_API_KEY or --api-key) has a character an HTTP header cannot carry "
                "(non-ASCII or a control character); check it for a stray character"
            )
        return api_key

    def _check_launch(self) -> dict[str, Any]:
        """The fields --launch-server derives (the server log's path, a longer --server-wait)."""
        if self.launch_server is None:
            return {}
        if not self.launch_server.strip():
            raise UsageError("--launch-server needs a command, e.g. 'python -m sglang.launch_server ...', or demo")
        if not (self.server_start_timeout > 0 and math.isfinite(self.server_start_timeout)):
            raise UsageError(
                f"{flag_of('server_start_timeout')} must be a positive number, got {self.server_start_timeout}"
            )
        if self.server_restarts < 0:
            raise UsageError(f"{flag_of('server_restarts')} must be 0 or more, got {self.server_restarts}")
        # The run waits out a server the supervisor restarts: one restart is a stop, a backoff
        # and a whole start-up, which must not look like an outage to give up on.
        return {
            "server_log": self.server_log or self.output_dir / "server.log",
            "server_wait": max(self.server_wait, self.server_start_timeout + RESTART_ALLOWANCE),
        }

    def cap_for(self, dataset: str) -> int | None:
        """The sample cap of one dataset: --max-samples wins over the budget file."""
        if self.max_samples is not None:
            return self.max_samples
        if self.budget_path is not None:
            if dataset not in self.budget:
                raise UsageError(
                    f"{self.budget_path}: no entry for dataset '{dataset}'; "
                    "rerun compute_budget.py for it, or pass --max-samples N"
                )
            return self.budget[dataset]
        return None

    @property
    def mixed(self) -> bool:
        """Several samples per prompt or a mix of recipes: requests carry seeds, rows say how they were drawn."""
        return self.samples_per_prompt > 1 or self.sampling_mix is not None

    def sampling_params(self) -> dict[str, Any]:
        """The user-chosen sampling keys, by SGLang's names; max_new_tokens is set per request."""
        chosen = {row.key: self.sampling_flags.get(row.name or "") for row in FLAGGED if row.name != "max_tokens"}
        return self.extra_sampling | {k: v for k, v in chosen.items() if v is not None}


def check_url(server_url: str) -> None:
    """One --server-url checked: UsageError naming the fix."""
    shown = redact(server_url)
    if not server_url.startswith(("http://", "https://")):
        raise UsageError(f"--server-url must start with http:// or https://, got {shown!r}")
    try:
        url = httpx.URL(server_url)
    except httpx.InvalidURL as exc:
        raise UsageError(f"--server-url {shown!r} is not a valid URL ({exc}); e.g. http://127.0.0.1:30000") from None
    if not url.host:
        raise UsageError(f"--server-url {shown!r} has no host; e.g. http://127.0.0.1:30000")
    if url.port is not None and not 1 <= url.port <= 65535:
        raise UsageError(f"--server-url {shown!r}: port {url.port} is not between 1 and 65535")


def flag_of(name: str) -> str | None:
    """The command-line flag of one RunConfig field (None: it has none), as every message names it."""
    for one in fields(RunConfig):
        if one.name == name:
            flag: str | None = one.metadata.get("flag", "--" + name.replace("_", "-"))
            return flag
    raise KeyError(f"RunConfig has no field {name!r}")


def default_of(name: str) -> Any:
    """The default of one RunConfig field: what the command line shows and uses when a flag is left out."""
    for one in fields(RunConfig):
        if one.name == name:
            if one.default is not MISSING:
                return one.default
            if one.default_factory is not MISSING:
                return one.default_factory()
            break
    raise KeyError(f"RunConfig has no field {name!r} with a default")
