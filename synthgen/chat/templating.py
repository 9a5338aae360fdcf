"""Tokenizer loading and chat-template rendering: the only module that imports transformers.

A prompt is rendered to text with the chat template (so we can see whether the template opened
the reasoning block) and then encoded without adding special tokens, since the template already
carries any BOS. The ids are what we send: SGLang would add a second BOS to templated text.

The template is the tokenizer's own unless an override is given (a model that ships none, such as
DeepSeek-V3.2, or a broken one). Templates disagree on the shape of a tool-calling turn: most read
the arguments as an object (the transformers convention SGLang follows), DeepSeek-R1's concatenates
them as a string and wants null content; :meth:`ChatRenderer.render` tries those shapes in a fixed
order and keeps the first the template accepts, so one conversation always renders the same way.

A chat template is code from the model's author, and it runs in a worker thread that cannot be
killed, so every render has a bound: transformers compiles templates with its sandbox
(ImmutableSandboxedEnvironment); ours, ``BoundedEnvironment``, is that sandbox plus a count of
loop iterations and calls (RENDER_STEPS), a wall-clock deadline (RENDER_SECONDS), and a cap on
the output (RENDER_MAX_CHARS, or less: what the served context can hold), checked as the output is
built, before anything is tokenized. A render over a bound raises ``TemplateBudgetError``: the
prompt is skipped (template_error, or prompt_too_long when the output is already longer than the
context), the run goes on.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jinja2 import nodes
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from synthgen.data.conversations import template_messages
from synthgen.data.failures import PROMPT_TOO_LONG, TEMPLATE_ERROR
from synthgen.data.openfiles import read_input
from synthgen.errors import TokenizerError

# transformers prints an advisory about missing PyTorch on import; we only need tokenizers.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

# (tool-call arguments, content of a turn that only calls tools), most common convention first.
TOOL_TURN_SHAPES: tuple[tuple[str, str | None], ...] = (("object", ""), ("string", None), ("string", ""))
# A --chat-template file (a tokenizer_config.json may carry a large vocabulary besides the template).
MAX_TEMPLATE_BYTES = 64 << 20
# The bounds of one render. A real template renders a long conversation in milliseconds and well
# under a million steps; these stop a runaway one (nested loops, exponential macros, a 30 MB output).
RENDER_STEPS = 10_000_000  # loop iterations + calls
RENDER_SECONDS = 10.0
RENDER_MAX_CHARS = 64 << 20
POWER_MAX_BITS = 1 << 20  # 2 ** 10 ** 9 would take the thread for minutes


class TemplateBudgetError(ValueError):
    """A render went over one of its bounds; ``kind`` is the skip's error_type."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


