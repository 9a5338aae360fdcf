"""Build the demo server's tiny chat model and its tokenizer, fully offline, in a few seconds.

Run with the SGLang venv's python (it needs torch, transformers and tokenizers); normally
`scripts/real_sglang.py setup` (synthgen.demo.install) does that. Nothing is downloaded: the tokenizer
is synthgen/demo/bpe.py's (trained on the Python standard library's own sources), and the weights
are set by hand, not trained, so the build is deterministic and takes seconds.

What the model does: after any prompt it writes a reasoning block, a short answer and its end-of-turn
token; greedy, always

    <think>A user has a message for me, so I should look at it first; then write one line:</think>
    The result is here.<|im_end|>

(one line, without the break after </think>: 29 tokens), and at temperature 1 (SGLang's default
when a request sets none) a varied recombination of the phrases below, ending the same way,
mostly within 20-50 tokens. It is a bigram model (the next token
depends only on the current one) written into a real Qwen2 checkpoint: the embedding puts each token
of the phrases (its "state") on its own direction, the LM head gives that state's successors their
log-probabilities plus a margin of MARGIN over every other token, and the two decoder layers keep
their random initialisation, scaled down so that they leave those logits almost unchanged. Every
other token (the prompt's last one, "\\n" of `<|im_start|>assistant\\n`, included) is followed by
`<think>`. The phrases use only words that are one token each, so the generated ids are exactly what
the tokenizer makes of the generated text (the tokens export and a re-tokenization agree).

What comes out (the real server's integration tests rely on these facts):
  - Qwen2ForCausalLM (or LlamaForCausalLM with --arch llama): hidden 64, 2 layers, 2 heads,
    intermediate 128, context 2048, bf16 safetensors (under 1 MB).
  - byte-level BPE tokenizer, vocabulary 2048; special tokens
    <|endoftext|>=0 (bos/pad), <|im_start|>=1, <|im_end|>=2 (eos), <think>=3, </think>=4.
  - a ChatML chat template; no reasoning or tool-call parser is needed (the client's `<think>` rule
    splits the output).
  - the greedy answer above (about 35 tokens) for every prompt that ends with the generation prompt.
The model's embedding has the tokenizer's vocabulary rounded up to a multiple of 64; ids at or
above that size crash the real server (see docs in real_sglang.py), so clients must not send them.

The build checks its own result before writing the stamp (a failed check fails the setup step):
the greedy answer, how many of 64 answers sampled at temperature 1 end within 256 tokens, and the
exact probability, from the chain itself, that an answer runs past 256 tokens.

Usage: python synthgen/demo/model.py OUT_DIR [--arch qwen2|llama] [--vocab 2048]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script by the demo venv's python
from synthgen.demo.bpe import padded_vocab_size, train_bpe  # noqa: E402  (imports only `tokenizers`)

CONTEXT_LENGTH = 2048
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
THINK, END_THINK, EOS = "<think>", "</think>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
CORPUS_FILES = 200  # the stdlib modules the tokenizer is trained on (bpe.py's recipe)
SEED = 0

# What the model writes: one phrase of each slot, in order, with these weights (the first of each slot
# is the greedy choice). An answer is <think> + the reasoning slots + </think> + the answer slots + EOS.
# The next-token probabilities are the bigram frequencies over all these combinations, so at a word
# two phrases share, sampling may cross from one to the other. Reasoning and answer share no token
# (the current token alone says which part the model is in), and within the greedy phrases no token
# repeats (greedy decoding would loop). The build asserts both.
REASONING_SLOTS: tuple[tuple[tuple[float, str], ...], ...] = (
    (
        (4.0, "A user has a message for me"),
        (1.0, "A user has some text for me"),
        (1.0, "I have a new message"),
        (1.0, "I have some text from a user"),
    ),
    (
        (4.0, ", so I should look at it first"),
        (1.0, ", and I can read it"),
        (1.0, ", so I will check it"),
        (1.0, ", and I should read it first"),
    ),
    (
        (4.0, "; then write one line:"),
        (1.0, "; one line will do:"),
        (1.0, "; then I can write:"),
        (1.0, "; I will write one line:"),
    ),
)
ANSWER_SLOTS: tuple[tuple[tuple[float, str], ...], ...] = (
    (
        (4.0, "The result is here."),
        (1.0, "The result is as you need."),
        (1.0, "The result is the same as the input."),
        (1.0, "The result is in the input."),
    ),
    (  # a second sentence, or none (the end-of-turn token right after the first)
        (4.0, ""),
        (1.0, " This is all you need."),
        (1.0, " It is the same as the input."),
    ),
)
MARGIN = 24.0  # logit of a designed successor over every other token: those get ~2048 * e^-20 in all
LAYER_SCALE = 0.05  # the decoder layers' output projections, times this: their effect on the logits stays small
NOISE = 0.25  # each token's own random component in the embedding (the rest is its state's direction)
Chain = dict[int, dict[int, float]]  # state id -> {next id: probability}
OTHER = -1  # the state of every token outside the phrases
CHECK_SAMPLES = 64
CHECK_MAX_TOKENS = 256  # the demo's default --max-tokens


def build_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    tok = PreTrainedTokenizerFast(
        tokenizer_object=train_bpe(SPECIAL_TOKENS, vocab_size=vocab_size, corpus_files=CORPUS_FILES),
        bos_token="<|endoftext|>",
        eos_token=EOS,
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>", THINK, END_THINK],
        model_max_length=CONTEXT_LENGTH,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def phrase_ids(tok: PreTrainedTokenizerFast, text: str) -> list[int]:
    """The ids of a phrase, asserting that each of its words is one token."""
    ids: list[int] = tok.encode(text, add_special_tokens=False)
    words = tok.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)
    assert len(ids) == len(words), f"demo model: a word of {text!r} is not one token: {tok.convert_ids_to_tokens(ids)}"
    return ids


def transitions(tok: PreTrainedTokenizerFast) -> Chain:
    """state id -> {next id: probability}, from the weighted bigrams of every combination of phrases."""
    think, end_think, eos = (tok.convert_tokens_to_ids(t) for t in (THINK, END_THINK, EOS))
    reasoning = [[(w, phrase_ids(tok, text)) for w, text in slot] for slot in REASONING_SLOTS]
    answer = [[(w, phrase_ids(tok, text)) for w, text in slot] for slot in ANSWER_SLOTS]
    tokens_of = [{i for slot in part for _, ids in slot for i in ids} for part in (reasoning, answer)]
    shared = tokens_of[0] & tokens_of[1]
    assert not shared, f"demo model: reasoning and answer share tokens {tok.convert_ids_to_tokens(sorted(shared))}"
    counts: Chain = defaultdict(lambda: defaultdict(float))
    for combo in itertools.product(*reasoning, *answer):
        weight = math.prod(w for w, _ in combo)
        n = len(reasoning)
        thought, said = (i for _, ids in combo[:n] for i in ids), (i for _, ids in combo[n:] for i in ids)
        seq = [think, *thought, end_think, *said, eos]
        for a, b in itertools.pairwise(seq):
            counts[a][b] += weight
    return {a: {b: c / sum(nxt.values()) for b, c in nxt.items()} for a, nxt in counts.items()}


def greedy_path(chain: Chain, start: int, eos: int) -> list[int]:
    path, state = [start], start
    while state != eos:
        state = max(chain[state].items(), key=lambda kv: kv[1])[0]
        assert state not in path, "demo model: the greedy answer loops"
        path.append(state)
    return path


def overrun_probability(chain: Chain, start: int, eos: int, steps: int) -> float:
    """P(no EOS within `steps` tokens) when sampling the chain at temperature 1."""
    mass = {start: 1.0}
    for _ in range(steps - 1):
        nxt: dict[int, float] = defaultdict(float)
        for state, p in mass.items():
            for b, q in chain[state].items():
                if b != eos:
                    nxt[b] += p * q
        mass = nxt
    return sum(mass.values())


def set_weights(model: torch.nn.Module, chain: Chain, start: int) -> None:
    """Embedding and LM head so that lm_head(norm(embed(i))) = MARGIN + log p(j | i) for the chain's
    successors j of i and 0 for every other token; every token outside the chain is followed by `start`."""
    chain = {**chain, OTHER: {start: 1.0}}
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    vocab, hidden = emb.shape
    states = sorted(chain)
    assert len(states) < hidden, f"demo model: {len(states)} states do not fit a hidden size of {hidden}"
    gen = torch.Generator().manual_seed(SEED)
    basis, _ = torch.linalg.qr(torch.randn(hidden, hidden, generator=gen, dtype=torch.float64))
    direction = {s: basis[:, k] for k, s in enumerate(states)}  # one orthonormal direction per state
    spare = basis[:, len(states) :]
    noise = spare @ torch.randn(spare.shape[1], vocab, generator=gen, dtype=torch.float64)
    noise = noise / noise.norm(dim=0, keepdim=True)
    scale = math.sqrt(hidden)  # |e| = sqrt(hidden): RMS 1, so the final RMSNorm (weight 1) leaves it as is
    along = math.sqrt(1 - NOISE**2)
    e = torch.empty(vocab, hidden, dtype=torch.float64)
    for i in range(vocab):
        e[i] = scale * (along * direction.get(i, direction[OTHER]) + NOISE * noise[:, i])
    u = torch.zeros(vocab, hidden, dtype=torch.float64)
    for s in states:
        for j, p in chain[s].items():
            u[j] += (MARGIN + math.log(p)) / (scale * along) * direction[s]
    with torch.no_grad():
        emb.copy_(e.to(emb.dtype))
        head.copy_(u.to(head.dtype))
        for name, param in model.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                param.mul_(LAYER_SCALE)


def build_model(arch: str, tok: PreTrainedTokenizerFast, chain: Chain) -> torch.nn.Module:
    bos = tok.convert_tokens_to_ids("<|endoftext|>")
    eos = tok.convert_tokens_to_ids(EOS)
    common = dict(
        # Rounded up to a multiple of 64 because kernels like aligned sizes; the extra rows are
        # never produced by the tokenizer.
        vocab_size=padded_vocab_size(len(tok)),
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
    torch.manual_seed(SEED)
    model = AutoModelForCausalLM.from_config(cfg)
    set_weights(model, chain, tok.convert_tokens_to_ids(THINK))
    return model.to(torch.bfloat16).eval()


def check(model: torch.nn.Module, tok: PreTrainedTokenizerFast, chain: Chain) -> dict[str, object]:
    """Generate as the server will (greedy, and sampled at temperature 1) and assert the answers end well."""
    think, end_think, eos = (tok.convert_tokens_to_ids(t) for t in (THINK, END_THINK, EOS))
    expected = greedy_path(chain, think, eos)
    prompts = [
        [{"role": "user", "content": "hello world"}],
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a prime number?"}],
        [{"role": "user", "content": "~" * 300}],
    ]
    for messages in prompts:
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
        out = model.generate(**ids, max_new_tokens=len(expected) + 8, do_sample=False)
        got = out[0, ids["input_ids"].shape[1] :].tolist()
        assert got == expected, f"demo model: greedy answer {tok.decode(got)!r}, expected {tok.decode(expected)!r}"
    tok.padding_side = "left"  # for this batch only: a decoder pads on the left
    batch = tok.apply_chat_template(
        [[{"role": "user", "content": f"question {i}"}] for i in range(CHECK_SAMPLES)],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
        padding=True,
    )
    tok.padding_side = "right"
    torch.manual_seed(SEED)
    out = model.generate(**batch, max_new_tokens=CHECK_MAX_TOKENS, do_sample=True, temperature=1.0, top_k=0, top_p=1.0)
    lengths, good = [], 0
    for row in out[:, batch["input_ids"].shape[1] :].tolist():
        if eos in row:
            row = row[: row.index(eos) + 1]
            lengths.append(len(row))
            body = row[1:-1]
            well_formed = row[0] == think and body.count(end_think) == 1 and think not in body
            split = body.index(end_think) if end_think in body else 0
            # Reasoning and answer are non-empty, and the ids are what the tokenizer makes of the text.
            canonical = tok.encode(tok.decode(row), add_special_tokens=False) == row
            good += well_formed and 0 < split < len(body) - 1 and canonical
    assert good >= CHECK_SAMPLES - 2, f"demo model: only {good} of {CHECK_SAMPLES} sampled answers ended well"
    overrun = overrun_probability(chain, think, eos, CHECK_MAX_TOKENS)
    assert overrun < 1e-9, f"demo model: an answer runs past {CHECK_MAX_TOKENS} tokens with probability {overrun}"
    return {
        "greedy_answer": tok.decode(expected),
        "greedy_tokens": len(expected),
        "sampled_ended_well": f"{good}/{CHECK_SAMPLES}",
        "sampled_tokens_mean": round(sum(lengths) / max(1, len(lengths)), 1),
        "sampled_tokens_max": max(lengths, default=0),
        f"p_longer_than_{CHECK_MAX_TOKENS}": overrun,
    }


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", help="directory to write the model and tokenizer into")
    parser.add_argument(
        "--arch", choices=["qwen2", "llama"], default="qwen2", help="model architecture (default qwen2)"
    )
    parser.add_argument("--vocab", type=int, default=2048, help="tokenizer vocabulary size (default 2048)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # a few tiny matrices: threads only cost here, on a shared machine

    os.makedirs(args.out_dir, exist_ok=True)
    tok = build_tokenizer(args.vocab)
    assert [tok.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS] == list(range(len(SPECIAL_TOKENS)))
    chain = transitions(tok)
    model = build_model(args.arch, tok, chain)
    summary = {"out_dir": args.out_dir, "arch": args.arch, **check(model, tok, chain)}

    tok.save_pretrained(args.out_dir)
    model.save_pretrained(args.out_dir, safe_serialization=True)
    cfg = model.config
    GenerationConfig(
        bos_token_id=cfg.bos_token_id, eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id, do_sample=False
    ).save_pretrained(args.out_dir)
    summary.update(
        tokenizer_vocab=len(tok),
        model_vocab=cfg.vocab_size,
        params=sum(p.numel() for p in model.parameters()),
        seconds=round(time.monotonic() - started, 1),
    )
    print(json.dumps(summary), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
