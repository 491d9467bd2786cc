"""``prmkit lab verifier-labels``: its AUC difference on hand-worked steps, the abstention rule,
and a whole run on a tiny base model."""

from __future__ import annotations

import json

import pytest

from prmkit.lab.verifierlabels import stats as vstats
from prmkit.lab.verifierlabels.report import scored
from prmkit.records import Record


def _rec(i, group, labels):
    return Record(id=f"r{i}", group=group, problem=f"p{group}", steps=[f"s{j}" for j in
                                                                       range(len(labels))],
                  labels=labels)


def test_the_auc_difference_on_hand_worked_steps():
    test = [_rec(0, "a", [1.0, 0.0]), _rec(1, "a", [1.0]), _rec(2, "b", [1.0, 0.0]),
            _rec(3, "b", [0.0])]
    good = {"r0": [0.9, 0.2], "r1": [0.8], "r2": [0.7, 0.1], "r3": [0.6]}   # ranks every step right
    flat = {"r0": [0.5, 0.5], "r1": [None], "r2": [0.5, 0.5], "r3": [0.5]}  # knows nothing
    steps = vstats.steps_of(test, {"good": good, "flat": flat})
    assert steps.correct.tolist() == [True, False, True, True, False, False]
    assert steps.unscored == {"good": 0, "flat": 1}          # counted, and scored 0.5
    assert vstats.arm_auc(steps, "good") == 1.0 and vstats.arm_auc(steps, "flat") == 0.5
    c = vstats.auc_difference(steps, "good", "flat", margin=0.03, draws=200, seed=1)
    # every resample with both kinds of step gives 1.0 - 0.5; problem a alone has one wrong
    # step, problem b alone one right step, so no resample lacks a class
    assert c["difference"] == 0.5 and c["ci95"] == [0.5, 0.5] and c["holds"]
    assert c["draws"] == 200 and c["problems"] == 2
    worse = vstats.auc_difference(steps, "flat", "good", margin=0.03, draws=200, seed=1)
    assert worse["difference"] == -0.5 and not worse["holds"]


def test_an_unscored_step_is_an_abstention_for_best_of_n():
    test = [_rec(0, "a", [1.0, 0.0])]
    assert scored(test, {"r0": [0.9, None]})[0].step_scores == [0.9, vstats.ABSTAIN]
    assert scored(test, {})[0].step_scores == [vstats.ABSTAIN] * 2


@pytest.fixture
def base(tmp_path):
    import tiny

    path = tmp_path / "base"
    from transformers import LlamaForCausalLM

    config = tiny.llama_config(tie_word_embeddings=True)
    config.num_hidden_layers = 4     # the verifier trains its last four, as train verifier does
    LlamaForCausalLM(config).save_pretrained(path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(path)
    return str(path)


def test_verifier_labels_runs_resumes_and_writes_its_claims(base, tmp_path, capsys):
    from prmkit.cli import main

    out = tmp_path / "vl"
    argv = ["lab", "verifier-labels", "--base", base, "--output", str(out), "--train-problems",
            "3", "--train-n", "2", "--more", "2", "--test-problems", "3", "--n", "2",
            "--bootstrap", "50"]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["claims"]) == {"verifier_matches_more_labels", "verifier_beats_same_labels"}
    for c in summary["claims"].values():
        assert isinstance(c["holds"], bool)
        if c["difference"] is not None:
            assert c["ci95"][0] <= c["difference"] <= c["ci95"][1] or c["draws"] < 50
    assert summary["config"]["train_problems"] == 3 and "world" not in summary["config"]
    assert len((out / "train_candidates.jsonl").read_text().splitlines()) == 3 * 2 * 2
    capsys.readouterr()
    assert main(argv) == 0 and "resuming" in capsys.readouterr().out
