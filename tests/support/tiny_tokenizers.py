"""Tiny chat tokenizers built offline at test time.

This module owns the test tokenizers: a byte-level BPE trained in well under a second on Python
standard-library sources (always on disk, so nothing comes from a hub; the recipe is
``synthgen.demo.bpe``, shared with the demo model), saved as a Hugging Face
tokenizer directory with a chat template and a ``config.json`` carrying the model vocab size.

Two chat styles mirror the two reasoning conventions a client has to handle:

- ``chatml`` (Qwen3-like): the generation prompt is ``<|im_start|>assistant\\n`` and the model
  writes both ``<think>`` and ``</think>``.
- ``kimi`` (Kimi-K2.5-like): the generation prompt already ends with ``<think>`` (or with
  ``<think></think>`` when the template kwarg ``thinking`` is false), so the model writes only
  ``</think>``.

``think_special=False`` keeps ``<think>``/``</think>`` single tokens but not special ones, so
``skip_special_tokens`` leaves them in decoded text. ``bos=True`` makes the tokenizer behave like
Llama: the template starts with ``{{ bos_token }}`` *and* encoding adds BOS, which is what makes a
doubled BOS possible when a client tokenizes a rendered template as text.

Building is cached per output directory: a finished build leaves a stamp file recording its
arguments, and a directory with a matching stamp is reused as is.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from tokenizers import Tokenizer, processors

from synthgen.demo.bpe import padded_vocab_size, train_bpe

BOS = "<|endoftext|>"
EOS = "<|im_end|>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
KIMI_ROLE_TOKENS = ["<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>"]

STYLES = ("chatml", "kimi")
BPE_VOCAB_SIZE = 2048
# The standard library sources are sorted so the corpus (and thus every token id) is the same on
# every run on a given Python install; 40 files (~1 MB) train in a fraction of a second.
CORPUS_FILES = 40
MAX_POSITION_EMBEDDINGS = 4096
STAMP_FILE = "tiny_tokenizer_build.json"

CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_start|>assistant\\n' }}"
    # Qwen3 disables thinking by pre-filling an empty think block.
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif -%}"
    "{%- endif -%}"
)

KIMI_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{ '<|im_system|>system<|im_middle|>' }}"
    "{%- elif message['role'] == 'user' -%}{{ '<|im_user|>user<|im_middle|>' }}"
    "{%- else -%}{{ '<|im_assistant|>' + message['role'] + '<|im_middle|>' }}"
    "{%- endif -%}"
    "{{ message['content'] + '<|im_end|>' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<|im_assistant|>assistant<|im_middle|>' }}"
    # Kimi-K2.5 pre-fills the opening tag: thinking is on unless the kwarg says false.
    "{%- if thinking is defined and thinking is false -%}{{ '<think></think>' }}"
    "{%- else -%}{{ '<think>' }}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def build_tokenizer(out_dir: Path, style: str = "chatml", think_special: bool = True, bos: bool = False) -> Path:
    """Build (or reuse) a tiny chat tokenizer in ``out_dir`` and return ``out_dir``.

    The directory loads with ``transformers.AutoTokenizer.from_pretrained(out_dir)`` offline and
    holds a ``config.json`` with ``vocab_size`` (tokenizer length rounded up to a multiple of 64,
    as real checkpoints pad their embedding tables), ``max_position_embeddings`` and ``model_type``.
    """
    if style not in STYLES:
        raise ValueError(f"unknown style {style!r}; expected one of {STYLES}")
    out_dir = Path(out_dir)
    build_args = {"style": style, "think_special": think_special, "bos": bos}
    stamp = out_dir / STAMP_FILE
    if stamp.exists() and json.loads(stamp.read_text()) == build_args:
        return out_dir

    # transformers is imported here, not at module level, so the simulator's import of this
    # module's constants stays cheap and free of its start-up warning.
    from transformers import PreTrainedTokenizerFast

    tokenizer = _train_bpe(style, think_special)
    if bos:
        bos_id = tokenizer.token_to_id(BOS)
        tokenizer.post_processor = processors.Sequence(
            [
                processors.ByteLevel(trim_offsets=False),
                processors.TemplateProcessing(
                    single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, bos_id)]
                ),
            ]
        )
    extra_special = ["<|im_start|>"]
    if think_special:
        extra_special += [THINK_OPEN, THINK_CLOSE]
    if style == "kimi":
        extra_special += KIMI_ROLE_TOKENS
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=BOS,
        extra_special_tokens=extra_special,
        model_max_length=MAX_POSITION_EMBEDDINGS,
    )
    template = CHATML_TEMPLATE if style == "chatml" else KIMI_TEMPLATE
    hf_tokenizer.chat_template = ("{{ bos_token }}" if bos else "") + template
    out_dir.mkdir(parents=True, exist_ok=True)
    hf_tokenizer.save_pretrained(out_dir)
    config = {
        "vocab_size": padded_vocab_size(len(hf_tokenizer)),
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "model_type": "qwen2",
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    # Written last: its presence means every other file of the build is complete.
    stamp.write_text(json.dumps(build_args) + "\n")
    return out_dir


def build_all(root: Path) -> dict[str, Path]:
    """Build the three variants tests usually need, in subfolders of ``root``."""
    root = Path(root)
    return {
        "chatml": build_tokenizer(root / "chatml", style="chatml"),
        "kimi": build_tokenizer(root / "kimi", style="kimi"),
        "chatml-nonspecial": build_tokenizer(root / "chatml-nonspecial", style="chatml", think_special=False),
    }


def _train_bpe(style: str, think_special: bool) -> Tokenizer:
    special = [BOS, "<|im_start|>", EOS]
    if think_special:
        special += [THINK_OPEN, THINK_CLOSE]
    if style == "kimi":
        special += KIMI_ROLE_TOKENS
    # Not special: still matched as one token on encode, kept by skip_special_tokens.
    plain = [] if think_special else [THINK_OPEN, THINK_CLOSE]
    return train_bpe(special, plain, BPE_VOCAB_SIZE, CORPUS_FILES)


@functools.cache
def hf_tokenizer(directory: Path):
    """The folder loaded as transformers loads it (offline), once per folder."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory)


def chat_ids(directory: Path, user: str = "hello world", **template_kwargs) -> list[int]:
    """One user turn rendered with the folder's chat template and a generation prompt, as ids."""
    rendered = hf_tokenizer(directory).apply_chat_template(
        [{"role": "user", "content": user}], add_generation_prompt=True, **template_kwargs
    )
    return rendered["input_ids"]


if __name__ == "__main__":  # PYTHONPATH=. python tests/support/tiny_tokenizers.py OUT_DIR [STYLE]: what bench/ uses
    import sys

    print(build_tokenizer(Path(sys.argv[1]), style=sys.argv[2] if len(sys.argv) > 2 else "chatml"))
