"""ORM training (outcome and pairwise Bradley-Terry), and the other trainable-parameter modes."""

from __future__ import annotations

import json

import pytest
import torch

from prmkit.models.hf import HFConfig, load_hf_prm
from prmkit.records import Record, write_records
from prmkit.train.loop import LoopConfig
from prmkit.train.orm import ORMTrainConfig, outcome_examples, pair_examples, train_orm
from prmkit.train.prm import PRMTrainConfig, train_prm, training_format
import tiny


def candidates(n_groups=6):
    out = []
    for g in range(n_groups):
        for k, ok in enumerate((True, False, True, False)):
            last = "so the answer is 5." if ok else "then 3 + 3 = 7."
            out.append(Record(id=f"g{g}-{k}", group=f"g{g}", problem=f"What is {g} + 3?",
                              steps=[f"Step 1: start {k}.", f"Step 2: {last}"], is_correct=ok,
                              labels=[1.0, 1.0 if ok else 0.0]))
    return out


@pytest.fixture
def base(tiny_base):
    return tiny_base


def test_outcome_examples_read_only_the_last_step():
    bound = training_format("prmkit", "class").bind(tiny.tokenizer())
    recs = candidates(1)
    exs, left = outcome_examples(recs + [Record(id="x", problem="p", steps=["s"])], bound, 512)
    assert left == 1  # no is_correct
    for r, ex in zip(recs, exs):
        enc = bound.encode(r.problem, r.steps)
        assert ex.read_positions == [enc.read_positions[-1]]
        assert ex.targets == [float(r.is_correct)]


def test_pairs_pair_a_correct_and_a_wrong_solution_of_one_problem():
    bound = training_format("prmkit", "class").bind(tiny.tokenizer())
    exs, _ = pair_examples(candidates(3), bound, 512, max_pairs=4, seed=0)
    assert len(exs) == 3 * 4  # 2 correct x 2 wrong per group
    for ex in exs:
        assert ex.targets == [1.0] and ex.rejected.targets == [0.0]
    assert len(exs[0]) == max(len(exs[0].input_ids), len(exs[0].rejected.input_ids))


@pytest.mark.parametrize("objective", ["outcome", "pairwise"])
def test_orm_loss_falls_and_scores_write_outcome_score(base, tmp_path, objective, capsys):
    data = tmp_path / "c.jsonl"
    write_records(str(data), candidates(6))
    out = tmp_path / objective
    cfg = ORMTrainConfig(base=base, data=str(data), eval_data=str(data), output=str(out),
                         objective=objective, max_length=256,
                         loop=LoopConfig(lr=3e-3, batch_tokens=512, last_k=1, warmup=0.0,
                                         max_steps=24, eval_every=8))
    history = train_orm(cfg)
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert json.loads((out / "last" / "prmkit_train.json").read_text())["kind"] == "orm"
    from prmkit.cli import main

    assert main(["score", "--model", str(out / "last"), "--input", str(data),
                 "--output", str(tmp_path / "s.jsonl"), "--dtype", "float32"]) == 0
    rows = [json.loads(l) for l in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert all("outcome_score" in r["meta"] and "step_scores" not in r for r in rows)


def test_pair_loss_is_bradley_terry_by_hand(base, tmp_path):
    """The loop's pair loss equals -log sigmoid(r_chosen - r_rejected) computed by hand."""
    from prmkit.models.hf import Reader
    from prmkit.train.loop import Loop
    from prmkit.train.orm import PairObjective

    fmt = training_format("prmkit", "class")
    model = tiny.token_classifier(2)
    bound = fmt.bind(tiny.tokenizer())
    exs, _ = pair_examples(candidates(1), bound, 512, 1, 0)
    objective = PairObjective(Reader(model, fmt, bound), tiny.tokenizer().pad_token_id)
    loop = Loop(model, objective, exs, LoopConfig(), str(tmp_path / "o"), "neg_train_loss",
                lambda m: {}, lambda *a: None)
    got = loop._loss([0]).item()
    with torch.no_grad():
        def reward(e):
            logits = model(torch.tensor([e.input_ids])).logits[0, e.read_positions[0]]
            return (logits[1] - logits[0]).item()
        margin = reward(exs[0]) - reward(exs[0].rejected)
    assert got == pytest.approx(-torch.nn.functional.logsigmoid(torch.tensor(margin)).item(), abs=1e-5)


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_full_and_lora_training_save_a_loadable_model(base, tmp_path, mode):
    pytest.importorskip("peft") if mode == "lora" else None
    data = tmp_path / "c.jsonl"
    write_records(str(data), candidates(3))
    out = tmp_path / mode
    cfg = PRMTrainConfig(base=base, data=str(data), output=str(out), max_length=256,
                         loop=LoopConfig(train=mode, lr=3e-3, batch_tokens=512, max_steps=4))
    history = train_prm(cfg)
    assert history[-1]["step"] == 4
    assert (out / "last" / "model.safetensors").is_file()
    prm = load_hf_prm(str(out / "last"), config=HFConfig(dtype="float32"))
    scores = prm.score(["What is 1 + 3?"], [["Step 1: start 0.", "Step 2: so the answer is 5."]])
    assert len(scores[0]) == 2 and all(0 <= s <= 1 for s in scores[0])
    if mode == "lora":  # the adapters are merged: a plain transformers model, no peft needed
        assert not (out / "last" / "adapter_config.json").exists()
