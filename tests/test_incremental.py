"""Incremental PRM scoring (KV reuse) against re-encoding, on tiny models in float32.

The reference is the rescoring scorer over the same HFPRM: every grown solution read whole in
one forward pass. Both must give the same scores to 1e-4, and the token counts must be what
the encodings say: reuse feeds each piece once, rescoring feeds every path whole.
"""

from __future__ import annotations

import gc
import math

import pytest
import tiny

from prmkit.models.backends.hf import HFConfig, HFPRM
from prmkit.models.sharing.incremental import (IncrementalPRM, Prefix, RescoringScorer, head_ids,
                                       prefix_scorer, release, reuse_blocker)
from prmkit.stepformat import PRESETS

F32 = HFConfig(dtype="float32")
PROBLEMS = ["What is 2 + 3?", "Natalia sold 48 clips in April and half as many in May. How many?"]
# a small tree per problem: (parent index in the list or -1 for the root, step)
TREE = [(-1, "2 + 3 = 5."), (-1, "2 + 3 = 6."), (0, "So 5."), (0, "The answer is 5."),
        (1, "The answer is 6."), (2, "The answer is \\boxed{5}."), (5, "Done, 1/2 = 0.5.")]



def sharp(kind: str):
    """A tiny model with larger random weights: with the default initialisation its scores
    hardly differ between positions, so a score read at a wrong position or with a wrong cache
    could pass for right; here they spread over (0, 1)."""
    import torch
    from transformers import LlamaForCausalLM, LlamaForTokenClassification

    torch.manual_seed(0)
    if kind == "lm":
        return LlamaForCausalLM(tiny.llama_config(initializer_range=0.2)).eval()
    return LlamaForTokenClassification(tiny.llama_config(num_labels=2, initializer_range=0.2)).eval()


CASES = [("math-shepherd", "lm"), ("rlhflow", "lm"), ("qwen-prm", "classes"),
         ("prmkit", "classes"), ("trl", "classes")]


def grow(scorer, problems=PROBLEMS, tree=TREE) -> list[list[Prefix]]:
    """Every node of ``tree`` for every problem, grown level by level, items of all problems
    (and of several parents) in one ``extend`` call per level."""
    roots = scorer.roots(problems)
    nodes: list[list[Prefix | None]] = [[None] * len(tree) for _ in problems]
    remaining = list(range(len(tree)))
    while remaining:
        ready = [j for j in remaining if tree[j][0] < 0 or nodes[0][tree[j][0]] is not None]
        items, where = [], []
        for i in range(len(problems)):
            for j in ready:
                parent = roots[i] if tree[j][0] < 0 else nodes[i][tree[j][0]]
                items.append((parent, tree[j][1]))
                where.append((i, j))
        for (i, j), prefix in zip(where, scorer.extend(items)):
            nodes[i][j] = prefix
        remaining = [j for j in remaining if j not in ready]
    return nodes  # type: ignore[return-value]


def path(tree, j) -> list[str]:
    steps = []
    while j >= 0:
        steps.append(tree[j][1])
        j = tree[j][0]
    return steps[::-1]


@pytest.mark.parametrize("fmt,make", CASES, ids=[c[0] for c in CASES])
def test_incremental_equals_rescoring(fmt, make):
    prm = HFPRM(sharp(make), tiny.tokenizer(), PRESETS[fmt], F32)
    fast, ref = IncrementalPRM(prm), RescoringScorer(prm)
    got, want = grow(fast), grow(ref)
    spread: list[float] = []
    for i, problem in enumerate(PROBLEMS):
        for j in range(len(TREE)):
            a, b = got[i][j], want[i][j]
            assert a.steps == b.steps == tuple(path(TREE, j))
            assert a.scores == pytest.approx(b.scores, abs=1e-4)
            assert a.scores == pytest.approx(b.scores, rel=1e-3)
            spread.extend(a.scores)
            # and both equal one-pass scoring of the whole path
            assert list(a.scores) == pytest.approx(prm.score([problem], [list(a.steps)])[0], abs=1e-4)
    odds = [math.log(p / (1 - p)) for p in spread]
    assert max(odds) - min(odds) > 2.0          # the scores differ enough to tell
    assert fast.fallbacks == 0
    bound = prm.bound
    # rescoring reads every path whole
    assert ref.tokens == sum(len(bound.encode(p, path(TREE, j)).input_ids)
                             for p in PROBLEMS for j in range(len(TREE)))
    # reuse reads the problem once, then each node's new ids once
    expected = 0
    for p in PROBLEMS:
        expected += len(head_ids(bound, p))
        for j in range(len(TREE)):
            before = (len(bound.encode(p, path(TREE, TREE[j][0])).input_ids) if TREE[j][0] >= 0
                      else len(head_ids(bound, p)))
            expected += len(bound.encode(p, path(TREE, j)).input_ids) - before
    assert fast.tokens == expected < ref.tokens
    heads = sum(len(head_ids(bound, p)) for p in PROBLEMS)   # the roots' costs
    assert heads + sum(n.cost for row in got for n in row) == expected


