"""Evaluations that score with a model: a tiny random model here (fast, exact in float32); the
default model on real data in the slow tests."""

from __future__ import annotations

import json
import os

import pytest

import tiny
from prmkit import cli
from prmkit.evaluate import processbench as pb
from prmkit.models.backends.hf import HFConfig, load_hf_prm
from prmkit.records import read_records

PROBLEMS = ["What is 2 + 3?", "Natalia sold clips to 48 of her friends in April."]


def tiny_model(path):
    tiny.causal_lm().save_pretrained(path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(path)
    return str(path)


def processbench_file(path, n=12):
    rows = []
    for i in range(n):
        steps = [f"Step {k + 1}: {k} + {i} = {k + i}." for k in range(2 + i % 4)]
        rows.append({"id": f"gsm8k-{i}", "generator": "g", "problem": PROBLEMS[i % 2],
                     "steps": steps, "final_answer_correct": i % 3 == 0,
                     "label": -1 if i % 3 == 0 else i % len(steps)})
    path.write_text(json.dumps(rows, indent=2))
    return path


def test_processbench_without_model_uses_the_default_prm_and_limit_cuts_each_split(tmp_path, capsys):
    """As the README says, no --model means the default PRM (as on `prmkit score`); --limit N
    keeps the first N solutions of each split. --model and --predictions together are refused."""
    data = tmp_path / "pb"
    data.mkdir()
    processbench_file(data / "gsm8k.json", 6)
    math = processbench_file(data / "math.json", 5)
    math.write_text(math.read_text().replace('"gsm8k-', '"math-'))
    out = tmp_path / "r.json"
    rc = cli.main(["eval", "processbench", "--data", str(data), "--limit", "2", "--dtype",
                   "float32", "--output", str(out)])
    assert rc == 0, capsys.readouterr().err
    res = json.loads(out.read_text())
    assert {k: v["n"] for k, v in res["model"]["splits"].items()} == {"gsm8k": 2, "math": 2}
    assert "model: default" in capsys.readouterr().out
    scored = read_records(str(tmp_path / "r.scores.jsonl"))
    assert sorted(r.id for r in scored) == ["gsm8k-0", "gsm8k-1", "math-0", "math-1"]
    for bad, says in ((["--limit", "0"], "--limit must be at least 1"),
                      (["--model", "default", "--predictions", str(out)], "not both")):
        rc = cli.main(["eval", "processbench", "--data", str(data), "--output",
                       str(tmp_path / "x.json"), *bad])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and len(err.splitlines()) == 1 and says in err


def test_processbench_with_a_model_records_dtype_and_resumes(tmp_path, capsys):
    model = tiny_model(tmp_path / "m")
    data = processbench_file(tmp_path / "gsm8k.json")
    out, saved = tmp_path / "r.json", tmp_path / "r.scores.jsonl"  # the default --save-scores
    argv = ["eval", "processbench", "--model", model, "--format", "math-shepherd", "--dtype",
            "float32", "--data", str(data), "--output", str(out)]
    assert cli.main(argv) == 0
    res = json.loads(out.read_text())
    assert res["scored_by"]["dtype"] == "float32"
    assert res["scored_by"]["format"] == "math-shepherd"
    # the figures are the definition applied to the model's own scores
    prm = load_hf_prm(model, "math-shepherd", HFConfig(dtype="float32"))
    recs = list(pb.load_splits(str(data))["gsm8k"])
    scores = prm.score([r.problem for r in recs], [r.steps for r in recs])
    preds = [pb.predicted_first_error(s, 0.5) for s in scores]
    want = pb.split_metrics([r.first_error for r in recs], preds)
    assert res["model"]["splits"]["gsm8k"] == want.to_dict()
    scored = read_records(str(saved))
    assert [r.id for r in scored] == [r.id for r in recs]
    for r, s in zip(scored, scores):
        assert r.step_scores == pytest.approx(s, abs=1e-6)

    # a kill after 5 records: the rerun scores only the other 7 and gives the same figures
    lines = saved.read_text().splitlines(keepends=True)
    from partials import header_of

    head = header_of(argv, tmp_path / "r.scores.jsonl.partial")   # what a run writes first
    (tmp_path / "r.scores.jsonl.partial").write_text(head + "".join(lines[:5]) + lines[5][:20])
    os.unlink(saved)
    capsys.readouterr()
    assert cli.main(argv) == 0
    assert "resuming: 5 of 12" in capsys.readouterr().err
    again = json.loads(out.read_text())
    assert again["model"] == res["model"]
    assert not (tmp_path / "r.scores.jsonl.partial").exists()

    # the saved scores evaluate the same through --predictions, with no model
    out2 = tmp_path / "r2.json"
    assert cli.main(["eval", "processbench", "--data", str(data), "--predictions", str(saved),
                     "--output", str(out2)]) == 0
    assert json.loads(out2.read_text())["model"] == res["model"]


def test_missing_model_is_a_one_line_error(tmp_path, capsys):
    data = processbench_file(tmp_path / "gsm8k.json", 3)
    rc = cli.main(["eval", "processbench", "--model", str(tmp_path / "nope"), "--data", str(data),
                   "--output", str(tmp_path / "r.json")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "no such folder" in err


# ---------------------------------------------------------------------------------------------
# slow: the default model on real data


@pytest.mark.slow
def test_default_model_on_processbench_gsm8k(shared_data, tmp_path, capsys):
    out = tmp_path / "r.json"
    rc = cli.main(["eval", "processbench", "--model", "smollm2-135m", "--format",
                   "math-shepherd", "--data", str(shared_data / "processbench_dev" / "gsm8k.json"),
                   "--calibrate-on", "gsm8k", "--output", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["scored_by"]["dtype"] == "bfloat16"
    assert res["calibration"]["split"] == "gsm8k"
    assert res["model"]["splits"]["gsm8k"]["n"] == 40
    assert "model: smollm2-135m" in capsys.readouterr().out


@pytest.mark.slow
def test_default_model_bestofn_on_gsm8k(shared_data, tmp_path):
    """The acceptance run, on the first 60 GSM8K test problems (240 candidates)."""
    from prmkit.realdata import gsm8k_candidates
    from prmkit.records import write_records

    recs = [r for r in gsm8k_candidates(str(shared_data / "gsm8k" / "example_model_solutions.jsonl"))
            if int(r.group.split("-")[1]) < 60]
    cands, scored = tmp_path / "c.jsonl", tmp_path / "s.jsonl"
    write_records(str(cands), recs)
    assert cli.main(["score", "--model", "smollm2-135m", "--format", "math-shepherd",
                     "--input", str(cands), "--output", str(scored)]) == 0
    out = tmp_path / "bon.json"
    assert cli.main(["eval", "bestofn", "--input", str(scored), "--n", "1,2,4",
                     "--output", str(out), "--plot", str(tmp_path / "bon.png")]) == 0
    res = json.loads(out.read_text())
    groups = {}
    for r in recs:
        groups.setdefault(r.group, []).append(r.is_correct)
    want = 100 * (sum(any(v) for v in groups.values()) / len(groups))  # percent of a fraction
    assert res["methods"]["oracle"][-1]["accuracy"] == want
    assert "prm-min" in res["methods"]
