"""The one recipe for a tiny offline tokenizer: a byte-level BPE trained on the Python standard
library's own sources (on every machine, so nothing comes from a hub).

The CPU demo server's model (``synthgen/demo/model.py``) and the test tokenizers (``tests/support/tiny_tokenizers.py``,
``tests/support/model_tokenizers.py``) are built with it; each adds its own special tokens, template and
config. Imports only the ``tokenizers`` library (which transformers installs), never transformers.
"""

from __future__ import annotations

import sysconfig
from collections.abc import Iterator, Sequence
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

VOCAB_SIZE = 2048
CORPUS_FILES = 40  # enough text for 2,048 merges; training takes well under a second


def stdlib_texts(files: int = CORPUS_FILES) -> Iterator[str]:
    """The first ``files`` modules of the running Python's standard library, in name order."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(stdlib.glob("*.py"))[:files]:
        yield path.read_text(encoding="utf-8", errors="ignore")


def train_bpe(
    special: Sequence[str],
    plain: Sequence[str] = (),
    vocab_size: int = VOCAB_SIZE,
    corpus_files: int = CORPUS_FILES,
) -> Tokenizer:
    """A byte-level BPE whose first ids are ``special`` (in order); ``plain`` are added tokens that
    encode as one token but are not special (``skip_special_tokens`` keeps them, as Qwen3's think tags)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(special),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(stdlib_texts(corpus_files), trainer=trainer)
    if plain:
        tokenizer.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in plain])
    return tokenizer


def padded_vocab_size(tokenizer_len: int) -> int:
    """The embedding size a checkpoint gives this tokenizer: rounded up to a multiple of 64."""
    return (tokenizer_len + 63) // 64 * 64