@pytest.mark.parametrize("head", ["hazard", "surprisal"])
@pytest.mark.parametrize("closing", [False, True])
def test_hazard_heads_carry_their_sum_through_the_tree(head, closing):
    """A hazard head's score sums over every token: each prefix keeps its segment's log S (and
    a surprisal head its final hidden states), a child continues from the token before its
    new ids, also where it reuses only part of its parent's ids (``closing``)."""
    from test_hazard import hazard_model
    from test_surprisal import tied_pair

    from prmkit.models.load import wrap_model
    from prmkit.train.common import training_format

    model = tied_pair(3)[0] if head == "surprisal" else hazard_model(3)
    prm = wrap_model(model, tiny.tokenizer(), training_format("prmkit", head), F32)
    if closing:
        prm.bound = tiny.ClosingBound(prm.bound)
    fast, ref = IncrementalPRM(prm), RescoringScorer(prm)
    got, want = grow(fast), grow(ref)
    flat = []
    for i in range(len(PROBLEMS)):
        for j in range(len(TREE)):
            assert got[i][j].scores == pytest.approx(want[i][j].scores, rel=1e-4, abs=1e-6)
            flat.extend(got[i][j].scores)
    logs = [math.log(p) for p in flat]
    assert max(logs) - min(logs) > 0.4          # the scores differ enough to tell
    assert (fast.partial > 0) == closing and fast.tokens < ref.tokens


def test_whole_solutions_and_the_factory():
    prm = HFPRM(tiny.token_classifier(2), tiny.tokenizer(), PRESETS["prmkit"], F32)
    scorer = prefix_scorer(prm)
    assert isinstance(scorer, IncrementalPRM) and prefix_scorer(scorer) is scorer
    assert isinstance(prefix_scorer(prm, kv_reuse=False), RescoringScorer)
    steps = [path(TREE, 5), path(TREE, 4)]
    out = scorer.score_full(PROBLEMS, steps)
    for o, want in zip(out, prm.score(PROBLEMS, steps)):
        assert list(o.scores) == pytest.approx(want, abs=1e-6)
    assert scorer.tokens == sum(o.cost for o in out) == sum(
        len(prm.bound.encode(p, s).input_ids) for p, s in zip(PROBLEMS, steps))


def test_falls_back_when_ids_are_not_a_prefix():
    prm = HFPRM(tiny.token_classifier(2), tiny.tokenizer(), PRESETS["prmkit"], F32)
    prm.bound = tiny.ClosingBound(prm.bound)
    fast, ref = IncrementalPRM(prm), RescoringScorer(prm)
    got, want = grow(fast), grow(ref)
    for i in range(len(PROBLEMS)):
        for j in range(len(TREE)):
            assert got[i][j].scores == pytest.approx(want[i][j].scores, abs=1e-4)
    # every node below the first level is a fallback: it reuses the cache of the ids it shares
    # with its parent (all but the closing token) and reads the rest, with the right scores
    deeper = sum(1 for parent, _ in TREE if parent >= 0) * len(PROBLEMS)
    assert fast.fallbacks == fast.partial == deeper
    assert fast.tokens < ref.tokens


