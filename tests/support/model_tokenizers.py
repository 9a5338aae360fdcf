"""Tiny offline tokenizers that carry real models' special tokens and real chat templates.

This module owns the per-model test tokenizers: each is a byte-level BPE trained (``synthgen.demo.bpe``,
as in ``tiny_tokenizers``) on Python standard-library sources, given the special tokens of one real model
family and that model's real chat template from ``tests/support/templates/`` (see SOURCES.md there), and
saved as a Hugging Face tokenizer folder that ``transformers.AutoTokenizer`` loads offline.
Building is cached per directory: a stamp file records the build arguments and the template's hash.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from tiny_tokenizers import BPE_VOCAB_SIZE, CORPUS_FILES

from synthgen.demo.bpe import padded_vocab_size, train_bpe

TEMPLATES = Path(__file__).parent / "templates"
STAMP_FILE = "model_tokenizer_build.json"
MAX_POSITION_EMBEDDINGS = 8192


@dataclass(frozen=True)
class ModelSpec:
    template: str  # file name under tests/support/templates/
    special: list[str]  # the model's special tokens that its template writes
    eos: str
    bos: str | None = None
    pad: str | None = None
    think_start: str = "<think>"
    extra: list[str] = field(default_factory=list)  # added tokens that are not special (Qwen3's tags)


DEEPSEEK = [
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
    "<｜tool▁outputs▁begin｜>",
    "<｜tool▁outputs▁end｜>",
    "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
]

MODELS: dict[str, ModelSpec] = {
    "kimi-k2-thinking": ModelSpec(
        "kimi-k2-thinking.jinja",
        [
            "[BOS]",
            "[EOS]",
            "<|im_end|>",
            "<|im_user|>",
            "<|im_assistant|>",
            "<|im_system|>",
            "<|im_middle|>",
            "<|tool_calls_section_begin|>",
            "<|tool_calls_section_end|>",
            "<|tool_call_begin|>",
            "<|tool_call_argument_begin|>",
            "<|tool_call_end|>",
            "<think>",
            "</think>",
            "<|media_start|>",
            "<|media_content|>",
            "<|media_pad|>",
            "<|media_end|>",
        ],
        eos="<|im_end|>",
        bos="[BOS]",
        pad="[EOS]",
    ),
    "qwen3": ModelSpec(
        "qwen3.jinja",
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        eos="<|im_end|>",
        pad="<|endoftext|>",
        extra=["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"],
    ),
    "glm-4.6": ModelSpec(
        "glm-4.6.jinja",
        [
            "<|endoftext|>",
            "[gMASK]",
            "<sop>",
            "<eop>",
            "<|system|>",
            "<|user|>",
            "<|assistant|>",
            "<|observation|>",
            "<think>",
            "</think>",
            "<tool_call>",
            "</tool_call>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
            "<tool_response>",
            "</tool_response>",
        ],
        eos="<|endoftext|>",
        pad="<|endoftext|>",
    ),
    "minimax-m2": ModelSpec(
        "minimax-m2.jinja",
        ["]~!b[", "]~b]", "[e~[", "<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>"],
        eos="[e~[",
        bos="]~!b[",
        pad="[e~[",
    ),
    "deepseek-r1-distill": ModelSpec(
        "deepseek-r1-distill.jinja",
        [*DEEPSEEK, "<think>", "</think>"],
        eos="<｜end▁of▁sentence｜>",
        bos="<｜begin▁of▁sentence｜>",
        pad="<｜end▁of▁sentence｜>",
    ),
    "gpt-oss": ModelSpec(
        "gpt-oss.jinja",
        [
            "<|startoftext|>",
            "<|endoftext|>",
            "<|return|>",
            "<|constrain|>",
            "<|channel|>",
            "<|start|>",
            "<|end|>",
            "<|message|>",
            "<|call|>",
            "<|endofprompt|>",
        ],
        eos="<|return|>",
        bos="<|startoftext|>",
        pad="<|endoftext|>",
        think_start="<|channel|>analysis<|message|>",
    ),
}


def template_text(model: str) -> str:
    return (TEMPLATES / MODELS[model].template).read_text(encoding="utf-8")


def build_model_tokenizer(out_dir: Path, model: str) -> Path:
    """Build (or reuse) the tiny tokenizer of ``model`` (a key of MODELS) in ``out_dir``."""
    spec = MODELS[model]
    template = template_text(model)
    out_dir = Path(out_dir)
    build_args = {"model": model, "template_sha256": hashlib.sha256(template.encode()).hexdigest()}
    stamp = out_dir / STAMP_FILE
    if stamp.exists() and json.loads(stamp.read_text()) == build_args:
        return out_dir

    from transformers import PreTrainedTokenizerFast

    tokenizer = train_bpe(spec.special, spec.extra, BPE_VOCAB_SIZE, CORPUS_FILES)
    named = {spec.eos, spec.bos, spec.pad}
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=spec.bos,
        eos_token=spec.eos,
        pad_token=spec.pad,
        extra_special_tokens=[t for t in spec.special if t not in named],
        model_max_length=MAX_POSITION_EMBEDDINGS,
    )
    hf_tokenizer.chat_template = template
    out_dir.mkdir(parents=True, exist_ok=True)
    hf_tokenizer.save_pretrained(out_dir)
    config = {
        "vocab_size": padded_vocab_size(len(hf_tokenizer)),
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    # Written last: its presence means every other file of the build is complete.
    stamp.write_text(json.dumps(build_args) + "\n")
    return out_dir
