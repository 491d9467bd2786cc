"""The surprisal head (``train prm --head surprisal``, :mod:`prmkit.models.surprisal`): a hazard
head whose every token also reads the LM's next-token distribution at the token before it.

The reference is slow and obviously correct: the LM's distribution comes from
``LlamaForCausalLM``'s own logits (transformers' LM head, not prmkit's projection through the
embedding matrix), the features are computed token by token in float64 from those, and a
step's score is the product of the per-token sigmoids of one unpadded solution at a time."""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from prmkit.errors import PrmkitError
from prmkit.models.load import wrap_model
from prmkit.models.reading import HFConfig, Reader
from prmkit.models.surprisal import OUTPUTS, SCALE
from prmkit.stepformat import StepFormat
from prmkit.train.common import training_format
from prmkit.train.prm import StepObjective, init_hazard_head, step_examples
from test_train_prm import records
import tiny

PROBLEMS = ["What is 2 + 3?", "Natalia sold clips to 48 of her friends in April."]
STEPS = [["2 + 3 = 5.", "The answer is 5."],
         ["She sold 24 in May.", "48 + 24 = 72.", "The answer is \\boxed{72}."]]


def tied_pair(seed: int = 0):
    """(token classifier with a surprisal head, the causal LM with the same body and tied head)."""
    from transformers import LlamaForCausalLM, LlamaForTokenClassification

    torch.manual_seed(seed)
    config = tiny.llama_config(num_labels=OUTPUTS, tie_word_embeddings=True)
    model = LlamaForTokenClassification(config).eval()
    with torch.no_grad():   # margins of a few units, gates that matter
        model.score.weight.mul_(8.0)
        model.score.bias.copy_(torch.tensor([0.0, 6.0, 1.0, -2.0, 0.5, 1.5]))
        model.model.embed_tokens.weight.mul_(3.0)    # a peaked next-token distribution
    lm = LlamaForCausalLM(tiny.llama_config(tie_word_embeddings=True)).eval()
    lm.model.load_state_dict(model.model.state_dict())
    lm.lm_head.weight = lm.model.embed_tokens.weight
    return model, lm


def reference(model, lm, bound, problem, steps) -> list[float]:
    """One solution, unbatched, float64, feature by feature from the causal LM's logits."""
    enc = bound.encode(problem, steps)
    ids = torch.tensor([enc.input_ids])
    with torch.no_grad():
        head = model(input_ids=ids).logits[0].double()
        logp = torch.log_softmax(lm(input_ids=ids).logits[0].double(), -1)
    log_keep = []
    for t, x in enumerate(enc.input_ids):
        z = [0.0] * 4
        if t > 0:
            dist = logp[t - 1]
            own = float(dist[x])
            z = [own, own - float(dist.max()), float(-(dist.exp() * dist).sum()),
                 float(int(dist.argmax()) == x)]
        keep = float(head[t, 1] - head[t, 0]) + sum(float(head[t, 2 + f]) * z[f] / SCALE[f]
                                                    for f in range(4))
        log_keep.append(-math.log1p(math.exp(-keep)))
    return [math.exp(sum(log_keep[:p + 1])) for p in enc.read_positions]


@pytest.mark.parametrize("chunk", [1024, 7])
def test_scores_equal_the_reference_batched_and_per_prefix(monkeypatch, chunk):
    """Batched with padding, per prefix, and with the vocabulary projection cut into chunks of
    7 tokens that straddle the rows of a batch."""
    monkeypatch.setattr("prmkit.models.surprisal.CHUNK", chunk)
    fmt = training_format("prmkit", "surprisal")
    assert fmt.hazard and fmt.surprisal and fmt.reading == "classes"
    model, lm = tied_pair()
    prm = wrap_model(model, tiny.tokenizer(), fmt, HFConfig(dtype="float32", token_budget=4096))
    want = [reference(model, lm, prm.bound, p, s) for p, s in zip(PROBLEMS, STEPS)]
    flat = [x for w in want for x in w]
    assert max(flat) - min(flat) > 0.3 and min(flat) > 0.1   # neither all 0 nor all 1
    for got in (prm.score(PROBLEMS, STEPS), prm.score_per_prefix(PROBLEMS, STEPS)):
        for g, w in zip(got, want):
            assert g == pytest.approx(w, rel=1e-4, abs=1e-6)