def test_truncated_paths_get_null_scores():
    prm = HFPRM(tiny.causal_lm(), tiny.tokenizer(), PRESETS["math-shepherd"],
                HFConfig(dtype="float32", max_length=28))
    got, want = grow(IncrementalPRM(prm)), grow(RescoringScorer(prm))
    flat_got = [s for row in got for n in row for s in n.scores]
    assert None in flat_got and any(s is not None for s in flat_got)
    for i in range(len(PROBLEMS)):
        for j in range(len(TREE)):
            assert [s is None for s in got[i][j].scores] == [s is None for s in want[i][j].scores]
            assert got[i][j].scores == pytest.approx(want[i][j].scores, abs=1e-4)


def test_pruned_nodes_free_their_cache():
    import weakref

    prm = HFPRM(tiny.causal_lm(), tiny.tokenizer(), PRESETS["math-shepherd"], F32)
    scorer = IncrementalPRM(prm)
    [root] = scorer.roots(PROBLEMS[:1])
    a, b = scorer.extend([(root, "2 + 3 = 5."), (root, "2 + 3 = 6.")])
    [a2] = scorer.extend([(a, "So 5.")])
    seg_b, seg_a = weakref.ref(b.kv[0][0]), weakref.ref(a.kv[0][0])
    del b                              # a pruned beam: its segment goes at once
    gc.collect()
    assert seg_b() is None and seg_a() is not None
    del a                              # a's child still needs a's segment
    gc.collect()
    assert seg_a() is not None
    del a2
    gc.collect()
    assert seg_a() is None


def test_models_that_cannot_reuse_a_cache():
    from transformers import BertConfig, BertForTokenClassification

    tok = tiny.tokenizer()
    bert = BertForTokenClassification(BertConfig(vocab_size=len(tok), hidden_size=16,
                                                 num_hidden_layers=1, num_attention_heads=2,
                                                 intermediate_size=32, num_labels=2)).eval()
    prm = HFPRM(bert, tok, PRESETS["prmkit"], F32)
    assert "both directions" in reuse_blocker(prm)
    assert isinstance(prefix_scorer(prm), RescoringScorer)


def test_beam_search_gives_the_same_records_with_and_without_reuse():
    """The whole search on a tiny PRM: reuse changes the PRM tokens read, nothing else."""
    from test_search import CHAT, P

    from prmkit.generate.fake import FakeGenerator
    from prmkit.search import BeamConfig, beam_search

    def script(prompt, k):   # any partial solution: depth d, sample k -> "step d.k"
        depth = prompt[len(CHAT.prompt(P.problem)):].count("\n")
        return f"The answer is {k}." if depth == 3 else f"step {depth}.{k} is {k * depth}\n"

    prm = HFPRM(sharp("classes"), tiny.tokenizer(), PRESETS["prmkit"], F32)
    runs = {}
    for reuse in (True, False):
        config = BeamConfig(n=4, m=2, kv_reuse=reuse)
        runs[reuse] = beam_search([P], FakeGenerator(script), CHAT, prm, config)
    a, b = runs[True], runs[False]
    assert [r.steps for r in a.records] == [r.steps for r in b.records]
    for x, y in zip(a.records, b.records):
        assert x.step_scores == pytest.approx(y.step_scores, abs=1e-4)
    assert a.account.total.tokens_generated == b.account.total.tokens_generated
    assert a.account.total.prm_tokens < b.account.total.prm_tokens


