"""Tokenizer loading and chat-template rendering: the only module that imports transformers.

A prompt is rendered to text with the tokenizer's chat template (so we can see whether the
template opened the reasoning block) and then encoded without adding special tokens, since
the template already carries any BOS. The ids are what we send: SGLang would add a second
BOS to templated text.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .errors import TokenizerError

# transformers prints an advisory about missing PyTorch on import; we only need tokenizers.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


@dataclass(frozen=True, slots=True)
class Rendered:
    input_ids: list[int]
    opens_reasoning: bool  # the generation prompt ends with the opening think tag


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False):
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    if name_or_path.startswith(("/", "./", "../", "~")) and not Path(name_or_path).expanduser().is_dir():
        raise TokenizerError(
            f"tokenizer folder {name_or_path} not found; pass --tokenizer PATH to a folder with tokenizer files "
            "(default: the tokenizer_path the server reports)"
        )
    try:
        tokenizer = AutoTokenizer.from_pretrained(os.path.expanduser(name_or_path), trust_remote_code=trust_remote_code)
    except Exception as exc:  # transformers raises OSError, ValueError, ImportError... for one cause
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TokenizerError(
            f"cannot load tokenizer '{name_or_path}' ({reason[:200]}); pass --tokenizer PATH to a local "
            "tokenizer folder (add --trust-remote-code if the model needs it)"
        ) from exc
    if not getattr(tokenizer, "chat_template", None):
        raise TokenizerError(
            f"tokenizer '{name_or_path}' has no chat template; pass --tokenizer PATH to one that does"
        )
    return tokenizer


def model_config(*paths: str | None) -> dict:
    """The first readable config.json among local model folders (the served model's first)."""
    for path in paths:
        if not path:
            continue
        try:
            data = json.loads((Path(path).expanduser() / "config.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return {}


def _config_int(config: dict, key: str) -> int | None:
    for holder in (config, config.get("text_config") or {}):
        if isinstance(holder.get(key), int):
            return holder[key]
    return None


def model_vocab_size(config: dict) -> int | None:
    """The model's embedding size. Ids at or above it crash SGLang's scheduler (and the whole
    server) rather than fail one request, so the runner never sends them."""
    return _config_int(config, "vocab_size")


def model_context_length(config: dict) -> int | None:
    """max_position_embeddings: the context length when the server does not report one
    (sglang-router answers /v1/models itself, without max_model_len)."""
    return _config_int(config, "max_position_embeddings")


class ChatRenderer:
    def __init__(self, tokenizer, template_kwargs: dict | None = None, think_start: str = "<think>"):
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.think_start = think_start

    def render(self, messages) -> Rendered:
        try:
            text = self.tokenizer.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=True, **self.template_kwargs
            )
        except Exception as exc:  # jinja2 TemplateError, or a template's raise_exception()
            raise ValueError(f"chat template failed: {exc}") from exc
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return Rendered(input_ids=list(ids), opens_reasoning=text.rstrip().endswith(self.think_start))
