"""Compute-optimal selection (Snell et al. 2024) on hand-worked tables."""

from __future__ import annotations

import pytest

from prmkit.errors import PrmkitError
from prmkit.records import Record
from prmkit.search.compute_optimal import (Outcome, choose, compute_optimal, difficulty,
                                           difficulty_bins, outcomes_of)

BON = {"p1": Outcome(True, 10), "p2": Outcome(True, 10), "p3": Outcome(False, 10),
       "p4": Outcome(False, 10)}
BEAM = {"p1": Outcome(False, 12), "p2": Outcome(True, 12), "p3": Outcome(True, 12),
        "p4": Outcome(True, 12)}


def test_bins_are_quantiles_of_the_estimate():
    bins = difficulty_bins({"p3": 0.8, "p1": 0.1, "p4": 0.9, "p2": 0.2}, 2)
    assert bins == {"p1": 0, "p2": 0, "p3": 1, "p4": 1}
    assert difficulty_bins({"a": 0.5, "b": 0.5, "c": 0.1}, 3) == {"c": 0, "a": 1, "b": 2}


def test_compute_optimal_chooses_per_bin_and_is_cross_validated():
    bins = {"p1": 0, "p2": 0, "p3": 1, "p4": 1}
    outcomes = {"best-of-n": BON, "beam(m=4)": BEAM}
    assert choose(outcomes, bins, list(bins)) == {0: "best-of-n", 1: "beam(m=4)"}
    # a tie (p2: both right) goes to fewer tokens
    assert choose(outcomes, bins, ["p2"]) == {0: "best-of-n"}
    report = compute_optimal(outcomes, bins, folds=2)
    # folds by position within each bin: (p1, p3) and (p2, p4). Fold 0 chooses on p2, p4:
    # best-of-n (tie, fewer tokens) for bin 0, beam for bin 1: p1 right (10), p3 right (12).
    # Fold 1 chooses on p1, p3: the same: p2 right (10), p4 right (12).
    assert (report.accuracy, report.tokens) == (1.0, 11.0)
    assert report.choice == {0: "best-of-n", 1: "beam(m=4)"}
    assert report.per_strategy == {"best-of-n": (0.5, 10.0), "beam(m=4)": (0.75, 12.0)}
    assert report.per_bin == {0: {"best-of-n": 1.0, "beam(m=4)": 0.5},
                              1: {"best-of-n": 0.0, "beam(m=4)": 1.0}}


def test_a_choice_fitted_on_other_problems_can_be_wrong():
    # bin 0 holds p1 (only beam right) and p2 (only best-of-n right): each fold chooses on the
    # other problem and gets its own wrong; cross-validation reports that honestly
    bon = {"p1": Outcome(False, 10), "p2": Outcome(True, 10)}
    beam = {"p1": Outcome(True, 10), "p2": Outcome(False, 10)}
    report = compute_optimal({"best-of-n": bon, "beam(m=4)": beam}, {"p1": 0, "p2": 0})
    assert report.accuracy == 0.0


def test_difficulty_from_scored_candidates():
    recs = [Record("a-0", "q", ["x", "The answer is 7."], group="a", step_scores=[0.9, 0.8]),
            Record("a-1", "q", ["The answer is 7."], group="a", step_scores=[0.5]),
            Record("a-2", "q", ["The answer is 8."], group="a", step_scores=[0.2]),
            Record("b-0", "r", ["The answer is 1."], group="b", step_scores=[1.0])]
    assert difficulty(recs, "prm", "last") == pytest.approx({"a": 1 - 1.5 / 3, "b": 0.0})
    assert difficulty(recs, "agreement") == pytest.approx({"a": 1 - 2 / 3, "b": 0.0})
    with pytest.raises(PrmkitError):
        difficulty(recs, "vibes")


def test_outcomes_of_search_records():
    recs = [Record("a-0", "q", ["s"], group="a", is_correct=True,
                   meta={"selected": True, "compute": {"tokens_generated": 30}}),
            Record("a-1", "q", ["s"], group="a", is_correct=False, meta={"selected": False})]
    assert outcomes_of(recs) == {"a": Outcome(True, 30)}
    with pytest.raises(PrmkitError, match="no outcome"):
        compute_optimal({"beam": {}}, {"a": 0})
