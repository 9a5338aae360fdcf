"""What the run renders prompts and reads answers with: the served model's tokenizer, its chat
template and its output parsers, chosen from the server's report and the user's flags, and the
settings they amount to (recorded beside the rows by ``provenance``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from synthgen.chat import templating
from synthgen.chat.parsers import KNOWN_REASONING, KNOWN_TOOL_CALL, OutputParser, unsupported_note
from synthgen.config import RunConfig
from synthgen.data.provenance import Settings
from synthgen.run.mix import Mix
from synthgen.server.client import Generation
from synthgen.server.discovery import ServerContext


@dataclass(frozen=True)
class Model:
    renderer: templating.ChatRenderer
    parser: OutputParser
    max_token_bytes: int | None  # the longest vocabulary entry: B bytes make at least B / this tokens


def load_model(cfg: RunConfig, ctx: ServerContext) -> Model:
    """Tokenizer and template (--tokenizer / --chat-template, else the server's), and the parsers
    (--reasoning-parser / --tool-call-parser, else the ones the server was started with)."""
    assert ctx.tokenizer_path is not None
    template = templating.read_chat_template(cfg.chat_template) if cfg.chat_template else None
    tokenizer = templating.load_tokenizer(ctx.tokenizer_path, cfg.trust_remote_code, template)
    renderer = templating.ChatRenderer(tokenizer, cfg.chat_template_kwargs, cfg.think_start, template)
    parser = OutputParser(
        choose_parser("reasoning", cfg.reasoning_parser, ctx.reasoning_parser, ctx.notes),
        choose_parser("tool-call", cfg.tool_call_parser, ctx.tool_call_parser, ctx.notes),
        cfg.think_start,
        cfg.think_end,
        decode=lambda ids: str(tokenizer.decode(ids, skip_special_tokens=False)),
        chat_template_kwargs=cfg.chat_template_kwargs,
    )
    return Model(renderer, parser, templating.max_token_bytes(tokenizer))


def stop_token(gen: Generation, parser: OutputParser) -> str:
    """The stop token a generation ended on, as text ("" if it did not end on one): SGLang's ``text``
    leaves a matched stop token out while ``output_ids`` keep it, and where the parsers' grammar has it
    (gpt-oss's ``<|call|>`` closes a tool call) the row is parsed from what the model wrote."""
    matched = gen.finish_reason.get("matched")
    if gen.finish_type != "stop" or type(matched) is not int or not gen.output_ids or parser.decode is None:
        return ""
    return parser.decode([matched]) if gen.output_ids[-1] == matched else ""


def choose_parser(kind: str, chosen: str | None, served: str | None, notes: list[str]) -> str | None:
    """The user's parser, else the one the server was started with (the model's), if we know it."""
    if chosen is not None or served is None:
        return chosen
    known = KNOWN_REASONING if kind == "reasoning" else KNOWN_TOOL_CALL
    if served in known:
        return served
    fallback = "the --think-start/--think-end rule" if kind == "reasoning" else "no tool-call parsing"
    notes.append(
        f"the server's {kind} parser '{served}' is not one this tool implements ({unsupported_note(kind, served)}); "
        f"using {fallback}, so rows keep that text in content (pass --{kind}-parser NAME to choose one)"
    )
    return None


def flag_settings(cfg: RunConfig) -> dict[str, Any]:
    """The settings the run's flags decide alone (``provenance.FLAG_SETTINGS``): checked before the
    server is asked."""
    return {
        "chat_template_kwargs": cfg.chat_template_kwargs,
        "sampling_params": cfg.sampling_params(),
        "max_tokens": cfg.max_tokens,
        "regenerate": cfg.regenerate,
        **Mix.from_config(cfg).settings(),
    }


def run_settings(cfg: RunConfig, ctx: ServerContext, model: Model) -> Settings:
    return Settings(
        model=ctx.model,
        weight_version=ctx.weight_version,
        tokenizer=ctx.tokenizer_path,
        chat_template_sha256=model.renderer.template_hash,
        reasoning_parser=model.parser.reasoning,
        tool_call_parser=model.parser.tool_call,
        **flag_settings(cfg),
    )
