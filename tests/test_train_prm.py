"""Training a PRM on a tiny model built from a config: the loss falls, only the intended
parameters change, a killed run resumes to the same result, and the trained folder scores
through `prmkit score` reading exactly the positions the trainer labelled."""

from __future__ import annotations

import json
import os

import pytest
import torch

from prmkit.errors import PrmkitError
from prmkit.models.backends.hf import HFConfig, load_hf_prm
from prmkit.records import Record, write_records
from prmkit.train.loop import LoopConfig
from prmkit.train.prm import (PRMTrainConfig, auc, first_error_f1, step_examples, train_prm,
                              training_format, tuned_threshold)
import tiny

GOOD, BAD = "so the answer is 5.", "then 3 + 3 = 7."


def records(n=12):
    """A learnable toy task: a step is wrong exactly when it contains '7'."""
    out = []
    for i in range(n):
        steps = [f"Step {k + 1}: " + (BAD if (i + k) % 3 == 0 else GOOD) for k in range(3)]
        labels = [0.0 if BAD in s else 1.0 for s in steps]
        out.append(Record(id=f"r{i}", problem=f"What is {i} + 3?", steps=steps, labels=labels))
    return out


@pytest.fixture
def base(tiny_base):
    return tiny_base


@pytest.fixture
def data(tmp_path):
    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_records(str(train), records(12))
    write_records(str(dev), records(6))
    return str(train), str(dev)


def config(base, data, out, **loop):
    loop_cfg = LoopConfig(**{"lr": 3e-3, "batch_tokens": 512, "last_k": 1, "warmup": 0.0,
                             **loop})
    return PRMTrainConfig(base=base, data=data[0], eval_data=data[1], output=str(out),
                          max_length=256, loop=loop_cfg)


def weights(folder):
    model = load_hf_prm(folder, config=HFConfig(dtype="float32")).model
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_loss_falls_and_only_the_last_layer_and_head_change(base, data, tmp_path):
    out = tmp_path / "run"
    history = train_prm(config(base, data, out, max_steps=30, eval_every=10))
    assert [h["step"] for h in history] == [10, 20, 30]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    for folder in ("best", "last"):
        for f in ("prmkit_format.json", "prmkit_delta.safetensors", "README.md", "prmkit_train.json"):
            assert os.path.isfile(out / folder / f), (folder, f)
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 3
    # only layer 1 (the last), the final norm and the head were trained and saved
    from safetensors.torch import load_file

    saved = set(load_file(str(out / "last" / "prmkit_delta.safetensors")))
    assert saved and all(k.startswith(("model.layers.1.", "model.norm.", "score.")) for k in saved)
    assert any(k.startswith("score.") for k in saved)
    trained = weights(str(out / "last"))
    from transformers import AutoModelForTokenClassification

    torch.manual_seed(0)
    start = AutoModelForTokenClassification.from_pretrained(base, num_labels=2).state_dict()
    for k, v in trained.items():
        if k.startswith(("model.layers.0.", "model.embed_tokens.")):
            assert torch.equal(v, start[k]), k
        if k.startswith("model.layers.1.") and k.endswith("weight"):
            assert not torch.equal(v, start[k]), k


