"""Best-of-N curves: the vectorised choice equals ``prmkit.select`` on every subset, the oracle
on GSM8K at N=4 equals the fraction of problems with a correct candidate, skipping rules."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from prmkit import cli, select
from prmkit.evaluate import bestofn
from prmkit.records import Record


def candidates(n_groups=30, size=6, seed=0, orm=True):
    rng = random.Random(seed)
    out = []
    for g in range(n_groups):
        for j in range(size):
            n = rng.randint(1, 4)
            answer = rng.choice(["1", "2", "3", "0.5", "1/2", None])
            out.append(Record(
                id=f"{g}-{j}", group=f"g{g}", problem="p", steps=[f"s{k}" for k in range(n)],
                answer=answer, is_correct=answer in ("1", "0.5", "1/2") and rng.random() < 0.8,
                step_scores=[rng.choice([0.5, 0.9, rng.random()]) for _ in range(n)],
                meta={"outcome_score": rng.random()} if orm else {}))
    return out


@pytest.mark.parametrize("method", select.METHODS)
def test_choice_equals_select_on_every_subset(method):
    recs = candidates()
    c = bestofn.candidates(recs, list(select.METHODS), "prod")
    rng = np.random.default_rng(1)
    groups = c.groups
    for n in (1, 2, 3, 6):
        subset = np.array([rng.permutation(g)[:n] for g in groups])
        chosen = bestofn.choose(c, method, subset, "prod")
        for row, pick in zip(subset, chosen):
            want = select.select([recs[i] for i in row], method)[0]
            if method == "oracle":  # only correctness matters for pass@N
                assert c.correct[pick] == want.is_correct
            else:
                assert recs[pick] is want, (method, n, [recs[i].id for i in row])


def test_oracle_on_gsm8k_equals_any_correct(shared_data, tmp_path, capsys):
    from prmkit.realdata import gsm8k_candidates
    from prmkit.records import write_records

    recs = gsm8k_candidates(str(shared_data / "gsm8k" / "example_model_solutions.jsonl"))
    rng = random.Random(0)
    for r in recs:  # synthetic PRM scores, a little better than chance
        r.step_scores = [min(1.0, max(0.0, rng.gauss(0.65 if r.is_correct else 0.55, 0.2)))
                         for _ in r.steps]
    inp = tmp_path / "scored.jsonl"
    write_records(str(inp), recs)
    out, png = tmp_path / "bon.json", tmp_path / "bon.png"
    rc = cli.main(["eval", "bestofn", "--input", str(inp), "--n", "1,2,4,8", "--draws", "20",
                   "--output", str(out), "--plot", str(png)])
    stdout = capsys.readouterr().out
    assert rc == 0
    res = json.loads(out.read_text())
    groups = {}
    for r in recs:
        groups.setdefault(r.group, []).append(r.is_correct)
    any_correct = sum(any(v) for v in groups.values()) / len(groups)
    oracle4 = [p for p in res["methods"]["oracle"] if p["n"] == 4][0]
    assert oracle4["accuracy"] == 100 * any_correct  # exact
    single = sum(r.is_correct for r in recs) / len(recs)
    for m, points in res["methods"].items():  # N=1: every method picks a random candidate
        assert points[0]["accuracy"] == pytest.approx(100 * single, abs=3)
        lo, hi = points[0]["ci95"]
        assert lo <= points[0]["accuracy"] <= hi
    assert res["n"] == [1, 2, 4] and "8" in res["skipped_n"]
    assert "orm" in res["skipped_methods"]
    assert set(res["methods"]) == set(select.METHODS) - {"orm"}
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "skipped orm" in stdout and "skipped N=8" in stdout


def test_skips_and_small_groups():
    recs = candidates(n_groups=10, size=3, orm=False)
    recs += [Record(id=f"big-{j}", group="big", problem="p", steps=["a"], is_correct=j == 0,
                    step_scores=[0.1 * j]) for j in range(5)]
    for r in recs[:2]:
        r.step_scores = None
    res = bestofn.curve(recs, bestofn.BestOfNConfig(n=[1, 4, 9], draws=5))
    assert "prm-min" in res["skipped_methods"] and "weighted-majority" in res["skipped_methods"]
    assert res["n"] == [1, 4] and "9" in res["skipped_n"]
    assert res["problems"] == {"1": 11, "4": 1}  # groups of 3 are left out at N=4
    assert set(res["methods"]) == {"majority", "oracle"}


def test_deterministic_and_needs_is_correct():
    recs = candidates(n_groups=8, size=4)
    cfg = bestofn.BestOfNConfig(n=[1, 2], draws=10, seed=5)
    assert bestofn.curve(recs, cfg) == bestofn.curve(recs, cfg)
    recs[3].is_correct = None
    with pytest.raises(Exception, match="is_correct"):
        bestofn.curve(recs, cfg)
