"""--cache-frozen with --eval-data: the dev set goes through the frozen pass with the training
set, and validation runs only the trained top on its stored states. Its step scores must be
the scores the saved model gives through the ordinary scorer (float32, one full forward), for
every head, with the head alone and with a trained layer, and a dev solution cut by
--max-length must keep its steps past the cut unscored."""

from __future__ import annotations

import pytest

from prmkit.models.backends.hf import HFConfig, load_hf_prm
from prmkit.records import Record, write_records
from prmkit.train.loop import LoopConfig
from prmkit.train.prm import PRMTrainConfig, train_prm
from test_surprisal import tied_base
from test_train_prm import records


def dev_records() -> list[Record]:
    long_steps = [f"Step {k + 1}: and then seven more seven more seven" for k in range(40)]
    cut = Record(id="long", problem="What is 40 + 3?", steps=long_steps,
                 labels=[1.0] * 20 + [0.0] * 20)
    return records(6) + [cut]


def validated_scores(tmp_path, monkeypatch, head: str, last_k: int, cache: bool):
    """(the step scores validation computed after the last step, the saved model's scores of
    the dev records through the ordinary scorer)."""
    import prmkit.train.prm as prm_module

    seen: list[list[list[float | None]]] = []
    real = prm_module.step_metrics
    monkeypatch.setattr(prm_module, "step_metrics",
                        lambda recs, scores: (seen.append([list(s) for s in scores]),
                                              real(recs, scores))[1])
    base = tied_base(tmp_path)
    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_records(str(train), records(12))
    write_records(str(dev), dev_records())
    out = tmp_path / f"run-{head}-{last_k}-{cache}"
    loop = LoopConfig(lr=3e-3, batch_tokens=512, last_k=last_k, warmup=0.0, epochs=2)
    history = train_prm(PRMTrainConfig(base=base, data=str(train), eval_data=str(dev),
                                       output=str(out), max_length=128, head=head,
                                       cache_frozen=cache, loop=loop))
    assert "dev_auc" in history[-1]
    prm = load_hf_prm(str(out / "last"), config=HFConfig(dtype="float32", max_length=128))
    recs = dev_records()
    return seen[-1], prm.score([r.problem for r in recs], [r.steps for r in recs])


@pytest.mark.parametrize("head,last_k", [("class", 1), ("class", 0), ("hazard", 0),
                                         ("surprisal", 0), ("surprisal", 1)])
def test_cached_validation_scores_equal_the_saved_models_scores(tmp_path, monkeypatch, head,
                                                                last_k):
    cached, reference = validated_scores(tmp_path, monkeypatch, head, last_k, True)
    assert [len(s) for s in cached] == [len(s) for s in reference]
    assert cached[-1][-1] is None and reference[-1][-1] is None   # past the cut: unscored
    assert [x is None for s in cached for x in s] == [x is None for s in reference for x in s]
    worst = max(abs(a - b) for s, t in zip(cached, reference) for a, b in zip(s, t)
                if a is not None)
    assert worst <= 1e-4
    assert len({round(x, 3) for s in cached for x in s if x is not None}) > 3   # not constant


def test_uncached_validation_is_unchanged(tmp_path, monkeypatch):
    """Without --cache-frozen, validation scores through the ordinary scorer, as before."""
    plain, reference = validated_scores(tmp_path, monkeypatch, "class", 1, False)
    worst = max(abs(a - b) for s, t in zip(plain, reference) for a, b in zip(s, t)
                if a is not None)
    assert worst <= 1e-6


def test_the_untrained_baselines_are_written_before_the_first_step(tmp_path):
    """DIR/untrained.json: the best constant predictor's loss (the entropy of the targets,
    worked by hand here) and the dev metrics of the model before training; for a hazard head,
    whose weights start at 0, every solution's step k gets the same score, a function of its
    position alone."""
    import json
    import math

    from prmkit.train.common import training_format
    from prmkit.train.prm import step_metrics

    base = tied_base(tmp_path)
    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_records(str(train), records(12))
    write_records(str(dev), records(6))
    out = tmp_path / "run"
    train_prm(PRMTrainConfig(base=base, data=str(train), eval_data=str(dev), output=str(out),
                             max_length=128, head="hazard", cache_frozen=True,
                             loop=LoopConfig(lr=3e-3, batch_tokens=512, last_k=0, warmup=0.0,
                                             epochs=1)))
    got = json.loads((out / "untrained.json").read_text())
    ys = [y for r in records(12) for y in r.labels]
    p = sum(ys) / len(ys)
    assert got["constant_loss"] == pytest.approx(-(p * math.log(p) + (1 - p) * math.log(1 - p)),
                                                 abs=1e-6)
    # before the first step the hazard head is the keep bias alone: the dev metrics are those
    # of scores that fall with each step's read position
    fmt = training_format("prmkit", "hazard")
    from transformers import AutoTokenizer

    bound = fmt.bind(AutoTokenizer.from_pretrained(base))
    dev_recs = records(6)
    reads = [list(bound.encode(r.problem, r.steps, max_length=128).read_positions) for r in dev_recs]
    by_position = [[-x for x in pos] for pos in reads]   # any falling function ranks the same
    want = step_metrics(dev_recs, by_position)
    assert got["dev_auc"] == pytest.approx(want["dev_auc"], abs=1e-6)


def outcome_records(recs: list[Record]) -> list[Record]:
    """The same solutions with one outcome each, learnable where the ORM reads: whether the
    last step is a good one."""
    return [Record(id=r.id, problem=r.problem, steps=r.steps, is_correct=r.labels[-1] >= 0.5)
            for r in recs]


@pytest.mark.parametrize("head,last_k", [("class", 1), ("surprisal", 0)])
def test_cached_orm_validation_scores_equal_the_saved_models_scores(tmp_path, monkeypatch, head,
                                                                    last_k):
    """train orm --cache-frozen --eval-data: the last-step scores validation ranks are the
    saved ORM's through the ordinary scorer, and a dev solution whose last step is cut gets 0
    in both."""
    import prmkit.train.orm as orm_module
    from prmkit.train.orm import ORMTrainConfig, train_orm

    seen: list[list[float]] = []
    real = orm_module.auc
    monkeypatch.setattr(orm_module, "auc", lambda ys, ss: (seen.append(list(ss)), real(ys, ss))[1])
    base = tied_base(tmp_path)
    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_records(str(train), outcome_records(records(60)))
    dev_recs = outcome_records(dev_records())
    write_records(str(dev), dev_recs)
    out = tmp_path / "orm"
    history = train_orm(ORMTrainConfig(
        base=base, data=str(train), eval_data=str(dev), output=str(out), max_length=128,
        head=head, cache_frozen=True,
        loop=LoopConfig(lr=1e-2, batch_tokens=512, last_k=last_k, warmup=0.0, epochs=3)))
    assert "dev_auc" in history[-1]
    prm = load_hf_prm(str(out / "last"), config=HFConfig(dtype="float32", max_length=128))
    scores = prm.score([r.problem for r in dev_recs], [r.steps for r in dev_recs])
    reference = [s[-1] if s[-1] is not None else 0.0 for s in scores]
    assert len(seen[-1]) == len(reference) and seen[-1][-1] == reference[-1] == 0.0
    assert max(abs(a - b) for a, b in zip(seen[-1], reference)) <= 1e-4
    assert len({round(x, 3) for x in seen[-1]}) > 3   # not constant
