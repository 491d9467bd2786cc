"""The implicit PRM (Yuan et al. 2024) on tiny models: step rewards sum to the outcome reward,
the cumulative form is their prefix sums, one pass equals per-prefix scoring, the rewards equal a
slow reference written from the definition, and a trained folder scores through `prmkit score`."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from prmkit.cli import main
from prmkit.errors import PrmkitError
from prmkit.models.backends.hf import HFConfig
from prmkit.models.load import load_prm as load_hf_prm  # any folder kind, the implicit PRM's too
from prmkit.models.backends.implicit import (ImplicitPRM, implicit_format, make_reference, share_frozen,
                                    sigmoid)
from prmkit.records import Record, read_records, write_records
from prmkit.train.implicit import ImplicitTrainConfig, train_implicit
from prmkit.train.loop import LoopConfig, set_trainable
import tiny

BETA = 0.5
PROBLEMS = ["What is 2 + 3?", "Natalia sold clips to 48 of her friends."]
STEPS = [["Step 1: 2 + 3 = 5.", "Step 2: The answer is 5."],
         ["She sold 48 clips in April.", "Half as many is 24.", "The answer is 72."]]


def pair(seed_policy=1):
    """Two different tiny causal LMs with the same architecture: policy and reference."""
    return tiny.causal_lm(seed=seed_policy), tiny.causal_lm(seed=0)


def prm(fmt="chat", form="probability", **config):
    policy, ref = pair()
    return ImplicitPRM(policy, ref, tiny.tokenizer(), implicit_format(fmt), BETA,
                       HFConfig(dtype="float32", **config), form=form)


def slow_rewards(scorer, problem, steps):
    """From the definition: full forwards of both models over the whole solution, log-softmax
    over the vocabulary, step k's tokens found by encoding the prefix of k+1 steps."""
    bound = scorer.bound
    ids = bound.encode(problem, steps).input_ids
    bounds = [len(bound.encode(problem, []).input_ids)]
    bounds += [len(bound.encode(problem, steps[:k + 1]).input_ids) for k in range(len(steps))]
    x = torch.tensor([ids])
    with torch.no_grad():
        lp = torch.log_softmax(scorer.model(x).logits[0].double(), -1)
        lr = torch.log_softmax(scorer.reference(x).logits[0].double(), -1)
    token = [BETA * float(lp[t - 1, ids[t]] - lr[t - 1, ids[t]]) for t in range(len(ids))]
    return [math.fsum(token[a:b]) for a, b in zip(bounds, bounds[1:])]


@pytest.mark.parametrize("fmt", ["chat", "lines"])
def test_step_rewards_sum_to_the_outcome_reward_and_equal_the_definition(fmt):
    scorer = prm(fmt)
    for rw, p, s in zip(scorer.rewards(PROBLEMS, STEPS), PROBLEMS, STEPS):
        assert len(rw.step_rewards) == len(s)
        assert rw.outcome != 0.0
        assert math.fsum(rw.step_rewards) == pytest.approx(rw.outcome, abs=1e-9)
        assert math.fsum(rw.token_rewards) == pytest.approx(rw.outcome, abs=1e-9)
        # cumulative form: prefix sums of the step rewards; the last one is the outcome reward
        running = 0.0
        for r, q in zip(rw.step_rewards, rw.q):
            running += r
            assert q == pytest.approx(running, abs=1e-9)
        assert rw.q[-1] == pytest.approx(rw.outcome, abs=1e-9)
        # the definition, computed the slow way (fp32 forwards, so 1e-4 is float noise)
        assert rw.step_rewards == pytest.approx(slow_rewards(scorer, p, s), abs=1e-4)


