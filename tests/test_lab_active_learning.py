"""Active learning in the lab: the arms' choices and the efficiency statistic against
hand-worked examples, and ``prmkit lab active-learning`` end to end on a tiny model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from prmkit.lab.activelearning.run import choose, uniform
from prmkit.lab.activelearning.stats import efficiency, resampled_quality, shared_slope_ratio
from prmkit.records import Record


def test_the_shared_slope_ratio_on_hand_worked_curves():
    xs = [0, 1, 2, 3]                                    # log2 of 1, 2, 4, 8 labels
    uniform_q = [50, 55, 60, 65]
    # the active curve one doubling ahead: uniform needs twice the labels for each quality
    assert shared_slope_ratio(xs, [55, 60, 65, 70], uniform_q) == pytest.approx(2.0)
    assert shared_slope_ratio(xs, [60, 65, 70, 75], uniform_q) == pytest.approx(4.0)
    assert shared_slope_ratio(xs, [45, 50, 55, 60], uniform_q) == pytest.approx(0.5)
    # slopes 4 and 6 pool to 5; the mean qualities differ by 8: 2 ** (8 / 5)
    assert shared_slope_ratio(xs, [55, 61, 67, 73], [50, 54, 58, 62]) == pytest.approx(2 ** 1.6)
    assert shared_slope_ratio(xs, [70, 70, 70, 70], [60, 60, 60, 60]) is None   # flat: no ratio


def test_resampled_quality_resamples_problems_and_seeds_together():
    acc = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])  # 2 seeds x 3 problems
    pidx = np.array([[0, 0, 0], [2, 1, 0]])
    sidx = np.array([[0, 0], [1, 0]])
    # resample 0: problem 0 three times, seed 0 twice -> 1.0; resample 1: seeds 1 and 0 over
    # problems 2, 1, 0 -> (1/3 + 2/3) / 2
    assert resampled_quality(acc, pidx, sidx).tolist() == pytest.approx([100.0, 50.0])


def test_efficiency_holds_for_a_curve_ahead_on_every_problem_and_not_for_equal_ones():
    budgets = [1, 2, 4, 8]
    rng = np.random.default_rng(0)
    base = rng.uniform(0.3, 0.5, size=(3, 60))
    u = {k: np.clip(base + 0.05 * i, 0, 1) for i, k in enumerate(budgets)}
    a = {k: np.clip(base + 0.05 * (i + 1), 0, 1) for i, k in enumerate(budgets)}
    c = efficiency({"active": a, "uniform": u}, "active", "uniform", budgets, seed=0)
    assert c["difference"] == pytest.approx(2.0, abs=1e-3) and c["holds"]
    assert c["ci95"][0] <= c["difference"] <= c["ci95"][1] and c["paper"] == 2.6
    same = efficiency({"active": u, "uniform": u}, "active", "uniform", budgets, seed=0)
    assert same["difference"] == pytest.approx(1.0) and not same["holds"]


def pool():
    """Two problems of four samples: P0 with three wrong answers, P1 with one."""
    rows = [("P0", [False, True, False, False], [0.9, 0.8, 0.2, 0.5]),
            ("P1", [True, False, True, True], [0.1, 0.3, 0.9, 0.6])]
    return [Record(id=f"{g}-{i}", problem=g, steps=["s"], labels=[1.0], group=g,
                   is_correct=ok, step_scores=None)
            for g, oks, _ in rows for i, ok in enumerate(oks)], \
        {f"{g}-{i}": [s] for g, _, ss in rows for i, s in enumerate(ss)}


def ids(records):
    return [r.id for r in records]


def test_the_active_arm_takes_the_most_convincing_wrong_answers_then_the_best_rest():
    recs, scores = pool()
    # k = 2: round(1.6) = 2 wrong answers, the selector's highest (P0-0 0.9, P0-3 0.5); P1 has
    # one wrong answer, then the highest-rated of the rest (P1-2 0.9)
    assert ids(choose("active", recs, 2, 0, 0.8, scores)) == ["P0-0", "P0-3", "P1-1", "P1-2"]
    # k = 4: round(3.2) = 3 wrong answers and one more, the whole of P0
    assert sorted(ids(choose("active", recs, 4, 0, 0.8, scores))[:4]) == \
        ["P0-0", "P0-1", "P0-2", "P0-3"]
    # k = 1: round(0.8) = 1 wrong answer
    assert ids(choose("active", recs, 1, 0, 0.8, scores)) == ["P0-0", "P1-1"]


def test_the_random_wrong_arm_takes_as_many_wrong_answers_and_uniform_any():
    recs, scores = pool()
    picked = choose("random-wrong", recs, 2, 0, 0.8, scores)
    p0 = [r for r in picked if r.group == "P0"]
    assert len(p0) == 2 and not any(r.is_correct for r in p0)
    p1 = [r for r in picked if r.group == "P1"]
    assert len(p1) == 2 and sum(not r.is_correct for r in p1) == 1
    u = uniform(recs, 3, 0)
    assert len(u) == 6 and u == uniform(recs, 3, 0) and ids(u) != ids(uniform(recs, 3, 1))


def test_budgets_where_the_active_share_rounds_to_all_are_dropped_by_rule():
    from prmkit.errors import PrmkitError
    from prmkit.lab.activelearning.run import ActiveLearningConfig

    # round(0.8 * 1) = 1 and round(0.8 * 2) = 2: the active arm would label wrong answers only
    c = ActiveLearningConfig(budgets="1,2,4,8,16")
    assert c.budget_list == [4, 8, 16] and c.dropped_budgets == [1, 2]
    assert ActiveLearningConfig().budget_list == [4, 8, 16]      # the protocol: none dropped
    with pytest.raises(PrmkitError, match="dropped"):
        ActiveLearningConfig(budgets="1,2,4")


@pytest.fixture
def base(tmp_path):
    import tiny

    path = tmp_path / "base"
    tiny.causal_lm(tie_word_embeddings=True).save_pretrained(path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(path)
    return str(path)


def test_active_learning_runs_and_writes_its_claim(base, tmp_path, capsys):
    from prmkit.cli import main

    out = tmp_path / "al"
    argv = ["lab", "active-learning", "--base", base, "--output", str(out), "--train-problems",
            "4", "--pool-n", "4", "--test-problems", "3", "--test-n", "4", "--budgets", "1,3,4",
            "--seeds", "2", "--epochs", "1"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    c = summary["claims"]["active_learning_efficiency"]
    assert isinstance(c["holds"], bool) and c["ci95"][0] <= c["difference"] <= c["ci95"][1]
    # each arm's curve is the mean of its PRMs' per-problem accuracies
    assert summary["dropped_budgets"] == [1] and not list(out.glob("prm_*_1_*.json"))
    runs = [json.loads((out / f"prm_uniform_3_{s}.json").read_text()) for s in (0, 1)]
    mean = 100 * np.mean([v for r in runs for v in r["accuracy"].values()])
    assert summary["curves"]["uniform"][0]["accuracy"] == pytest.approx(mean, abs=1e-3)
    assert all(r["labels"] == 12 for r in runs)           # three per training problem
    capsys.readouterr()
    assert main(argv) == 0 and "resuming" in capsys.readouterr().out
    assert "<img" in (out / "report.html").read_text()