def test_batches_follow_the_items_not_memory_addresses(monkeypatch):
    """Which children share a forward pass must not change from run to run: in bfloat16 the
    batch changes the last bits of a score, and a near tie in a beam then flips. Parents go in
    the order of their first child in the call, their children in call order."""
    import random

    prm = HFPRM(tiny.causal_lm(), tiny.tokenizer(), PRESETS["math-shepherd"], F32)
    scorer = IncrementalPRM(prm)
    problems = [f"What is {k} + {k}?" for k in range(8)]
    roots = scorer.roots(problems)
    parents = [p for p, in (scorer.extend([(r, "Let us add.")]) for r in roots)]
    items = [(parents[i], f"{i} + {i} = {2 * i + d}.") for i in range(8) for d in range(2)]
    random.Random(0).shuffle(items)   # so call order and allocation order differ
    seen: list[list[str]] = []
    read = scorer._read
    monkeypatch.setattr(scorer, "_read", lambda batch, out: (
        seen.append([m.child.steps[-1] for m in batch]), read(batch, out)))
    scorer.budget = 10 ** 9           # one batch: its order is the whole story
    scorer.extend(items)
    order = []
    for parent, _ in items:
        if parent not in order:
            order.append(parent)
    order.sort(key=lambda p: -len(p.ids))   # longest cache first (a stable sort)
    want = [step for parent in order for p, step in items if p is parent]
    assert len({len(p.ids) for p in parents}) < len(parents)  # ties that the order must break
    assert seen == [want]


def test_best_of_n_scores_a_problem_on_its_shared_prefix_as_one_pass_does():
    """Best-of-N reads each problem's prompt once (prefix sharing) when the PRM can reuse a
    cache: the same records and the same scores (1e-4) as with kv_reuse off, where every
    candidate is read whole, and fewer PRM tokens."""
    from test_search import CHAT, P

    from prmkit.generate.fake import FakeGenerator
    from prmkit.search import SearchConfig, best_of_n

    def script(prompt, k):
        return f"Step one: {k} + 1 = {k + 1}.\nThe answer is {k % 3}."

    prm = HFPRM(sharp("classes"), tiny.tokenizer(), PRESETS["prmkit"], F32)
    problems = [P, type(P)("q2", "What is 7 - 2?", "5")]
    runs = {reuse: best_of_n(problems, FakeGenerator(script), CHAT, prm,
                             SearchConfig(n=6, kv_reuse=reuse)) for reuse in (True, False)}
    a, b = runs[True], runs[False]
    assert [r.steps for r in a.records] == [r.steps for r in b.records]
    for x, y in zip(a.records, b.records):
        assert x.step_scores == pytest.approx(y.step_scores, abs=1e-4)
    plain = [prm.score([r.problem], [r.steps])[0] for r in b.records]
    for x, y in zip(a.records, plain):
        assert x.step_scores == pytest.approx(y, abs=1e-4)
    assert 0 < a.account.total.prm_tokens < b.account.total.prm_tokens


@pytest.mark.parametrize("head", ["class", "surprisal"])
def test_a_step_asked_twice_on_one_prefix_is_read_once(head):
    """Samples of a step are often word for word the same: one ``extend`` call that asks the
    same step of the same prefix twice reads it once, gives both the scores of a path read
    whole, and charges the repeat nothing; each copy grows on as its own prefix."""
    from test_surprisal import tied_pair

    from prmkit.models.load import wrap_model
    from prmkit.train.common import training_format

    if head == "surprisal":
        prm = wrap_model(tied_pair(3)[0], tiny.tokenizer(), training_format("prmkit", head), F32)
    else:
        prm = HFPRM(sharp("classes"), tiny.tokenizer(), PRESETS["prmkit"], F32)
    fast, once = IncrementalPRM(prm), IncrementalPRM(prm)
    problem, step = PROBLEMS[1], "She sold 48 / 2 = 24 clips in May."
    root, root_once = fast.roots([problem])[0], once.roots([problem])[0]
    a, b, other = fast.extend([(root, step), (root, step), (root, "So 72.")])
    once.extend([(root_once, step), (root_once, "So 72.")])
    assert fast.tokens == once.tokens                 # the repeat was not read
    assert a.cost > 0 and b.cost == 0 and a is not b
    want = prm.score([problem], [[step]])[0]
    assert list(a.scores) == list(b.scores) == pytest.approx(want, abs=1e-5)
    assert other.scores != a.scores
    release(a)                                        # one copy finishes: the other grows on
    grown = fast.extend([(b, "The answer is 72.")])[0]
    assert list(grown.scores) == pytest.approx(
        prm.score([problem], [[step, "The answer is 72."]])[0], abs=1e-5)
    assert fast.fallbacks == 0
