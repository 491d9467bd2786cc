"""prmkit lab compute-optimal: its statistics on hand-worked and brute-force examples, its
trained n-gram PRM, and the command at tiny sizes (resumed after a kill)."""

import itertools
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from prmkit import select
from prmkit.errors import PrmkitError
from prmkit.lab.computeoptimal.run import final_pick
from prmkit.lab.computeoptimal.summary import claims
from prmkit.lab.computeoptimal.stats import (Budget, Data, bon_curve, curve_grid, cv_choice, figures,
                                fold_ids, holm, samples_needed, weighted_draws)
from prmkit.lab.verifiers.ngramprm import NgramPRM, fit_ngram_prm, hazard_examples, ngrams, words
from prmkit.records import Record
from prmkit.search.compute_optimal import Outcome, compute_optimal


def _pool(rows, group="p"):
    """Records of one problem's pool: (answer, last-step score, right) per sample."""
    return [Record(id=f"{group}-{k}", problem="q", steps=["first", f"step {k}"], answer=a, group=group,
                   step_scores=[0.3, s], is_correct=bool(c), meta={"complete": True})
            for k, (a, s, c) in enumerate(rows)]


HAND = [("12", 0.5, 1), ("30", 0.9, 0), ("12", 0.5, 1), ("7", 0.2, 0)]


def test_weighted_draws_by_hand():
    # answers' summed last-step scores: 12 -> 0.5 per sample, 30 -> 0.9, 7 -> 0.2.
    # n=4: 12 sums 1.0 > 0.9: right (argmax picks 30: wrong). n=2: of the 6 pairs, right are
    # {12, 12}, {12a, 7}, {12b, 7}: 1/2. n=3: of the 4 triples, right are those with both 12s:
    # 1/2. n=1: 2 of 4 samples right.
    got = weighted_draws(_pool(HAND), [1, 2, 3, 4], 4000, np.random.default_rng(0))["p"]
    assert got[3] == 1.0
    assert got[:3] == pytest.approx([0.5, 0.5, 0.5], abs=0.04)
    assert bon_curve([s for _, s, _ in HAND], [c for *_, c in HAND])[3] == 0.0
    with pytest.raises(PrmkitError, match="cannot draw 5"):
        weighted_draws(_pool(HAND), [5], 10, np.random.default_rng(0))


def test_weighted_draws_match_select_over_every_ordered_draw():
    # scores in sixteenths add exactly, so two answers can tie and the draw order decides
    rng = np.random.default_rng(3)
    rows = [(str(rng.integers(0, 3)), int(rng.integers(1, 16)) / 16, 0) for _ in range(6)]
    rows = [(a, s, int(a == "1")) for a, s, _ in rows]
    recs = _pool(rows)
    got = weighted_draws(recs, [2, 3, 5], 20000, np.random.default_rng(1))["p"]
    for j, n in enumerate([2, 3, 5]):
        picks = [select.select([recs[i] for i in order], "weighted-majority", "last")[0]
                 for order in itertools.permutations(range(6), n)]
        exact = sum(r.is_correct for r in picks) / len(picks)
        assert got[j] == pytest.approx(exact, abs=0.03), n


def test_final_pick_votes_among_finished_candidates():
    recs = _pool([("5", 0.9, 0), ("7", 0.5, 1), ("7", 0.5, 1), ("5", 0.2, 0)])
    recs[3].meta["complete"] = False                 # unfinished: it does not vote
    assert final_pick(recs) is recs[1]               # 7 sums 1.0 against 5's 0.9
    for r in recs:
        r.meta["complete"] = False                   # none finished: all vote, 5 sums 1.1
    assert final_pick(recs) is recs[0]


def test_curve_grid_holds_every_budget_and_its_best_of_n():
    assert curve_grid(144, [4, 8, 16, 32], 4) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64,
                                                   80, 96, 128, 144]


def test_samples_needed_interpolates_the_first_crossing():
    grid, curve = [1, 2, 4], np.array([0.2, 0.4, 0.5])
    assert samples_needed(grid, curve, 0.3) == pytest.approx(1.5)   # halfway from 1 to 2
    assert samples_needed(grid, curve, 0.45) == pytest.approx(3.0)  # halfway from 2 to 4
    assert samples_needed(grid, curve, 0.1) == 1.0
    assert samples_needed(grid, curve, 0.5) == 4.0
    assert math.isinf(samples_needed(grid, curve, 0.6))


def test_fold_ids_count_positions_within_each_bin():
    assert fold_ids([0, 1, 0, 0, 1], 2).tolist() == [0, 0, 1, 0, 1]


