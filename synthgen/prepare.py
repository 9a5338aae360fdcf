"""Preparing one prompt for sending: read its line, render it with the chat template, tokenize,
check it against the served model's vocabulary and limits (runs in a worker thread).

A prompt that will not be sent comes back as a ``Skip`` with a machine-readable kind
(template_error, token_out_of_vocab, empty_prompt, prompt_too_long) and a reason; the runner
records it in errors.jsonl.
"""

from __future__ import annotations

from dataclasses import dataclass

from .dataset_run import DatasetRun, WorkItem
from .prompts import PromptReader
from .server import ServerContext, fit_max_new_tokens
from .templating import ChatRenderer


@dataclass(frozen=True, slots=True)
class Skip:
    prompt_id: str
    kind: str
    reason: str


class Preparer:
    def __init__(self, renderer: ChatRenderer, server: ServerContext, max_tokens: int):
        self.renderer, self.server, self.max_tokens = renderer, server, max_tokens
        self._readers: dict[str, PromptReader] = {}

    def prepare(self, run: DatasetRun, prompt_id: str) -> WorkItem | Skip:
        reader = self._readers.get(run.name)
        if reader is None:
            reader = self._readers[run.name] = PromptReader(run.index)
        prompt = reader.read(prompt_id)
        try:
            rendered = self.renderer.render(prompt.messages)
        except ValueError as exc:
            return Skip(prompt.id, "template_error", str(exc))
        ids = rendered.input_ids
        ctx = self.server
        if ctx.vocab_size is not None and ids and max(ids) >= ctx.vocab_size:
            return Skip(prompt.id, "token_out_of_vocab", (
                f"token id {max(ids)} is outside the model's vocabulary ({ctx.vocab_size}); "
                "the tokenizer does not match the served model"
            ))
        if not ids:
            return Skip(prompt.id, "empty_prompt", "the chat template rendered an empty prompt")
        max_new, reason = fit_max_new_tokens(len(ids), self.max_tokens, ctx.context_len, ctx.max_input_len)
        if max_new is None:
            return Skip(prompt.id, "prompt_too_long", reason or "")
        return WorkItem(run, prompt, ids, rendered.opens_reasoning, max_new)

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
