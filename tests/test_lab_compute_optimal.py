"""prmkit lab compute-optimal: its statistics on hand-worked examples, its trained n-gram PRM,
and the command at tiny sizes (resumed after a kill)."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from prmkit.errors import PrmkitError
from prmkit.lab.cosummary import claims
from prmkit.lab.costats import (Budget, Data, bon_curve, cv_choice, figures, fold_ids,
                                   samples_needed)
from prmkit.lab.ngramprm import NgramPRM, fit_ngram_prm, hazard_examples, ngrams, words
from prmkit.records import Record
from prmkit.search.compute_optimal import Outcome, compute_optimal


def test_bon_curve_is_the_exact_expectation_over_subsets():
    # ranked by score: 0.9 (wrong), 0.7 (right), 0.5 (right)
    # n=1: 2/3; n=2: {a,b}->a, {a,c}->a, {b,c}->c(0.7): 1/3; n=3: a: 0
    assert np.allclose(bon_curve([0.9, 0.5, 0.7], [0, 1, 1]), [2 / 3, 1 / 3, 0.0])
    # a tie goes to the earlier sample: n=2 picks sample 0, which is wrong
    assert np.allclose(bon_curve([0.5, 0.5], [0, 1]), [0.5, 0.0])
    with pytest.raises(PrmkitError):
        bon_curve([], [])


def test_samples_needed_interpolates_the_first_crossing():
    curve = np.array([0.2, 0.4, 0.5])
    assert samples_needed(curve, 0.3) == pytest.approx(1.5)     # halfway from n=1 to n=2
    assert samples_needed(curve, 0.45) == pytest.approx(2.5)
    assert samples_needed(curve, 0.1) == 1.0
    assert samples_needed(curve, 0.5) == 3.0
    assert math.isinf(samples_needed(curve, 0.6))


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
    # 4 problems, a pool of 4 samples each, one budget n=2 with best-of-n and beam
    curves = np.array([[0.25, 0.5, 0.75, 1.0]] * 4)       # best-of-n: n / 4
    beam = np.array([1.0, 1.0, 1.0, 0.0])                   # 0.75 on average
    budget = Budget(2, ["best-of-n", "beam"], np.array([curves[:, 1], beam]),
                    np.array([[20.0] * 4, [24.0] * 4]))
    return Data([budget], curves, np.full(4, 10.0), probe_samples=1,
                probe_tokens=np.full(4, 10.0), folds=2,
                bins={"one": np.zeros(4, int), "two": np.array([0, 0, 1, 1])})


def test_figures_by_hand():
    f = figures(_data(), "one", np.ones(4), charge_probe=False)
    # one bin: both folds train on the other fold's two problems, where beam (1.0 or 0.5) is
    # at least best-of-n's 0.5 (tie in fold 1 -> fewer tokens: best-of-n)
    # fold 0 = p0, p2 (trained on p1, p3: beam 0.5 vs 0.5 -> best-of-n: 0.5 each)
    # fold 1 = p1, p3 (trained on p0, p2: beam 1.0 -> beam: 1.0 and 0.0)
    assert f["co"] == [pytest.approx(0.5)]
    assert f["bon_n"] == [pytest.approx(2.0)]               # best-of-n reaches 0.5 at n = 2
    assert f["e_samples"] == [pytest.approx(1.0)]
    assert f["co_tokens"] == [pytest.approx((20 + 20 + 24 + 24) / 4)]
    assert f["e_tokens"] == [pytest.approx(2.0 * 10 / 22)]
    charged = figures(_data(), "one", np.ones(4), charge_probe=True)
    assert charged["e_samples"] == [pytest.approx(2.0 / 3)]  # n + 1 probe sample
    assert charged["e_tokens"] == [pytest.approx(20 / 32)]


def test_figures_cap_a_censored_efficiency_at_the_pool():
    data = _data()
    data.curves = np.array([[0.1, 0.2, 0.3, 0.4]] * 4)
    f = figures(data, "one", np.ones(4), charge_probe=False)
    assert f["censored"] == [True] and f["e_samples"] == [pytest.approx(4 / 2)]


def test_claims_hold_by_their_intervals():
    def fig(e, co, single):
        return {"n": [4, 8], "e_samples": e, "co": co, "single": single, "censored": [False] * 2}

    point = fig([1.5, 3.0], [0.6, 0.7], [0.6, 0.6])
    boots = [fig([1.0, 2.0 + i / 10], [0.6, 0.7], [0.6, 0.6 + i / 1000]) for i in range(21)]
    c = claims(point, boots)
    e = c["efficiency_vs_best_of_n"]
    assert e["budget"] == 8 and e["difference"] == 3.0
    assert e["ci95"] == [pytest.approx(2.05), pytest.approx(3.95)]
    assert e["holds"] and e["interval_excludes_paper"]          # 4 is above 3.95
    d = c["difficulty_beats_best_single"]
    assert d["difference"] == pytest.approx(5.0)            # (0 + 10 points) / 2
    # resample i: (0 + 10 - i / 10) / 2 points, 5.0 down to 4.0; 2.5th percentile 4.025
    assert d["ci95"] == [pytest.approx(4.025), pytest.approx(4.975)]
    assert d["holds"]


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
        "--rollouts", "2", "--pool", "8", "--budgets", "4,8", "--methods", "beam:4,mcts:4",
        "--bins", "2", "--resamples", "20", "--workers", "1", "--min-steps", "2",
        "--max-steps", "4"]


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
    for name in ("efficiency_vs_best_of_n", "difficulty_beats_best_single"):
        c = summary["claims"][name]
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
    from prmkit.lab.computeoptimal import ComputeOptimalConfig

    with pytest.raises(PrmkitError, match="--budgets"):
        ComputeOptimalConfig(budgets="8,4")
    with pytest.raises(PrmkitError, match="--methods"):
        ComputeOptimalConfig(methods="beam")
    with pytest.raises(PrmkitError, match="--pool"):
        ComputeOptimalConfig(pool=64)
