"""A request's life as values: the job that goes in, and what it carries from one request to the next.

    Job     one request ready to send, frozen: rendered, tokenized and fitted to the context; it names
            its dataset (the writer keeps the dataset's files and counts, run/writer.py). With
            ``--regenerate all`` it is the next turn of a conversation, after ``turns``.
    Carry   a turn's output so far, carried into the next request: the ids of attempts (or runs)
            ended early, or of a cut answer extended by --continue-cut; replaced, never changed.

Nothing changes a job: a prompt's procedure (run/procedure.py) makes the next one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from synthgen.chat.parsers import OutputParser
from synthgen.data import rowread
from synthgen.data.partials import Extension
from synthgen.data.prompts import Prompt
from synthgen.data.records import Turn
from synthgen.data.samples import sample_key
from synthgen.run.mix import SampleRequest
from synthgen.run.model import stop_token
from synthgen.server.client import Generation


@dataclass(frozen=True)
class Job:
    dataset: str  # the dataset's name: where the writer files what comes of it
    prompt: Prompt
    input_ids: list[int]
    opens_reasoning: bool
    max_new_tokens: int
    messages: list[dict[str, Any]] = field(default_factory=list)  # what was rendered
    turns: list[Turn] = field(default_factory=list)  # regenerate=all: the turns before this one
    request: SampleRequest | None = None  # the sample: its seed and recipe (None: the run's flags as they are)

    @property
    def key(self) -> str:
        """Where resume files this work: the prompt id, with the sample after the first."""
        return self.prompt.id if self.request is None else sample_key(self.prompt.id, self.request.sample)

    @property
    def turn_index(self) -> int:
        return len(self.turns)

    def turn(self, gen: Generation, parser: OutputParser, attempts: int, latency: float, rid: str) -> Turn:
        """The generated turn, split by the reasoning and tool-call parsers as SGLang would."""
        # SGLang parses tool calls only for requests that declare tools; ours are in the prompt.
        if self.prompt.tools is not None:
            history = sum(len(m.get("tool_calls") or []) for m in self.messages)
            parsed = parser.parse(
                gen.text,
                self.opens_reasoning,
                call_id_prefix=f"{self.prompt.id}/{len(self.turns)}",
                history_tool_calls=history,
                tools=self.prompt.tools,  # undeclared functions dropped, XML arguments typed by the schemas
                stop=stop_token(gen, parser),
            )
            reasoning, content, complete = parsed.reasoning, parsed.content, parsed.reasoning_complete
            had_reasoning, calls = parsed.had_reasoning, parsed.tool_calls or None
        else:  # no tools declared: a tool-call-looking answer stays in the content, as SGLang leaves it
            split = parser.split(gen.text, self.opens_reasoning, stop=stop_token(gen, parser))
            reasoning, content, complete = split.reasoning, split.content, split.reasoning_closed
            had_reasoning, calls = split.had_reasoning, None
        return Turn(
            reasoning_content=reasoning,
            content=content,
            tool_calls=calls,
            had_reasoning=had_reasoning,
            finish_reason=gen.finish_type,
            finish_detail=gen.finish_reason,
            reasoning_complete=complete,
            prompt_tokens=gen.prompt_tokens or len(self.input_ids),
            completion_tokens=gen.completion_tokens,
            cached_tokens=gen.cached_tokens,
            output_text=gen.text,
            input_ids=self.input_ids,
            output_ids=gen.output_ids,
            latency_s=round(latency, 3),
            server_latency_s=gen.server_latency,
            attempts=attempts,
            request_id=gen.request_id or rid,
            worker=gen.worker,
        )

    def conversation_done(self, turn: Turn) -> str | None:
        """regenerate=all: None while turns remain, else "" (all done) or why it stopped early."""
        if self.prompt.conversation is None:
            return ""
        positions = len(self.prompt.conversation.all_positions())
        if rowread.cut(turn):
            return f"turn {len(self.turns) + 1} of {positions} was cut at --max-tokens"
        if rowread.looped(turn):
            return f"turn {len(self.turns) + 1} of {positions} fell into a loop (the loop guard ended it)"
        return "" if len(self.turns) + 1 >= positions else None


@dataclass(frozen=True)
class Carry:
    """A turn's output so far: ``output_ids`` (None: nothing carried), ``segments`` (tokens per attempt)
    and ``seeds`` (the sampling_seed each attempt sent, None where it sent none; as long as ``segments``),
    ``before`` (of them, what an earlier run generated); ``max_new_tokens`` for the whole turn and
    ``extended_by`` (--continue-cut: the tokens a cut answer was given beyond its max)."""

    max_new_tokens: int
    output_ids: list[int] | None = None
    segments: list[int] = field(default_factory=list)
    before: int = 0
    extended_by: int | None = None
    seeds: list[int | None] = field(default_factory=list)

    @classmethod
    def fresh(cls, job: Job) -> Carry:
        return cls(job.max_new_tokens)

    @property
    def tokens(self) -> int:
        return len(self.output_ids or [])

    @property
    def left(self) -> int:
        """What is left of max_new_tokens for the next request."""
        return self.max_new_tokens - self.tokens

    def extension(self) -> Extension | None:
        """--continue-cut: the extension this carry is part of, as a partial output line records it."""
        return Extension(self.max_new_tokens, self.extended_by) if self.extended_by else None

    def recorded_seeds(self) -> list[int | None] | None:
        """The segments' seeds as a row or a partial output line records them: None when no attempt sent one."""
        return self.seeds if any(seed is not None for seed in self.seeds) else None

    def ids_after(self, input_ids: list[int]) -> list[int]:
        """A request's ids: the prompt's, plus the output so far."""
        return input_ids if self.output_ids is None else [*input_ids, *self.output_ids]
