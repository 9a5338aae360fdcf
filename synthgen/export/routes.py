"""Resolving a request: the datasets (select), the tokenizer, the vocabulary and the render check's route per
dataset. Loading a tokenizer is the slow part of a start; it happens only when the check or the vocabulary
needs it.

The tokenizer is --tokenizer, else the one each dataset's settings record (when its folder is here); a recorded
one that does not load is a note, not an error. The vocabulary is the model's config.json vocab_size, else
the tokenizer's length.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from synthgen.data.provenance import recorded_sets
from synthgen.errors import TokenizerError, UsageError
from synthgen.export import formats
from synthgen.export.config import DatasetRef, ExportConfig, ExportRequest
from synthgen.export.rendercheck import Route, SpecForgeRoute, TemplateRoute, specforge_available

# Columns of a specforge row that are not template variables (the trainer pops or ignores them).
TEMPLATE_SKIP_KEYS = frozenset({"id", "conversations", "tools", "status", "synthgen_meta"})

Say = Callable[[str], None]  # a note for the user (stderr)


def resolve(request: ExportRequest, datasets: tuple[DatasetRef, ...], note: Say) -> ExportConfig:
    """The config of an export of ``datasets`` (chosen by select.choose_datasets)."""
    checkers, vocabs = render_setup(request, datasets, note)
    return ExportConfig(
        datasets=datasets,
        format=request.format,
        out=request.out,
        keep_truncated=request.keep_truncated,
        shuffle=request.shuffle,
        seed=request.seed,
        val_fraction=request.val_fraction,
        vocabs=vocabs,
        checkers=checkers,
        fail_on_drift=request.fail_on_drift,
        settings=request.settings,
    )


def tokenizer_vocab_size(tokenizer: Any) -> int | None:
    try:
        return len(tokenizer) if tokenizer is not None else None
    except TypeError:  # a stand-in without a length
        return None


def recorded_tokenizer(ref: DatasetRef) -> str | None:
    """The tokenizer folder the dataset's latest settings set names, when it is a folder here."""
    for entry in reversed(recorded_sets(ref.path.parent)):
        path = entry["settings"].get("tokenizer")
        if isinstance(path, str) and path and Path(path).expanduser().is_dir():
            return path
    return None


def _check_flags(request: ExportRequest, check: bool) -> None:
    if request.specforge_template and not check:
        raise UsageError("--specforge-template is for the render check of specforge/messages rows; drop it")
    if request.specforge_template and not specforge_available():
        raise UsageError(
            f"--specforge-template {request.specforge_template}: the specforge package does not import here "
            "(pip install --no-deps specforge, with torch, transformers and datasets); drop the flag to check "
            "with the model's chat template"
        )


def _route(request: ExportRequest, tokenizer: Any) -> Route:
    try:
        if request.specforge_template:
            return SpecForgeRoute(tokenizer, request.specforge_template)
        return TemplateRoute(tokenizer, TEMPLATE_SKIP_KEYS)
    except KeyError as exc:
        raise UsageError(f"--specforge-template {exc.args[0]}") from None


def render_setup(
    request: ExportRequest, datasets: tuple[DatasetRef, ...], note: Say
) -> tuple[dict[str, Route], dict[str, int]]:
    """(the render check's route per dataset, the vocabulary size per dataset)."""
    from synthgen.chat.templating import model_config, model_vocab_size

    paths = {ref.name: request.tokenizer or recorded_tokenizer(ref) for ref in datasets}
    check = formats.get(request.format).render_check and request.render_check
    _check_flags(request, check)
    loaded: dict[str, Any] = {}
    checkers: dict[str, Route] = {}
    vocabs: dict[str, int] = {}
    for ref in datasets:
        path = paths[ref.name]
        if path is None:
            continue
        vocab = model_vocab_size(model_config(path))
        if (check or vocab is None) and path not in loaded:
            loaded[path] = _load(request, path, note)
        tokenizer = loaded.get(path)
        if vocab is None and tokenizer is not None:
            vocab = tokenizer_vocab_size(tokenizer)
        if vocab is not None:
            vocabs[ref.name] = vocab
        if check and tokenizer is not None:
            _check_template(ref, tokenizer, note)
            checkers[ref.name] = _route(request, tokenizer)
    return checkers, vocabs


def _check_template(ref: DatasetRef, tokenizer: Any, note: Say) -> None:
    """A note when the tokenizer's chat template is not the one the dataset's latest settings set rendered with."""
    from synthgen.chat.templating import ChatRenderer

    sets = recorded_sets(ref.path.parent)
    recorded = sets[-1]["settings"].get("chat_template_sha256") if sets else None
    try:
        used = ChatRenderer(tokenizer).template_hash
    except TokenizerError:
        return
    if recorded and recorded != used:
        note(
            f"{ref.name}: the tokenizer's chat template is not the one the run rendered with (settings.jsonl "
            "chat_template_sha256); the render check compares with another template"
        )


def _load(request: ExportRequest, path: str, note: Say) -> Any:
    from synthgen.chat.templating import load_tokenizer  # transformers only when a tokenizer is used

    try:
        return load_tokenizer(path, trust_remote_code=request.trust_remote_code)
    except TokenizerError as exc:
        if request.tokenizer is not None:
            raise
        note(f"render check skipped for the recorded tokenizer {path}: {exc}")
        return None
