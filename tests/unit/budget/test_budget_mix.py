"""Budgets of a training mix: every sample counts, and datasets that are already tokens join the totals."""

from fractions import Fraction

from synthgen.budget.file import plan_json
from synthgen.budget.plan import Estimate, Plan, existing_dataset, format_table, plan_dataset

BUDGET = 10_000_000
# The seed's mix: eight datasets to generate at 10M tokens each, and two that already hold the target
# model's tokens (A1_deepswekimi 2,800 rows ~8.4M tokens, A2_kimik25 2,000 rows ~4.0M): ~38K samples, ~92M tokens.
GENERATED = {
    "B1_magicoder": (1500, 38_200),
    "B2_openmath": (3793, 14_714),
    "B3_glaive": (2400, 52_000),
    "B4_ultrachat": (1450, 120_000),
    "B5_sharegpt": (2600, 9_100),
    "B6_openthoughts": (6200, 20_000),
    "B7_toolace": (1900, 11_300),
    "B8_swegym": (4800, 2_400),
}


def seed_plan(per_prompt=1):
    rows = [
        plan_dataset(name, available, Estimate(Fraction(avg), "avg-tokens"), BUDGET, per_prompt=per_prompt)
        for name, (avg, available) in GENERATED.items()
    ]
    rows += [
        existing_dataset("A1_deepswekimi", 2_800, 8_400_000, 31_000_000),
        existing_dataset("A2_kimik25", 2_000, 4_000_000, 9_000_000),
    ]
    return Plan(BUDGET, tuple(rows), (Fraction(1000), Fraction(1500)), per_prompt)


def test_four_samples_per_prompt_select_a_quarter_of_the_prompts():
    one = plan_dataset("math", 100_000, Estimate(Fraction(1000), "avg-tokens"), BUDGET)
    four = plan_dataset("math", 100_000, Estimate(Fraction(1000), "avg-tokens"), BUDGET, per_prompt=4)
    assert (one.max_samples, one.samples, one.expected_tokens) == (10_000, 10_000, 10_000_000)
    assert (four.max_samples, four.samples, four.expected_tokens) == (2_500, 10_000, 10_000_000)


def test_samples_per_prompt_round_down_to_whole_prompts_so_the_budget_is_never_passed():
    row = plan_dataset("m", 100_000, Estimate(Fraction(1500), "avg-tokens"), BUDGET, per_prompt=4)
    assert row.max_samples == 1_666  # floor(10M / 6,000)
    assert row.expected_tokens == 9_996_000 <= BUDGET


def test_a_small_dataset_keeps_every_prompt_and_all_its_samples():
    row = plan_dataset("swe", 2_400, Estimate(Fraction(4800), "avg-tokens"), BUDGET, per_prompt=4)
    assert (row.max_samples, row.samples) == (520, 2_080)


def test_the_seeds_table_reproduces_with_its_pre_tokenized_rows_about_38k_samples_and_92m_tokens():
    plan = seed_plan()
    assert plan.total_samples == 37_968
    assert plan.total_tokens == 92_387_048
    assert plan.existing_rows == 4_800 and plan.existing_tokens == 12_400_000
    assert plan.generation_tokens == plan.total_tokens - 12_400_000
    assert format_table(plan) == "\n".join(
        [
            "Budget: 10,000,000 output tokens per dataset",
            "",
            "dataset          avg tokens  source                               available  samples  expected tokens",
            "---------------  ----------  -----------------------------------  ---------  -------  ---------------",
            "B1_magicoder          1,500  --avg-tokens                            38,200    6,666        9,999,000",
            "B2_openmath           3,793  --avg-tokens                            14,714    2,636        9,998,348",
            "B3_glaive             2,400  --avg-tokens                            52,000    4,166        9,998,400",
            "B4_ultrachat          1,450  --avg-tokens                           120,000    6,896        9,999,200",
            "B5_sharegpt           2,600  --avg-tokens                             9,100    3,846        9,999,600",
            "B6_openthoughts       6,200  --avg-tokens                            20,000    1,612        9,994,400",
            "B7_toolace            1,900  --avg-tokens                            11,300    5,263        9,999,700",
            "B8_swegym             4,800  --avg-tokens                             2,400    2,083        9,998,400",
            "A1_deepswekimi        3,000  existing pre-tok, 31,000,000 in all          -    2,800        8,400,000",
            "A2_kimik25            2,000  existing pre-tok, 9,000,000 in all           -    2,000        4,000,000",
            "---------------  ----------  -----------------------------------  ---------  -------  ---------------",
            "total                                                               267,714   37,968       92,387,048",
            "",
            "To generate: 79,987,048 tokens -> 22.2 h at 1,000 tok/s, 14.8 h at 1,500 tok/s",
            "Existing:    12,400,000 tokens in 4,800 rows (already tokens: in the totals, not in the generation time)",
        ]
    )


def test_with_several_samples_the_table_shows_prompts_and_samples_and_says_each_sample_counts():
    table = format_table(seed_plan(per_prompt=4))
    lines = table.splitlines()
    assert lines[0] == (
        "Budget: 10,000,000 output tokens per dataset, 4 samples per prompt "
        "(each counts: prompts = budget / (4 x avg tokens))"
    )
    assert lines[2].split() == [
        "dataset",
        "avg",
        "tokens",
        "source",
        "available",
        "prompts",
        "samples",
        "expected",
        "tokens",
    ]
    row = next(line for line in lines if line.startswith("B1_magicoder"))
    assert row.split()[-3:] == ["1,666", "6,664", "9,996,000"]
    a1 = next(line for line in lines if line.startswith("A1_deepswekimi"))
    assert a1.split()[-3:] == ["-", "2,800", "8,400,000"]


def test_the_budget_file_says_how_many_samples_per_prompt_and_marks_existing_data_as_never_run():
    data = plan_json(seed_plan(per_prompt=4))
    assert data["samples_per_prompt"] == 4
    assert data["datasets"]["B1_magicoder"]["max_samples"] == 1_666
    assert data["datasets"]["A1_deepswekimi"] == {
        "max_samples": 0,
        "available": None,
        "avg_completion_tokens": 3000,
        "avg_source": "existing",
        "expected_tokens": 8_400_000,
        "rows": 2_800,
        "path": None,
    }
    assert "samples_per_prompt" not in plan_json(seed_plan())
