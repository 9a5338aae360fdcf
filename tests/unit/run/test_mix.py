"""The mix in a run: each (prompt, sample) gets its seed and recipe from --seed, the id and the sample alone."""

from synthgen.data.mix import load_mix
from synthgen.data.samples import sample_seed
from synthgen.run.mix import Mix, restart_note

MIX = load_mix(
    '[{"weight": 3, "temperature": 0.0}, '
    '{"weight": 1, "temperature": 0.8, "top_p": 0.95, "chat_template_kwargs": {"thinking": false}}]'
)


def mix(recipes=MIX, per_prompt=4, seed=0):
    return Mix(per_prompt, recipes, seed, {"top_k": 20}, 1024, {"thinking": True})


def test_a_sample_is_sent_with_its_seed_and_the_recipe_it_drew_over_the_runs_flags():
    req = mix().request("p1", 2)
    assert req.seed == sample_seed(0, "p1", 2)
    recipe = MIX.draw(0, "p1", 2)
    assert req.sampling()["sampling_seed"] == req.seed
    assert req.sampling()["temperature"] == recipe.params["temperature"]
    assert req.sampling()["top_k"] == 20
    assert req.row_fields() == {
        "sample": 2,
        "sampling_seed": req.seed,
        "recipe": {
            "index": recipe.index,
            "sampling_params": {**req.effective.sampling, "max_new_tokens": 1024},
            "chat_template_kwargs": {"thinking": True, **recipe.kwargs},
        },
    }


def test_one_sample_and_no_mix_sends_and_writes_what_it_did_before():
    req = mix(recipes=None, per_prompt=1).request("p1", 0)
    assert req.sampling() == {"top_k": 20}
    assert req.row_fields() == {}
    assert req.rid("synthgen-abc") == "synthgen-abc"
    assert mix().request("p1", 3).rid("synthgen-abc") == "synthgen-abc-s00003."


def test_without_a_mix_a_sample_has_the_runs_flags_its_seed_and_no_recipe():
    req = mix(recipes=None).request("p1", 0)
    assert req.sampling() == {"top_k": 20, "sampling_seed": sample_seed(0, "p1", 0)}
    assert req.row_fields() == {"sample": 0, "sampling_seed": sample_seed(0, "p1", 0)}
    assert req.kwargs == {"thinking": True}


def test_the_same_command_draws_the_same_requests():
    pairs = [(f"p{i}", k) for i in range(30) for k in range(4)]
    assert [mix().request(*p) for p in pairs] == [mix().request(*p) for p in pairs]


def test_settings_record_the_mix_the_samples_and_the_seed():
    assert mix(seed=3).settings() == {"samples_per_prompt": 4, "sample_seed": 3, "sampling_mix": MIX.as_json()}
    assert mix(recipes=None).settings()["sampling_mix"] is None
    assert mix(recipes=None, per_prompt=1).settings() == {
        "samples_per_prompt": 1,
        "sample_seed": None,
        "sampling_mix": None,
    }


def test_the_dry_run_shows_the_draw_per_recipe_and_each_recipes_first_sample():
    pairs = [(f"p{i}", k) for i in range(100) for k in range(4)]
    lines = mix().dry_run_lines(pairs)
    assert lines[0] == "samples: 400 to send, 4 per prompt, --seed 0"
    assert lines[1] == "recipe draw (--sampling-mix):"
    counts = MIX.counts(pairs, 0)
    assert lines[2].startswith(f"  recipe 0 (weight 3, 75.0%): {counts[0]:,} samples (")
    assert lines[3].startswith(f"  recipe 1 (weight 1, 25.0%): {counts[1]:,} samples (")
    assert "temperature=0.8, top_p=0.95" in lines[3] and "'thinking': False" in lines[3]


def test_a_budget_planned_for_another_sample_count_is_refused_naming_the_flag(tmp_path):
    import json

    import pytest

    from synthgen.cli.run import build_parser, config_from_args
    from synthgen.errors import UsageError

    plan = tmp_path / "budget.json"
    plan.write_text(json.dumps({"datasets": {"a": {"max_samples": 5}}, "samples_per_prompt": 4}))
    with pytest.raises(UsageError, match=r"was planned for 4 sample\(s\) per prompt; pass --samples-per-prompt 4"):
        config_from_args(build_parser().parse_args(["--budget", str(plan)]))
    cfg = config_from_args(build_parser().parse_args(["--budget", str(plan), "--samples-per-prompt", "4"]))
    assert cfg.samples_per_prompt == 4 and cfg.mixed


def test_the_recipes_whose_samples_restart_are_those_with_an_output_side_setting_a_seed_is_not_one():
    assert mix().restarting() == [] and mix(recipes=None).restarting() == []
    penalties = load_mix(
        '[{"temperature": 0.8}, {"sampling_params": {"presence_penalty": 0.5}}, '
        '{"sampling_params": {"min_new_tokens": 4}}]'
    )
    restarting = mix(penalties).restarting()
    assert [index for index, _ in restarting] == [1, 2]
    assert restarting[0][1].startswith("presence_penalty 0.5: it counts output tokens")
    note = restart_note(restarting)
    assert note.startswith("note: samples of recipes 1, 2 restart instead of continuing when ended early (recipe 1: ")
    assert restart_note(restarting[:1]).startswith("note: samples of recipe 1 restart instead of continuing")
