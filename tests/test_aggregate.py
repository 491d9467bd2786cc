"""Aggregating step scores: every expectation is worked by hand in the comment beside it."""

import math

import pytest

from prmkit.aggregate import AGGREGATES, aggregate
from prmkit.errors import PrmkitError


def test_the_five_aggregates_are_a_plain_dict():
    assert list(AGGREGATES) == ["prod", "min", "last", "mean", "geomean"]


def test_prod_of_the_acceptance_example():
    # 0.97 * 0.93 = 0.9021; * 0.95 = 0.856995; * 0.94 = 0.8055753
    assert aggregate([0.97, 0.93, 0.95, 0.94], "prod") == pytest.approx(0.8055753)
    assert round(aggregate([0.97, 0.93, 0.95, 0.94], "prod"), 3) == 0.806


def test_min_last_mean():
    scores = [0.9, 0.2, 0.6, 0.7]
    assert aggregate(scores, "min") == 0.2
    assert aggregate(scores, "last") == 0.7
    assert aggregate(scores, "mean") == pytest.approx(0.6)  # 2.4 / 4


def test_geomean():
    assert aggregate([0.25, 1.0], "geomean") == pytest.approx(0.5)  # sqrt(0.25)
    assert aggregate([0.5, 0.125], "geomean") == pytest.approx(0.25)  # sqrt(0.0625)
    assert aggregate([0.8], "geomean") == pytest.approx(0.8)


def test_a_zero_score_makes_prod_and_geomean_zero():
    assert aggregate([0.9, 0.0, 0.8], "prod") == 0.0
    assert aggregate([0.9, 0.0, 0.8], "geomean") == 0.0


def test_prod_in_log_space_matches_the_plain_product_on_a_long_solution():
    scores = [0.5, 0.9, 0.99] * 300  # 900 steps: 0.4455 ** 300 ~ 4e-106
    assert aggregate(scores, "prod") == pytest.approx(math.prod(scores), rel=1e-10)
    assert aggregate(scores, "prod") > 0.0


def test_prod_does_not_overflow_midway_with_scores_above_one():
    # the plain running product overflows to inf after the first 400 factors of 1e3
    scores = [1e3] * 400 + [1e-3] * 400
    assert aggregate(scores, "prod") == pytest.approx(1.0)


def test_nulls_are_dropped_before_aggregating():
    scores = [0.9, None, 0.5, 0.8]
    assert aggregate(scores, "prod") == pytest.approx(0.36)  # 0.9 * 0.5 * 0.8
    assert aggregate(scores, "min") == 0.5
    assert aggregate(scores, "mean") == pytest.approx(2.2 / 3)
    assert aggregate(scores, "geomean") == pytest.approx(0.36 ** (1 / 3))


def test_last_of_a_truncated_solution_is_the_last_scored_step():
    assert aggregate([0.9, 0.4, None, None], "last") == 0.4
    assert aggregate([None, 0.7], "last") == 0.7


def test_all_null_is_an_error():
    with pytest.raises(PrmkitError, match="all 2 step scores are null"):
        aggregate([None, None], "min")


def test_empty_is_an_error():
    with pytest.raises(PrmkitError, match="empty"):
        aggregate([], "prod")


def test_unknown_how_lists_the_names():
    with pytest.raises(PrmkitError, match="unknown aggregate 'product'.*prod, min, last, mean, "
                                          "geomean"):
        aggregate([0.5], "product")


def test_negative_scores_are_fine_for_min_last_mean_but_not_for_prod_geomean():
    assert aggregate([-1.0, 2.0], "min") == -1.0
    assert aggregate([-1.0, 2.0], "last") == 2.0
    assert aggregate([-1.0, 2.0], "mean") == 0.5
    for how in ("prod", "geomean"):
        with pytest.raises(PrmkitError, match="non-negative"):
            aggregate([-1.0, 2.0], how)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "0.5", True])
def test_a_score_that_is_not_a_finite_number_is_an_error(bad):
    with pytest.raises(PrmkitError, match="step score 1"):
        aggregate([0.5, bad], "mean")


def test_integers_are_accepted():
    assert aggregate([1, 0.5], "prod") == 0.5
