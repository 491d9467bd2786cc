"""Choosing one candidate per group: every expectation is worked by hand in a comment."""

import pytest

from prmkit import select as select_module
from prmkit.errors import PrmkitError
from prmkit.records import Record
from prmkit.select import METHODS, accuracy, groups, select


def rec(id, scores=None, answer=None, correct=None, group="q", steps=None, meta=None):
    n = len(scores) if scores is not None else 1
    return Record(id=id, problem="What is it?", steps=steps or [f"step {i}" for i in range(n)],
                  step_scores=scores, answer=answer, is_correct=correct, group=group,
                  meta=meta or {})


def ids(chosen):
    return [r.id for r in chosen]


# the acceptance example
A = rec("A", [0.97, 0.93, 0.95, 0.94], "1", True)   # prod 0.8056, min 0.93, last 0.94
B = rec("B", [0.99, 0.24, 0.96, 0.98], "2", False)  # prod 0.2235, min 0.24, last 0.98
C = rec("C", [0.91, 0.88, 0.90], "3", False)        # prod 0.7207, min 0.88, last 0.90


def test_acceptance_example():
    assert round(select_module.prm_score(A, "prod"), 3) == 0.806
    assert round(select_module.prm_score(B, "prod"), 3) == 0.224
    assert round(select_module.prm_score(C, "prod"), 3) == 0.721
    assert ids(select([A, B, C], "prm-prod")) == ["A"]
    assert ids(select([A, B, C], "prm-min")) == ["A"]
    assert ids(select([A, B, C], "prm-last")) == ["B"]
    # mean: A 0.9475, B 0.7925, C 0.8967; geomean: A 0.9474, B 0.6876, C 0.8965
    assert ids(select([A, B, C], "prm-mean")) == ["A"]
    assert ids(select([A, B, C], "prm-geomean")) == ["A"]


def test_methods_and_dispatch_agree():
    assert set(METHODS) == set(select_module._CHOOSERS)


def test_best_of_n_tie_goes_to_the_earlier_candidate():
    rs = [rec("x", [0.4]), rec("y", [0.5, 1.0]), rec("z", [0.5])]  # prod: 0.4, 0.5, 0.5
    assert ids(select(rs, "prm-prod")) == ["y"]
    assert ids(select(list(reversed(rs)), "prm-prod")) == ["z"]


def test_prm_skips_unscored_steps():
    # x: [0.9, None] -> last scored step 0.9; y: last 0.8
    rs = [rec("x", [0.9, None]), rec("y", [0.1, 0.8])]
    assert ids(select(rs, "prm-last")) == ["x"]


def test_orm_picks_the_highest_outcome_score_ties_to_the_earlier():
    rs = [rec("x", meta={"outcome_score": 0.3}), rec("y", meta={"outcome_score": 0.7}),
          rec("z", meta={"outcome_score": 0.7})]
    assert ids(select(rs, "orm")) == ["y"]


def test_majority_counts_equivalent_answers_together():
    # "0.5" and "\frac{1}{2}" are one answer with 2 votes; "3" and "0.25" have 1 each
    rs = [rec("a", answer="3"), rec("b", answer="0.5"), rec("c", answer="0.25"),
          rec("d", answer="\\frac{1}{2}")]
    assert ids(select(rs, "majority")) == ["b"]  # the first candidate with the winning answer


def test_majority_extracts_a_missing_answer_from_the_last_step():
    # a answers "5"; b and c have no answer field but box 7 in their last step: 7 wins 2 to 1
    rs = [rec("a", answer="5"),
          rec("b", steps=["2 + 5 = 7", "So the answer is $\\boxed{7}$."]),
          rec("c", steps=["The answer is \\boxed{7}"])]
    assert ids(select(rs, "majority")) == ["b"]


def test_majority_tie_goes_to_the_answer_that_appears_first():
    # "2": 2 votes (a, d), "1": 2 votes (b, c); "2" appears first -> a
    rs = [rec("a", answer="2"), rec("b", answer="1"), rec("c", answer="1"),
          rec("d", answer="2")]
    assert ids(select(rs, "majority")) == ["a"]


def test_candidates_without_an_answer_do_not_vote():
    # blank answers and a last step with nothing to extract do not outvote "4"
    rs = [rec("a", answer=""), rec("b", answer=" "), rec("c", answer="$ $"),
          rec("d", steps=["I am not sure."]), rec("e", answer="4")]
    assert ids(select(rs, "majority")) == ["e"]


def test_a_group_where_no_one_answered():
    rs = [rec("a", [0.2], answer=""), rec("b", [0.9], answer="")]
    assert ids(select(rs, "majority")) == ["a"]  # the first candidate
    assert ids(select(rs, "weighted-majority")) == ["b"]  # the highest-scoring one


