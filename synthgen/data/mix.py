"""--sampling-mix: weighted recipes, read and checked once, and the recipe each sample draws (pure but the read).

A mix is a JSON list of recipes, given inline or as a file::

    [{"weight": 3, "temperature": 0.0},
     {"weight": 1, "temperature": 0.8, "top_p": 0.95, "chat_template_kwargs": {"thinking": false}}]

A recipe may set every sampling flag of run_inference.py, by its option name (``RECIPE_KEYS``: the rows of
synthgen.data.sampling_keys with a flag; ``sampling_params`` as ``--sampling-params``: more SGLang sampling keys), and
``chat_template_kwargs``; ``weight`` (default 1) is its share of the draws. A key
the recipe leaves out takes the run's flag (``--temperature``, ``--chat-template-kwargs``, ...), and the
recipe's kwargs are laid over the run's. Each (prompt, sample) draws one recipe with a generator seeded by
``samples.draw_key(--seed, id, sample)``: the same command draws the same recipes, whatever the order.
"""

from __future__ import annotations

import difflib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from synthgen.data.openfiles import read_input
from synthgen.data.samples import draw_key
from synthgen.data.sampling_keys import BY_NAME, SamplingKey, reserved
from synthgen.errors import UsageError

FLAG = "--sampling-mix"
EXAMPLE = '[{"weight": 3, "temperature": 0.0}, {"weight": 1, "temperature": 0.8, "top_p": 0.95}]'
MAX_MIX_BYTES = 1 << 20
MAX_RECIPES = 1000


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# recipe key -> its row: every sampling flag of run_inference.py, checked as the flag is.
RECIPE_KEYS: dict[str, SamplingKey] = BY_NAME
KWARGS = "chat_template_kwargs"
EXTRA = "sampling_params"  # as --sampling-params: SGLang sampling keys the flags above do not name
WEIGHT = "weight"
ALL_KEYS = (WEIGHT, *RECIPE_KEYS, EXTRA, KWARGS)
# Set by the run for each request: a recipe that sets one would not be what was sent.
RESERVED = reserved(samples=True)


@dataclass(frozen=True)
class Recipe:
    """One recipe as given: its weight, the sampling flags it sets and its template kwargs."""

    index: int
    weight: float
    params: Mapping[str, Any]  # recipe keys (RECIPE_KEYS) it sets
    kwargs: Mapping[str, Any]  # chat_template_kwargs it sets
    extra: Mapping[str, Any] | None = None  # sampling_params it sets

    def as_json(self) -> dict[str, Any]:
        """The recipe as settings.jsonl records it (and as it is given: a mix read back is this mix)."""
        out: dict[str, Any] = {WEIGHT: self.weight, **self.params}
        if self.extra:
            out[EXTRA] = dict(self.extra)
        if self.kwargs:
            out[KWARGS] = dict(self.kwargs)
        return out


@dataclass(frozen=True)
class SamplingMix:
    recipes: tuple[Recipe, ...]

    @property
    def total_weight(self) -> float:
        return sum(r.weight for r in self.recipes)

    def as_json(self) -> list[dict[str, Any]]:
        return [r.as_json() for r in self.recipes]

    def draw(self, seed: int, prompt_id: str, sample: int) -> Recipe:
        """The recipe of one (prompt, sample): a generator seeded by that pair and --seed alone."""
        if len(self.recipes) == 1:
            return self.recipes[0]
        point = random.Random(draw_key(seed, prompt_id, sample)).random() * self.total_weight
        for recipe in self.recipes:
            point -= recipe.weight
            if point < 0:
                return recipe
        return self.recipes[-1]  # float rounding at the very top end

    def counts(self, draws: Sequence[tuple[str, int]], seed: int) -> list[int]:
        """How many of these (prompt id, sample) pairs draw each recipe (--dry-run's table)."""
        out = [0] * len(self.recipes)
        for prompt_id, sample in draws:
            out[self.draw(seed, prompt_id, sample).index] += 1
        return out


@dataclass(frozen=True)
class Effective:
    """What one sample's request carries: the run's flags with the recipe laid over them."""

    recipe: int | None  # None: no mix
    sampling: dict[str, Any]  # SGLang sampling_params keys the user chose (max_new_tokens apart)
    max_tokens: int
    kwargs: dict[str, Any]

    def as_row(self) -> dict[str, Any]:
        """The row's ``recipe``: its index, its effective sampling params and kwargs."""
        return {
            "index": self.recipe,
            "sampling_params": {**self.sampling, "max_new_tokens": self.max_tokens},
            KWARGS: self.kwargs,
        }


