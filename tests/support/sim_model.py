"""The simulator's fake model: decodes the prompt, finds its last user or tool turn and writes the styled
output (``sglang_sim.py``'s docstring describes it)."""

from __future__ import annotations

import functools
import json
import random
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sim_config import (
    END_MARKERS,
    FILLER_WORDS,
    HARMONY_RETURN,
    LOOP_LENGTH,
    LOOP_SENTENCE,
    MAX_CONTINUED_OUTPUT,
    SIM_MARKER,
    THINK_CLOSE,
    THINK_END_BY_PARSER,
    THINK_OPEN,
    TOOL_NAME,
    TURN_HEADER,
    LengthDist,
    prompt_sha1,
)
from tokenizers import Tokenizer

if TYPE_CHECKING:  # a cycle at run time: only the annotations need it
    from sim_requests import Sequence


def read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


class FakeModel:
    """Tokenizer plus a deterministic 'model' that answers the last user or tool turn."""

    def __init__(
        self,
        tokenizer_dir: Path,
        reasoning: bool,
        style: str = "think",
        length_dist: LengthDist | None = None,
        reasoning_parser: str | None = None,
    ):
        self.tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
        self.reasoning = reasoning
        self.style = style
        self.length_dist = length_dist
        self.stop_ids = self._stop_ids(tokenizer_dir)
        if not self.stop_ids:
            raise ValueError(
                f"{tokenizer_dir}: no EOS token in tokenizer_config.json, config.json or generation_config.json"
            )
        self.eos_id = self.stop_ids[0]
        self.pad_id = self.encode_text(".")[-1]
        # What 0.5.23 counts reasoning tokens up to; None without --reasoning-parser.
        self.think_end_ids: list[int] | None = None
        if reasoning_parser:
            self.think_end_ids = self.encode_text(THINK_END_BY_PARSER.get(reasoning_parser, THINK_CLOSE))

    def _stop_ids(self, tokenizer_dir: Path) -> list[int]:
        ids: list[int] = []
        eos = read_json(tokenizer_dir / "tokenizer_config.json").get("eos_token")
        eos = eos["content"] if isinstance(eos, dict) else eos
        eos_id = self.tokenizer.token_to_id(eos) if isinstance(eos, str) else None
        if eos_id is not None:
            ids.append(eos_id)
        for name in ("config.json", "generation_config.json"):
            value = read_json(tokenizer_dir / name).get("eos_token_id")
            for token in value if isinstance(value, list) else [value]:
                if isinstance(token, int) and token not in ids:
                    ids.append(token)
        return ids

    def encode_prompt(self, text: str) -> list[int]:
        # SGLang tokenizes text with the HF default add_special_tokens=True (BOS if the tokenizer
        # adds one), which is why a rendered template that already has BOS gets a second one.
        return self.tokenizer.encode(text).ids

    def encode_text(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], skip_special_tokens: bool) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    def planned(self, seq: Sequence) -> list[int]:
        """The output of one sequence: the model's, or a sick worker's "!" to the length limit."""
        if seq.garbled:
            return self.encode_text("!")[:1] * seq.max_new_tokens
        return self.complete(seq.input_ids, seq.variation)

    def complete(self, input_ids: list[int], variation: int = 0) -> list[int]:
        """The output, ending with a stop id unless it loops, that the model would write given
        unlimited tokens (``variation`` pad tokens before the stop id: a seeded sample, see
        seeded_variation). Greedy and stateless, as a model is: when the ids are a prompt followed
        by the start of this model's output for it (a continuation: prompt + partial ids), the
        answer is the rest of that output.

        A ``<think>`` that ends the ids can be the template's (Kimi-style) or the model's first
        token; the text is the same either way. Without a ``[sim:...]`` marker it is the prompt's,
        as before continuations existed; with one it is the model's, so ``[sim:long=N]`` stays N ids
        long whatever the partial. Lengths from ``--output-len-dist`` therefore hold across a
        continuation only for partials longer than that one token and prompts not ending in it."""
        marked = SIM_MARKER.search(self.decode(input_ids, skip_special_tokens=False)) is not None
        for split in self._continuation_splits(input_ids, marked):
            rest = self._continued(input_ids, split, variation)
            if rest is not None:
                return rest
        return self._complete_prompt(input_ids, variation)

    def _continued(self, input_ids: list[int], split: int, variation: int = 0) -> list[int] | None:
        full = self._complete_prompt(input_ids[:split], variation)
        partial = len(input_ids) - split
        return full[partial:] if input_ids[split:] == full[:partial] else None

    def _continuation_splits(self, input_ids: list[int], marked: bool) -> list[int]:
        """Where a partial output could begin, longest partial first: positions whose ids begin
        one of the output's forms (full think block, open think tag left out, no think block)."""
        tail = self.decode(input_ids[-8:], skip_special_tokens=False)
        if not marked and tail.rstrip().endswith(THINK_OPEN):
            return []
        starts = self._output_starts
        firsts = {ids[0] for ids in starts}
        end = len(input_ids)
        return [
            i
            for i in range(max(1, end - MAX_CONTINUED_OUTPUT), end)
            if input_ids[i] in firsts and any(input_ids[i : i + len(ids)] == ids[: end - i] for ids in starts)
        ]

    @functools.cached_property
    def _output_starts(self) -> list[list[int]]:
        starts = [THINK_OPEN + "Reasoning", "Reasoning", "Answer", "<|channel|>", "<tool_call>"]
        starts += ["<|tool_calls_section_begin|>"]
        return [ids for ids in (self.encode_text(text) for text in starts) if ids]

    def _complete_prompt(self, input_ids: list[int], variation: int = 0) -> list[int]:
        prompt = self.decode(input_ids, skip_special_tokens=False)
        kind, message = last_turn(prompt)
        marker = SIM_MARKER.search(message)
        if marker and marker["loop"] is not None:
            return self._looping(prompt)
        ids = self.encode_text(self.output_text(prompt))
        if not ids or ids[-1] not in self.stop_ids:
            ids.append(self.eos_id)
        if variation:
            ids = ids[:-1] + [self.pad_id] * variation + ids[-1:]
        if marker and marker["long"]:
            return self._lengthened(prompt, input_ids, ids, int(marker["long"]))
        if self.length_dist is None:
            return ids
        length = self.length_dist.length(prompt_sha1(input_ids))
        body, stop = ids[:-1], ids[-1]
        if length <= len(ids):
            return body[: length - 1] + [stop]
        return body + [self.pad_id] * (length - len(ids)) + [stop]

    def _looping(self, prompt: str) -> list[int]:
        """``[sim:loop]``: the start of the reasoning, then one sentence over and over, never a stop."""
        head = self.output_text(prompt)
        reasoning = f"Reasoning about: {last_turn(prompt)[1]}"
        cut = head.find(reasoning)
        head = head[: cut + len(reasoning)] if cut >= 0 else ""
        ids = self.encode_text(head + LOOP_SENTENCE)
        sentence = self.encode_text(LOOP_SENTENCE)
        repeats = max(1, (LOOP_LENGTH - len(ids)) // max(1, len(sentence)) + 1)
        return ids + sentence * repeats

    def _lengthened(self, prompt: str, input_ids: list[int], ids: list[int], length: int) -> list[int]:
        """``[sim:long=N]``: exactly N ids (stop id included), the reasoning (else the answer)
        lengthened with varied words that never repeat a pattern, so a loop guard stays quiet."""
        text = self.output_text(prompt)
        kind, message = last_turn(prompt)
        for part in (f"Reasoning about: {message}", f"Answer: {message}"):
            at = text.find(part)
            if at >= 0:
                cut = at + len(part)
                break
        else:
            cut = len(text)
        before = self.encode_text(text[:cut])
        after = ids[len(before) :] if ids[: len(before)] == before else ids[-1:]
        words = random.Random(prompt_sha1(input_ids))
        filler: list[int] = []
        while len(before) + len(filler) + len(after) < length:
            filler += self.encode_text(" " + " ".join(words.choice(FILLER_WORDS) for _ in range(64)))
        body = (before + filler[: max(0, length - len(before) - len(after))] + after)[: length - 1]
        return body + [ids[-1]]

    def output_text(self, prompt: str) -> str:
        kind, message = last_turn(prompt)
        reasoning, answer = f"Reasoning about: {message}", f"Answer: {message}"
        if kind == "user" and self.style == "harmony_tool":
            arguments = json.dumps({"query": message}, ensure_ascii=False)
            return (
                f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant<|channel|>commentary "
                f"to=functions.{TOOL_NAME} <|constrain|>json<|message|>{arguments}<|call|>"
            )
        if self.style in ("harmony", "harmony_tool"):
            final = f"<|channel|>final<|message|>{answer}{HARMONY_RETURN}"
            if not self.reasoning:
                return final
            return f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant{final}"
        if kind == "user" and self.style == "kimi_tool":
            arguments = json.dumps({"query": message}, ensure_ascii=False)
            answer = (
                f"<|tool_calls_section_begin|><|tool_call_begin|>functions.{TOOL_NAME}:0"
                f"<|tool_call_argument_begin|>{arguments}<|tool_call_end|><|tool_calls_section_end|>"
            )
        elif kind == "user" and self.style == "qwen_tool":
            call = json.dumps({"name": TOOL_NAME, "arguments": {"query": message}}, ensure_ascii=False)
            answer = f"<tool_call>\n{call}\n</tool_call>"
        tail = prompt.rstrip()
        if not self.reasoning or tail.endswith(THINK_CLOSE):
            return answer
        if tail.endswith(THINK_OPEN):
            return reasoning + THINK_CLOSE + answer
        return THINK_OPEN + reasoning + THINK_CLOSE + answer

    def reasoning_tokens(self, output: list[int]) -> int:
        """0.5.23's count for a request with require_reasoning: tokens through the end marker."""
        end = self.think_end_ids
        if not end:
            return 0
        for i in range(len(output) - len(end) + 1):
            if output[i : i + len(end)] == end:
                return i + len(end)
        return len(output)


def last_turn(prompt: str) -> tuple[str, str]:
    """("user" | "tool", U) for the prompt's last user or tool turn (see the module docstring)."""
    found: tuple[str, str, int] | None = None  # kind, format, content start
    for match in TURN_HEADER.finditer(prompt):
        fmt = str(match.lastgroup) if match.lastgroup != "kimi_name" else "kimi"
        kind = turn_kind(fmt, match)
        if kind:
            found = (kind, fmt, match.end())
    if found is None:
        return "user", prompt
    kind, fmt, start = found
    end = prompt.find(END_MARKERS[fmt], start)
    content = prompt[start:] if end < 0 else prompt[start:end]
    if fmt == "chatml" and kind == "tool" and "<tool_response>" in content:
        inner = content[content.rfind("<tool_response>") + len("<tool_response>") :]
        content = inner.split("</tool_response>", 1)[0]
    elif fmt == "kimi" and kind == "tool" and content.startswith("## Return of "):
        content = content.partition("\n")[2]
    return kind, content.strip() if kind == "tool" else content


def turn_kind(fmt: str, match: re.Match) -> str | None:
    if fmt == "chatml":
        role = match["chatml"]
        if role == "tool":
            return "tool"
        if role == "user":
            following = match.string[match.end() : match.end() + 64].lstrip()
            return "tool" if following.startswith("<tool_response>") else "user"
        return None
    if fmt == "kimi":
        if match["kimi"] == "user":
            return "user"
        following = match.string[match.end() : match.end() + 13]
        return "tool" if match["kimi_name"] == "tool" or following == "## Return of " else None
    if fmt == "harmony":
        role = match["harmony"].strip()
        return "user" if role == "user" else "tool" if role.startswith("functions.") else None
    if fmt == "llama":
        role = match["llama"]
        return "user" if role == "user" else "tool" if role in ("ipython", "tool") else None
    return "user" if fmt == "ds_user" else "tool"