def test_forms_and_one_pass_equals_per_prefix():
    for form in ("probability", "cumulative", "step"):
        scorer = prm(form=form, token_budget=64)  # small budget: the two paths batch differently
        one, ref = scorer.score(PROBLEMS, STEPS), scorer.score_per_prefix(PROBLEMS, STEPS)
        for a, b in zip(one, ref):
            assert a == pytest.approx(b, abs=1e-5)
    rewards = prm().rewards(PROBLEMS, STEPS)
    probs = prm().score(PROBLEMS, STEPS)
    assert probs == [[pytest.approx(sigmoid(q)) for q in rw.q] for rw in rewards]
    steps = prm(form="step").score(PROBLEMS, STEPS)
    assert steps == [pytest.approx(rw.step_rewards) for rw in rewards]


def test_scores_do_not_depend_on_batch_makeup():
    together = prm().score(PROBLEMS, STEPS)
    alone = [prm().score([p], [s])[0] for p, s in zip(PROBLEMS, STEPS)]
    for a, b in zip(together, alone):
        assert a == pytest.approx(b, abs=1e-5)


def test_identical_policy_and_reference_give_zero_rewards():
    policy = tiny.causal_lm(seed=3)
    scorer = ImplicitPRM(policy, tiny.causal_lm(seed=3), tiny.tokenizer(), implicit_format("chat"),
                         BETA, HFConfig(dtype="float32"))
    for rw in scorer.rewards(PROBLEMS, STEPS):
        assert rw.outcome == 0.0 and set(rw.step_rewards) == {0.0}
    assert scorer.score(PROBLEMS, STEPS) == [[0.5, 0.5], [0.5, 0.5, 0.5]]


def test_a_cut_solution_has_null_steps_and_no_outcome():
    scorer = prm(max_length=None)
    full = scorer.rewards(PROBLEMS[:1], STEPS[:1])[0]
    enc = scorer.bound.encode(PROBLEMS[0], STEPS[0])
    cut = prm(max_length=enc.step_ends[0] + 1).rewards(PROBLEMS[:1], STEPS[:1])[0]
    assert cut.outcome is None and cut.step_rewards[1] is None and cut.q[1] is None
    assert cut.step_rewards[0] == pytest.approx(full.step_rewards[0], abs=1e-6)


def test_share_frozen_keeps_one_copy_of_the_frozen_weights():
    model = tiny.causal_lm()
    set_trainable(model, LoopConfig(train="last-k", last_k=1))
    ref = make_reference(model, "last-k")
    assert ref.model.layers[0].self_attn.q_proj.weight is model.model.layers[0].self_attn.q_proj.weight
    assert ref.model.embed_tokens.weight is model.model.embed_tokens.weight
    assert ref.model.layers[1].mlp.up_proj.weight is not model.model.layers[1].mlp.up_proj.weight
    assert not any(p.requires_grad for p in ref.parameters())
    with torch.no_grad():
        model.model.layers[1].mlp.up_proj.weight.add_(1.0)  # training the policy ...
    assert not torch.equal(ref.model.layers[1].mlp.up_proj.weight,  # ... leaves the reference
                           model.model.layers[1].mlp.up_proj.weight)
    other = tiny.causal_lm(seed=5)
    with pytest.raises(PrmkitError):
        share_frozen(other, torch.nn.Linear(2, 2), set())


def last_k_pair():
    """A policy trained in its top layer only (its bottom the reference's own tensors)."""
    policy = tiny.causal_lm(seed=1)
    set_trainable(policy, LoopConfig(train="last-k", last_k=1))
    reference = make_reference(policy, "last-k")
    with torch.no_grad():
        for p in policy.model.layers[1].parameters():
            p.add_(0.05 * torch.randn_like(p))       # what training would have moved
    return policy, reference