def test_killed_run_resumes_to_the_same_weights_and_step_count(base, data, tmp_path):
    full = tmp_path / "full"
    train_prm(config(base, data, full, max_steps=6, eval_every=2))

    killed = tmp_path / "killed"
    calls = {"n": 0}
    import prmkit.train.prm as prm_module
    real_validate = prm_module.validate

    def dying_validate(prm, recs):
        calls["n"] += 1
        # killed during the third validation: the untrained model's, step 2's, then step 4's
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_validate(prm, recs)

    prm_module.validate = dying_validate
    try:
        with pytest.raises(KeyboardInterrupt):
            train_prm(config(base, data, killed, max_steps=6, eval_every=2))
    finally:
        prm_module.validate = real_validate
    state = json.loads((killed / "last" / "trainer_state.json").read_text())
    assert state["step"] == 2
    history = train_prm(config(base, data, killed, max_steps=6, eval_every=2))
    assert [h["step"] for h in history] == [2, 4, 6]  # the whole run's lines
    state = json.loads((killed / "last" / "trainer_state.json").read_text())
    assert state["step"] == 6
    a, b = weights(str(full / "last")), weights(str(killed / "last"))
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    rows = [json.loads(l) for l in (killed / "metrics.jsonl").read_text().splitlines()]
    want = [json.loads(l) for l in (full / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4, 6]
    for r, w in zip(rows, want):
        assert r["train_loss"] == pytest.approx(w["train_loss"], abs=1e-6)
        assert r["dev_auc"] == pytest.approx(w["dev_auc"], abs=1e-9)


def test_trainer_positions_are_the_scorer_positions(base, data, tmp_path):
    out = tmp_path / "run"
    train_prm(config(base, data, out, max_steps=3))
    prm = load_hf_prm(str(out / "last"), config=HFConfig(dtype="float32"))
    fmt = training_format("prmkit", "class")
    recs = records(4)
    examples, _ = step_examples(recs, fmt.bind(prm.tokenizer), 256, False, False)
    for r, ex in zip(recs, examples):
        enc = prm.bound.encode(r.problem, r.steps)
        assert ex.read_positions == enc.read_positions
        assert ex.targets == r.labels
        ids = torch.tensor([ex.input_ids])
        with torch.no_grad():
            probs = torch.softmax(prm.model(ids).logits[0, ex.read_positions], -1)[:, 1]
        assert prm.score([r.problem], [r.steps])[0] == pytest.approx(probs.tolist(), abs=1e-5)


def test_step_examples_mask_nulls_cut_at_first_error_and_never_shift():
    bound = training_format("prmkit", "class").bind(tiny.tokenizer())
    r = Record(id="a", problem="p?", steps=["s1", "s2 7", "s3", "s4"], labels=[1.0, 0.0, None, 1.0])
    (ex,), _ = step_examples([r], bound, 1024, soft=False, until_first_error=False)
    enc = bound.encode(r.problem, r.steps)
    assert ex.read_positions == [enc.read_positions[i] for i in (0, 1, 3)]
    assert ex.targets == [1.0, 0.0, 1.0]
    (ex,), _ = step_examples([r], bound, 1024, soft=False, until_first_error=True)
    assert ex.read_positions == enc.read_positions[:2] and ex.targets == [1.0, 0.0]
    cut = enc.read_positions[1]  # step 1's read position no longer fits
    (ex,), _ = step_examples([r], bound, cut, soft=False, until_first_error=False)
    assert ex.read_positions == enc.read_positions[:1] and ex.targets == [1.0]
    soft = Record(id="b", problem="p?", steps=["s1", "s2"], labels=[0.75, 0.25])
    (ex,), _ = step_examples([soft], bound, 1024, soft=True, until_first_error=False)
    assert ex.targets == [0.75, 0.25]
    (ex,), _ = step_examples([soft], bound, 1024, soft=False, until_first_error=False)
    assert ex.targets == [1.0, 0.0]
    unlabelled = Record(id="c", problem="p?", steps=["s1"])
    assert step_examples([unlabelled], bound, 1024, False, False) == ([], 1)


def test_auc_and_f1_by_hand():
    # pairs (pos, neg): (0.9,0.1) win, (0.9,0.5) win, (0.5,0.1) win, (0.5,0.5) tie -> 3.5/4
    assert auc([1, 1, 0, 0], [0.9, 0.5, 0.1, 0.5]) == pytest.approx(0.875)
    assert auc([1, 1], [0.2, 0.3]) is None
    recs = [Record(id="a", problem="p", steps=["x", "y"], first_error=1),
            Record(id="b", problem="p", steps=["x", "y"], first_error=-1),
            Record(id="c", problem="p", steps=["x", "y"], first_error=0)]
    # a: pred 1 (hit); c: pred -1 (miss) -> error acc 50; b: pred -1 (hit) -> correct acc 100
    f1 = first_error_f1(recs, [[0.9, 0.1], [0.8, 0.7], [0.6, 0.9]])
    assert f1 == pytest.approx(2 * 50 * 100 / 150)


def test_tuned_threshold_by_hand():
    recs = [Record(id="a", problem="p", steps=["x", "y"], first_error=1),
            Record(id="b", problem="p", steps=["x", "y"], first_error=-1),
            Record(id="c", problem="p", steps=["x", "y"], first_error=0)]
    # a (error at 1) is right for t in (0.1, 0.9]; b (none) for t <= 0.7; c (error at 0) for
    # t > 0.6. The candidates are 0.1, the midpoints 0.35, 0.65, 0.75, 0.85 and one above 0.9:
    # 0.65 gets all three (F1 100); 0.35 misses c (F1 66.7)
    got = tuned_threshold(recs, [[0.9, 0.1], [0.8, 0.7], [0.6, 0.9]])
    assert got["dev_threshold"] == pytest.approx(0.65)
    assert got["dev_f1_tuned"] == pytest.approx(100.0)
    assert tuned_threshold(recs[:1], [[0.9, 0.1]]) == {}   # no sample without an error


def test_f1_tuned_fitness_saves_the_threshold(base, data, tmp_path):
    out = tmp_path / "run"
    clean = [Record(id=f"c{i}", problem=f"What is {i} + 2?", steps=[f"Step 1: {GOOD}"],
                    labels=[1.0]) for i in range(3)]
    write_records(data[1], records(6) + clean)   # the threshold needs solutions without errors
    cfg = config(base, data, out, max_steps=4, eval_every=2)
    cfg.fitness = "f1-tuned"
    history = train_prm(cfg)
    saved = json.loads((out / "best" / "prmkit_threshold.json").read_text())
    best = max(history, key=lambda h: h["dev_f1_tuned"])
    assert saved["threshold"] == best["dev_threshold"] and "dev.jsonl" in saved["tuned_on"]


def test_bad_options_are_clear_errors(base, data, tmp_path):
    with pytest.raises(PrmkitError, match="--train"):
        LoopConfig(train="most")
    with pytest.raises(PrmkitError, match="--head"):
        PRMTrainConfig(base=base, data=data[0], output=str(tmp_path), head="three")
    with pytest.raises(PrmkitError, match="last-k"):
        train_prm(config(base, data, tmp_path / "x", last_k=5, max_steps=1))


def test_training_batches_mix_neighbours_and_keep_the_budget():
    from prmkit.train.loop import training_batches

    # 40 problems x 4 candidates, the candidates of a problem adjacent and of one length (as
    # a policy's identical right answers are): length-sorted batches would be one problem each
    lengths = [60 + 3 * (i // 4) for i in range(160)] + [900]   # and one too long for a batch
    batches = training_batches(lengths, 256, seed=0)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(161))                                 # each example once
    for b in batches:
        assert len(b) == 1 or max(lengths[i] for i in b) * len(b) <= 256
    assert [160] in batches                                         # the long one alone
    one_problem = sum(len(b) > 1 and len({i // 4 for i in b}) == 1 for b in batches)
    assert one_problem <= len(batches) // 10
    assert training_batches(lengths, 256, seed=0) == batches        # the seed fixes them
    assert training_batches(lengths, 256, seed=1) != batches
    # within a chunk like lengths go together: padding stays small
    waste = sum(max(lengths[i] for i in b) * len(b) - sum(lengths[i] for i in b) for b in batches)
    assert waste / sum(lengths) < 0.15


def test_head_lr_puts_the_head_in_its_own_parameter_group(base):
    from prmkit.train.common import load_base
    from prmkit.train.loop import param_groups, set_trainable

    cfg = PRMTrainConfig(base=base, data="unused", output="unused",
                         loop=LoopConfig(lr=1e-4, head_lr=5e-3, last_k=1))
    model, _ = load_base(cfg, training_format("prmkit", "class"))
    model = set_trainable(model, cfg.loop)
    body, head = param_groups(model, cfg.loop)
    names = {id(p): n for n, p in model.named_parameters()}
    assert body["lr"] == 1e-4 and head["lr"] == 5e-3
    assert sorted(names[id(p)] for p in head["params"]) == ["score.bias", "score.weight"]
    assert all(names[id(p)].startswith(("model.layers.1.", "model.norm.")) for p in body["params"])
    # without --head-lr: one group at --lr
    [only] = param_groups(model, LoopConfig(lr=1e-4, last_k=1))
    assert only["lr"] == 1e-4 and len(only["params"]) == len(body["params"]) + 2
    with pytest.raises(PrmkitError, match="--head-lr"):
        LoopConfig(head_lr=0.0)


def test_a_run_that_learns_nothing_says_so_and_names_its_figures(base, data, tmp_path, capsys):
    from prmkit.cli import main

    out = tmp_path / "nothing"
    assert main(["train", "prm", "--base", base, "--data", data[0], "--output", str(out),
                 "--max-steps", "1", "--lr", "1e-9", "--last-k", "0", "--max-length", "256"]) == 0
    said = capsys.readouterr().out
    assert "training loss at the end" in said and "(no dev data)" in said
    assert "neg_train_loss" not in said and "last validation" not in said
    constant = json.load(open(out / "untrained.json"))["constant_loss"]
    assert f"is not below {constant}, the loss of always predicting the labels' base rate" in said


def test_the_outcome_lines_by_hand(tmp_path):
    from prmkit.train.cli import outcome_lines

    (tmp_path / "untrained.json").write_text(json.dumps({"constant_loss": 0.6365}))
    learnt = outcome_lines([{"step": 40, "train_loss": 0.21, "dev_auc": 0.9, "seconds": 3}],
                           str(tmp_path))
    assert learnt == ["trained 40 steps; training loss at the end 0.21; dev auc=0.9"]
    stuck = outcome_lines([{"step": 1, "train_loss": 0.7, "neg_train_loss": -0.7}], str(tmp_path))
    assert len(stuck) == 2 and "(no dev data)" in stuck[0] and "0.7 is not below 0.6365" in stuck[1]
