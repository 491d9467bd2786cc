"""--cache-frozen: training on the stored outputs of the frozen layers gives the weights the
uncached trainer gives, for both heads, and the first batch checks the cached forward."""

from __future__ import annotations

import pytest
import torch

from prmkit.errors import PrmkitError
from prmkit.models.backends.hf import HFConfig, load_hf_prm
from prmkit.train.loop import LoopConfig
from prmkit.train.prm import PRMTrainConfig, train_prm
from test_train_prm import data  # noqa: F401  (the same toy records, as a fixture)


def run(base, data, out, head, cache, last_k=1, **loop):
    cfg = PRMTrainConfig(base=base, data=data[0], eval_data=data[1], output=str(out),
                         max_length=256, head=head, cache_frozen=cache,
                         loop=LoopConfig(lr=3e-3, batch_tokens=256, last_k=last_k, warmup=0.0,
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


def test_the_head_alone_trains_the_same_cached_or_not(tiny_base, data, tmp_path):
    """--last-k 0: only the head moves; cached, the stored states are the body's final output
    (after its final norm) and an epoch runs the head alone, to the same weights."""
    plain, w_plain = run(tiny_base, data, tmp_path / "plain", "class", False, last_k=0)
    cached, w_cached = run(tiny_base, data, tmp_path / "cached", "class", True, last_k=0)
    for a, b in zip(plain, cached):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-5)
    assert max(float((w_plain[k] - w_cached[k]).abs().max()) for k in w_plain) <= 1e-5
    from transformers import AutoModelForCausalLM

    start = AutoModelForCausalLM.from_pretrained(tiny_base).state_dict()
    moved = {k for k in w_plain if k in start and not torch.equal(w_plain[k], start[k])}
    assert not moved                                 # the body, its norm included, is frozen
    assert plain[-1]["train_loss"] < plain[0]["train_loss"]   # and the head learned
    with pytest.raises(PrmkitError, match="--last-k 0 trains the classification head alone"):
        run(tiny_base, data, tmp_path / "lt", "label-tokens", False, last_k=0)


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


def test_repeated_sequences_are_read_once_and_train_as_uncached(tiny_base, tmp_path,
                                                                 monkeypatch):
    """Candidates that repeat another's text word for word (most right lab solutions do) go
    through the frozen layers once; training still gives the uncached weights."""
    from prmkit.records import write_records
    from test_train_prm import records

    once = records(6)
    twice = once + [r.__class__(**{**r.to_dict(), "id": r.id + "-again"}) for r in once[:4]]
    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_records(str(train), twice)
    write_records(str(dev), records(9)[6:])
    from prmkit.train import frozentree

    real, seen = frozentree.tree_hidden, []

    def counted(layers, seqs, *args):
        seen.extend(tuple(e.input_ids) for e in seqs)
        return real(layers, seqs, *args)

    monkeypatch.setattr(frozentree, "tree_hidden", counted)
    plain, w_plain = run(tiny_base, (str(train), str(dev)), tmp_path / "plain", "class", False,
                         last_k=0)
    cached, w_cached = run(tiny_base, (str(train), str(dev)), tmp_path / "cached", "class",
                           True, last_k=0)
    # the build reads each distinct training and dev sequence once, as one token tree (10
    # training sequences, 6 distinct)
    assert len(seen) == len(set(seen)) == 6 + 3
    for a, b in zip(plain, cached):
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-5)
    assert max(float((w_plain[k] - w_cached[k]).abs().max()) for k in w_plain) <= 1e-5


def test_the_token_tree_pass_gives_each_sequence_its_own_states_and_lm_features():
    """The frozen pass over sequences that share prefixes (a common start, a branch inside a
    step, a sequence that is a prefix of another, a twin) gives each the final states and the
    surprisal head's LM features of its plain forward, alone; tree attention, float32."""
    import torch
    from test_surprisal import tied_pair

    from prmkit.models.surprisal import Surprisal
    from prmkit.train.frozen import FrozenLayers
    from prmkit.train.loop import Example

    model = tied_pair(3)[0]
    seqs = [[5, 6, 7, 8, 9, 10], [5, 6, 7, 11, 12], [5, 6, 7, 8], [5, 6, 7, 8, 9, 10],
            [5, 13, 14, 15, 16, 17, 18, 19], [20, 21]]
    examples = [Example(list(s), [len(s) - 1], [1.0]) for s in seqs]
    frozen = FrozenLayers(model, 0)
    frozen.lm = Surprisal(model)
    device = torch.device("cpu")
    frozen.build(examples, 4096, 0, device, autocast=False)
    assert set(frozen.feats) == {id(e) for e in examples}
    for e in examples:
        plain = frozen.bottom_hidden([e], 0, device)[0]
        assert torch.allclose(frozen.hidden[id(e)], plain, atol=1e-5)
        with torch.no_grad():
            want = frozen.lm.features(plain[None], torch.tensor([e.input_ids]))[0]
        assert torch.allclose(frozen.feats[id(e)], want, atol=1e-5)
        assert float(want[1:].abs().sum()) > 0      # features that a wrong read would change
