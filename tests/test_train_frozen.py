"""--cache-frozen: training on the stored outputs of the frozen layers gives the weights the
uncached trainer gives, for both heads, and the first batch checks the cached forward."""

from __future__ import annotations

import pytest
import torch

from prmkit.errors import PrmkitError
from prmkit.models.hf import HFConfig, load_hf_prm
from prmkit.train.loop import LoopConfig
from prmkit.train.prm import PRMTrainConfig, train_prm
from test_train_prm import data  # noqa: F401  (the same toy records, as a fixture)


def run(base, data, out, head, cache, **loop):
    cfg = PRMTrainConfig(base=base, data=data[0], eval_data=data[1], output=str(out),
                         max_length=256, head=head, cache_frozen=cache,
                         loop=LoopConfig(lr=3e-3, batch_tokens=256, last_k=1, warmup=0.0,
                                         epochs=3, **loop))
    history = train_prm(cfg)
    model = load_hf_prm(str(out / "last"), config=HFConfig(dtype="float32")).model
    return history, {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("head", ["class", "label-tokens"])
def test_cached_training_gives_the_uncached_weights(tiny_base, data, tmp_path, head):
    plain, w_plain = run(tiny_base, data, tmp_path / "plain", head, False)
    cached, w_cached = run(tiny_base, data, tmp_path / "cached", head, True)
    assert [h["step"] for h in plain] == [h["step"] for h in cached]
    for a, b in zip(plain, cached):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-5)
    assert w_plain.keys() == w_cached.keys()
    worst = max(float((w_plain[k] - w_cached[k]).abs().max()) for k in w_plain)
    assert worst <= 1e-5
    # and training moved the trained layer, so the two runs are not equal by doing nothing
    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(tiny_base).state_dict()
    moved = [k for k in w_plain if k.startswith("model.layers.1.") and k in start
             and not torch.equal(w_plain[k], start[k])]
    assert moved


def test_a_cached_forward_that_differs_is_refused(tiny_base, data, tmp_path, monkeypatch):
    from prmkit.train import frozen

    real = frozen.FrozenLayers.bottom_hidden

    def shifted(self, seqs, pad, device):
        return [h + 1.0 for h in real(self, seqs, pad, device)]

    monkeypatch.setattr(frozen.FrozenLayers, "bottom_hidden", shifted)
    with pytest.raises(PrmkitError, match="cached forward of .* differs from the uncached"):
        run(tiny_base, data, tmp_path / "bad", "class", True)


def test_cache_frozen_needs_last_k(tiny_base, data, tmp_path):
    with pytest.raises(PrmkitError, match="--cache-frozen needs --train last-k"):
        PRMTrainConfig(base=tiny_base, data=data[0], output=str(tmp_path / "o"),
                       cache_frozen=True, loop=LoopConfig(train="full"))