def test_a_last_k_policy_reads_the_shared_layers_once_and_equals_the_definition(monkeypatch):
    from prmkit.models.backends import implicit, sharedbody

    policy, reference = last_k_pair()
    assert sharedbody.shared_bottom(policy, reference) == 1
    assert sharedbody.shared_bottom(*pair()) == 0            # two models share nothing
    scorer = ImplicitPRM(policy, reference, tiny.tokenizer(), implicit_format("lines"), BETA,
                         HFConfig(dtype="float32", token_budget=64))
    calls = []
    real = implicit.shared_logps
    monkeypatch.setattr(implicit, "shared_logps", lambda *a: calls.append(1) or real(*a))
    problems, steps = PROBLEMS * 3, STEPS * 3                # several batches
    rewards = scorer.rewards(problems, steps)
    assert scorer.shared is True and len(calls) == scorer.stats.forwards > 1
    for p, s, rw in zip(problems, steps, rewards):
        assert rw.step_rewards == pytest.approx(slow_rewards(scorer, p, s), abs=1e-5)

    # a wrong shortcut (here: the policy's log-probabilities off by 0.01) fails the first
    # batch's check, and every batch is read whole
    monkeypatch.setattr(implicit, "shared_logps",
                        lambda *a: (lambda pr: (pr[0] + 0.01, pr[1]))(real(*a)))
    wrong = ImplicitPRM(policy, reference, tiny.tokenizer(), implicit_format("lines"), BETA,
                        HFConfig(dtype="float32", token_budget=64))
    again = wrong.rewards(problems, steps)
    assert wrong.shared is False
    for a, b in zip(again, rewards):
        assert a.step_rewards == pytest.approx(b.step_rewards, abs=1e-6)


def test_lora_reference_is_the_policy_with_adapters_off():
    pytest.importorskip("peft")
    model = set_trainable(tiny.causal_lm(), LoopConfig(train="lora", lora_r=2))
    assert make_reference(model, "lora") is None
    scorer = ImplicitPRM(model, None, tiny.tokenizer(), implicit_format("chat"), BETA,
                         HFConfig(dtype="float32"))
    assert scorer.rewards(PROBLEMS, STEPS)[0].outcome == 0.0  # LoRA starts as the identity
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    rw = scorer.rewards(PROBLEMS, STEPS)[0]
    assert rw.outcome != 0.0 and math.fsum(rw.step_rewards) == pytest.approx(rw.outcome)


# ---------------------------------------------------------------------------------------------
# training


GOOD, BAD = "so the answer is 5.", "then 3 + 3 = 7."


def outcome_records(n):
    """Outcome labels only: a solution is wrong exactly when one of its steps says '7'."""
    out = []
    for i in range(n):
        steps = [f"Step {k + 1}: " + (BAD if (i + k) % 4 == 0 else GOOD) for k in range(2)]
        out.append(Record(id=f"r{i}", problem=f"What is {i} + 3?", steps=steps,
                          is_correct=not any(BAD in s for s in steps), group=f"g{i // 2}"))
    return out


@pytest.fixture
def base(tmp_path):
    path = tmp_path / "base"
    tiny.causal_lm().save_pretrained(path, safe_serialization=True)
    tiny.tokenizer().save_pretrained(path)
    return str(path)


def config(base, tmp_path, **kw):
    os.makedirs(tmp_path, exist_ok=True)
    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_records(str(train), outcome_records(16))
    dev_records = outcome_records(8)
    for r in dev_records:  # gold step labels for step AUC / first-error F1 on dev
        r.labels = [0.0 if BAD in s else 1.0 for s in r.steps]
    write_records(str(dev), dev_records)
    loop = LoopConfig(**{"lr": 3e-3, "batch_tokens": 512, "last_k": 1, "warmup": 0.0,
                         "max_steps": 12, "eval_every": 6, **kw.pop("loop", {})})
    return ImplicitTrainConfig(base=base, data=str(train), eval_data=str(dev),
                               output=str(tmp_path / "run"), beta=BETA, max_length=256,
                               loop=loop, **kw)