# Weighted majority, worked by hand (one step each, so the prod score is the step score):
#   a "7" 0.1 | b "9" 0.4 | c "7" 0.2 | d "9" 0.5 | e "7" 0.1
#   plain votes:   "7" 3, "9" 2               -> "7", first such candidate a
#   weighted sums: "7" 0.1+0.2+0.1 = 0.4, "9" 0.4+0.5 = 0.9 -> "9", its best candidate d (0.5)
WEIGHTED = [rec("a", [0.1], "7"), rec("b", [0.4], "9"), rec("c", [0.2], "7"),
            rec("d", [0.5], "9"), rec("e", [0.1], "7")]


def test_weighted_majority_differs_from_plain_majority():
    assert ids(select(WEIGHTED, "majority")) == ["a"]
    assert ids(select(WEIGHTED, "weighted-majority")) == ["d"]


def test_weighted_majority_weight_by():
    # a "1" [0.9, 0.9]: prod 0.81, min 0.9
    # b "2" [0.5, 1.0]: prod 0.50, min 0.5
    # c "2" [0.35, 1.0]: prod 0.35, min 0.35
    # prod: "1" 0.81 < "2" 0.85 -> "2", best b;  min: "1" 0.9 > "2" 0.85 -> a
    rs = [rec("a", [0.9, 0.9], "1"), rec("b", [0.5, 1.0], "2"), rec("c", [0.35, 1.0], "2")]
    assert ids(select(rs, "weighted-majority")) == ["b"]  # default weight_by="prod"
    assert ids(select(rs, "weighted-majority", weight_by="min")) == ["a"]


def test_weighted_majority_ties():
    # equal sums 0.5 = 0.25 + 0.25: "b" has more votes; its candidates tie -> the earlier, b1
    rs = [rec("a", [0.5], "a"), rec("b1", [0.25], "b"), rec("b2", [0.25], "b")]
    assert ids(select(rs, "weighted-majority")) == ["b1"]
    # equal sums and votes: the answer that appears first
    rs = [rec("x", [0.5], "x"), rec("y", [0.5], "y")]
    assert ids(select(rs, "weighted-majority")) == ["x"]


def test_oracle_is_pass_at_n():
    rs = [rec("a", correct=False), rec("b", correct=True), rec("c", correct=True)]
    assert ids(select(rs, "oracle")) == ["b"]  # the first correct one
    rs = [rec("a", correct=False), rec("b", correct=False)]
    assert ids(select(rs, "oracle")) == ["a"]  # none correct: the first


def test_multiple_groups_in_order_of_first_appearance():
    rs = [rec("p1", [0.2], group="p"), rec("q1", [0.9], group="q"),
          rec("p2", [0.8], group="p"), rec("q", [0.1], group=None),  # alone, despite its id
          rec("q2", [0.3], group="q"), rec("r1", [0.5], group=None)]
    assert [ids(g) for g in groups(rs)] == [["p1", "p2"], ["q1", "q2"], ["q"], ["r1"]]
    assert ids(select(rs, "prm-prod")) == ["p2", "q1", "q", "r1"]


def test_select_of_nothing_is_nothing():
    assert select([], "majority") == []


def test_accuracy():
    chosen = select([A, B, C], "prm-prod") + select([A, B, C], "prm-last")  # A right, B wrong
    assert accuracy(chosen) == 0.5
    assert accuracy([A, A, A, B]) == 0.75
    assert accuracy([A, rec("u")]) is None  # u lacks is_correct
    assert accuracy([]) is None


def test_missing_step_scores_name_the_record():
    with pytest.raises(PrmkitError, match="record 'u'.*no step_scores.*prmkit score"):
        select([A, rec("u")], "prm-min")
    with pytest.raises(PrmkitError, match="record 'u'.*no step_scores"):
        select([A, rec("u", answer="1")], "weighted-majority")


def test_unscored_solution_names_the_record():
    with pytest.raises(PrmkitError, match="record 'u'.*all 2 step scores are null"):
        select([A, rec("u", [None, None])], "prm-prod")


def test_missing_or_bad_outcome_score_names_the_record():
    with pytest.raises(PrmkitError, match="record 'A'.*outcome_score"):
        select([A], "orm")
    with pytest.raises(PrmkitError, match="record 'x'.*'high', expected a finite number"):
        select([rec("x", meta={"outcome_score": "high"})], "orm")


def test_oracle_needs_is_correct():
    with pytest.raises(PrmkitError, match="record 'u'.*is_correct"):
        select([A, rec("u")], "oracle")


def test_unknown_method_and_weight_by_list_the_names():
    with pytest.raises(PrmkitError, match="unknown selection method 'best'.*prm-prod.*oracle"):
        select([A], "best")
    with pytest.raises(PrmkitError, match="unknown weight_by aggregate 'sum'.*prod, min"):
        select([A], "weighted-majority", weight_by="sum")
