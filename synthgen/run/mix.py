"""The training mix in a run: what each (prompt, sample) is sent with, what its row records, what --dry-run shows.

    Mix.request(prompt_id, sample)   the sample's seed and its effective recipe (the run's flags, the drawn
                                     recipe laid over them), from --seed, the id and the sample alone
    SampleRequest.sampling()         the sampling_params it is sent with (max_new_tokens apart)
    SampleRequest.row_fields()       what its row adds: sample, sampling_seed, recipe (with a mix)
    Mix.dry_run_lines(pairs)         the draw: how many samples each recipe gets, and its first sample
    Mix.restarting()                 the recipes whose samples restart when ended early, and why

With several samples per prompt or a mix (``RunConfig.mixed``) every request carries ``sampling_seed``: on
a server with ``--enable-deterministic-inference`` it makes the sample reproducible; elsewhere SGLang
accepts it and samples as it would without (tests/integration/test_real_sampling_seed.py). A run of one
sample per prompt and no mix sends and writes what it did before samples existed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from synthgen.config import RunConfig
from synthgen.data.mix import Effective, SamplingMix, effective
from synthgen.data.partials import continuation_blocker
from synthgen.data.samples import sample_rid, sample_seed


@dataclass(frozen=True)
class SampleRequest:
    prompt_id: str
    sample: int
    seed: int  # sampling_params.sampling_seed
    effective: Effective
    mixed: bool  # a --sampling-mix drew the recipe
    seeded: bool = True  # samples or a mix: the request carries its seed and its row says how it was drawn

    def sampling(self) -> dict[str, Any]:
        if not self.seeded:
            return dict(self.effective.sampling)
        return {**self.effective.sampling, "sampling_seed": self.seed}

    def rid(self, base: str) -> str:
        """The request id of one attempt: the sample as a fixed-width suffix, so that no two samples of a
        prompt prefix-match (SGLang's /abort_request matches by prefix)."""
        return sample_rid(base, self.sample) if self.seeded else base

    @property
    def max_tokens(self) -> int:
        return self.effective.max_tokens

    @property
    def kwargs(self) -> dict[str, Any]:
        return self.effective.kwargs

    def row_fields(self) -> dict[str, Any]:
        """What a row says of how it was drawn (nothing for a run of one sample and no mix)."""
        if not self.seeded:
            return {}
        fields: dict[str, Any] = {"sample": self.sample, "sampling_seed": self.seed}
        if self.mixed:
            fields["recipe"] = self.effective.as_row()
        return fields


@dataclass(frozen=True)
class Mix:
    """The run's samples and recipes: ``--samples-per-prompt``, ``--sampling-mix``, ``--seed`` and the
    flags a recipe lays itself over."""

    per_prompt: int
    recipes: SamplingMix | None
    seed: int
    sampling: Mapping[str, Any]  # the run's sampling flags by SGLang's names
    max_tokens: int
    kwargs: Mapping[str, Any]  # --chat-template-kwargs

    @classmethod
    def from_config(cls, cfg: RunConfig) -> Mix:
        return cls(
            cfg.samples_per_prompt,
            cfg.sampling_mix,
            cfg.seed,
            cfg.sampling_params(),
            cfg.max_tokens,
            cfg.chat_template_kwargs,
        )

    @property
    def seeded(self) -> bool:
        return self.per_prompt > 1 or self.recipes is not None

    def request(self, prompt_id: str, sample: int) -> SampleRequest:
        recipe = None if self.recipes is None else self.recipes.draw(self.seed, prompt_id, sample)
        eff = effective(recipe, self.sampling, self.max_tokens, self.kwargs)
        seed = sample_seed(self.seed, prompt_id, sample)
        return SampleRequest(prompt_id, sample, seed, eff, recipe is not None, self.seeded)

    def restarting(self) -> list[tuple[int, str]]:
        """(recipe index, why) of each recipe whose samples are not continued from a partial output but
        restart: its settings count output tokens (``partials.continuation_blocker``)."""
        out: list[tuple[int, str]] = []
        for recipe in self.recipes.recipes if self.recipes is not None else ():
            why = continuation_blocker(effective(recipe, self.sampling, self.max_tokens, self.kwargs).sampling)
            if why is not None:
                out.append((recipe.index, why))
        return out

    def settings(self) -> dict[str, Any]:
        """What settings.jsonl records of the mix (provenance.MIX_DEFAULTS: a run without samples or a mix
        records what it recorded before)."""
        return {
            "samples_per_prompt": self.per_prompt,
            "sample_seed": self.seed if self.seeded else None,
            "sampling_mix": None if self.recipes is None else self.recipes.as_json(),
        }

    def dry_run_lines(self, pairs: Sequence[tuple[str, int]]) -> list[str]:
        """--dry-run: samples per recipe over the (id, sample) pairs this run would send, and the first
        sample of each recipe (its effective parameters)."""
        lines = [f"samples: {len(pairs):,} to send, {self.per_prompt:,} per prompt, --seed {self.seed}"]
        if self.recipes is None:
            return lines
        counts = self.recipes.counts(pairs, self.seed)
        first: dict[int, tuple[str, int]] = {}
        for pid, k in pairs:
            index = self.recipes.draw(self.seed, pid, k).index
            first.setdefault(index, (pid, k))
            if len(first) == len(counts):
                break
        total = self.recipes.total_weight
        lines.append("recipe draw (--sampling-mix):")
        for recipe, count in zip(self.recipes.recipes, counts, strict=True):
            share = f"{count / len(pairs):.1%}" if pairs else "-"
            where = first.get(recipe.index)
            example = ""
            if where is not None:
                req = self.request(*where)
                example = f"; first: {where[0]} sample {where[1]}: {_params(req)}"
            lines.append(
                f"  recipe {recipe.index} (weight {recipe.weight:g}, {recipe.weight / total:.1%}): "
                f"{count:,} samples ({share}){example}"
            )
        return lines


def restart_note(restarting: list[tuple[int, str]]) -> str:
    """The run's note at its start where some recipes' samples restart (``Mix.restarting``)."""
    which = ", ".join(str(index) for index, _ in restarting)
    why = restarting[0][1] if len(restarting) == 1 else "; ".join(f"recipe {i}: {w}" for i, w in restarting)
    return (
        f"note: samples of recipe{'s' if len(restarting) > 1 else ''} {which} restart instead of continuing when "
        f"ended early ({why}); a stop waits --drain-timeout for them"
    )


def _params(req: SampleRequest) -> str:
    parts = [f"{k}={v}" for k, v in req.sampling().items()]
    parts.append(f"max_new_tokens<={req.max_tokens}")
    if req.kwargs:
        parts.append(f"chat_template_kwargs={req.kwargs}")
    return ", ".join(parts)
