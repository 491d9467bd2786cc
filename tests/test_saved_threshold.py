"""The first-error threshold saved with a model (prmkit_threshold.json): read from the folder,
used by default by eval processbench and select --by filtered-majority, said on stderr, and
overridden by --threshold. Every expectation is worked by hand in a comment."""

from __future__ import annotations

import json

import pytest

from prmkit import cli
from prmkit.errors import PrmkitError
from prmkit.evaluate import common
from prmkit.models import folder
from prmkit.models.pypi import DEFAULT_PRM_DIR
from prmkit.records import Record
from prmkit.select import select


def run(capsys, *argv):
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def model_dir(tmp_path, threshold=0.7):
    d = tmp_path / "m"
    d.mkdir()
    (d / folder.THRESHOLD_FILE).write_text(json.dumps({"threshold": threshold, "tuned_on": "dev"}))
    return d


def test_saved_threshold_and_threshold_for(tmp_path):
    d = model_dir(tmp_path)
    assert folder.saved_threshold(str(d))["threshold"] == 0.7
    assert folder.saved_threshold(str(tmp_path)) is None              # a folder without one
    assert folder.saved_threshold("Qwen/Qwen2.5-Math-PRM-7B") is None  # a hub id
    t, said = folder.threshold_for(str(d), None)
    assert t == 0.7 and "saved with the model" in said and "tuned on dev" in said
    assert folder.threshold_for(str(d), 0.2) == (0.2, "threshold 0.2 (--threshold)")
    assert folder.threshold_for(str(tmp_path), None)[0] == 0.5
    (d / folder.THRESHOLD_FILE).write_text('{"threshold": "high"}')
    with pytest.raises(PrmkitError, match="numeric"):
        folder.saved_threshold(str(d))


def test_the_default_prm_has_its_threshold():
    info = folder.saved_threshold(None)
    assert info is not None and info == folder.saved_threshold("default")
    assert 0 < info["threshold"] < 1 and info["tuned_on"]
    assert str(info["threshold"]) in (open(f"{DEFAULT_PRM_DIR}/README.md").read())


def cand(id, scores, answer):
    return Record(id=id, problem="q?", steps=[f"s{i}" for i in range(len(scores))],
                  step_scores=scores, answer=answer, group="g")


def test_filtered_majority_hand_worked():
    # answers 7, 7, 9: majority picks 7 (a). At threshold 0.5 both 7s have a step below it
    # (min 0.4 and 0.3), so only c (9, min 0.8) votes: c. At 0.25 every candidate votes: a.
    # At 0.9 no candidate is clean, so the whole group votes: a.
    rs = [cand("a", [0.9, 0.4], "7"), cand("b", [0.3], "7"), cand("c", [0.8, 0.95], "9")]
    assert [r.id for r in select(rs, "majority")] == ["a"]
    assert [r.id for r in select(rs, "filtered-majority", threshold=0.5)] == ["c"]
    assert [r.id for r in select(rs, "filtered-majority", threshold=0.25)] == ["a"]
    assert [r.id for r in select(rs, "filtered-majority", threshold=0.9)] == ["a"]


def test_select_uses_the_saved_threshold_and_says_so(tmp_path, capsys):
    rs = [cand("a", [0.9, 0.4], "7"), cand("b", [0.3], "7"), cand("c", [0.8, 0.95], "9")]
    data = tmp_path / "c.jsonl"
    data.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rs))
    out = tmp_path / "o.jsonl"
    d = model_dir(tmp_path, threshold=0.5)   # only c is clean at 0.5
    rc, _, err = run(capsys, "select", "--input", data, "--by", "filtered-majority",
                     "--model", d, "--output", out)
    assert rc == 0 and "threshold 0.5: the one saved with the model" in err
    assert json.loads(out.read_text())["id"] == "c"
    rc, _, err = run(capsys, "select", "--input", data, "--by", "filtered-majority",
                     "--model", d, "--threshold", 0.25, "--output", out)
    assert rc == 0 and "threshold 0.25 (--threshold)" in err
    assert json.loads(out.read_text())["id"] == "a"
    rc, _, err = run(capsys, "select", "--input", data, "--by", "majority", "--model", d)
    assert rc == 0 and "threshold" not in err   # majority applies none


def processbench_data(tmp_path):
    # one gsm8k sample, first error at step 1 (0-based)
    p = tmp_path / "gsm8k.json"
    p.write_text(json.dumps([{"id": "gsm8k-0", "generator": "x", "problem": "1+1?",
                              "steps": ["a", "b", "c"], "final_answer_correct": False,
                              "label": 1}]))
    return p


@pytest.mark.parametrize("given, want_pred, want_said", [
    # scores 0.9, 0.6, 0.2: the saved 0.7 flags step 1 (right); --threshold 0.5 flags step 2
    (None, 1, "the one saved with the model"), (0.5, 2, "(--threshold)")])
def test_eval_processbench_uses_the_saved_threshold(tmp_path, capsys, monkeypatch, given,
                                                     want_pred, want_said):
    def fake_score(records, args, desc, share_prefix=False):
        for r in records:
            r.step_scores = [0.9, 0.6, 0.2]
        return {"name": args.model, "format": "prmkit", "dtype": "float32", "device": "cpu"}

    monkeypatch.setattr(common, "score_with_model", fake_score)
    d = model_dir(tmp_path, threshold=0.7)
    out = tmp_path / "res.json"
    extra = [] if given is None else ["--threshold", given]
    rc, _, err = run(capsys, "eval", "processbench", "--data", processbench_data(tmp_path),
                     "--model", d, "--output", out, *extra)
    assert rc == 0 and want_said in err
    res = json.loads(out.read_text())
    assert res["threshold"] == (0.7 if given is None else 0.5)
    assert want_said in res["threshold_from"]
    assert res["predictions"][0]["predicted"] == want_pred


def test_score_names_the_saved_threshold(tmp_path, capsys):
    cli._say_threshold(str(model_dir(tmp_path, threshold=0.6)))
    err = capsys.readouterr().err
    assert "the model's threshold: 0.6 (tuned on dev)" in err and "--threshold overrides" in err
    cli._say_threshold("Qwen/Qwen2.5-Math-PRM-7B")   # none saved: nothing said
    assert capsys.readouterr().err == ""
