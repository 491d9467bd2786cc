"""``prmkit lab rl``: the learnable policy (labels equal to gold, exact accuracy, gradients),
the gold arm's check of stated values, the ceiling against brute force on a tiny world, the
trained hazard PRM and the ORM, the advantages of each arm, the statistics worked by hand, and
a tiny run that writes its summary and resumes after a kill."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

from prmkit.cli import main
from prmkit.errors import PrmkitError
from prmkit.lab.verifiers import featureprm
from prmkit.lab.rl import stats as rlstats
from prmkit.lab.rl.run import LabRLConfig, advantages, ceiling_accuracy, exact_accuracy
from prmkit.lab.rl.policy import (KINDS, OPERATORS, StatedGoldPRM, StepPolicy, hidden_text,
                                  kind_of, stated_labels)
from prmkit.world.problems import (LabConfig, Op, Problem, answer_text, apply, gold_labels,
                              load_problem, make_problems, number, step_text)

# Mia has 14; buys 6 (add) = 20; gives away 5 (sub) = 15
MIA = Problem("Mia", "She", "marbles", 14, [Op("add", 6, "buys"), Op("sub", 5, "gives away")])


@pytest.mark.parametrize("show,slip_shown,slip_hidden", [(0.9, 0.03, 0.35), (0.5, 0.3, 0.5)])
def test_fast_labels_equal_gold_labels(show, slip_shown, slip_hidden):
    records = make_problems(LabConfig(n=60, min_steps=1, max_steps=8, seed=3))
    policy, rng = StepPolicy(show, slip_shown, slip_hidden), random.Random(0)
    policy.theta_op += np.random.default_rng(0).normal(0, 2, policy.theta_op.shape)
    wrong = 0
    for r in records:
        problem = load_problem(r.problem)
        for _ in range(15):
            s = policy.sample(problem, rng)
            assert s.labels == gold_labels(r.problem, s.steps), s.steps
            wrong += 0 in s.labels
    assert wrong > 100   # the check covered wrong steps, not only right ones


def test_hidden_steps_state_a_result_and_claim_nothing():
    policy = StepPolicy(show=1e-9, slip_shown=0.0, slip_hidden=0.0)
    s = policy.sample(MIA, random.Random(1))
    assert s.shown == [False, False]
    assert "=" not in s.steps[0] and s.steps[0].endswith(" marbles.")
    assert s.steps[-1].startswith("The answer is")


def test_stated_values_are_checked_by_hand():
    # a hidden slip (20 stated as 21): the world's labels blame the next shown step, which
    # carries 21 on; the stated-value check blames the hidden step itself
    slip = ["She buys 6 more, so she has 21 marbles.",
            "She gives away 5, so she has 21 - 5 = 16 marbles.", "The answer is 16."]
    assert gold_labels(MIA.text(), slip) == [1, 0, 0]
    assert stated_labels(MIA, slip) == [0, 0, 0]
    # a hidden wrong operator (14 + 6 = 20, then 20 + 5 stated as 25): the world's labels
    # blame the answer line, the check the hidden step
    wrong_op = ["She buys 6 more, so she has 14 + 6 = 20 marbles.",
                "She gives away 5, so she has 25 marbles.", "The answer is 25."]
    assert gold_labels(MIA.text(), wrong_op) == [1, 1, 0]
    assert stated_labels(MIA, wrong_op) == [1, 0, 0]
    right = [hidden_text(MIA, 0, 20), hidden_text(MIA, 1, 15), answer_text(15)]
    assert stated_labels(MIA, right) == [1, 1, 1]
    assert StatedGoldPRM().score([MIA.text()], [wrong_op]) == [[1.0, 0.0, 0.0]]


@pytest.mark.parametrize("show", [1.0 - 1e-12, 0.5])
def test_stated_labels_agree_with_gold_where_shown_and_are_never_later(show):
    records = make_problems(LabConfig(n=40, min_steps=1, max_steps=8, seed=5))
    policy, rng = StepPolicy(show=show), random.Random(0)
    moved = 0
    for r in records:
        problem = load_problem(r.problem)
        for _ in range(10):
            s = policy.sample(problem, rng)
            got = stated_labels(problem, s.steps)
            # the first error never later (a hidden slip that a later slip happens to undo,
            # 39 / 3 = 13 stated as 3, a true value, is wrong by stated values only)
            assert all(a <= b for a, b in zip(got, s.labels))
            if all(s.shown):
                assert got == s.labels
            moved += got != s.labels
    assert (moved > 20) == (show == 0.5)


def _line_outcomes(problem, i, x, slip_shown, slip_hidden):
    """Every (operator, shown, slip) of line ``i`` from value ``x``, drawn as
    :class:`StepPolicy` draws them: its text, the value it carries on, and its probability
    factors (operator index, shown, the slip's share of the chance)."""
    from fractions import Fraction

    out = []
    for o, name in enumerate(OPERATORS):
        y0 = apply(name, Fraction(x), problem.ops[i].k)
        for shown in (True, False):
            slip = slip_shown if shown else slip_hidden
            offsets = [d for d in (-10, -2, -1, 1, 2, 10) if y0 + d > 0 or y0 <= -10]
            for d, share in [(0, 1 - slip)] + [(d, slip / len(offsets)) for d in offsets]:
                y = Fraction(number(y0 + d))
                text = step_text(problem, i, x, y, name) if shown else hidden_text(problem, i, y)
                out.append((text, y, o, shown, share))
    return out


def _brute_best(problem, policy):
    """The best chance that every line is right (by stated_labels of the text) over a grid of
    the policy family: each kind's operator distribution (thirds over the 4 operators) and
    show chance (0, 0.5, 1), every outcome of every line enumerated."""
    from itertools import product

    dists = [np.array(c) / 3 for c in product(range(4), repeat=4) if sum(c) == 3]

    def factors(lines):   # grid points x outcomes
        return np.array([[p[o] * (s if shown else 1 - s) * share for _, _, o, shown, share in lines]
                         for p in dists for s in (0.0, 0.5, 1.0)])

    lines0 = _line_outcomes(problem, 0, problem.start, policy.slip_shown, policy.slip_hidden)
    after = []   # per outcome of line 0: the chance, at each grid point, that the rest is right
    for t0, y0, *_ in lines0:
        lines1 = _line_outcomes(problem, 1, y0, policy.slip_shown, policy.slip_hidden)
        ok = np.array([all(stated_labels(problem, [t0, t1, answer_text(y1)]))
                       for t1, y1, *_ in lines1], dtype=float)
        after.append(factors(lines1) @ ok)
    return float((factors(lines0) @ np.array(after)).max())


def test_ceiling_is_the_best_of_the_policy_family_by_brute_force():
    # a tiny world of two problems of two operations, the kinds of one not in the other, so
    # the family's best mean is the mean of each problem's best
    div = Problem("Leo", "He", "coins", 10, [Op("mul", 4), Op("div", 5)])
    policy = StepPolicy()
    best = [_brute_best(p, policy) for p in (MIA, div)]
    counts = np.zeros((2, len(KINDS)))
    for row, p in enumerate((MIA, div)):
        for k in range(len(p.ops)):
            counts[row, kind_of(p, k)] += 1
    assert best == pytest.approx([0.97 ** 2, 0.97 ** 2])
    assert ceiling_accuracy(policy, counts) == pytest.approx(np.mean(best))
    assert exact_accuracy(policy, counts) < ceiling_accuracy(policy, counts)


def test_success_probability_by_hand():
    policy = StepPolicy(show=0.5, slip_shown=0.1, slip_hidden=0.3)
    p_op = policy.op_probs()
    buys, gives = KINDS.index("buys"), KINDS.index("gives away")
    add, sub = OPERATORS.index("add"), OPERATORS.index("sub")
    assert p_op[gives, sub] == pytest.approx(0.55, abs=1e-3)   # the base confusion
    line = 0.5 * 0.9 + 0.5 * 0.7                                # shown or hidden, no slip
    want = p_op[buys, add] * line * p_op[gives, sub] * line
    assert policy.success_probability(MIA) == pytest.approx(want)
    counts = np.zeros((1, len(KINDS)))
    counts[0, buys] = counts[0, gives] = 1
    assert exact_accuracy(policy, counts) == pytest.approx(want)


def test_success_probability_matches_sampling():
    policy, rng = StepPolicy(), random.Random(2)
    right = [all(policy.sample(MIA, rng).labels) for _ in range(20000)]
    assert np.mean(right) == pytest.approx(policy.success_probability(MIA), abs=0.015)


def test_grad_log_prob_is_the_gradient_of_the_log_probability():
    policy = StepPolicy()
    s = policy.sample(MIA, random.Random(4))
    g_op, g_show = np.zeros_like(policy.theta_op), np.zeros_like(policy.theta_show)
    policy.grad_log_prob(s, [2.0, -1.0, 5.0], g_op, g_show)   # the answer line's 5.0 is unused

    def log_prob(theta_op, theta_show):
        z = theta_op - theta_op.max(axis=1, keepdims=True)
        lp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        ps = 1 / (1 + np.exp(-theta_show))
        return sum(a * (lp[c, o] + math.log(ps[c] if sh else 1 - ps[c]))
                   for a, c, o, sh in zip([2.0, -1.0], s.kinds, s.ops, s.shown))

    eps = 1e-6
    c, o = s.kinds[1], OPERATORS.index("add")
    bumped = policy.theta_op.copy()
    bumped[c, o] += eps
    numeric = (log_prob(bumped, policy.theta_show) - log_prob(policy.theta_op, policy.theta_show)) / eps
    assert g_op[c, o] == pytest.approx(numeric, rel=1e-4, abs=1e-6)
    bumped = policy.theta_show.copy()
    bumped[s.kinds[0]] += eps
    numeric = (log_prob(policy.theta_op, bumped) - log_prob(policy.theta_op, policy.theta_show)) / eps
    assert g_show[s.kinds[0]] == pytest.approx(numeric, rel=1e-4, abs=1e-6)
    assert kind_of(MIA, 1) == KINDS.index("gives away")


def test_feature_prm_reads_the_text_by_hand():
    steps = ["She buys 6 more, so she has 14 + 6 = 21 marbles.",   # calculation wrong
             "She gives away 5, so she has 21 + 5 = 26 marbles.",  # wrong operator
             "She gives away 5, so she has 20 marbles.",           # hidden, wrong carry unseen
             "The answer is 19."]                                   # not the previous result
    f = featureprm.features(MIA, steps)
    names = featureprm.FEATURES
    assert dict(zip(names, f[0])) == {"bias": 1, "hidden": 0, "calc": 1, "operator": 0,
                                      "carry": 0, "answer": 0, "answer_carry": 0}
    assert f[1, names.index("operator")] == 1 and f[1, names.index("calc")] == 0
    assert f[2, names.index("hidden")] == 1 and f[2].sum() == 2
    assert f[3, names.index("answer")] == 1 and f[3, names.index("answer_carry")] == 1
    # weights: hazard logit -2 on a clean step, +2 with a wrong calculation
    prm = featureprm.FeaturePRM([-2.0, 0, 4.0, 0, 0, 0, 0])
    h_clean, h_bad = 1 / (1 + math.exp(2)), 1 / (1 + math.exp(-2))
    got = prm.score([MIA.text()], [steps[:2]])[0]
    assert got == pytest.approx([1 - h_bad, (1 - h_bad) * (1 - h_clean)])


def test_orm_reads_counts_by_hand():
    steps = ["She buys 6 more, so she has 14 + 6 = 21 marbles.",   # calculation wrong
             "She gives away 5, so she has 16 marbles.",           # hidden
             "The answer is 16."]
    row = featureprm.orm_row(MIA, steps)
    assert dict(zip(featureprm.ORM_FEATURES, row)) == {
        "bias": 1, "steps": 3, "hidden": 1, "calc": 1, "operator": 0, "carry": 0,
        "answer_carry": 0}
    orm = featureprm.FeatureORM([1.0, 0, -1.0, -2.0, 0, 0, 0])       # logit 1 - 1 - 2 = -2
    assert orm.score([MIA.text()], [steps]) == [[None, None, pytest.approx(1 / (1 + math.exp(2)))]]
    assert orm.to_dict()["features"] == list(featureprm.ORM_FEATURES)


def test_hazard_rows_and_fit():
    x, y = featureprm.hazard_rows(MIA, ["a = 1", "b", "The answer is 15."], [1, 0, 0])
    assert len(x) == 2 and y.tolist() == [0.0, 1.0]
    x, y = featureprm.hazard_rows(MIA, ["a", "b"], [1, 1])
    assert y.tolist() == [0.0, 0.0]
    # a feature on in 80% of its rows' errors and 20% of the others: the fit finds its log odds
    rng = np.random.default_rng(0)
    f = rng.integers(0, 2, 4000)
    y = (rng.random(4000) < np.where(f == 1, 0.8, 0.2)).astype(float)
    w = featureprm.fit(np.stack([np.ones(4000), f], axis=1), y, l2=0.0)
    assert w[0] == pytest.approx(math.log(0.2 / 0.8), abs=0.15)
    assert w[1] == pytest.approx(2 * math.log(4), abs=0.25)


class S:
    def __init__(self, correct, step_scores, prm=None):
        self.correct, self.step_scores, self.prm = correct, step_scores, prm


def test_advantages_of_each_arm_by_hand():
    group = [S(True, [1.0, 1.0, 1.0]), S(False, [1.0, 0.0, 0.0])]
    a = 0.5 / math.sqrt(0.5)       # outcomes 1, 0: sample std sqrt(0.5)
    assert advantages("outcome", group, 1.0) == [[a] * 3, [-a] * 3]
    # orm: GRPO's advantage on the ORM's scores (0.9, 0.5: sample std 0.4 / sqrt(2)), not
    # on the outcomes
    orm = [S(False, [None, None, 0.9], prm=0.9), S(True, [None, None, 0.5], prm=0.5)]
    assert advantages("orm", orm, 1.0) == [pytest.approx([h := 0.2 / (0.4 / math.sqrt(2))] * 3),
                                           pytest.approx([-h] * 3)]
    assert advantages("gold", group, 2.0) == [pytest.approx([a + 2, a, a]),
                                              pytest.approx([-a + 2, -a - 2, -a])]
    # process: six rewards, mean 2/3, population std sqrt(2)/3; 1 -> +1/sqrt(2), 0 -> -sqrt(2)
    h = 1 / math.sqrt(2)
    assert advantages("prm-only", group, 1.0) == [pytest.approx([3 * h, 2 * h, h]),
                                                  pytest.approx([h - 2 * 2 * h, -4 * h, -2 * h])]


def test_advantages_of_the_extra_gold_arms_by_hand():
    group = [S(True, [1.0, 1.0]), S(False, [1.0, 0.0])]
    a = 0.5 / math.sqrt(0.5)
    # min-form returns [1, 1] and [0, 0], baseline 0.5; weight 2
    assert advantages("gold-min", group, 2.0) == [pytest.approx([a + 1, a + 1]),
                                                  pytest.approx([-a - 1, -a - 1])]
    # process: mean 0.75, population std sqrt(3)/4; 1 -> +1/sqrt(3), 0 -> -sqrt(3)
    r = 1 / math.sqrt(3)
    assert advantages("gold-process", group, 1.0) == [pytest.approx([a + 2 * r, a + r]),
                                                      pytest.approx([-a + r - 3 * r, -a - 3 * r])]
    assert LabRLConfig(arms="outcome,gold-delta").arm_list == ["outcome", "gold-delta"]


def test_samples_to_reach_and_ratio_by_hand():
    assert rlstats.samples_to_reach([0.2, 0.4, 0.6], 10, 0.5) == pytest.approx(15.0)
    assert rlstats.samples_to_reach([0.2, 0.4], 10, 0.5) == math.inf
    assert rlstats.samples_to_reach([0.6, 0.7], 10, 0.5) == 0.0
    # start 20%, ceiling 80%: halfway is 50%
    assert rlstats.halfway_target(0.2, 0.8) == pytest.approx(0.5)
    assert rlstats.halfway_target(0.2, 0.8, 0.25) == pytest.approx(0.35)
    # outcome's mean curve [0.2, 0.35, 0.55, 0.7] reaches 0.5 three quarters of the way from
    # 10 to 20 samples (17.5); the arm's [0.2, 0.45, 0.65, 0.75] a quarter of the way (12.5)
    base = np.array([[0.2, 0.3, 0.5, 0.7], [0.2, 0.4, 0.6, 0.7]])
    fast = np.array([[0.2, 0.5, 0.7, 0.7], [0.2, 0.4, 0.6, 0.8]])
    assert rlstats.sample_ratio(base, fast, 10, 0.5) == (pytest.approx(17.5 / 12.5), "")
    claim = rlstats.ratio_claim(base, fast, 10, 0.5, bootstrap=200, seed=0)
    # resamples: seed 0 twice 20 / 10 = 2, seed 1 twice 15 / 15 = 1, both 1.4
    assert claim["ratio"] == pytest.approx(1.4) and claim["ci95"] == [1.0, 2.0]
    assert not claim["holds"]   # the interval must lie above 1
    assert claim["samples_outcome"] == 17.5 and claim["samples_arm"] == 12.5
    assert claim["ci95"][0] <= claim["difference"] <= claim["ci95"][1]
    assert claim["seeds_reaching"] == {"outcome": 2, "arm": 2} and claim["censored"] == ""
    # censoring: the arm never reaching the target gives 0; outcome never reaching it counts
    # the budget (30 samples), a lower bound: 30 / 12.5
    slow = np.array([[0.2, 0.2, 0.3, 0.4]] * 2)
    assert rlstats.sample_ratio(base, slow, 10, 0.5) == (0.0, "arm")
    assert rlstats.sample_ratio(slow, fast, 10, 0.5) == (pytest.approx(2.4), "base")
    assert rlstats.sample_ratio(slow, slow, 10, 0.5) == (0.0, "both")
    claim = rlstats.ratio_claim(base, slow, 10, 0.5, bootstrap=50, seed=0)
    assert claim["censored_resamples"] == {"arm": 50, "base": 0, "both": 0}
    assert claim["samples_arm"] is None and not claim["holds"]


def test_area_under_the_curve_and_its_claim_by_hand():
    # update 0 left out: (0.4 + 0.6 + 0.7) / 3
    assert rlstats.auc([0.2, 0.4, 0.6, 0.7]) == pytest.approx(0.5667, abs=1e-4)
    base = np.array([[0.2, 0.4, 0.6, 0.7], [0.2, 0.3, 0.5, 0.7]])     # 0.5667, 0.5
    arm = np.array([[0.2, 0.5, 0.7, 0.7], [0.2, 0.4, 0.6, 0.8]])      # 0.6333, 0.6
    claim = rlstats.auc_claim(base, arm, bootstrap=500, seed=0, margin=0.0)
    assert claim["difference"] == pytest.approx((6.667 + 10.0) / 2, abs=1e-3)
    assert 6.66 <= claim["ci95"][0] <= claim["difference"] <= claim["ci95"][1] <= 10.0
    assert claim["holds"] and claim["seeds"] == 2
    assert not rlstats.auc_claim(arm, base, bootstrap=500, seed=0, margin=0.0)["holds"]
    # a margin of 12 points: minus 8.3 [-10, -6.7] is not worse by more than 12
    assert rlstats.auc_claim(arm, base, bootstrap=500, seed=0, margin=12.0)["holds"]


def test_hacking_signature_by_hand():
    def run(acc_end, prms, accs):
        log = [{"step": i, "prm": p, "accuracy": a, "length": 1.0, "n_steps": 1.0, "n": 1}
               for i, (p, a) in enumerate(zip(prms, accs))]
        return {"curve": [0.5, acc_end], "log": log}

    rising = [0.2, 0.2, 0.5, 0.6]
    falling = [0.6, 0.6, 0.3, 0.2]
    runs = [run(0.3, rising, falling), run(0.2, rising, falling)]
    got = rlstats.hacking(runs, window=2, bootstrap=200, seed=0)
    assert got["holds"] and got["difference"] == pytest.approx(-25.0)   # -20 and -30 points
    assert got["prm_change"] == pytest.approx(0.35) and got["flagged_share"] == 1.0
    honest = [run(0.7, rising, rising), run(0.8, rising, rising)]
    assert not rlstats.hacking(honest, window=2, bootstrap=200, seed=0)["holds"]
    mean, ci = rlstats.mean_ci([1.0, 3.0], bootstrap=500, seed=0)
    assert mean == 2.0 and ci[0] <= 2.0 <= ci[1] and ci[0] >= 1.0 and ci[1] <= 3.0


def test_config_checks():
    with pytest.raises(PrmkitError, match="--lrs"):
        LabRLConfig(lrs="fast")
    with pytest.raises(PrmkitError, match="--arms"):
        LabRLConfig(arms="gold")
    with pytest.raises(PrmkitError, match="--group"):
        LabRLConfig(group=1)
    with pytest.raises(PrmkitError, match="--target-share"):
        LabRLConfig(target_share=1.0)


TINY = ["--seeds", "3", "--tune-seeds", "1", "--lrs", "3,10", "--updates", "4",
        "--problems-per-update", "2", "--group", "4", "--bootstrap", "100",
        "--train-problems", "20", "--eval-problems", "10", "--prm-problems", "20"]


def test_tiny_run_writes_summary_and_resumes_after_a_kill(tmp_path, monkeypatch, capsys):
    out = tmp_path / "rl"
    assert main(["lab", "rl", "--output", str(out), *TINY]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["claims"]) == {"step_rewards_learn_faster", "step_rewards_fewer_samples",
                                      "prm_only_reward_hacking"}
    assert summary["primary"] == "step_rewards_learn_faster"
    assert summary["start_accuracy"] < summary["target_accuracy"] < summary["ceiling_accuracy"]
    for claim in summary["claims"].values():
        assert isinstance(claim["holds"], bool)
        assert claim["ci95"][0] <= claim["difference"] <= claim["ci95"][1]
    assert len(summary["mean_curves"]["gold"]) == 5
    assert "<img" in (out / "report.html").read_text()
    # killed after two evaluation runs: the rest are redone, the finished ones reused
    for f in (out / "runs").glob("*_2.json"):
        f.unlink()
    (out / "summary.json").unlink()
    import prmkit.lab.rl.run as rl

    made = []
    real = rl.run_seed
    monkeypatch.setattr(rl, "run_seed", lambda *a, **k: made.append(a[2]) or real(*a, **k))
    assert main(["lab", "rl", "--output", str(out), *TINY]) == 0
    assert sorted(made) == sorted(["outcome", "gold", "trained", "orm", "prm-only"])
    assert json.loads((out / "summary.json").read_text())["claims"] == summary["claims"]
    assert "[" in capsys.readouterr().out   # stage times printed
