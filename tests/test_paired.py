"""Paired differences over problems and their bootstrap intervals, against hand-worked cases."""

from __future__ import annotations

import pytest

from prmkit.errors import PrmkitError
from prmkit.evaluate.paired import (difference_of_differences, paired_difference,
                                    per_problem_accuracy)
from prmkit.records import Record


def test_paired_difference_by_hand():
    a = {"p1": 1.0, "p2": 1.0, "p3": 0.0, "p4": 1.0}
    b = {"p1": 0.0, "p2": 1.0, "p3": 0.0, "p4": 0.0, "only-b": 1.0}
    c = paired_difference(a, b, bootstrap=2000, seed=0)
    # differences 1, 0, 0, 1 over the 4 common problems: mean 50 points
    assert c.difference == 50.0 and c.problems == 4
    # every resample's mean is one of 0, 25, ..., 100, and the interval covers the mean
    assert c.ci95[0] <= 50.0 <= c.ci95[1]
    assert all(round(v / 25.0) * 25.0 == pytest.approx(v) for v in c.ci95)
    # a resample of all zeros has probability (1/2)^4 = 6.25% > 2.5%: the interval reaches 0,
    # so the claim does not hold, but it does as non-inferiority with any margin
    assert c.ci95[0] == 0.0 and not c.holds
    assert paired_difference(a, b, bootstrap=2000, seed=0, margin=1.0).holds


def test_identical_methods_give_a_zero_interval_and_no_claim():
    a = {f"p{i}": float(i % 2) for i in range(20)}
    c = paired_difference(a, dict(a))
    assert c.difference == 0.0 and c.ci95 == [0.0, 0.0] and not c.holds


def test_a_clear_win_holds():
    a = {f"p{i}": 1.0 for i in range(40)}
    b = {f"p{i}": float(i < 10) for i in range(40)}
    c = paired_difference(a, b)
    assert c.difference == 75.0 and c.ci95[0] > 50.0 and c.holds


def test_difference_of_differences_by_hand():
    # lead of a over b: at setting 1 it is 0 on both problems, at setting 2 it is 1 and 0
    a1, b1 = {"x": 0.5, "y": 0.5}, {"x": 0.5, "y": 0.5}
    a2, b2 = {"x": 1.0, "y": 0.0}, {"x": 0.0, "y": 0.0}
    c = difference_of_differences(a1, b1, a2, b2, bootstrap=1000)
    assert c.difference == 50.0 and c.problems == 2


def test_no_common_problem_is_an_error():
    with pytest.raises(PrmkitError, match="no problem in common"):
        paired_difference({"a": 1.0}, {"b": 1.0})


def _cands(group, correct, scores):
    return [Record(id=f"{group}-{k}", problem="q", steps=["s"], group=group, is_correct=c,
                   step_scores=[s], answer=str(k)) for k, (c, s) in enumerate(zip(correct, scores))]


def test_per_problem_accuracy_by_hand():
    # p: the best-scored candidate is right; q: the best-scored is wrong
    records = _cands("p", [True, False, False], [0.9, 0.2, 0.1]) + \
        _cands("q", [True, False, False], [0.1, 0.8, 0.2])
    full = per_problem_accuracy(records, "prm-prod", 3)
    assert full == {"p": 1.0, "q": 0.0}
    # N=2 on p: the right candidate wins whenever drawn, in 2 of the 3 pairs; on q only the
    # pair without candidate 1 ({0, 2}) picks the right one (0.1 < 0.2: no, it picks 2), so 0
    two = per_problem_accuracy(records, "prm-prod", 2, draws=3000, seed=1)
    assert two["p"] == pytest.approx(2 / 3, abs=0.03) and two["q"] == 0.0
    # the oracle: any right candidate in the draw
    assert per_problem_accuracy(records, "oracle", 2, draws=3000, seed=1)["q"] == \
        pytest.approx(2 / 3, abs=0.03)
    with pytest.raises(PrmkitError, match="orm"):
        per_problem_accuracy(records, "orm", 2)
