"""Consensus of Monte Carlo and judge labels, and the quality report against gold labels,
on hand-worked examples."""

from __future__ import annotations

import pytest

from prmkit.errors import PrmkitError
from prmkit.label.consensus import consensus
from prmkit.label.quality import label_quality, method_of
from prmkit.records import Record


def rec(id, first_error=None, labels=None, steps=("a", "b", "c"), **meta):
    return Record(id=id, problem=f"problem {id}", steps=list(steps), first_error=first_error,
                  labels=labels, meta=meta)


MC = [rec("1", 1, [1.0, 0.0, 1.0], mc={"strategy": "per-step"}),
      rec("2", -1, [1.0, 1.0, 1.0], mc={}),
      rec("3", 2, mc={}),
      rec("4", 0, mc={}),
      rec("5", None, mc={})]
JUDGE = [rec("1", 1, judge={"votes": [1]}), rec("2", -1), rec("3", 0), rec("5", 1), rec("6", 2)]


def test_consensus_keeps_agreement_and_counts_the_rest():
    kept, summary = consensus(MC, JUDGE)
    assert [r.id for r in kept] == ["1", "2"]
    assert (summary.kept, summary.dropped) == (2, 1)            # 3: MC says 2, judge 0
    assert summary.missing_judge == 1                           # 4: not judged
    assert summary.missing_mc == 2                              # 5: no MC label; 6: not in MC
    assert kept[0].labels == [1.0, 0.0, None]                    # from the agreed first error
    assert kept[0].meta["judge"] == {"votes": [1]} and "mc" in kept[0].meta
    assert "kept 2, dropped 1" in summary.line() and "66.7%" in summary.line()
    kept, _ = consensus(MC, JUDGE, labels="mc")
    assert kept[0].labels == [1.0, 0.0, 1.0]
    assert MC[0].labels == [1.0, 0.0, 1.0]                       # inputs are not changed


def test_consensus_refuses_different_solutions_under_one_id():
    with pytest.raises(PrmkitError, match="different steps"):
        consensus([rec("1", 0)], [rec("1", 0, steps=("x", "b", "c"))])


def test_quality_against_gold_by_hand():
    gold = {r.id: r for r in [rec("1", 1), rec("2", -1), rec("3", 0),
                              rec("4", labels=[1.0, 1.0, 0.0])]}
    labelled = [rec("1", 1, [1.0, 0.0, None], mc={"strategy": "binary", "mode": "hard",
                                                   "rollouts": 4, "threshold": 0.0,
                                                   "rollouts_spent": 8}),
                rec("2", 0, [0.0, None, None], mc={"strategy": "binary", "mode": "hard",
                                                    "rollouts": 4, "threshold": 0.0,
                                                    "rollouts_spent": 4}),
                rec("3", 0, [0.0, None, None], mc={"strategy": "binary", "mode": "hard",
                                                    "rollouts": 4, "threshold": 0.0,
                                                    "rollouts_spent": 12}),
                rec("4", 2, [1.0, 1.0, 0.0], mc={"strategy": "binary", "mode": "hard",
                                                  "rollouts": 4, "threshold": 0.0,
                                                  "rollouts_spent": 0}),
                rec("9", 0, [0.0, None, None], mc={"strategy": "binary", "mode": "hard",
                                                    "rollouts": 4, "threshold": 0.0,
                                                    "rollouts_spent": 4})]
    [q] = label_quality(labelled, gold)
    assert q.method == "mc binary hard K=4" == method_of(labelled[0])
    assert (q.records, q.no_gold, q.unknown) == (4, 1, 0)
    assert q.first_error_agreement == 75.0                  # 1, 3, 4 agree; 2 does not
    assert (q.error_acc, q.correct_acc, q.f1) == (100.0, 0.0, 0.0)
    # steps labelled on both sides: 1: a b (agree, agree); 2: a (disagree); 3: a (agree);
    # 4: a b c (agree x3)  -> 6 of 7
    assert q.steps == 7 and q.step_agreement == pytest.approx(100 * 6 / 7)
    assert q.rollouts_per_record == 6.0                     # (8 + 4 + 12 + 0) / 4


def test_quality_reads_soft_labels_with_their_threshold():
    gold = {"1": rec("1", labels=[1.0, 1.0, 0.0])}
    soft = rec("1", 2, [0.25, 0.5, 0.0], mc={"strategy": "per-step", "mode": "soft",
                                              "rollouts": 4, "threshold": 0.25})
    [q] = label_quality([soft], gold)
    assert q.method == "mc per-step soft K=4 t=0.25"
    assert q.step_agreement == pytest.approx(100 * 2 / 3)   # 0.25 <= t: judged wrong
    [judged] = label_quality([rec("1", 2, judge={"model": "m", "samples": 1})], gold)
    assert judged.method == "judge m x1" and judged.step_agreement == 100.0
    assert judged.rollouts_per_record is None
