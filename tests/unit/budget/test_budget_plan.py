"""The budget math, parsing and table of synthgen.budget.plan: known values, table-driven."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from synthgen.budget import plan as budget
from synthgen.budget.file import plan_json
from synthgen.budget.plan import (
    Estimate,
    Measurement,
    Plan,
    choose_estimate,
    expected_tokens,
    fixed_dataset,
    format_table,
    measure,
    parse_amount,
    parse_assignments,
    parse_count,
    parse_throughput,
    percentile,
    plan_dataset,
    samples_for,
)
from synthgen.errors import UsageError

FLAG = "--tokens-per-dataset"
USE = "use K, M or B (e.g. 10M, 2.5B, 500K or 10000000)"


@pytest.mark.parametrize(
    "text, expected",
    [
        ("10M", 10_000_000),
        ("10m", 10_000_000),
        ("2.5B", 2_500_000_000),
        ("2.5b", 2_500_000_000),
        ("500K", 500_000),
        ("500k", 500_000),
        ("0.5M", 500_000),
        (".5K", 500),
        ("1.5k", 1_500),
        ("10000000", 10_000_000),
        (" 7 ", 7),
        ("3.0", 3),
    ],
)
def test_token_counts_accept_plain_integers_and_k_m_b_suffixes_in_any_case(text, expected):
    assert parse_count(text, FLAG) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("0", "--tokens-per-dataset must be positive, got '0'"),
        ("0.0M", "--tokens-per-dataset must be positive, got '0.0M'"),
        ("-5", "--tokens-per-dataset must be positive, got '-5'"),
        ("-5M", "--tokens-per-dataset must be positive, got '-5M'"),
        ("10X", f"--tokens-per-dataset: unknown suffix 'X' in '10X'; {USE}"),
        ("10MB", f"--tokens-per-dataset: unknown suffix 'MB' in '10MB'; {USE}"),
        ("ten", "--tokens-per-dataset: 'ten' is not a number; use e.g. 10M, 2.5B, 500K or 10000000"),
        ("", "--tokens-per-dataset: '' is not a number; use e.g. 10M, 2.5B, 500K or 10000000"),
        ("1,000", "--tokens-per-dataset: '1,000' is not a number; use e.g. 10M, 2.5B, 500K or 10000000"),
        ("M", "--tokens-per-dataset: 'M' is not a number; use e.g. 10M, 2.5B, 500K or 10000000"),
        ("2.5", "--tokens-per-dataset: '2.5' is not a whole number of tokens"),
        ("1.2345K", "--tokens-per-dataset: '1.2345K' (1,234.5) is not a whole number of tokens"),
    ],
)
def test_bad_token_counts_are_refused_with_a_message_naming_the_fix(text, message):
    with pytest.raises(UsageError) as err:
        parse_count(text, FLAG)
    assert str(err.value) == message


def test_amounts_such_as_averages_may_be_fractional():
    assert parse_amount("3793.5", "--default-avg") == Fraction(7587, 2)
    assert parse_amount("3.8K", "--default-avg") == 3800


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1200", (1200,)),
        ("1000-1500", (1000, 1500)),
        (" 1000 - 1500 ", (1000, 1500)),
        ("1K-1.5k", (1000, 1500)),
        ("1000-1000", (1000,)),
        ("1250.5", (Fraction(2501, 2),)),
    ],
)
def test_throughput_is_one_figure_or_a_rising_range(text, expected):
    assert parse_throughput(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("1500-1000", "--throughput: range '1500-1000' goes down; put the lower figure first (1000-1500)"),
        ("0", "--throughput must be positive, got '0'"),
        ("1000-0", "--throughput must be positive, got '0'"),
        ("-1000", "--throughput must be positive, got '-1000'"),
        ("1000-", "--throughput: '1000-' is not a figure or a range; use e.g. 1200 or 1000-1500"),
        ("1-2-3", "--throughput: '1-2-3' is not a figure or a range; use e.g. 1200 or 1000-1500"),
        ("fast", "--throughput: 'fast' is not a number; use e.g. 10M, 2.5B, 500K or 10000000"),
    ],
)
def test_bad_throughputs_are_refused_with_a_message_naming_the_fix(text, message):
    with pytest.raises(UsageError) as err:
        parse_throughput(text)
    assert str(err.value) == message


def test_name_value_pairs_parse_each_value_and_keep_their_order():
    pairs = parse_assignments(["b=2K", " a = 1 "], "--fixed", parse_count)
    assert list(pairs.items()) == [("b", 2000), ("a", 1)]


@pytest.mark.parametrize(
    "texts, message",
    [
        (["math"], "--avg-tokens: 'math' is not NAME=N; write it like --avg-tokens math=3793"),
        (["=5"], "--avg-tokens: '=5' is not NAME=N; write it like --avg-tokens math=3793"),
        (["math="], "--avg-tokens: 'math=' is not NAME=N; write it like --avg-tokens math=3793"),
        (["math=0"], "--avg-tokens math must be positive, got '0'"),
        (["math=-3"], "--avg-tokens math must be positive, got '-3'"),
        (["math=3x"], f"--avg-tokens math: unknown suffix 'x' in '3x'; {USE}"),
        (["math=1", "math=2"], "--avg-tokens: 'math' is given twice; keep one"),
    ],
)
def test_bad_name_value_pairs_are_refused_with_a_message_naming_the_fix(texts, message):
    with pytest.raises(UsageError) as err:
        parse_assignments(texts, "--avg-tokens", parse_amount)
    assert str(err.value) == message


@pytest.mark.parametrize(
    "tokens_budget, avg, available, samples",
    [
        (10_000_000, 3793, 14_714, 2636),  # the documented example: floor(2636.43...)
        (10_000_000, 812, 9_001, 9_001),  # 12,315 fit the budget, only 9,001 exist
        (1_000, 10, 500, 100),  # an exact multiple is not lost to float rounding
        (10, Fraction(10, 3), 100, 3),
        (1_000, Fraction(1, 10), 50_000, 10_000),
        (100, 101, 50, 0),  # one average answer is already over budget
        (10_000_000, 3793, 0, 0),  # empty dataset
    ],
)
def test_sample_count_is_the_budget_over_the_average_rounded_down_and_capped_at_availability(
    tokens_budget, avg, available, samples
):
    assert samples_for(tokens_budget, avg, available) == samples


@pytest.mark.parametrize(
    "samples, avg, expected",
    [
        (2636, 3793, 9_998_348),
        (1, Fraction(5, 2), 3),  # halves round up
        (3, Fraction(1, 2), 2),
        (3, Fraction(1, 3), 1),
        (2, Fraction(5, 3), 3),  # 3.33 -> 3
        (0, 3793, 0),
    ],
)
def test_expected_tokens_are_samples_times_average_rounded_half_up(samples, avg, expected):
    assert expected_tokens(samples, avg) == expected


@given(
    tokens_budget=st.integers(1, 10**10),
    avg=st.fractions(min_value=Fraction(1, 100), max_value=10**6),
    available=st.integers(0, 10**6),
)
def test_a_planned_dataset_never_exceeds_its_budget_in_expectation_and_leaves_no_room_for_one_more(
    tokens_budget, avg, available
):
    samples = samples_for(tokens_budget, avg, available)
    assert 0 <= samples <= available
    assert samples * avg <= tokens_budget
    assert samples == available or (samples + 1) * avg > tokens_budget


@pytest.mark.parametrize(
    "values, p, expected",
    [
        (list(range(1, 11)), 50, 5),
        (list(range(1, 11)), 90, 9),
        (list(range(1, 11)), 100, 10),
        ([7], 50, 7),
        ([7], 90, 7),
        ([1, 2], 50, 1),
        ([1, 2], 90, 2),
        ([10, 20, 30, 40], 50, 20),
        ([10, 20, 30, 40], 90, 40),
    ],
)
def test_percentiles_are_nearest_rank_so_they_are_values_that_occurred(values, p, expected):
    assert percentile(values, p) == expected


def test_a_measurement_has_the_exact_mean_and_the_p50_and_p90_of_its_rows():
    assert measure([400, 100, 300, 200], truncated=1) == Measurement(
        rows=4, mean=Fraction(250), p50=200, p90=400, truncated=1
    )
    assert measure([1, 2]).mean == Fraction(3, 2)


def test_no_rows_is_no_measurement():
    assert measure([]) is None


MEASURED = Measurement(rows=50, mean=Fraction(3000), p50=2800, p90=6000)


@pytest.mark.parametrize(
    "given_avg, measured, default, expected",
    [
        (4000, MEASURED, 2000, Estimate(Fraction(4000), "avg-tokens")),
        (None, MEASURED, 2000, Estimate(Fraction(3000), "measured", MEASURED)),
        (None, None, 2000, Estimate(Fraction(2000), "default-avg")),
        (4000, None, None, Estimate(Fraction(4000), "avg-tokens")),
        (None, MEASURED, None, Estimate(Fraction(3000), "measured", MEASURED)),
        (None, None, None, None),
    ],
)
def test_the_average_comes_from_avg_tokens_then_the_measurement_then_the_default(
    given_avg, measured, default, expected
):
    assert choose_estimate(given_avg, measured, default) == expected


def _example_plan() -> Plan:
    return Plan(
        tokens_per_dataset=10_000_000,
        datasets=(
            plan_dataset("math_hard", 14_714, Estimate(Fraction(3793), "measured", MEASURED), 10_000_000),
            plan_dataset("code", 9_001, Estimate(Fraction(812), "avg-tokens"), 10_000_000),
            plan_dataset("chat", 4_000, None, 10_000_000),
            plan_dataset("poems", 20_000, Estimate(Fraction(4001, 2), "default-avg"), 10_000_000),
            fixed_dataset("wiki_rewrites", 24_000_000),
        ),
        throughput=(Fraction(1000), Fraction(1500)),
    )


def test_totals_count_fixed_tokens_but_leave_no_estimate_datasets_out():
    plan = _example_plan()
    # poems: floor(10M / 2000.5) = 4998 samples, 4998 * 2000.5 = 9,998,499
    assert [d.max_samples for d in plan.datasets] == [2636, 9001, None, 4998, 0]
    assert plan.total_samples == 2636 + 9001 + 4998
    assert plan.generation_tokens == 9_998_348 + 7_308_812 + 9_998_499
    assert plan.fixed_tokens == 24_000_000
    assert plan.total_tokens == plan.generation_tokens + 24_000_000
    assert plan.total_available == 14_714 + 9_001 + 4_000 + 20_000


def test_generation_time_is_hours_at_each_end_of_the_throughput_range():
    assert budget.generation_hours(9_998_348, (1000, 1500)) == pytest.approx((2.7773189, 1.8515459))
    assert budget.generation_hours(3_600_000, (1000,)) == (1.0,)


def test_fixed_datasets_are_not_in_the_generation_time():
    plan = Plan(10_000_000, (fixed_dataset("wiki", 36_000_000),), (Fraction(1000),))
    assert plan.hours() == (0.0,)
    assert plan.total_tokens == 36_000_000


def test_the_table_is_aligned_with_thousands_separators_totals_and_generation_time():
    assert format_table(_example_plan()) == "\n".join(
        [
            "Budget: 10,000,000 output tokens per dataset",
            "",
            "dataset        avg tokens  source                                   available  samples  expected tokens",
            "-------------  ----------  ---------------------------------------  ---------  -------  ---------------",
            "math_hard           3,793  measured: 50 rows, p50 2,800, p90 6,000     14,714    2,636        9,998,348",
            "code                  812  --avg-tokens                                 9,001    9,001        7,308,812",
            "chat                    -  no estimate                                  4,000        -                -",
            "poems             2,000.5  --default-avg                               20,000    4,998        9,998,499",
            "wiki_rewrites           -  fixed (generated elsewhere)                      -        -       24,000,000",
            "-------------  ----------  ---------------------------------------  ---------  -------  ---------------",
            "total                                                                  47,715   16,635       51,305,659",
            "",
            "To generate: 27,305,659 tokens -> 7.6 h at 1,000 tok/s, 5.1 h at 1,500 tok/s",
            "Fixed:       24,000,000 tokens (generated elsewhere: in the total, not in the generation time)",
            "No estimate: chat (no sample count, not in the totals; see the notes on stderr)",
        ]
    )


def test_a_single_measured_row_is_labelled_in_the_singular():
    one = Measurement(rows=1, mean=Fraction(5), p50=5, p90=5)
    row = plan_dataset("tiny", 3, Estimate(Fraction(5), "measured", one), 100)
    assert budget.source_label(row) == "measured: 1 row, p50 5, p90 5"


def test_the_json_plan_marks_fixed_datasets_with_zero_samples_and_lists_no_estimate_ones_apart():
    assert plan_json(_example_plan()) == {
        "tokens_per_dataset": 10_000_000,
        "datasets": {
            "math_hard": {
                "max_samples": 2636,
                "available": 14714,
                "avg_completion_tokens": 3793,
                "avg_source": "measured",
                "expected_tokens": 9_998_348,
            },
            "code": {
                "max_samples": 9001,
                "available": 9001,
                "avg_completion_tokens": 812,
                "avg_source": "avg-tokens",
                "expected_tokens": 7_308_812,
            },
            "poems": {
                "max_samples": 4998,
                "available": 20000,
                "avg_completion_tokens": 2000.5,
                "avg_source": "default-avg",
                "expected_tokens": 9_998_499,
            },
            "wiki_rewrites": {
                "max_samples": 0,
                "available": None,
                "avg_completion_tokens": None,
                "avg_source": "fixed",
                "expected_tokens": 24_000_000,
            },
        },
        "no_estimate": ["chat"],
    }
