"""Terminal histograms: nice bin edges, quantiles marked."""

from __future__ import annotations

from synthgen.export.histogram import histogram, quantile


def test_histogram_marks_the_bins_holding_p50_p90_and_p99():
    assert quantile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9) == 9
    assert histogram([], "x") == ["x  n=0"]
    lines = histogram([10, 20, 300, 301, 999, 4000], "completion tokens")
    assert lines[0] == "completion tokens  n=6  min 10  p50 300  p90 4,000  p99 4,000  max 4,000"
    assert lines[1] == "      0 -   499  ######################################## 4  p50"
    assert lines[-1] == "  4,000 - 4,499  ##########                               1  p90 p99"
    assert len({len(line.split("  p")[0].rstrip()) for line in lines[1:]}) <= 2