def _outcomes():
    # 8 problems, 2 bins; best-of-n wins in bin 0, beam in bin 1, with one exception each
    bon = [1, 1, 1, 0, 0, 0, 1, 0]
    beam = [0, 0, 1, 1, 1, 1, 0, 1]
    bins = [0, 0, 0, 0, 1, 1, 1, 1]
    return bon, beam, bins


def test_cv_choice_equals_the_plain_compute_optimal():
    bon, beam, bins = _outcomes()
    pids = [f"p{i}" for i in range(8)]
    outcomes = {"best-of-n": {p: Outcome(bool(c), 10) for p, c in zip(pids, bon)},
                "beam": {p: Outcome(bool(c), 12) for p, c in zip(pids, beam)}}
    plain = compute_optimal(outcomes, dict(zip(pids, bins)), folds=2)
    acc, tok = np.array([bon, beam], float), np.array([[10] * 8, [12] * 8], float)
    picked = cv_choice(acc, tok, np.array(bins), fold_ids(bins, 2), np.ones(8))
    assert acc[picked, np.arange(8)].mean() == pytest.approx(plain.accuracy)
    # by hand: fold 0 = p0 p2 p4 p6, trained on p1 p3 (bin 0: bon 1/2, beam 1/2 -> tie -> fewer
    # tokens: bon) and p5 p7 (bin 1: beam 2/2); fold 1 trained on p0 p2 (bon 2/2) and p4 p6
    # (bon 1/2, beam 1/2: bon). Picks: bon, bon, bon, bon, bon, beam, beam, bon
    assert picked.tolist() == [0, 0, 0, 0, 1, 0, 1, 0]
    assert plain.accuracy == pytest.approx(4 / 8)


def test_cv_choice_weights_count_a_problem_twice():
    bon, beam, bins = _outcomes()
    acc, tok = np.array([bon, beam], float), np.array([[10] * 8, [12] * 8], float)
    w = np.ones(8)
    w[3] = 2.0           # p3 (beam right, bon wrong) drawn twice: bin 0 of fold 0 goes to beam
    picked = cv_choice(acc, tok, np.array(bins), fold_ids(bins, 2), w)
    assert picked[[0, 2]].tolist() == [1, 1]
    w[3] = 0.0           # p3 not drawn: bin 0 of fold 0 trains on p1 alone (bon right)
    assert cv_choice(acc, tok, np.array(bins), fold_ids(bins, 2), w)[[0, 2]].tolist() == [0, 0]


def _data():
    # 4 problems, best-of-n drawn at 1, 2, 4, 8, 12; one budget n=2 with best-of-n and beam
    grid = [1, 2, 4, 8, 12]
    curves = np.array([[0.25, 0.5, 0.75, 0.9, 1.0]] * 4)
    beam = np.array([1.0, 1.0, 1.0, 0.0])                   # 0.75 on average
    budget = Budget(2, ["best-of-n", "beam"], np.array([curves[:, 1], beam]),
                    np.array([[20.0] * 4, [24.0] * 4]))
    return Data([budget], grid, curves, np.full(4, 10.0), probe_samples=1,
                probe_tokens=np.full(4, 10.0), folds=2,
                bins={"one": np.zeros(4, int), "two": np.array([0, 0, 1, 1])})


def test_figures_by_hand():
    f = figures(_data(), "one", np.ones(4), charge_probe=False)
    # one bin: both folds train on the other fold's two problems, where beam (1.0 or 0.5) is
    # at least best-of-n's 0.5 (tie in fold 1 -> fewer tokens: best-of-n)
    # fold 0 = p0, p2 (trained on p1, p3: beam 0.5 vs 0.5 -> best-of-n: 0.5 each)
    # fold 1 = p1, p3 (trained on p0, p2: beam 1.0 -> beam: 1.0 and 0.0)
    assert f["co"] == [pytest.approx(0.5)]
    assert f["ref_n"] == [8] and f["ref"] == [pytest.approx(0.9)]     # best-of-4n
    assert f["bon_needed"] == [pytest.approx(2.0)]            # best-of-n reaches 0.5 at n = 2
    assert f["co_tokens"] == [pytest.approx((20 + 20 + 24 + 24) / 4)]
    assert f["e_tokens"] == [pytest.approx(2.0 * 10 / 22)]
    charged = figures(_data(), "one", np.ones(4), charge_probe=True)
    assert charged["ref_n"] == [12] and charged["ref"] == [pytest.approx(1.0)]  # 4 x (2 + 1)
    assert charged["ref4n"] == [pytest.approx(0.9)]
    assert charged["e_tokens"] == [pytest.approx(20 / 32)]    # the probe's 10 tokens added


