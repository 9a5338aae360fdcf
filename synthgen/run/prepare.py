"""Preparing one request: read the prompt's line, render it with the chat template (its tools
included), tokenize, check it against the served model's vocabulary and limits (runs in a
worker thread). With ``--regenerate all`` each turn of a conversation is prepared in turn, on
the model's own earlier replies.

A prompt that will not be sent comes back as a ``Skip`` with its kind (``synthgen.data.failures``:
template_error, token_out_of_vocab, empty_prompt, prompt_too_long, cannot_regenerate), a reason and
what identifies the prompt (its hash); the producer records it in errors.jsonl.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from synthgen.chat.parsers import OutputParser
from synthgen.chat.templating import ChatRenderer, TemplateBudgetError
from synthgen.config import RunConfig
from synthgen.data.conversations import ConversationError
from synthgen.data.failures import (
    CANNOT_REGENERATE,
    EMPTY_PROMPT,
    PROMPT_TOO_LONG,
    TEMPLATE_ERROR,
    TOKEN_OUT_OF_VOCAB,
)
from synthgen.data.prompts import Prompt, PromptReader
from synthgen.data.records import Turn
from synthgen.data.samples import sample_key, split_key
from synthgen.run.dataset_run import DatasetRun
from synthgen.run.job import Job
from synthgen.run.mix import SampleRequest
from synthgen.run.model import Model
from synthgen.run.settled import unread_prompt
from synthgen.server.client import build_payload
from synthgen.server.discovery import ServerContext, fit_max_new_tokens


@dataclass(frozen=True, slots=True)
class Skip:
    prompt_id: str
    kind: str
    reason: str
    prompt: str  # the prompt's hash, or its size when it was skipped unread: what a settled skip is keyed on


class Preparer:
    def __init__(self, model: Model, server: ServerContext, max_tokens: int):
        self.model = model
        self.renderer: ChatRenderer = model.renderer
        self.parser: OutputParser = model.parser
        self.server, self.max_tokens = server, max_tokens
        # The longest token of the vocabulary, in bytes: a line of B bytes makes at least B / this many tokens.
        self.max_token_bytes = model.max_token_bytes
        self._readers: dict[str, PromptReader] = {}

    def prepare(self, run: DatasetRun, key: str) -> Job | Skip:
        """The request of one work key: a prompt id, or a prompt's sample (``samples.sample_key``)."""
        prompt_id, sample = split_key(key)
        too_long = self._too_long_unread(run, prompt_id, key)
        if too_long is not None:
            return too_long
        reader = self._readers.get(run.name)
        if reader is None:
            reader = self._readers[run.name] = PromptReader(run.index)
        prompt = reader.read(prompt_id)
        request = None if run.mix is None or not run.mix.seeded else run.mix.request(prompt_id, sample)
        if prompt.conversation is None:
            return self._fit(run, prompt, list(prompt.messages), [], request)
        blocker = prompt.conversation.all_blocker()
        if blocker:
            return Skip(key, CANNOT_REGENERATE.name, f"--regenerate all: {blocker}", prompt.prompt_hash)
        done = [Turn.from_dict(t.data) for t in run.partial.get(key, [])]
        if len(done) >= len(prompt.conversation.all_positions()):
            done = []  # more turns than the conversation has now (its trailing replies changed): start again
        return self.next_turn(run, prompt, done, request)

    def next_turn(
        self, run: DatasetRun, prompt: Prompt, turns: list[Turn], request: SampleRequest | None = None
    ) -> Job | Skip:
        """Mode all: the request for the turn after ``turns``, on the model's own earlier replies."""
        conversation = prompt.conversation
        assert conversation is not None
        positions = conversation.all_positions()
        try:
            messages = conversation.all_prompt(positions[len(turns)], [t.message() for t in turns])
        except ConversationError as exc:
            return Skip(_key(prompt, request), CANNOT_REGENERATE.name, str(exc), prompt.prompt_hash)
        return self._fit(run, prompt, messages, turns, request)

    def _fit(
        self,
        run: DatasetRun,
        prompt: Prompt,
        messages: list[dict[str, Any]],
        turns: list[Turn],
        request: SampleRequest | None = None,
    ) -> Job | Skip:
        max_chars, too_long = self._render_cap()
        key = _key(prompt, request)
        kwargs = None if request is None else request.kwargs
        try:
            if prompt.input_ids is not None:  # rendered already: sent as they are, checked like any other
                ids = list(prompt.input_ids)
                vocab = self.server.vocab_size
                if vocab is not None and max(ids) >= vocab:
                    return Skip(
                        key,
                        TOKEN_OUT_OF_VOCAB.name,
                        f"the line's input_ids hold id {max(ids)}, outside the model's vocabulary ({vocab}); "
                        "render them with the served model's tokenizer",
                        prompt.prompt_hash,
                    )
                text = self.renderer.tokenizer.decode(ids, skip_special_tokens=False)
            else:
                rendered = self.renderer.render(messages, prompt.tools, max_chars, too_long, kwargs)
                ids, text = rendered.input_ids, rendered.text
        except TemplateBudgetError as exc:  # over the render's time, step or size bound
            return Skip(key, exc.kind, str(exc), prompt.prompt_hash)
        except ValueError as exc:
            return Skip(key, TEMPLATE_ERROR.name, str(exc), prompt.prompt_hash)
        ctx = self.server
        if ctx.vocab_size is not None and ids and max(ids) >= ctx.vocab_size:
            return Skip(
                key,
                TOKEN_OUT_OF_VOCAB.name,
                (
                    f"token id {max(ids)} is outside the model's vocabulary ({ctx.vocab_size}); "
                    "the tokenizer does not match the served model"
                ),
                prompt.prompt_hash,
            )
        if not ids:
            return Skip(key, EMPTY_PROMPT.name, "the chat template rendered an empty prompt", prompt.prompt_hash)
        max_tokens = self.max_tokens if request is None else request.max_tokens
        max_new, reason = fit_max_new_tokens(len(ids), max_tokens, ctx.context_len, ctx.max_input_len)
        if max_new is None:
            return Skip(key, PROMPT_TOO_LONG.name, reason or "", prompt.prompt_hash)
        opens = self.parser.opens_reasoning(text)
        return Job(run.name, prompt, ids, opens, max_new, messages, turns, request=request)

    def _render_cap(self) -> tuple[int | None, str | None]:
        """The longest rendered text that can still fit the context (a text of C characters makes at
        least C / max_token_bytes tokens), and the skip reason past it; (None, None) when unknown.
        The render stops there, so a huge output is never tokenized."""
        limit = self.server.max_input_len or self.server.context_len
        if limit is None or not self.max_token_bytes:
            return None, None
        cap = limit * self.max_token_bytes
        return cap, (
            f"the rendered prompt passed {cap:,} characters, so at least {limit:,} tokens; "
            f"the server accepts fewer than {limit:,}"
        )

    def _too_long_unread(self, run: DatasetRun, prompt_id: str, key: str) -> Skip | None:
        """A huge line that cannot fit is skipped before it is read, rendered or tokenized."""
        size = run.index.long_lines.get(prompt_id)
        limit = self.server.max_input_len or self.server.context_len
        if size is None or limit is None or not self.max_token_bytes:
            return None
        at_least = size // self.max_token_bytes
        if at_least < limit:
            return None
        return Skip(
            key,
            PROMPT_TOO_LONG.name,
            f"prompt line has {size:,} bytes, so at least {at_least:,} tokens; the server accepts fewer than {limit:,}",
            unread_prompt(size),
        )

    def done_with(self, run: DatasetRun) -> None:
        """The dataset's prompts are all prepared: its prompt file is closed now, not at the end."""
        reader = self._readers.pop(run.name, None)
        if reader is not None:
            reader.close()

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


