"""ORM training (outcome and pairwise Bradley-Terry), and the other trainable-parameter modes."""

from __future__ import annotations

import json

import pytest
import torch

from prmkit.models.backends.hf import HFConfig, load_hf_prm
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
    from prmkit.models.backends.hf import Reader
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


def test_an_orm_with_the_surprisal_head_reads_survival_at_the_last_step(tmp_path):
    """``train orm --head surprisal`` (the demo's ORM): the loss falls from about ln 2 (the
    head starts with S at the last step near 1/2), the cached head alone ends with the
    uncached run's weights, and the saved model scores a survival curve."""
    from test_surprisal import tied_base

    from prmkit.models.load import load_prm

    data = tmp_path / "c.jsonl"
    write_records(str(data), candidates(6))
    base, heads = tied_base(tmp_path), []
    for cache_frozen in (False, True):
        out = tmp_path / f"orm{cache_frozen}"
        cfg = ORMTrainConfig(base=base, data=str(data), output=str(out), head="surprisal",
                             max_length=256, cache_frozen=cache_frozen,
                             loop=LoopConfig(lr=3e-3, batch_tokens=512, last_k=0, warmup=0.0,
                                             max_steps=24, eval_every=8))
        history = train_orm(cfg)
        assert history[0]["train_loss"] < 1.0     # not the tens of a head started at random
        assert history[-1]["train_loss"] < history[0]["train_loss"]
        prm = load_prm(str(out / "last"), config=HFConfig(dtype="float32"))
        assert prm.format.surprisal
        heads.append(prm.model.score.weight.detach().clone())
        scores = prm.score([r.problem for r in candidates(1)], [r.steps for r in candidates(1)])
        assert all(b <= a + 1e-7 for s in scores for a, b in zip(s, s[1:]))
    assert torch.allclose(heads[0], heads[1], atol=1e-5)
    assert heads[0].abs().max() > 1e-3          # it moved from its zero start


def test_cache_frozen_needs_the_outcome_objective(tmp_path):
    from prmkit.errors import PrmkitError

    with pytest.raises(PrmkitError, match="--cache-frozen needs"):
        ORMTrainConfig(base="b", data="d", output="o", objective="pairwise", cache_frozen=True)


def test_the_orm_reads_the_frozen_states_the_prm_stored(tmp_path, monkeypatch):
    """``--frozen-store``: the PRM's run writes the frozen body's states and LM features, the
    ORM's run on the same base and candidates reads them all (its body runs only for the
    first batch's check) and trains to the weights of a run without the store."""
    from test_surprisal import tied_base

    from prmkit.models.load import load_prm
    from prmkit.train.frozen import FrozenLayers

    data, store = tmp_path / "c.jsonl", tmp_path / "store"
    write_records(str(data), candidates(6))
    base = tied_base(tmp_path)
    loop = dict(lr=3e-3, batch_tokens=512, last_k=0, warmup=0.0, max_steps=12, eval_every=12)
    train_prm(PRMTrainConfig(base=base, data=str(data), output=str(tmp_path / "prm"),
                             head="surprisal", max_length=256, cache_frozen=True,
                             frozen_store=str(store), loop=LoopConfig(**loop)))
    [file] = list(store.iterdir())
    assert file.name.startswith("frozen-") and file.suffix == ".safetensors"
    calls = []
    real = FrozenLayers.bottom_hidden
    monkeypatch.setattr(FrozenLayers, "bottom_hidden",
                        lambda self, seqs, *a: calls.append(len(seqs)) or real(self, seqs, *a))
    heads = []
    for kept in (str(store), None):
        out = tmp_path / f"orm{bool(kept)}"
        train_orm(ORMTrainConfig(base=base, data=str(data), output=str(out), head="surprisal",
                                 max_length=256, cache_frozen=True, frozen_store=kept,
                                 loop=LoopConfig(**loop)))
        heads.append(load_prm(str(out / "last"), config=HFConfig(dtype="float32")).model.score.weight)
        if kept:
            assert len(calls) == 1          # the check's batch alone: the rest came from the store
    assert len(calls) > 2                   # without the store the body ran over every batch
    assert torch.allclose(heads[0], heads[1], atol=1e-5)