def test_figures_cap_a_censored_efficiency_at_the_pool():
    data = _data()
    data.curves = np.array([[0.1, 0.2, 0.3, 0.35, 0.4]] * 4)
    f = figures(data, "one", np.ones(4), charge_probe=False)
    assert f["censored"] == [True] and f["e_tokens"] == [pytest.approx(12 * 10 / 22)]


def test_holm_steps_down_by_hand():
    # four tests, each bootstrap distribution uniform on [a, a + 10] (10001 points), margin 2:
    # p = share at or below -2: A (a=-1) 0, B (a=-2.1) 101/10001, C (a=-2.115) 116/10001,
    # D (a=-3) 1001/10001; so the steps are A, B, C, D at 1 - 0.05/4, 1 - 0.05/3, 1 - 0.05/2
    # and 0.95. Low ends: A -1 + 10 x 0.625% = -0.9375 (holds); B -2.1 + 10 x 0.8333% =
    # -2.0167 (fails, and the step-down stops); C -2.115 + 0.125 = -1.99 would hold at its
    # level, and does not; D -3 + 0.25 = -2.75.
    boots = [np.linspace(a, a + 10, 10001) for a in (-1.0, -2.1, -2.115, -3.0)]
    out = holm(boots, margin=2.0)
    assert [h["holds"] for h in out] == [True, False, False, False]
    assert [h["holm_step"] for h in out] == [1, 2, 3, 4]
    assert [h["holm_level"] for h in out] == pytest.approx([0.9875, 1 - 0.05 / 3, 0.975, 0.95])
    assert [h["ci_holm"][0] for h in out] == pytest.approx([-0.9375, -2.0167, -1.99, -2.75])
    assert [h["p_value"] for h in out] == pytest.approx([0, 0.0101, 0.0116, 0.10009], abs=1e-5)
    # B alone is one test at 95%: -2.1 + 0.25 = -1.85 holds
    assert holm(boots[1:2], margin=2.0)[0]["holds"]


def _fig(co, ref, single):
    return {"n": [4, 8], "ref_n": [32, 48], "co": co, "ref": ref, "single": single}


def test_claims_by_hand():
    # n=4: co - ref = -1 point, resamples uniform on [-1.5, -0.5]: p = 0, Holm's first step of
    # two, at 97.5%: low end -1.5 + 0.0125 = -1.4875 > -2: holds. n=8: -3 points, resamples on
    # [-3.5, -2.5]: second step, at 95%: low end -3.475: does not.
    # beats best single over n = 4 and 8: (0 + 10) / 2 = 5 points; resamples 4.0 .. 5.0, whose
    # interval [4.025, 4.975] is widened to hold the point estimate
    e = np.linspace(-0.005, 0.005, 2001)
    point = _fig([0.80, 0.70], [0.81, 0.73], [0.80, 0.60])
    boots = [_fig([0.80, 0.70], [0.81 + x, 0.73 + x], [0.80, 0.60 + 2 * (x + 0.005)])
             for x in e]
    c = claims(point, boots, margin=2.0, single_budgets=[4, 8])
    four = c["compute_optimal_at_4_matches_best_of_32"]
    eight = c["compute_optimal_at_8_matches_best_of_48"]
    assert four["difference"] == pytest.approx(-1.0) and four["holds"]
    assert four["ci95"] == pytest.approx([-1.475, -0.525]) and four["holm_step"] == 1
    assert four["ci_holm"] == pytest.approx([-1.4875, -0.5125])
    assert four["holm_level"] == 0.975 and eight["holm_level"] == 0.95
    assert eight["difference"] == pytest.approx(-3.0) and not eight["holds"]
    assert eight["ci95"] == pytest.approx([-3.475, -2.525])
    d = c["difficulty_beats_best_single"]
    assert d["difference"] == pytest.approx(5.0) and d["holds"]
    assert d["ci95"] == pytest.approx([4.025, 5.0])
    for claim in c.values():
        assert claim["ci95"][0] <= claim["difference"] <= claim["ci95"][1]


def test_ngram_prm_reads_numbers_and_the_calculator():
    assert words("She has 14 + 6 = 21 marbles.") == [
        "she", "has", "<num>", "+", "<num>", "=", "<num>", "[calculator:", "<num>", "marbles"]
    assert words("He has 3 - 5 = -2 coins.")[-2:] == ["<neg>", "coins"]
    w = words("One of the 3 groups has 20 / 3 = 6.67 marbles.")
    assert "<dec>" in w and "[calculator:" not in w
    assert "[calculator:" in words("She has 14 + 6 = 21 marbles.")
    assert "= <num>" in ngrams("x 1 + 1 = 2")