def _key(prompt: Prompt, request: SampleRequest | None) -> str:
    return prompt.id if request is None else sample_key(prompt.id, request.sample)


def first_request_report(preparer: Preparer, runs: list[DatasetRun], cfg: RunConfig) -> list[str]:
    """--dry-run: the first request the run would send (or why its prompt would be skipped)."""
    draw = mix_report(runs, cfg)
    sample = next(((run, run.selection.pending[0]) for run in runs if run.selection.pending), None)
    if sample is None:
        return [*draw, "nothing to do: every selected prompt is already done"]
    item = preparer.prepare(*sample)
    if isinstance(item, Skip):
        return [*draw, f"first prompt {sample[1]} would be skipped: {item.kind}: {item.reason}"]
    sampling = cfg.sampling_params() if item.request is None else item.request.sampling()
    rid = "synthgen-<uuid>" if item.request is None else item.request.rid("synthgen-<uuid>")
    payload = build_payload(item.input_ids, item.max_new_tokens, sampling, rid)
    shown = dict(payload, input_ids=f"[{len(item.input_ids)} token ids: {item.input_ids[:12]} ...]")
    rendered = preparer.renderer.tokenizer.decode(item.input_ids)
    which = item.prompt.id if item.request is None else f"{item.prompt.id} sample {item.request.sample}"
    return [
        *draw,
        f"first request ({item.dataset} / {which}): POST {cfg.display_url}/generate",
        "  " + orjson.dumps(shown).decode(),
        "  rendered prompt:\n    " + rendered.replace("\n", "\n    "),
        f"  prompt opens reasoning: {item.opens_reasoning}",
    ]


def mix_report(runs: list[DatasetRun], cfg: RunConfig) -> list[str]:
    """--dry-run with samples or a mix: the draw over every sample the run would send."""
    mix = next((run.mix for run in runs if run.mix is not None), None)
    if mix is None or not mix.seeded:
        return []
    return mix.dry_run_lines([split_key(key) for run in runs for key in run.selection.pending])
