"""PRMBench's PRMScore: hand-worked confusion counts, the edge cases, and the command on the
shared PRMBench part against the definition written out here (as mr_eval computes it)."""

from __future__ import annotations

import json
import random

import pytest

from prmkit import cli
from prmkit.evaluate import prmbench
from prmkit.evaluate.prmbench import Confusion
from prmkit.records import Record


def rec(id, n, error_steps, cat="circular"):
    return Record(id=id, problem="p", steps=[f"s{i}" for i in range(n)],
                  meta={"error_steps": error_steps, "classification": cat})


def test_confusion_hand_worked():
    # errors at 0-based 1 and 3; judgements: valid, valid, invalid, invalid, None (not counted)
    c = prmbench.confusion([1, 3], [True, True, False, False, None])
    # step0 correct+valid TP; step1 error+valid FP; step2 correct+invalid FN; step3 error+invalid TN
    assert c == Confusion(tp=1, fp=1, tn=1, fn=1)


def test_f1_and_prmscore_hand_worked():
    c = Confusion(tp=6, fp=2, tn=3, fn=1)
    f1, nf1 = prmbench.f1_scores(c)
    # positive: precision 6/8, recall 6/7 -> F1 = 2*6/(12+2+1) = 12/15 = 80%
    assert f1 == pytest.approx(80.0)
    # negative: precision 3/4, recall 3/5 -> F1 = 2*3/(6+1+2) = 6/9 = 66.67%
    assert nf1 == pytest.approx(200 / 3)
    assert prmbench.prmscore(c) == pytest.approx(0.5 * 80 + 0.5 * 200 / 3)
    assert prmbench.prmscore(c, f1_only=True) == pytest.approx(80.0)


def test_edge_cases():
    all_right = Confusion(tp=5)
    assert prmbench.f1_scores(all_right) == (100.0, None)  # no error step, none flagged
    assert prmbench.prmscore(all_right) == 100.0
    all_wrong = Confusion(fp=2, fn=3)  # every judgement wrong
    assert prmbench.f1_scores(all_wrong) == (0.0, 0.0)
    assert prmbench.prmscore(all_wrong) == 0.0
    assert prmbench.prmscore(Confusion()) is None  # nothing counted


def test_categories_groups_and_overall():
    recs = [rec("a", 3, [3]), rec("b", 2, [1], "confidence"), rec("c", 4, [5], "confidence")]
    valid = {"a": [True, True, False], "b": [True, True], "c": [True, False, True, True]}
    res = prmbench.evaluate_judgements(recs, valid)
    # circular: a (error at step 3) -> TP (s0), TP (s1), TN (s2): F1 100, negF1 100
    assert res["categories"]["circular"]["prmscore"] == 100.0
    # confidence: b (error at step 1) -> FP, TP; c: error step 5 is past the end -> 3 TP, 1 FN
    conf = res["categories"]["confidence"]
    assert (conf["tp"], conf["fp"], conf["tn"], conf["fn"]) == (4, 1, 0, 1)
    assert conf["f1"] == pytest.approx(100 * 8 / 10) and conf["negative_f1"] == 0.0
    assert conf["prmscore"] == pytest.approx(40.0)
    assert conf["first_error_acc"] == 0.0  # b's first error judged valid; c has none in range
    # overall: pooled counts TP 6, FP 1, TN 1, FN 1 (not the mean of the categories)
    assert res["confusion"] == {"tp": 6, "fp": 1, "tn": 1, "fn": 1}
    assert res["prmscore"] == pytest.approx(0.5 * 100 * 12 / 14 + 0.5 * 100 * 2 / 4)
    assert res["groups"]["simplicity"]["prmscore"] == 100.0
    assert res["groups"]["soundness"]["prmscore"] == pytest.approx(40.0)


def test_threshold_is_strict():
    recs = [rec("a", 2, [2])]
    res = prmbench.evaluate(recs, {"a": [0.5, 0.5]}, threshold=0.5)  # 0.5 is not > 0.5
    assert res["confusion"] == {"tp": 0, "fp": 0, "tn": 1, "fn": 1}


# ---------------------------------------------------------------------------------------------
# the command on real data, against mr_eval's rule written out independently


def mr_eval_counts(error_steps_1based, labels):
    """eval_on_hallucination_step of mr_eval, restated: positive = step not in error_steps."""
    errors = [e - 1 for e in error_steps_1based]
    counts = {"TP": 0, "FP": 0, "TN": 0, "FN": 0}
    for i, valid in enumerate(labels):
        if i in errors:
            counts["FP" if valid else "TN"] += 1
        else:
            counts["TP" if valid else "FN"] += 1
    return counts


def f1(tp, fp, fn):
    p, r = tp / (tp + fp), tp / (tp + fn)
    return 2 * p * r / (p + r)


def test_predictions_on_shared_prmbench(shared_data, tmp_path, capsys):
    folder = shared_data / "prmbench_train_p1_first400"
    rng = random.Random(3)
    rows, per_cat = [], {}
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            obj = json.loads(line)
            scores = [rng.random() for _ in obj["modified_process"]]
            rows.append({"id": f"{obj['classification']}-{obj['idx']}", "step_scores": scores})
            c = mr_eval_counts(obj["error_steps"], [s > 0.5 for s in scores])
            tot = per_cat.setdefault(obj["classification"], {"TP": 0, "FP": 0, "TN": 0, "FN": 0})
            for k in tot:
                tot[k] += c[k]
    preds = tmp_path / "p.jsonl"
    preds.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "r.json"
    rc = cli.main(["eval", "prmbench", "--data", str(folder), "--predictions", str(preds),
                   "--output", str(out)])
    stdout = capsys.readouterr().out
    assert rc == 0
    res = json.loads(out.read_text())
    total = {"TP": 0, "FP": 0, "TN": 0, "FN": 0}
    for cat, c in per_cat.items():
        got = res["model"]["categories"][cat]
        assert (got["tp"], got["fp"], got["tn"], got["fn"]) == (c["TP"], c["FP"], c["TN"], c["FN"])
        want = 0.5 * f1(c["TP"], c["FP"], c["FN"]) + 0.5 * f1(c["TN"], c["FN"], c["FP"])
        assert got["prmscore"] == pytest.approx(100 * want, abs=1e-9)
        for k in total:
            total[k] += c[k]
    want = 0.5 * f1(total["TP"], total["FP"], total["FN"]) + 0.5 * f1(total["TN"], total["FN"], total["FP"])
    assert res["model"]["prmscore"] == pytest.approx(100 * want, abs=1e-9)
    assert res["model"]["n"] == 3203
    assert set(res["baselines"]) == {"all_valid", "random"}
    assert "overall" in stdout and "PRMScore" in stdout


def test_only_modified_process_reaches_the_model(shared_data):
    recs = prmbench.load(shared_data / "prmbench_train_p1_first400" /
                         "prm800k_train_p1_first400_4o_circular.jsonl")
    line = (shared_data / "prmbench_train_p1_first400" /
            "prm800k_train_p1_first400_4o_circular.jsonl").read_text().splitlines()[0]
    obj = json.loads(line)
    assert recs[0].steps == obj["modified_process"]
    assert recs[0].problem == obj["modified_question"]


def test_repeated_records_keep_the_first(tmp_path, capsys):
    row = {"idx": "x1", "question": "q", "modified_process": ["a", "b"], "error_steps": [2],
           "classification": "circular"}
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "error_steps": [1]}) + "\n")
    recs = prmbench.load(str(path))
    assert len(recs) == 1 and recs[0].meta["error_steps"] == [2]
    assert "1 repeated records" in capsys.readouterr().err
