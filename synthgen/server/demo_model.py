"""Build a tiny, randomly initialised chat model and its tokenizer, fully offline.

Run with the SGLang venv's python (it needs torch, transformers and tokenizers); normally
`scripts/real_sglang.py setup` (synthgen.server.demo) does that. Nothing is downloaded: the tokenizer is trained on the
Python standard library's own sources, and the weights are random (seed 0).

What comes out (the real server's integration tests rely on these facts):
  - Qwen2ForCausalLM (or LlamaForCausalLM with --arch llama): hidden 64, 2 layers, 2 heads,
    intermediate 128, context 2048, bf16 safetensors (under 1 MB).
  - byte-level BPE tokenizer, vocabulary 2048; special tokens
    <|endoftext|>=0 (bos/pad), <|im_start|>=1, <|im_end|>=2 (eos), <think>=3, </think>=4.
  - a ChatML chat template.
The model's embedding has the tokenizer's vocabulary rounded up to a multiple of 64; ids at or
above that size crash the real server (see docs in real_sglang.py), so clients must not send them.

Usage: python synthgen/server/demo_model.py OUT_DIR [--arch qwen2|llama] [--vocab 2048]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

CONTEXT_LENGTH = 2048
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TRAINING_FILES = 200


def stdlib_sources() -> list[str]:
    """The first few hundred stdlib modules: present on every machine, so the build stays offline."""
    stdlib = os.path.dirname(os.__file__)
    return sorted(glob.glob(os.path.join(stdlib, "*.py")))[:TRAINING_FILES]


def train_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    def texts():
        for path in stdlib_sources():
            with open(path, encoding="utf-8", errors="ignore") as fh:
                yield fh.read()

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts(), trainer=trainer)
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|endoftext|>",
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>", "<think>", "</think>"],
        model_max_length=CONTEXT_LENGTH,
    )
    hf_tok.chat_template = CHAT_TEMPLATE
    return hf_tok


def build_model(arch: str, vocab_size: int, tok: PreTrainedTokenizerFast):
    bos = tok.convert_tokens_to_ids("<|endoftext|>")
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    common = dict(
        # Rounded up to a multiple of 64 because kernels like aligned sizes; the extra rows are
        # never produced by the tokenizer.
        vocab_size=(vocab_size + 63) // 64 * 64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=CONTEXT_LENGTH,
        rms_norm_eps=1e-6,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=bos,
        eos_token_id=eos,
        pad_token_id=bos,
        torch_dtype="bfloat16",
    )
    if arch == "llama":
        cfg = AutoConfig.for_model("llama", head_dim=32, **common)
    else:
        cfg = AutoConfig.for_model("qwen2", **common)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", help="directory to write the model and tokenizer into")
    parser.add_argument(
        "--arch", choices=["qwen2", "llama"], default="qwen2", help="model architecture (default qwen2)"
    )
    parser.add_argument("--vocab", type=int, default=2048, help="tokenizer vocabulary size (default 2048)")
    args = parser.parse_args(argv)

    os.makedirs(args.out_dir, exist_ok=True)
    tok = train_tokenizer(args.vocab)
    tok.save_pretrained(args.out_dir)
    assert [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))

    model = build_model(args.arch, len(tok), tok)
    model.save_pretrained(args.out_dir, safe_serialization=True)
    cfg = model.config
    GenerationConfig(
        bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id, do_sample=False
    ).save_pretrained(args.out_dir)

    # Sanity check that the saved pair works together before a server ever sees it.
    encoded = tok.apply_chat_template(
        [{"role": "user", "content": "hello world"}], add_generation_prompt=True, return_tensors="pt"
    )
    ids = encoded if isinstance(encoded, torch.Tensor) else encoded["input_ids"]
    out = model.generate(ids, max_new_tokens=8, do_sample=False)
    summary = {
        "out_dir": args.out_dir,
        "arch": args.arch,
        "tokenizer_vocab": len(tok),
        "model_vocab": cfg.vocab_size,
        "params": sum(p.numel() for p in model.parameters()),
        "hello_prompt_ids": ids[0].tolist(),
        "hello_greedy_ids": out[0, ids.shape[1] :].tolist(),
    }
    print(json.dumps(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