def test_training_lowers_the_loss_and_the_folder_scores_through_prmkit_score(base, tmp_path):
    cfg = config(base, tmp_path)
    history = train_implicit(cfg)
    assert [h["step"] for h in history] == [6, 12]
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    assert {"dev_outcome_auc", "dev_auc", "dev_f1"} <= set(history[-1])
    best = tmp_path / "run" / "best"
    info = json.loads((best / "prmkit_train.json").read_text())
    assert info["kind"] == "implicit-prm" and info["config"]["beta"] == BETA
    assert json.loads((best / "prmkit_format.json").read_text())["reading"] == "log-ratio"
    from safetensors.torch import load_file

    saved = set(load_file(str(best / "prmkit_delta.safetensors")))
    assert saved and all(k.startswith(("model.layers.1.", "model.norm.")) for k in saved)

    loaded = load_hf_prm(str(best), config=HFConfig(dtype="float32"))
    assert isinstance(loaded, ImplicitPRM)
    # one copy of the untrained tensors: the policy's layer 0 is the reference's
    assert loaded.model.model.layers[0].mlp.up_proj.weight is \
        loaded.reference.model.layers[0].mlp.up_proj.weight
    dev = read_records(cfg.eval_data)
    rewards = loaded.rewards([r.problem for r in dev], [r.steps for r in dev])
    for rw in rewards:
        assert math.fsum(rw.step_rewards) == pytest.approx(rw.outcome, abs=1e-9)
    # the trained reward separates right from wrong outcomes on dev
    right = [rw.outcome for r, rw in zip(dev, rewards) if r.is_correct]
    wrong = [rw.outcome for r, rw in zip(dev, rewards) if not r.is_correct]
    assert min(right) > max(wrong)

    out = tmp_path / "scored.jsonl"
    assert main(["score", "--model", str(best), "--input", cfg.eval_data, "--output", str(out),
                 "--dtype", "float32"]) == 0
    scored = read_records(str(out))
    assert [r.step_scores for r in scored] == [
        [pytest.approx(sigmoid(q), abs=1e-6) for q in rw.q] for rw in rewards]


def test_dpo_pairs_train_and_bad_input_is_one_line(base, tmp_path, capsys):
    cfg = config(base, tmp_path, objective="dpo", loop={"max_steps": 4, "eval_every": 4})
    history = train_implicit(cfg)
    assert history[-1]["step"] == 4
    with pytest.raises(PrmkitError):
        ImplicitTrainConfig(base=base, data=cfg.data, output="x", objective="kto")
    empty = tmp_path / "none.jsonl"
    write_records(str(empty), [Record(id="a", problem="p", steps=["s"])])  # no is_correct
    code = main(["train", "implicit-prm", "--base", base, "--data", str(empty),
                 "--output", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("prmkit: ") and "is_correct" in err[-1]


def test_killed_run_resumes_to_the_same_weights(base, tmp_path):
    train_implicit(config(base, tmp_path / "a", loop={"max_steps": 4, "eval_every": 2}))
    killed = config(base, tmp_path / "b", loop={"max_steps": 4, "eval_every": 2})
    import prmkit.train.implicit as module

    real = module.validate_implicit
    calls = {"n": 0}

    def dying(prm_, records):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(prm_, records)

    module.validate_implicit = dying
    try:
        with pytest.raises(KeyboardInterrupt):
            train_implicit(killed)
    finally:
        module.validate_implicit = real
    history = train_implicit(killed)
    assert [h["step"] for h in history] == [2, 4]  # the whole run's lines
    a = load_file_tensors(tmp_path / "a" / "run" / "last")
    b = load_file_tensors(tmp_path / "b" / "run" / "last")
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


def load_file_tensors(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "prmkit_delta.safetensors"))


def test_lora_training_saves_merged_weights_scored_against_the_base(base, tmp_path):
    pytest.importorskip("peft")
    cfg = config(base, tmp_path, loop={"train": "lora", "lora_r": 2, "max_steps": 2,
                                       "eval_every": 2})
    train_implicit(cfg)
    loaded = load_hf_prm(str(tmp_path / "run" / "last"), config=HFConfig(dtype="float32"))
    assert isinstance(loaded, ImplicitPRM)
    rw = loaded.rewards(PROBLEMS, STEPS)[0]
    assert rw.outcome != 0.0 and math.fsum(rw.step_rewards) == pytest.approx(rw.outcome)