def test_the_gates_change_the_scores_and_start_at_zero():
    """With the gates at 0 the head is the plain hazard head of its first two outputs."""
    fmt, plain = training_format("prmkit", "surprisal"), training_format("prmkit", "hazard")
    model, _ = tied_pair(1)
    tok = tiny.tokenizer()
    before = wrap_model(model, tok, fmt, HFConfig(dtype="float32")).score(PROBLEMS, STEPS)
    examples, _ = step_examples(records(4), fmt.bind(tok), 256, False, False)
    init_hazard_head(model, examples, surprisal=True)
    assert model.score.weight[2:].abs().max() == 0 and model.score.bias[2:].abs().max() == 0
    after = wrap_model(model, tok, fmt, HFConfig(dtype="float32")).score(PROBLEMS, STEPS)
    from transformers import LlamaForTokenClassification

    two = LlamaForTokenClassification(tiny.llama_config(num_labels=2, tie_word_embeddings=True))
    two.model.load_state_dict(model.model.state_dict())
    with torch.no_grad():
        two.score.weight.copy_(model.score.weight[:2])
        two.score.bias.copy_(model.score.bias[:2])
    hazard = wrap_model(two.eval(), tok, plain, HFConfig(dtype="float32")).score(PROBLEMS, STEPS)
    for a, h in zip(after, hazard):
        assert a == pytest.approx(h, abs=1e-6)
    assert max(abs(x - y) for b, a in zip(before, after) for x, y in zip(b, a)) > 1e-3


def test_the_objective_is_the_step_cross_entropy_of_the_reference_scores():
    fmt = training_format("prmkit", "surprisal")
    model, lm = tied_pair(2)
    tok = tiny.tokenizer()
    bound = fmt.bind(tok)
    recs = records(4)
    examples, _ = step_examples(recs, bound, 256, False, False)
    objective = StepObjective(Reader(model, fmt, bound), tok.pad_token_id)
    with torch.no_grad():
        loss = float(objective(examples, torch.device("cpu"), None))
    terms = []
    for r in recs:
        for y, s in zip(r.labels, reference(model, lm, bound, r.problem, r.steps)):
            terms.append(-(y * math.log(s) + (1 - y) * math.log(1 - s)))
    assert loss == pytest.approx(sum(terms) / len(terms), rel=1e-4)


def test_an_untied_base_and_a_format_without_hazard_are_refused():
    from transformers import LlamaForTokenClassification

    fmt = training_format("prmkit", "surprisal")
    untied = LlamaForTokenClassification(tiny.llama_config(num_labels=OUTPUTS))
    with pytest.raises(PrmkitError, match="tied embeddings"):
        Reader(untied, fmt, fmt.bind(tiny.tokenizer()))
    with pytest.raises(PrmkitError, match="surprisal needs hazard"):
        StepFormat(name="x", reading="classes", surprisal=True)
    assert StepFormat.from_dict(fmt.to_dict()) == fmt     # saved and loaded with the model
    from prmkit.models.sharing.incremental import reuse_blocker

    model, _ = tied_pair(3)
    assert "hazard" in reuse_blocker(wrap_model(model, tiny.tokenizer(), fmt, HFConfig()))


def tied_base(tmp_path):
    _, lm = tied_pair(4)
    base = tmp_path / "base"
    lm.save_pretrained(base, safe_serialization=True)
    tiny.tokenizer().save_pretrained(base)
    return str(base)


def test_the_head_alone_with_stored_features_trains_as_uncached(tmp_path):
    """--last-k 0 --cache-frozen: the LM features are computed once from the stored final
    states; the weights equal those of the uncached run, which computes them every step."""
    from prmkit.models.backends.hf import load_hf_prm
    from prmkit.records import write_records
    from prmkit.train.loop import LoopConfig
    from prmkit.train.prm import PRMTrainConfig, train_prm

    base = tied_base(tmp_path)
    write_records(str(tmp_path / "train.jsonl"), records(12))
    weights = []
    for cache in (False, True):
        out = tmp_path / f"run-{cache}"
        loop = LoopConfig(lr=3e-3, batch_tokens=256, last_k=0, warmup=0.0, epochs=3)
        train_prm(PRMTrainConfig(base=base, data=str(tmp_path / "train.jsonl"), output=str(out),
                                 max_length=256, head="surprisal", cache_frozen=cache, loop=loop))
        weights.append(load_hf_prm(str(out / "last"), config=HFConfig(dtype="float32"))
                       .model.score.weight.detach().clone())
    assert float((weights[0] - weights[1]).abs().max()) <= 1e-5
    assert float(weights[0][2:].abs().max()) > 1e-3     # the gates trained


