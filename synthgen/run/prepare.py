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
from synthgen.run.dataset_run import DatasetRun, WorkItem
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

    def prepare(self, run: DatasetRun, prompt_id: str) -> WorkItem | Skip:
        too_long = self._too_long_unread(run, prompt_id)
        if too_long is not None:
            return too_long
        reader = self._readers.get(run.name)
        if reader is None:
            reader = self._readers[run.name] = PromptReader(run.index)
        prompt = reader.read(prompt_id)
        if prompt.conversation is None:
            return self._fit(run, prompt, list(prompt.messages), [])
        blocker = prompt.conversation.all_blocker()
        if blocker:
            return Skip(prompt.id, CANNOT_REGENERATE.name, f"--regenerate all: {blocker}", prompt.prompt_hash)
        done = [Turn.from_dict(t.data) for t in run.partial.get(prompt.id, [])]
        if len(done) >= len(prompt.conversation.all_positions()):
            done = []  # more turns than the conversation has now (its trailing replies changed): start again
        return self.next_turn(run, prompt, done)

    def next_turn(self, run: DatasetRun, prompt: Prompt, turns: list[Turn]) -> WorkItem | Skip:
        """Mode all: the request for the turn after ``turns``, on the model's own earlier replies."""
        conversation = prompt.conversation
        assert conversation is not None
        positions = conversation.all_positions()
        try:
            messages = conversation.all_prompt(positions[len(turns)], [t.message() for t in turns])
        except ConversationError as exc:
            return Skip(prompt.id, CANNOT_REGENERATE.name, str(exc), prompt.prompt_hash)
        return self._fit(run, prompt, messages, turns)

    def _fit(
        self, run: DatasetRun, prompt: Prompt, messages: list[dict[str, Any]], turns: list[Turn]
    ) -> WorkItem | Skip:
        max_chars, too_long = self._render_cap()
        try:
            rendered = self.renderer.render(messages, prompt.tools, max_chars, too_long)
        except TemplateBudgetError as exc:  # over the render's time, step or size bound
            return Skip(prompt.id, exc.kind, str(exc), prompt.prompt_hash)
        except ValueError as exc:
            return Skip(prompt.id, TEMPLATE_ERROR.name, str(exc), prompt.prompt_hash)
        ids = rendered.input_ids
        ctx = self.server
        if ctx.vocab_size is not None and ids and max(ids) >= ctx.vocab_size:
            return Skip(
                prompt.id,
                TOKEN_OUT_OF_VOCAB.name,
                (
                    f"token id {max(ids)} is outside the model's vocabulary ({ctx.vocab_size}); "
                    "the tokenizer does not match the served model"
                ),
                prompt.prompt_hash,
            )
        if not ids:
            return Skip(prompt.id, EMPTY_PROMPT.name, "the chat template rendered an empty prompt", prompt.prompt_hash)
        max_new, reason = fit_max_new_tokens(len(ids), self.max_tokens, ctx.context_len, ctx.max_input_len)
        if max_new is None:
            return Skip(prompt.id, PROMPT_TOO_LONG.name, reason or "", prompt.prompt_hash)
        return WorkItem(run, prompt, ids, self.parser.opens_reasoning(rendered.text), max_new, messages, turns)

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

    def _too_long_unread(self, run: DatasetRun, prompt_id: str) -> Skip | None:
        """A huge line that cannot fit is skipped before it is read, rendered or tokenized."""
        size = run.index.long_lines.get(prompt_id)
        limit = self.server.max_input_len or self.server.context_len
        if size is None or limit is None or not self.max_token_bytes:
            return None
        at_least = size // self.max_token_bytes
        if at_least < limit:
            return None
        return Skip(
            prompt_id,
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


def first_request_report(preparer: Preparer, runs: list[DatasetRun], cfg: RunConfig) -> list[str]:
    """--dry-run: the first request the run would send (or why its prompt would be skipped)."""
    sample = next(((run, run.selection.pending[0]) for run in runs if run.selection.pending), None)
    if sample is None:
        return ["nothing to do: every selected prompt is already done"]
    item = preparer.prepare(*sample)
    if isinstance(item, Skip):
        return [f"first prompt {sample[1]} would be skipped: {item.kind}: {item.reason}"]
    payload = build_payload(item.input_ids, item.max_new_tokens, cfg.sampling_params(), "synthgen-<uuid>")
    shown = dict(payload, input_ids=f"[{len(item.input_ids)} token ids: {item.input_ids[:12]} ...]")
    rendered = preparer.renderer.tokenizer.decode(item.input_ids)
    return [
        f"first request ({item.run.name} / {item.prompt.id}): POST {cfg.display_url}/generate",
        "  " + orjson.dumps(shown).decode(),
        "  rendered prompt:\n    " + rendered.replace("\n", "\n    "),
        f"  prompt opens reasoning: {item.opens_reasoning}",
    ]