@dataclass
class _Budget:
    deadline: float
    steps: int
    max_chars: int
    too_long: str | None  # the reason when max_chars is the context's bound, else None (the hard cap)

    def tick(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            raise TemplateBudgetError(
                TEMPLATE_ERROR.name, f"the chat template ran over {RENDER_STEPS:,} loop steps and calls; stopped"
            )
        if time.monotonic() > self.deadline:
            raise TemplateBudgetError(
                TEMPLATE_ERROR.name, f"the chat template ran for over {RENDER_SECONDS:.0f} s; stopped"
            )

    def check_size(self, chars: int) -> None:
        if chars > self.max_chars:
            if self.too_long is not None:
                raise TemplateBudgetError(PROMPT_TOO_LONG.name, self.too_long)
            raise TemplateBudgetError(
                TEMPLATE_ERROR.name, f"the chat template's output passed {self.max_chars >> 20} MiB; stopped"
            )


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("synthgen_render_budget", default=None)


class _Counted:
    """A loop's iterable: each iteration is a step of the render's budget (len() as the original's)."""

    __slots__ = ("_items", "_budget")

    def __init__(self, items: Any, budget: _Budget):
        self._items, self._budget = items, budget

    def __iter__(self) -> Iterator[Any]:
        tick = self._budget.tick
        for item in self._items:
            tick()
            yield item

    def __len__(self) -> int:
        return len(self._items)


def counted(items: Any) -> Any:
    """Called by a bounded template on every for-loop's iterable."""
    budget = _BUDGET.get()
    return items if budget is None else _Counted(items, budget)


def sized(text: Any) -> Any:
    """Called by a bounded template on every ``~`` concatenation: a string doubled in a loop stops here."""
    budget = _BUDGET.get()
    if budget is not None and isinstance(text, str):
        budget.check_size(len(text))
    return text


class _AddBounds(NodeTransformer):
    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _imported_call("counted", node.iter)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _imported_call("sized", node)


def _imported_call(name: str, arg: nodes.Node) -> nodes.Call:
    target = nodes.ImportedName(f"{__name__}.{name}", lineno=arg.lineno)
    return nodes.Call(target, [arg], [], None, None, lineno=arg.lineno)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """transformers' sandbox with a budget per render (see the module's docstring). Outside a
    budgeted render (``ChatRenderer`` sets one) it renders exactly as the plain sandbox."""

    intercepted_binops = frozenset({"*", "**"})

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = _AddBounds().visit(super()._parse(source, name, filename))
        tree.set_environment(self)
        return tree  # type: ignore[no-any-return]

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        budget = _BUDGET.get()
        if budget is not None:
            budget.tick()
        return super().call(__context, __obj, *args, **kwargs)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        budget = _BUDGET.get()
        if budget is not None:
            _check_binop(budget, operator, left, right)
        return super().call_binop(context, operator, left, right)

    def concat(self, pieces: Iterable[str]) -> str:
        budget = _BUDGET.get()
        if budget is None:
            return "".join(pieces)
        out, chars = [], 0
        for piece in pieces:
            chars += len(piece)
            budget.check_size(chars)
            out.append(piece)
        return "".join(out)


def _check_binop(budget: _Budget, operator: str, left: Any, right: Any) -> None:
    if operator == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
                budget.check_size(len(seq) * times)
    elif isinstance(left, int) and isinstance(right, int) and right > 0:
        if right * max(abs(left).bit_length() - 1, 0) > POWER_MAX_BITS:
            raise TemplateBudgetError(TEMPLATE_ERROR.name, "the chat template computes a number too large; stopped")


def _install_bounds() -> bool:
    """Make transformers compile chat templates with ``BoundedEnvironment``; True when it does."""
    from transformers.utils import chat_template_utils as ctu

    if getattr(ctu, "ImmutableSandboxedEnvironment", None) is not BoundedEnvironment:
        # transformers builds its sandbox by this module-level name at each compile.
        setattr(ctu, "ImmutableSandboxedEnvironment", BoundedEnvironment)  # noqa: B010
        compile_cache: Any = getattr(ctu, "_compile_jinja_template", None)
        if hasattr(compile_cache, "cache_clear"):
            compile_cache.cache_clear()  # templates compiled before, with the plain sandbox
    return True


def bounded(template_source: str) -> bool:
    """Whether transformers renders ``template_source`` with the bounds (a check of the patch)."""
    from transformers.utils import chat_template_utils as ctu

    compiled = ctu._compile_jinja_template(template_source)
    return isinstance(getattr(compiled, "environment", None), BoundedEnvironment)


@dataclass(frozen=True, slots=True)
class Rendered:
    input_ids: list[int]
    opens_reasoning: bool  # the generation prompt ends with the opening think tag
    text: str = ""


def load_tokenizer(name_or_path: str, trust_remote_code: bool = False, chat_template: str | None = None) -> Any:
    """The tokenizer at ``name_or_path``; it must carry a chat template unless ``chat_template`` overrides it."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    # A name that can only be a local path fails now, not after the hub's retries. A hub id is
    # "name" or "org/name"; "org/name" is taken as a path when "org" is a local folder.
    looks_local = (
        name_or_path.startswith(("/", ".", "~"))
        or "\\" in name_or_path
        or name_or_path.endswith("/")
        or name_or_path.count("/") > 1
        or ("/" in name_or_path and Path(name_or_path.split("/", 1)[0]).is_dir())
    )
    if looks_local and not Path(name_or_path).expanduser().is_dir():
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
    if not chat_template and not getattr(tokenizer, "chat_template", None):
        raise TokenizerError(f"tokenizer '{name_or_path}' has no chat template; pass --tokenizer PATH to one that does")
    return tokenizer


def model_config(*paths: str | None) -> dict[str, Any]:
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


def _config_int(config: dict[str, Any], key: str) -> int | None:
    for holder in (config, config.get("text_config") or {}):
        value = holder.get(key)
        if isinstance(value, int):
            return value
    return None


def model_vocab_size(config: dict[str, Any]) -> int | None:
    """The model's embedding size. Ids at or above it crash SGLang's scheduler (and the whole
    server) rather than fail one request, so the runner never sends them."""
    return _config_int(config, "vocab_size")


def model_context_length(config: dict[str, Any]) -> int | None:
    """max_position_embeddings: the context length when the server does not report one
    (sglang-router answers /v1/models itself, without max_model_len)."""
    return _config_int(config, "max_position_embeddings")


class ChatRenderer:
    """Renders conversations with one chat template and encodes them to the ids we send."""

    def __init__(
        self,
        tokenizer: Any,
        template_kwargs: dict[str, Any] | None = None,
        think_start: str = "<think>",
        chat_template: str | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.template_kwargs = dict(template_kwargs or {})
        self.think_start = think_start
        self.chat_template = chat_template
        source = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
        if isinstance(source, dict):  # a tokenizer with named templates renders with "default"
            source = source.get("default")
        if not isinstance(source, str) or not source:
            raise TokenizerError("the tokenizer has no chat template; pass a template file to use instead")
        self.template_source: str = source
        self.template_hash = hashlib.sha256(source.encode("utf-8")).hexdigest()
        _install_bounds()

    def render_text(
        self,
        messages: Sequence[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_chars: int | None = None,
        too_long: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> str:
        """The template's text for ``messages`` followed by the generation prompt, rendered within the
        bounds (``max_chars``: a smaller output cap, whose skip reason is ``too_long``); raises
        TemplateBudgetError over them, ValueError when the template fails. ``template_kwargs``: a
        sample's recipe's kwargs instead of the run's."""
        cap = RENDER_MAX_CHARS if max_chars is None or max_chars >= RENDER_MAX_CHARS else max_chars
        reason = too_long if cap != RENDER_MAX_CHARS else None
        kwargs: dict[str, Any] = dict(self.template_kwargs if template_kwargs is None else template_kwargs)
        if tools is not None:
            kwargs["tools"] = tools
        if self.chat_template is not None:
            kwargs["chat_template"] = self.chat_template
        calls = any(m.get("role") == "assistant" and m.get("tool_calls") for m in messages)
        shapes = TOOL_TURN_SHAPES if calls else TOOL_TURN_SHAPES[:1]
        first_error: Exception | None = None
        for arguments, null_content in shapes:
            shaped = template_messages(messages, arguments, null_content)
            budget = _BUDGET.set(_Budget(time.monotonic() + RENDER_SECONDS, RENDER_STEPS, cap, reason))
            try:
                text = self.tokenizer.apply_chat_template(shaped, tokenize=False, add_generation_prompt=True, **kwargs)
            except TemplateBudgetError:
                raise  # another shape would run into the same bound
            except Exception as exc:  # jinja2 TemplateError, TypeError, or a template's raise_exception()
                first_error = first_error or exc
                continue
            finally:
                _BUDGET.reset(budget)
            if not isinstance(text, str):  # transformers 5 may hand back a list for batched input
                raise ValueError(f"chat template returned {type(text).__name__}, expected text")
            return text
        raise ValueError(f"chat template failed: {first_error}") from first_error

    def render(
        self,
        messages: Sequence[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        max_chars: int | None = None,
        too_long: str | None = None,
        template_kwargs: dict[str, Any] | None = None,
    ) -> Rendered:
        text = self.render_text(messages, tools, max_chars, too_long, template_kwargs)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return Rendered(input_ids=list(ids), opens_reasoning=text.rstrip().endswith(self.think_start), text=text)


def read_chat_template(path: str | Path) -> str:
    """A chat template file: plain Jinja (``.jinja``) or a tokenizer_config.json carrying one."""
    path = Path(path).expanduser()
    try:
        data = read_input(path, "pass a template file with --chat-template FILE", MAX_TEMPLATE_BYTES)
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")  # as read_text() reads it
    except (OSError, UnicodeDecodeError) as exc:
        raise TokenizerError(f"cannot read chat template {path} ({exc}); pass --chat-template FILE") from exc
    if path.suffix == ".json":
        try:
            template = json.loads(text).get("chat_template")
        except (ValueError, AttributeError) as exc:
            raise TokenizerError(f"{path} is not a tokenizer_config.json with a chat_template") from exc
        if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
            template = next((t.get("template") for t in template if t.get("name") == "default"), None)
        if not isinstance(template, str) or not template:
            raise TokenizerError(f"{path} has no chat_template string")
        return template
    if not text.strip():
        raise TokenizerError(f"chat template {path} is empty")
    return text


def max_token_bytes(tokenizer: Any) -> int | None:
    """An upper bound on the bytes one token stands for (the longest vocabulary entry, UTF-8 encoded;
    byte-level BPE symbols encode to at least the byte they stand for), so a text of B bytes makes at
    least B / this many tokens. None when the vocabulary cannot be read."""
    try:
        vocab = tokenizer.get_vocab()
    except Exception:  # a remote-code tokenizer may not implement it
        return None
    return max((len(token.encode("utf-8")) for token in vocab), default=None) or None
