"""Step-level metrics: AUC against a brute-force pair count, ECE by hand, the command."""

from __future__ import annotations

import json
import random

import pytest

from prmkit import cli
from prmkit.evaluate import stepwise
from prmkit.records import Record


def brute_auc(scores, positive):
    pos = [s for s, y in zip(scores, positive) if y]
    neg = [s for s, y in zip(scores, positive) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@pytest.mark.parametrize("seed", range(10))
def test_auc_equals_pairwise_count_with_ties(seed):
    rng = random.Random(seed)
    n = rng.randint(2, 60)
    scores = [rng.choice([0.1, 0.2, 0.5, 0.5, 0.9, rng.random()]) for _ in range(n)]
    positive = [rng.random() < 0.6 for _ in range(n)]
    if all(positive) or not any(positive):
        positive[0] = not positive[0]
    assert stepwise.auc(scores, positive) == pytest.approx(brute_auc(scores, positive), abs=1e-12)


def test_auc_hand_worked_and_edges():
    assert stepwise.auc([0.9, 0.8, 0.1], [True, True, False]) == 1.0
    assert stepwise.auc([0.1, 0.9], [True, False]) == 0.0
    assert stepwise.auc([0.5, 0.5], [True, False]) == 0.5  # a tie counts one half
    assert stepwise.auc([0.5, 0.7], [True, True]) is None  # one class only


def test_ece_hand_worked():
    # 2 bins. Bin [0, 0.5): scores 0.2, 0.4 (mean 0.3), labels 0, 1 (mean 0.5) -> gap 0.2.
    # Bin [0.5, 1]: scores 0.6, 1.0 (mean 0.8), labels 1, 1 (mean 1.0) -> gap 0.2.
    ece, bins = stepwise.reliability([0.2, 0.4, 0.6, 1.0], [0, 1, 1, 1], bins=2)
    assert ece == pytest.approx(20.0)
    assert [b["count"] for b in bins] == [2, 2]
    assert bins[1]["mean_score"] == pytest.approx(0.8)
    # 0.5 falls in the upper bin, 1.0 in the last one
    _, bins = stepwise.reliability([0.5, 1.0], [1, 1], bins=2)
    assert [b["count"] for b in bins] == [0, 2]
    assert stepwise.reliability([1.5], [1], bins=2) == (None, [])  # not probabilities
    perfect, _ = stepwise.reliability([0.0, 1.0], [0, 1], bins=10)
    assert perfect == 0.0


def test_evaluate_uses_only_labelled_scored_steps():
    recs = [Record(id="a", problem="p", steps=["x", "y", "z"], labels=[1.0, 0.0, None],
                   step_scores=[0.9, 0.2, 0.1]),
            Record(id="b", problem="p", steps=["x", "y"], first_error=1, step_scores=[None, 0.6]),
            Record(id="c", problem="p", steps=["x"], labels=[1.0])]  # not scored
    res = stepwise.evaluate(recs, stepwise.StepwiseConfig(threshold=0.5))
    assert res["steps"] == 3 and res["positive_steps"] == 1  # (0.9,1) (0.2,0) (0.6,0)
    assert res["auc"] == 1.0
    assert res["accuracy"] == pytest.approx(200 / 3)  # 0.6 >= 0.5 but wrong
    json.dumps(res, allow_nan=False)


def test_command_writes_json_and_plot(tmp_path, capsys):
    rng = random.Random(0)
    rows = []
    for i in range(30):
        labels = [float(rng.random() < 0.7) for _ in range(4)]
        rows.append({"id": str(i), "problem": "p", "steps": ["s"] * 4, "labels": labels,
                     "step_scores": [min(1.0, max(0.0, 0.3 + 0.4 * y + rng.gauss(0, 0.2)))
                                     for y in labels]})
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out, png = tmp_path / "r.json", tmp_path / "r.png"  # the plot's default name
    rc = cli.main(["eval", "steps", "--input", str(inp), "--output", str(out), "--bins", "5"])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["steps"] == 120 and res["bins"] == 5 and len(res["reliability"]) == 5
    assert res["auc"] > 0.8
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "AUC" in capsys.readouterr().out
