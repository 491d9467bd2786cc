"""ProcessBench metric: hand-worked examples, edge cases, threshold calibration, baselines, and
``prmkit eval processbench`` on the dev slice against the definition written out here."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from prmkit import cli
from prmkit.evaluate import heuristic
from prmkit.evaluate import processbench as pb
from prmkit.records import Record


def run(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line_error(rc, err, *fragments):
    assert rc == 2 and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prmkit: "), err
    for f in fragments:
        assert f in lines[0], lines[0]


# ---------------------------------------------------------------------------------------------
# the metric, by hand


def test_predicted_first_error():
    assert pb.predicted_first_error([0.9, 0.4, 0.1], 0.5) == 1
    assert pb.predicted_first_error([0.9, 0.5, 0.6], 0.5) == -1  # 0.5 is not below 0.5
    assert pb.predicted_first_error([0.2], 0.5) == 0
    assert pb.predicted_first_error([None, 0.9, None], 0.5) == -1  # null never flags
    assert pb.predicted_first_error([None, 0.3], 0.5) == 1


def test_split_metrics_hand_worked():
    # 3 error samples (labels 1, 0, 2), 2 correct samples.
    labels = [1, 0, 2, -1, -1]
    preds = [1, 2, 2, -1, 0]  # error: right, wrong, right -> 2/3; correct: right, wrong -> 1/2
    m = pb.split_metrics(labels, preds)
    assert m.error_acc == pytest.approx(200 / 3)
    assert m.correct_acc == 50.0
    assert m.f1 == pytest.approx(2 * (200 / 3) * 50 / (200 / 3 + 50))  # 57.142857...
    assert m.f1 == pytest.approx(400 / 7)
    assert (m.n, m.n_error, m.n_correct) == (5, 3, 2)


def test_all_correct_and_all_wrong():
    labels = [0, 3, -1, -1]
    right = pb.split_metrics(labels, labels)
    assert (right.error_acc, right.correct_acc, right.f1) == (100.0, 100.0, 100.0)
    wrong = pb.split_metrics(labels, [1, -1, 0, 2])
    assert (wrong.error_acc, wrong.correct_acc, wrong.f1) == (0.0, 0.0, 0.0)  # defined: 0
    always = pb.split_metrics(labels, [-1] * 4)
    assert (always.error_acc, always.correct_acc, always.f1) == (0.0, 100.0, 0.0)


def test_split_without_error_samples_or_correct_samples_or_any():
    no_err = pb.split_metrics([-1, -1], [-1, 0])
    assert no_err.error_acc is None and no_err.correct_acc == 50.0 and no_err.f1 is None
    assert (no_err.n, no_err.n_error, no_err.n_correct) == (2, 0, 2)
    no_cor = pb.split_metrics([1, 0], [1, 1])
    assert no_cor.error_acc == 50.0 and no_cor.correct_acc is None and no_cor.f1 is None
    empty = pb.split_metrics([], [])
    assert empty.to_dict() == {"error_acc": None, "correct_acc": None, "f1": None, "n": 0,
                               "n_error": 0, "n_correct": 0}


def test_a_dash_in_the_table_is_explained_under_it():
    """Each split with a "-" gets a line saying which kind of solution it lacks."""
    splits = {"gsm8k": pb.split_metrics([1, 0], [1, 1]).to_dict(),      # errors only
              "math": pb.split_metrics([-1, -1], [-1, 0]).to_dict(),    # correct only
              "both": pb.split_metrics([-1, 1], [-1, 1]).to_dict(),
              "none": pb.split_metrics([], []).to_dict()}
    assert pb.dash_reasons(splits) == [
        "-: gsm8k has no solution without one (correct_acc), so no F1",
        "-: math has no solution with an error (error_acc), so no F1",
        "-: none has no solution with an error (error_acc) and none without one (correct_acc), "
        "so no F1"]


def test_average_f1_is_the_plain_mean_of_defined_splits():
    res = pb.evaluate({"a": [0, -1], "b": [0, -1, -1, -1], "c": [-1], "d": []},
                      {"a": [0, -1], "b": [0, 0, -1, -1], "c": [-1], "d": []})
    # a: 100/100 -> 100. b: error 100, correct 2/3 -> f1 80. c, d: undefined.
    assert res["splits"]["b"]["f1"] == pytest.approx(80.0)
    assert res["average_f1"] == pytest.approx(90.0)  # not weighted by n (n_a=2, n_b=4)
    assert res["average_over"] == ["a", "b"]
    assert pb.evaluate({"c": [-1]}, {"c": [-1]})["average_f1"] is None
    json.dumps(res, allow_nan=False)  # None, never NaN


# ---------------------------------------------------------------------------------------------
# calibration


def brute_force_best(labels, scores):
    """Every threshold in a fine grid plus every score and its neighbours: the best F1."""
    cands = {x for row in scores for s in row for x in (s, np.nextafter(s, 2), np.nextafter(s, -2))}
    best = -1.0
    for t in sorted(cands):
        preds = [pb.predicted_first_error(row, t) for row in scores]
        f1 = pb.split_metrics(labels, preds).f1
        best = max(best, f1)
    return best


@pytest.mark.parametrize("seed", range(8))
def test_calibrated_threshold_is_optimal(seed):
    rng = random.Random(seed)
    labels, scores = [], []
    for _ in range(30):
        n = rng.randint(1, 6)
        labels.append(rng.choice([-1] + list(range(n))))
        scores.append([round(rng.random(), 1) for _ in range(n)])  # many ties
    t, f1 = pb.calibrate_threshold(labels, scores)
    preds = [pb.predicted_first_error(row, t) for row in scores]
    assert pb.split_metrics(labels, preds).f1 == pytest.approx(f1)
    assert f1 == pytest.approx(brute_force_best(labels, scores))
    assert pb.calibrate_threshold(labels, scores) == (t, f1)  # deterministic


def test_calibration_hand_worked():
    # sample A: error at 1, scores [0.9, 0.3]; sample B: correct, scores [0.8, 0.7].
    # t in (0.3, 0.7]: A right (0.3 < t <= 0.9), B right (t <= 0.7) -> F1 100.
    t, f1 = pb.calibrate_threshold([1, -1], [[0.9, 0.3], [0.8, 0.7]])
    assert f1 == 100.0 and 0.3 < t <= 0.7
    assert t == pytest.approx(0.5)  # the midpoint of 0.3 and 0.7: the lowest best candidate


# ---------------------------------------------------------------------------------------------
# baselines


def records(split, n_err=3, n_cor=2, steps=4):
    out = []
    for i in range(n_err + n_cor):
        fe = i % steps if i < n_err else -1
        out.append(Record(id=f"{split}-{i}", problem="p", steps=[f"s{k}" * (k + 1) for k in range(steps)],
                          first_error=fe))
    return out


def test_always_correct_and_random():
    splits = {"x": records("x"), "y": records("y", 2, 5, 3)}
    assert pb.always_correct(splits)["average_f1"] == 0.0
    rnd = pb.random_first_error(splits, draws=400, seed=1)
    # Uniform over n+1 outcomes: each accuracy is about 100/(n+1).
    assert rnd["splits"]["x"]["error_acc"] == pytest.approx(100 / 5, abs=3)
    assert rnd["splits"]["y"]["correct_acc"] == pytest.approx(100 / 4, abs=3)
    assert rnd == pb.random_first_error(splits, draws=400, seed=1)  # seeded
    assert rnd["draws"] == 400 and "400 draws" in rnd["how"]


def test_logistic_fit_matches_gradient_descent():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = (x @ [1.5, -2.0, 0.5] + rng.normal(size=200) > 0).astype(float)
    w = heuristic.fit_logistic(x, y, l2=1.0)
    # The optimum has a zero gradient: X^T (p - y) + l2 * w (bias not penalised) = 0.
    z = np.c_[np.ones(200), x]
    p = 1 / (1 + np.exp(-(z @ w)))
    grad = z.T @ (p - y) + np.r_[0.0, w[1:]]
    assert np.abs(grad).max() < 1e-8
    assert w[1] > 0 and w[2] < 0


def test_heuristic_learns_position():
    # Errors always at the last step: later steps must score lower.
    recs = [Record(id=str(i), problem="p", steps=["a"] * n, first_error=n - 1 if i % 2 else -1)
            for i, n in enumerate([3, 4, 5, 3, 4, 5, 6, 2] * 3)]
    model = heuristic.fit(recs)
    s = model.step_scores(Record(id="z", problem="p", steps=["a"] * 5))
    assert s[0] > s[-1]
    assert model.n_records == len(recs)


def test_position_length_fit_modes():
    splits = {"gsm8k": records("gsm8k", 6, 4), "math": records("math", 5, 5)}
    assert "leave one split out" in pb.position_length(splits)["fit_on"]
    assert "calibration split" in pb.position_length(splits, calibrate_on="gsm8k")["fit_on"]
    assert "in-sample" in pb.position_length({"gsm8k": splits["gsm8k"]})["fit_on"]
    assert "training file t" in pb.position_length(splits, splits["math"], "t")["fit_on"]


# ---------------------------------------------------------------------------------------------
# the command on the dev slice, against the definition written out independently


def hand_metrics(samples):
    """The definition, written plainly: samples are (label, prediction)."""
    err = [y == p for y, p in samples if y != -1]
    cor = [p == -1 for y, p in samples if y == -1]
    a, b = 100 * sum(err) / len(err), 100 * sum(cor) / len(cor)
    return a, b, (2 * a * b / (a + b) if a + b else 0.0)


def first_below(scores, t):
    return next((i for i, s in enumerate(scores) if s < t), -1)


def test_predictions_on_the_dev_slice(shared_data, tmp_path, capsys):
    data = shared_data / "processbench_dev"
    rng = random.Random(7)
    rows, gold = [], {}
    for split in ("gsm8k", "math", "olympiadbench", "omnimath"):
        for obj in json.loads((data / f"{split}.json").read_text()):
            scores = [rng.random() for _ in obj["steps"]]
            rows.append({"id": obj["id"], "step_scores": scores})
            gold.setdefault(split, []).append((obj["label"], scores))
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "res.json"
    rc, stdout, _ = run(capsys, "eval", "processbench", "--data", data, "--predictions", preds,
                        "--threshold", 0.3, "--output", out)
    assert rc == 0
    res = json.loads(out.read_text())
    f1s = []
    for split, samples in gold.items():
        a, b, f1 = hand_metrics([(y, first_below(s, 0.3)) for y, s in samples])
        got = res["model"]["splits"][split]
        assert got["error_acc"] == pytest.approx(a, abs=1e-12)
        assert got["correct_acc"] == pytest.approx(b, abs=1e-12)
        assert got["f1"] == pytest.approx(f1, abs=1e-12)
        assert got["n"] == len(samples)
        f1s.append(f1)
    assert res["model"]["average_f1"] == pytest.approx(sum(f1s) / 4, abs=1e-12)
    assert res["threshold"] == 0.3
    assert {s["n"] for s in res["model"]["splits"].values()} == {40, 100, 103, 104}
    # baselines beside the model, and the heuristic verdict printed
    assert res["baselines"]["always_correct"]["average_f1"] == 0.0
    assert 10 < res["baselines"]["random"]["average_f1"] < 16
    assert res["baselines"]["position_length"]["average_f1"] > 20
    assert res["beats_position_length"] is False
    assert "does NOT beat the position/length heuristic" in stdout
    assert "average F1" in stdout


def test_first_error_predictions_and_calibration(shared_data, tmp_path, capsys):
    data = shared_data / "processbench_dev" / "gsm8k.json"
    objs = json.loads(data.read_text())
    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps({"id": o["id"], "first_error": o["label"]}) + "\n"
                             for o in objs))
    out = tmp_path / "r.json"
    assert run(capsys, "eval", "processbench", "--data", data, "--predictions", preds,
               "--output", out)[0] == 0
    res = json.loads(out.read_text())
    assert res["model"]["splits"]["gsm8k"]["f1"] == 100.0  # the gold labels themselves
    assert res["threshold"] is None and res["beats_position_length"] is True
    rc, _, err = run(capsys, "eval", "processbench", "--data", data, "--predictions", preds,
                     "--calibrate-on", "gsm8k", "--output", out)
    one_line_error(rc, err, "--calibrate-on needs step scores")


def test_user_errors_are_one_line(shared_data, tmp_path, capsys):
    data = shared_data / "processbench_dev" / "gsm8k.json"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "gsm8k-0", "first_error": 1}\n{"id": "gsm8k-1", "step_scores": "x"}\n')
    rc, _, err = run(capsys, "eval", "processbench", "--data", data, "--predictions", bad,
                     "--output", tmp_path / "o.json")
    one_line_error(rc, err, f"{bad}:2:", "field 'step_scores'")
    short = tmp_path / "short.jsonl"
    short.write_text('{"id": "gsm8k-0", "step_scores": [0.5]}\n')
    rc, _, err = run(capsys, "eval", "processbench", "--data", data, "--predictions", short,
                     "--output", tmp_path / "o.json")
    one_line_error(rc, err, f"{short}:1:", "field 'step_scores'", "steps")
    rc, _, err = run(capsys, "eval", "processbench", "--data", data, "--model", "default",
                     "--predictions", short, "--output", tmp_path / "o.json")
    one_line_error(rc, err, "--model", "--predictions", "not both")
    rc, _, err = run(capsys, "eval", "processbench", "--data", tmp_path / "nope", "--predictions",
                     short, "--output", tmp_path / "o.json")
    one_line_error(rc, err, "no such file or folder")
    assert not (tmp_path / "o.json").exists()


def test_help_texts(capsys):
    for name in ("processbench", "prmbench", "steps", "bestofn"):
        with pytest.raises(SystemExit):
            cli.main(["eval", name, "--help"])
        text = capsys.readouterr().out
        assert "--output" in text
    with pytest.raises(SystemExit):
        cli.main(["eval", "prmbench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "arXiv:2501.03124" in text and "ssmisya/PRMBench" in text


def test_every_option_has_help():
    import argparse

    def walk(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    if name in ("eval", "report") or parser.prog.endswith("eval"):
                        yield from walk(child)
            elif parser.prog.split()[1:2] in (["eval"], ["report"]):
                yield parser.prog, action

    seen = 0
    for prog, action in walk(cli.build_parser()):
        seen += 1
        assert action.help and action.help.strip(), (prog, action.dest)
    assert seen > 40