@pytest.mark.parametrize("cache_frozen", [False, True])
def test_train_prm_with_the_surprisal_head(tmp_path, cache_frozen):
    """Training runs (the cached forward checks itself against the uncached one on its first
    batch, so the cached run also tests that the token ids reach the head), the loss falls,
    and the saved folder scores as the trained model did."""
    from prmkit.models.backends.hf import load_hf_prm
    from prmkit.records import write_records
    from prmkit.train.loop import LoopConfig
    from prmkit.train.prm import PRMTrainConfig, train_prm

    base = tied_base(tmp_path)
    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_records(str(train), records(12))
    write_records(str(dev), records(6))
    loop = LoopConfig(lr=3e-3, batch_tokens=512, last_k=1, warmup=0.0, max_steps=30,
                      eval_every=10)
    history = train_prm(PRMTrainConfig(base=str(base), data=str(train), eval_data=str(dev),
                                       output=str(tmp_path / "run"), max_length=256,
                                       head="surprisal", cache_frozen=cache_frozen, loop=loop))
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    prm = load_hf_prm(str(tmp_path / "run" / "last"), config=HFConfig(dtype="float32"))
    assert prm.format.surprisal and prm.model.config.num_labels == OUTPUTS
    scores = prm.score([r.problem for r in records(3)], [r.steps for r in records(3)])
    assert all(all(b <= a + 1e-7 for a, b in zip(s, s[1:])) for s in scores)
    assert dataclasses.asdict(prm.format)["surprisal"] is True


@pytest.mark.parametrize("packed", [True, False], ids=["tree-pass", "by-depth"])
@pytest.mark.parametrize("head", ["hazard", "surprisal"])
@pytest.mark.parametrize("closing", [False, True])
def test_shared_prefix_scoring_carries_the_hazard_sum(head, closing, packed):
    """Prefix sharing reads a hazard head too. In one pass (``packed``) each segment's sum
    starts from its ancestor's log S at the cut, and a surprisal head's first token reads the
    ancestor's state there; a depth at a time, each node carries its log S and final hidden
    states to the rows that continue it. Both also where a row reuses only part of a node's
    ids (``closing``: a format whose prefix ids are not a prefix, so rows cut inside a node or
    its ancestors). Equal to plain one-pass scoring within 1e-4."""
    from test_hazard import hazard_model
    from test_shared_prefix import split

    from prmkit.models.sharing.prefix import ShareStats, SharedPrefixScorer, score_shared

    model = tied_pair(5)[0] if head == "surprisal" else hazard_model(5)
    prm = wrap_model(model, tiny.tokenizer(), training_format("prmkit", head),
                     HFConfig(dtype="float32"))
    if closing:
        prm.bound = tiny.ClosingBound(prm.bound)
    problems, steps, groups = split()
    want = prm.score(problems, steps)
    for budget in (None, 60):   # one pass per depth, and passes split by a small budget
        stats = ShareStats()
        scorer = SharedPrefixScorer(prm, stats)
        scorer.budget = budget or scorer.budget
        assert scorer.packed
        scorer.packed = packed
        got = scorer.score(problems, steps, groups)
        for a, b in zip(got, want):
            assert a == pytest.approx(b, rel=1e-4, abs=1e-6)
        assert stats.computed < stats.plain and stats.groups == 4
        # a depth at a time, a row cut inside a node counts as a partial fallback; the token
        # tree of one pass is cut at the token, on each solution's own ids: none falls back
        assert (stats.partial > 0) == (closing and not packed)
    flat = [x for row in want for x in row]
    assert max(flat) - min(flat) > 0.1
    stats = ShareStats()   # the default path (score, eval bestofn, the demo) shares too
    for a, b in zip(score_shared(prm, problems, steps, groups, stats), want):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6)
    assert stats.groups == 4
