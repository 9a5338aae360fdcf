"""--sampling-mix: recipes checked with one-line errors, drawn per (prompt, sample) with a seeded generator."""

import pytest

from synthgen.data.mix import RECIPE_KEYS, effective, load_mix, parse_mix
from synthgen.errors import UsageError

MIX = (
    '[{"weight": 3, "temperature": 0.0},'
    ' {"weight": 1, "temperature": 0.8, "top_p": 0.95, "chat_template_kwargs": {"thinking": false}}]'
)


def test_a_mix_given_inline_is_read_with_its_weights_params_and_kwargs():
    mix = load_mix(MIX)
    assert [r.weight for r in mix.recipes] == [3, 1]
    assert mix.recipes[1].params == {"temperature": 0.8, "top_p": 0.95}
    assert mix.recipes[1].kwargs == {"thinking": False}
    assert mix.as_json() == [
        {"weight": 3, "temperature": 0.0},
        {"weight": 1, "temperature": 0.8, "top_p": 0.95, "chat_template_kwargs": {"thinking": False}},
    ]


def test_a_mix_in_a_file_is_read_from_the_file(tmp_path):
    path = tmp_path / "mix.json"
    path.write_text(MIX)
    assert load_mix(str(path)).as_json() == load_mix(MIX).as_json()


def test_the_draw_is_the_same_for_the_same_prompt_sample_and_seed_whatever_the_order():
    mix = load_mix(MIX)
    pairs = [(f"p{i}", k) for i in range(50) for k in range(4)]
    first = {p: mix.draw(0, *p).index for p in pairs}
    again = {p: mix.draw(0, *p).index for p in reversed(pairs)}
    assert first == again
    assert {p: mix.draw(1, *p).index for p in pairs} != first


def test_the_draw_follows_the_weights():
    mix = load_mix(MIX)
    counts = mix.counts([(f"p{i}", k) for i in range(2000) for k in range(2)], seed=0)
    assert sum(counts) == 4000
    assert 0.70 < counts[0] / 4000 < 0.80  # weight 3 of 4


def test_one_recipe_is_always_drawn():
    mix = load_mix('[{"temperature": 1.0}]')
    assert {mix.draw(0, f"p{i}", 0).index for i in range(20)} == {0}
    assert mix.recipes[0].weight == 1


def test_the_recipe_is_laid_over_the_runs_flags():
    mix = load_mix('[{"temperature": 0.8, "max_tokens": 100, "chat_template_kwargs": {"thinking": false}}]')
    eff = effective(mix.recipes[0], {"temperature": 0.2, "top_k": 20}, 4096, {"thinking": True, "effort": "high"})
    assert eff.sampling == {"temperature": 0.8, "top_k": 20}
    assert eff.max_tokens == 100
    assert eff.kwargs == {"thinking": False, "effort": "high"}
    assert eff.as_row() == {
        "index": 0,
        "sampling_params": {"temperature": 0.8, "top_k": 20, "max_new_tokens": 100},
        "chat_template_kwargs": {"thinking": False, "effort": "high"},
    }


def test_more_sglang_sampling_keys_ride_along_and_are_recorded():
    mix = load_mix('[{"temperature": 0.7, "sampling_params": {"min_p": 0.05}}]')
    assert mix.as_json() == [{"weight": 1, "temperature": 0.7, "sampling_params": {"min_p": 0.05}}]
    eff = effective(mix.recipes[0], {"min_p": 0.1, "presence_penalty": 0.2}, 64, {})
    assert eff.sampling == {"min_p": 0.05, "presence_penalty": 0.2, "temperature": 0.7}


def test_without_a_mix_the_runs_flags_are_the_request():
    eff = effective(None, {"temperature": 0.2}, 512, {})
    assert eff.as_row() == {
        "index": None,
        "sampling_params": {"temperature": 0.2, "max_new_tokens": 512},
        "chat_template_kwargs": {},
    }


def test_every_sampling_flag_has_a_recipe_key():
    assert {row.flag for row in RECIPE_KEYS.values()} == {"--temperature", "--top-p", "--top-k", "--max-tokens"}


@pytest.mark.parametrize(
    "text, message",
    [
        ("[{", "--sampling-mix: not valid JSON ("),
        ("[]", "--sampling-mix: a mix is a non-empty JSON list of recipes, e.g. '["),
        ('{"weight": 1}', "--sampling-mix: a mix is a non-empty JSON list of recipes"),
        ("[3]", '--sampling-mix: recipe 0 is not an object; write it like {"weight": 1, "temperature": 0.8}'),
        (
            '[{"top-p": 0.9}]',
            "--sampling-mix: recipe 0: unknown key 'top-p'; did you mean 'top_p'? a recipe takes weight, temperature, "
            "top_p, top_k, max_tokens, sampling_params, chat_template_kwargs",
        ),
        ('[{"seed": 1}]', "--sampling-mix: recipe 0: unknown key 'seed'; a recipe takes weight, temperature"),
        ('[{}, {"weight": 0}]', "--sampling-mix: recipe 1: weight must be a positive number, got 0"),
        ('[{"weight": "2"}]', '--sampling-mix: recipe 0: weight must be a positive number, got "2"'),
        (
            '[{"temperature": -1}]',
            "--sampling-mix: recipe 0: temperature must be 0 or more (as --temperature), got -1",
        ),
        ('[{"top_p": 0}]', "--sampling-mix: recipe 0: top_p must be in (0, 1] (as --top-p), got 0"),
        (
            '[{"top_k": 0}]',
            "--sampling-mix: recipe 0: top_k must be -1 or at least 1 (as --top-k), got 0",
        ),
        (
            '[{"max_tokens": 1.5}]',
            "--sampling-mix: recipe 0: max_tokens must be a whole number (as --max-tokens), got 1.5",
        ),
        ('[{"chat_template_kwargs": "x"}]', "--sampling-mix: recipe 0: chat_template_kwargs must be an object"),
        ('[{"sampling_params": 1}]', "--sampling-mix: recipe 0: sampling_params must be an object of SGLang sampling"),
        (
            '[{"sampling_params": {"sampling_seed": 1}}]',
            "--sampling-mix: recipe 0: sampling_params: sampling_seed is set by the run for each sample; leave it out",
        ),
        (
            '[{"sampling_params": {"top_p": 0.5}}]',
            "--sampling-mix: recipe 0: sampling_params sets top_p; give it as the recipe's own key 'top_p'",
        ),
    ],
)
def test_a_bad_mix_is_one_line_naming_the_flag_the_recipe_and_the_fix(text, message):
    with pytest.raises(UsageError) as err:
        parse_mix(text, "--sampling-mix")
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_a_bad_mix_file_names_the_file(tmp_path):
    path = tmp_path / "mix.json"
    path.write_text('[{"temprature": 1}]')
    with pytest.raises(UsageError, match=rf"^{path}: recipe 0: unknown key 'temprature'; did you mean 'temperature'\?"):
        load_mix(str(path))


def test_a_missing_mix_file_says_how_to_give_it_inline(tmp_path):
    with pytest.raises(
        UsageError, match=r"--sampling-mix: no file .*nope.json \(and not JSON: a mix given inline starts with '\['\)"
    ):
        load_mix(str(tmp_path / "nope.json"))