def effective(
    recipe: Recipe | None, sampling: Mapping[str, Any], max_tokens: int, kwargs: Mapping[str, Any]
) -> Effective:
    """``sampling``/``max_tokens``/``kwargs``: the run's flags; the recipe's keys win over them."""
    chosen = dict(sampling)
    limit = max_tokens
    if recipe is None:
        return Effective(None, chosen, limit, dict(kwargs))
    chosen.update(recipe.extra or {})
    for key, value in recipe.params.items():
        if key == "max_tokens":
            limit = int(value)
        else:
            chosen[RECIPE_KEYS[key].key] = value
    return Effective(recipe.index, chosen, limit, {**kwargs, **recipe.kwargs})


# --- reading ---------------------------------------------------------------------------------------
def load_mix(text: str) -> SamplingMix:
    """``--sampling-mix``'s value: JSON when it starts with ``[`` (after blanks), else a file holding it."""
    stripped = text.strip()
    if not stripped:
        raise UsageError(f"{FLAG} is empty; give a JSON list of recipes or a file holding one, e.g. '{EXAMPLE}'")
    if stripped.startswith(("[", "{")):
        return parse_mix(stripped, FLAG)
    path = Path(stripped)
    try:
        data = read_input(path, "a mix is a short JSON list of recipes", MAX_MIX_BYTES)
    except FileNotFoundError:
        raise UsageError(
            f"{FLAG}: no file {path} (and not JSON: a mix given inline starts with '['); e.g. '{EXAMPLE}'"
        ) from None
    except OSError as exc:
        raise UsageError(f"{FLAG}: cannot read {path} ({exc.strerror}); check the path") from None
    return parse_mix(data.decode("utf-8", errors="replace"), str(path))


def parse_mix(text: str, where: str) -> SamplingMix:
    """A mix from its JSON text; ``where`` names the file or the flag in every error."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON ({exc}); write a list of recipes, e.g. '{EXAMPLE}'") from None
    if not isinstance(data, list) or not data:
        raise UsageError(f"{where}: a mix is a non-empty JSON list of recipes, e.g. '{EXAMPLE}'")
    if len(data) > MAX_RECIPES:
        raise UsageError(f"{where}: {len(data):,} recipes; at most {MAX_RECIPES:,}")
    return SamplingMix(tuple(parse_recipe(item, index, where) for index, item in enumerate(data)))


def parse_recipe(item: Any, index: int, where: str) -> Recipe:
    at = f"{where}: recipe {index}"
    if not isinstance(item, dict):
        raise UsageError(f'{at} is not an object; write it like {{"weight": 1, "temperature": 0.8}}')
    for key in item:
        if key not in ALL_KEYS:
            close = difflib.get_close_matches(key.replace("-", "_").lstrip("_"), ALL_KEYS, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise UsageError(f"{at}: unknown key '{key}'; {hint}a recipe takes {', '.join(ALL_KEYS)}")
    weight = item.get(WEIGHT, 1)
    if not _is_number(weight) or not (weight > 0 and math.isfinite(weight)):
        raise UsageError(f"{at}: weight must be a positive number, got {orjson.dumps(weight).decode()}")
    params = {}
    for key, row in RECIPE_KEYS.items():
        if key in item and item[key] is not None:
            problem = row.problem(item[key])
            if problem:
                shown = orjson.dumps(item[key]).decode()
                raise UsageError(f"{at}: {key} {problem} (as {row.flag}), got {shown}")
            params[key] = item[key]
    kwargs = item.get(KWARGS) or {}
    if not isinstance(kwargs, dict):
        raise UsageError(f'{at}: {KWARGS} must be an object, e.g. {{"thinking": false}}')
    extra = item.get(EXTRA) or {}
    if not isinstance(extra, dict):
        raise UsageError(f'{at}: {EXTRA} must be an object of SGLang sampling keys, e.g. {{"min_p": 0.05}}')
    reserved = [key for key in RESERVED if key in extra]
    if reserved:
        raise UsageError(f"{at}: {EXTRA}: {reserved[0]} is set by the run for each sample; leave it out")
    named = [key for key, row in RECIPE_KEYS.items() if row.key in extra]
    if named:
        key = named[0]
        raise UsageError(f"{at}: {EXTRA} sets {RECIPE_KEYS[key].key}; give it as the recipe's own key '{key}'")
    return Recipe(index, weight, params, kwargs, extra)
