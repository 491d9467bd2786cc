"""The hazard head (``train prm --head hazard``, ``StepFormat.hazard``): every token's
P(no error here), a step's score their product up to its read position. Checked against a
slow reference that multiplies the per-token probabilities of one unpadded solution at a time
in float64, through every path that reads a PRM: batched scoring, per-prefix scoring, search's
prefix scorer, the trainer's objective, and the checks that refuse what cannot read it."""

from __future__ import annotations

import dataclasses
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from prmkit.errors import PrmkitError
from prmkit.models.load import wrap_model
from prmkit.models.reading import HFConfig, Reader
from prmkit.stepformat import StepFormat, get_format
from prmkit.train.common import training_format
from prmkit.train.prm import StepObjective, init_hazard_head, step_examples
from test_train_prm import records
import tiny

PROBLEMS = ["What is 2 + 3?", "Natalia sold clips to 48 of her friends in April."]
STEPS = [["2 + 3 = 5.", "The answer is 5."],
         ["She sold 24 in May.", "48 + 24 = 72.", "The answer is \\boxed{72}."]]


def hazard_model(seed: int = 0):
    from transformers import LlamaForTokenClassification

    torch.manual_seed(seed)
    config = tiny.llama_config(num_labels=2)
    model = LlamaForTokenClassification(config).eval()
    with torch.no_grad():   # margins of a few units, as a trained head has
        model.score.weight.mul_(40.0)
        model.score.bias.copy_(torch.tensor([0.0, 7.0]))
    return model


def reference(model, bound, problem, steps) -> list[float]:
    """Per solution, unbatched: the product over tokens 0..read of softmax(logits)[1]."""
    enc = bound.encode(problem, steps)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([enc.input_ids])).logits[0].double()
    keep = torch.softmax(logits, -1)[:, 1].tolist()
    return [math.prod(keep[:p + 1]) for p in enc.read_positions]


def test_scores_equal_the_product_of_token_probabilities_batched_and_per_prefix():
    fmt = training_format("prmkit", "hazard")
    assert fmt.hazard and fmt.reading == "classes"
    model, tok = hazard_model(), tiny.tokenizer()
    prm = wrap_model(model, tok, fmt, HFConfig(dtype="float32", token_budget=4096))
    want = [reference(model, prm.bound, p, s) for p, s in zip(PROBLEMS, STEPS)]
    flat = [x for w in want for x in w]
    assert max(flat) > 0.2 and max(flat) - min(flat) > 0.1   # neither all 0 nor all 1
    for got in (prm.score(PROBLEMS, STEPS), prm.score_per_prefix(PROBLEMS, STEPS)):
        for g, w in zip(got, want):
            assert g == pytest.approx(w, abs=1e-5)
    # scores never rise along a solution: a survival curve
    for g in prm.score(PROBLEMS, STEPS):
        assert all(b <= a + 1e-7 for a, b in zip(g, g[1:]))


def test_padded_batches_and_masks_add_nothing_from_padding():
    fmt = training_format("prmkit", "hazard")
    model, tok = hazard_model(1), tiny.tokenizer()
    reader = Reader(model, fmt, fmt.bind(tok))
    bound = fmt.bind(tok)
    encs = [bound.encode(p, s) for p, s in zip(PROBLEMS, STEPS)]
    width = max(len(e.input_ids) for e in encs)
    ids = torch.full((2, width), tok.pad_token_id)
    mask = torch.zeros((2, width), dtype=torch.long)
    for b, e in enumerate(encs):
        ids[b, :len(e.input_ids)] = torch.tensor(e.input_ids)
        mask[b, :len(e.input_ids)] = 1
    rows = torch.tensor([b for b, e in enumerate(encs) for _ in e.read_positions])
    cols = torch.tensor([p for e in encs for p in e.read_positions])
    with torch.no_grad():
        probs = reader.probabilities(reader.logits(ids, mask, rows, cols)).tolist()
    want = [x for p, s in zip(PROBLEMS, STEPS) for x in reference(model, bound, p, s)]
    assert probs == pytest.approx(want, abs=1e-5)