def test_ngram_prm_scores_survival_and_learns_the_note():
    prm = NgramPRM(["[calculator:"], [2.0, -4.0])
    right, wrong = "She has 1 + 1 = 2 coins.", "She has 1 + 1 = 3 coins."
    h_right, h_wrong = 1 / (1 + math.exp(-2.0)), 1 / (1 + math.exp(2.0))
    [row] = prm.score(["p"], [[right, wrong, right]])
    assert row == pytest.approx([h_right, h_right * h_wrong, h_right * h_wrong * h_right])
    recs = [Record(id=f"r{i}", problem="p", steps=[right, wrong, right], labels=[1, 0, 0])
            for i in range(3)] + [Record(id="ok", problem="p", steps=[right, right],
                                         labels=[1, 1])]
    steps, targets = hazard_examples(recs)
    assert targets == [1, 0] * 3 + [1, 1]               # nothing after a first error
    fitted = fit_ngram_prm(recs)
    assert fitted.hazard(wrong) < 0.5 < fitted.hazard(right)
    with pytest.raises(PrmkitError):
        NgramPRM(["a"], [1.0])


def test_ngram_prm_round_trips_and_names_a_bad_file(tmp_path):
    prm = NgramPRM(["a", "b"], [0.1, 0.2, 0.3], 7)
    path = str(tmp_path / "prm.json")
    prm.save(path)
    assert NgramPRM.load(path) == prm
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(PrmkitError, match="bad.json"):
        NgramPRM.load(str(tmp_path / "bad.json"))


TINY = ["--problems", "10", "--oracle-samples", "4", "--train-problems", "8", "--train-n", "2",
        "--rollouts", "2", "--probe-n", "1", "--pool", "20", "--draws", "10", "--budgets", "4",
        "--single-budgets", "4", "--methods", "beam:4", "--beside", "mcts:4", "--bins", "2",
        "--resamples", "20", "--workers", "1", "--min-steps", "2", "--max-steps", "4"]


def _run(out):
    cmd = [sys.executable, "-m", "prmkit.cli", "lab", "compute-optimal", "--output", str(out)]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    return subprocess.Popen(cmd + TINY, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)


def test_command_writes_claims_and_resumes_after_a_kill(tmp_path, capsys):
    from prmkit.cli import build_parser

    args = build_parser().parse_args(["lab", "compute-optimal", "--output",
                                      str(tmp_path / "whole")] + TINY)
    assert args.run(args) == 0
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert set(summary["claims"]) == {"compute_optimal_at_4_matches_best_of_20",
                                      "difficulty_beats_best_single"}
    for c in summary["claims"].values():
        assert isinstance(c["holds"], bool) and c["ci95"][0] <= c["difference"] <= c["ci95"][1]
    assert 0.5 < summary["prm"]["step_auc"] <= 1.0
    assert (tmp_path / "whole" / "report.html").stat().st_size > 1000
    for k in range(1, 7):
        assert any(line.startswith(f"{k}. ") and line.endswith(" s]")
                   for line in printed.splitlines()), k
    proc = _run(tmp_path / "killed")
    for line in proc.stdout:
        if line.startswith("2. "):          # the PRM is written; probe, pool, searches not yet
            proc.kill()
            break
    proc.wait()
    assert not (tmp_path / "killed" / "summary.json").exists()
    again = _run(tmp_path / "killed")
    text = again.communicate(timeout=300)[0]
    assert again.returncode == 0, text
    assert "resuming" in text
    resumed = json.loads((tmp_path / "killed" / "summary.json").read_text())
    assert resumed["claims"] == summary["claims"]
    assert resumed["difficulty"] == summary["difficulty"]


def test_bad_options_are_clear_errors():
    from prmkit.lab.computeoptimal.run import ComputeOptimalConfig

    with pytest.raises(PrmkitError, match="--budgets"):
        ComputeOptimalConfig(budgets="8,4")
    with pytest.raises(PrmkitError, match="--methods"):
        ComputeOptimalConfig(methods="beam")
    with pytest.raises(PrmkitError, match="--pool"):
        ComputeOptimalConfig(pool=128)
    with pytest.raises(PrmkitError, match="--single-budgets"):
        ComputeOptimalConfig(single_budgets="4,12")