def test_search_reuses_caches_under_a_hazard_prm_and_agrees_with_scoring():
    from prmkit.models.sharing.incremental import IncrementalPRM, prefix_scorer, reuse_blocker

    fmt = training_format("prmkit", "hazard")
    model = hazard_model(2)
    prm = wrap_model(model, tiny.tokenizer(), fmt, HFConfig(dtype="float32"))
    assert "hazard" in reuse_blocker(prm) and reuse_blocker(prm, carries_hazard=True) is None
    scorer = prefix_scorer(prm)
    assert isinstance(scorer, IncrementalPRM)
    full = scorer.score_full(PROBLEMS, STEPS)
    for prefix, want in zip(full, prm.score(PROBLEMS, STEPS)):
        assert prefix.scores == pytest.approx(want, abs=1e-5)


def test_the_objective_is_the_step_cross_entropy_of_the_survival_scores():
    fmt = training_format("prmkit", "hazard")
    model, tok = hazard_model(3), tiny.tokenizer()
    bound = fmt.bind(tok)
    recs = records(4)
    examples, _ = step_examples(recs, bound, 256, False, False)
    objective = StepObjective(Reader(model, fmt, bound), tok.pad_token_id)
    with torch.no_grad():
        loss = float(objective(examples, torch.device("cpu"), None))
    terms = []
    for r in recs:
        for y, s in zip(r.labels, reference(model, bound, r.problem, r.steps)):
            terms.append(-(y * math.log(s) + (1 - y) * math.log(1 - s)))
    assert loss == pytest.approx(sum(terms) / len(terms), rel=1e-4)


def test_the_head_starts_near_one_half_at_the_mean_read_position():
    fmt = training_format("prmkit", "hazard")
    model, tok = hazard_model(4), tiny.tokenizer()
    with torch.no_grad():
        model.score.weight.zero_()
    bound = fmt.bind(tok)
    examples, _ = step_examples(records(6), bound, 256, False, False)
    init_hazard_head(model, examples)
    reads = [p + 1 for e in examples for p in e.read_positions]
    mean = sum(reads) / len(reads)
    keep = torch.sigmoid(model.score.bias[1] - model.score.bias[0]).item()
    assert keep ** mean == pytest.approx(0.5, abs=1e-4)


def test_a_hazard_format_needs_classes_and_vllm_refuses_it():
    with pytest.raises(PrmkitError, match="hazard needs reading classes"):
        StepFormat(name="x", reading="value", hazard=True)
    fmt = dataclasses.replace(get_format("prmkit"), hazard=True)
    assert StepFormat.from_dict(fmt.to_dict()) == fmt     # saved and loaded with the model
    assert not StepFormat.from_dict({k: v for k, v in fmt.to_dict().items()
                                     if k != "hazard"}).hazard   # older folders: no hazard
    from prmkit.models.backends.vllm import engine_args

    with pytest.raises(PrmkitError, match="hazard head"):
        engine_args("m", fmt.bind(tiny.tokenizer()))


def test_train_prm_with_the_hazard_head_learns_the_toy_task(tiny_base, tmp_path):
    from prmkit.models.backends.hf import load_hf_prm
    from prmkit.records import write_records
    from prmkit.train.loop import LoopConfig
    from prmkit.train.prm import PRMTrainConfig, train_prm

    train, dev = tmp_path / "train.jsonl", tmp_path / "dev.jsonl"
    write_records(str(train), records(12))
    write_records(str(dev), records(6))
    loop = LoopConfig(lr=3e-3, batch_tokens=512, last_k=1, warmup=0.0, max_steps=30,
                      eval_every=10)
    history = train_prm(PRMTrainConfig(base=tiny_base, data=str(train), eval_data=str(dev),
                                       output=str(tmp_path / "run"), max_length=256,
                                       head="hazard", loop=loop))
    assert history[-1]["train_loss"] < history[0]["train_loss"]
    prm = load_hf_prm(str(tmp_path / "run" / "last"), config=HFConfig(dtype="float32"))
    assert prm.format.hazard                   # the folder remembers how it is read
    scores = prm.score([r.problem for r in records(3)], [r.steps for r in records(3)])
    assert all(all(b <= a + 1e-7 for a, b in zip(s, s[1:])) for s in scores)
