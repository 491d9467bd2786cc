"""Prefix sharing (prmkit/models/sharing/prefix.py) against plain one-pass scoring, in float32.

Every step format preset, on the tiny tokenizer with a sharp tiny model (scores that differ
by position, so a read at a wrong place or on a wrong cache shows) and on the real tokenizers
of tests/test_recipes.py: the shared-prefix scores equal ``HFPRM.score`` within 1e-4, the
tokens fed are what the encodings say, and candidates whose ids do not begin with their
prefix's are counted as fallbacks and still scored right.
"""

from __future__ import annotations

import math

import pytest
import tiny
from test_incremental import sharp

from prmkit.models.backends.hf import HFConfig, HFPRM
from prmkit.models.sharing.incremental import head_ids
from prmkit.models.sharing.prefix import ShareStats, SharedPrefixScorer, group_prefix, score_shared
from prmkit.stepformat import PRESETS

F32 = HFConfig(dtype="float32")
P1 = "What is 2 + 3?"
P2 = "Natalia sold 48 clips in April and half as many in May. How many?"
# (problem, steps, group): a group with a common first step, one with none, identical
# candidates, a lone candidate without a group, a group of one, and an empty solution
BATCH = [
    (P1, ["2 + 3 = 5.", "So 5.", "The answer is 5."], "a"),
    (P1, ["2 + 3 = 5.", "The answer is \\boxed{5}."], "a"),
    (P1, ["2 + 3 = 5.", "So 6.", "The answer is 6.", "Done, 1/2 = 0.5."], "a"),
    (P2, ["48 / 2 = 24.", "48 + 24 = 72."], "b"),
    (P2, ["Half of 48 is 24.", "The answer is 72."], "b"),
    (P2, ["48 / 2 = 24.", "48 + 24 = 72."], "b"),
    (P2, ["48 + 48 = 96."], None),
    (P1, ["2 + 3 = 6."], "c"),
    (P1, ["The answer is 5."], "d"),
    (P1, ["The answer is 6."], "d"),
    # two branches, each with a run of two steps that two of its solutions share
    (P2, ["48 / 2 = 24.", "48 + 24 = 72.", "The answer is 72."], "e"),
    (P2, ["48 / 2 = 24.", "48 + 24 = 72.", "So 72."], "e"),
    (P2, ["Half of 48 is 24.", "24 + 48 = 72.", "The answer is 72."], "e"),
    (P2, ["Half of 48 is 24.", "24 + 48 = 72."], "e"),
    (P2, ["Half of 48 is 24.", "24 + 48 = 72.", "\\boxed{72}", "Done."], "e"),
    (P2, ["Half of 48 is 24."], "e"),
]
CASES = [("math-shepherd", "lm"), ("rlhflow", "lm"), ("qwen-prm", "classes"),
         ("prmkit", "classes"), ("trl", "classes")]


def split(batch=BATCH):
    return [b[0] for b in batch], [b[1] for b in batch], [b[2] for b in batch]


def lcp(a, b) -> int:
    return next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def expected_tokens(prm, batch=BATCH) -> tuple[int, int, int]:
    """(plain, computed, fallbacks) worked out from the encodings alone. A group's tree has a
    node for its common prefix and one for every run of steps that two of its solutions begin
    with (their longest common run); a node is read after the ids it shares with the longest
    node above it, a solution after those it shares with the longest node it extends."""
    bound = prm.bound
    encs = [bound.encode(p, s).input_ids for p, s, _ in batch]
    plain = sum(len(e) for e in encs)
    groups: dict = {}
    for i, (p, _, g) in enumerate(batch):
        groups.setdefault(None if g is None else (g, p), []).append(i)
    computed = sum(len(encs[i]) for i in groups.pop(None, []))
    fallbacks = 0
    for members in groups.values():
        if len(members) == 1:
            computed += len(encs[members[0]])
            continue
        problem, steps = batch[members[0]][0], [batch[i][1] for i in members]
        root = group_prefix(bound, problem, steps, [encs[i] for i in members])
        common = min(lcp(steps[0], s) for s in steps)
        runs = {tuple(a[:lcp(a, b)]) for a in steps for b in steps if a is not b}
        nodes = {tuple(steps[0][:common]): root}   # by their steps, shortest first
        for run in sorted((r for r in runs if len(r) > common), key=len):
            nodes[run] = bound.encode(problem, list(run)).input_ids
            above = nodes[max((k for k in nodes if run[:len(k)] == k and k != run), key=len)]
            n = lcp(above, nodes[run])
            fallbacks += n < len(above)
            computed += len(nodes[run]) - n
        computed += len(root)
        for i in members:
            sol = tuple(batch[i][1])
            k = max((k for k in nodes if sol[:len(k)] == k), key=len)
            n = lcp(nodes[k], encs[i])
            fallbacks += n < len(nodes[k])
            computed += len(encs[i]) - n
    return plain, computed, fallbacks


def expected_trie_tokens(prm, batch=BATCH) -> tuple[int, int, int]:
    """(plain, computed, fallbacks) of the one-pass tree (rows not split): each group of two or
    more reads every distinct prefix of its solutions' ids once, counted here by brute force
    as the set of all of them; the others are read whole. Nothing falls back: the tree is cut
    at the token, on each solution's own ids."""
    encs = [prm.bound.encode(p, s).input_ids for p, s, _ in batch]
    groups: dict = {}
    for i, (p, _, g) in enumerate(batch):
        groups.setdefault(None if g is None else (g, p), []).append(i)
    computed = sum(len(encs[i]) for i in groups.pop(None, []))
    for members in groups.values():
        computed += len({tuple(encs[i][:k]) for i in members for k in range(1, len(encs[i]) + 1)})
    return sum(len(e) for e in encs), computed, 0


@pytest.mark.parametrize("packed", [True, False], ids=["tree-pass", "by-depth"])
@pytest.mark.parametrize("fmt,make", CASES, ids=[c[0] for c in CASES])
def test_shared_equals_one_pass_on_every_preset(fmt, make, packed):
    prm = HFPRM(sharp(make), tiny.tokenizer(), PRESETS[fmt], F32)
    problems, steps, groups = split()
    stats = ShareStats()
    scorer = SharedPrefixScorer(prm, stats)
    assert scorer.packed       # tiny Llama, sdpa attention: trees in one pass unless told
    scorer.packed = packed
    got = scorer.score(problems, steps, groups)
    want = prm.score(problems, steps)
    assert [len(r) for r in got] == [len(s) for s in steps]
    for a, b in zip(got, want):
        assert a == pytest.approx(b, abs=1e-4)
    odds = [math.log(p / (1 - p)) for row in got for p in row]
    assert max(odds) - min(odds) > 2.0            # scores differ enough to tell a wrong read
    plain, computed, fallbacks = (expected_trie_tokens if packed else expected_tokens)(prm)
    assert (stats.plain, stats.computed, stats.fallbacks) == (plain, computed, fallbacks)
    assert stats.computed < stats.plain
    assert stats.groups == 4 and stats.alone == 2   # a, b, d, e shared; the lone one, c whole
    assert stats.candidates == 14
    planner = SharedPrefixScorer(prm)
    planner.packed = packed
    plan = planner.plan(problems, steps, groups)   # no forward pass
    assert (plan.plain, plan.computed, plan.fallbacks, plan.groups, plan.alone, plan.candidates) == (
        stats.plain, stats.computed, stats.fallbacks, stats.groups, stats.alone, stats.candidates)


def test_the_prefix_holds_the_common_steps_and_their_scores_are_shared():
    prm = HFPRM(sharp("classes"), tiny.tokenizer(), PRESETS["prmkit"], F32)
    group = [s for p, s, g in BATCH if g == "a"]
    ids = [prm.bound.encode(P1, s).input_ids for s in group]
    assert group_prefix(prm.bound, P1, group, ids) == prm.bound.encode(P1, ["2 + 3 = 5."]).input_ids
    assert group_prefix(prm.bound, P1, [["x."], ["y."]], []) == head_ids(prm.bound, P1)
    turns = PRESETS["rlhflow"].bind(tiny.tokenizer())   # nothing before the first step's turn
    ids = [turns.encode(P1, s).input_ids for s in (["x = 1."], ["y = 2."])]
    prefix = group_prefix(turns, P1, [["x = 1."], ["y = 2."]], ids)
    assert head_ids(turns, P1) == [] and len(prefix) > len(tiny.tokenizer()(P1)["input_ids"])
    assert ids[0][:len(prefix)] == ids[1][:len(prefix)] == prefix
    for packed, passes in ((True, 1), (False, 2)):
        stats = ShareStats()
        scorer = SharedPrefixScorer(prm, stats)
        scorer.packed = packed
        got = scorer.score([P1] * 3, group, ["a"] * 3)
        assert len({row[0] for row in got}) == 1      # step 0 read once, in the prefix's part
        # one tree-attention pass, or the prefix, then the three suffixes on its cache
        assert stats.forwards == passes


@pytest.mark.parametrize("packed", [True, False], ids=["tree-pass", "by-depth"])
def test_falls_back_where_the_prefix_is_not_a_prefix(packed):
    prm = HFPRM(sharp("classes"), tiny.tokenizer(), PRESETS["prmkit"], F32)
    prm.bound = tiny.ClosingBound(prm.bound)
    problems, steps, groups = split()
    stats = ShareStats()
    scorer = SharedPrefixScorer(prm, stats)
    scorer.packed = packed
    got = scorer.score(problems, steps, groups)
    for a, b in zip(got, prm.score(problems, steps)):
        assert a == pytest.approx(b, abs=1e-4)
    if packed:   # the token tree shares the ids the solutions share, whatever a step's prefix
        assert (stats.plain, stats.computed, stats.fallbacks) == expected_trie_tokens(prm)
        return
    # a prefix with steps ends with the closing token, which every solution (and every node)
    # below it with more steps lacks; they reuse the ids before it. Group a: its 3 solutions;
    # group e: 2 solutions of the first branch, the second branch's longer run and 2 of its
    # solutions (those that are exactly a node's steps fall back on nothing)
    plain, computed, fallbacks = expected_tokens(prm)
    assert fallbacks == 8 and stats.fallbacks == stats.partial == fallbacks
    assert stats.computed == computed < plain


def test_truncated_candidates_get_null_scores_as_in_one_pass():
    prm = HFPRM(tiny.causal_lm(), tiny.tokenizer(), PRESETS["math-shepherd"],
                HFConfig(dtype="float32", max_length=28))
    problems, steps, groups = split()
    got, want = score_shared(prm, problems, steps, groups), prm.score(problems, steps)
    assert any(None in row for row in want) and any(s is not None for row in want for s in row)
    for a, b in zip(got, want):
        assert [s is None for s in a] == [s is None for s in b]
        assert a == pytest.approx(b, abs=1e-4)


def test_a_prm_that_cannot_share_is_scored_plainly():
    class Fixed:
        def score(self, problems, steps):
            return [[0.5] * len(s) for s in steps]

    problems, steps, groups = split()
    stats = ShareStats()
    assert score_shared(Fixed(), problems, steps, groups, stats) == Fixed().score(problems, steps)
    assert stats.alone == len(BATCH) and stats.groups == 0


@pytest.mark.parametrize("packed", [True, False], ids=["tree-pass", "by-depth"])
def test_small_budgets_split_the_passes_and_keep_the_scores(packed):
    prm = HFPRM(sharp("lm"), tiny.tokenizer(), PRESETS["math-shepherd"],
                HFConfig(dtype="float32", token_budget=40))
    problems, steps, groups = split()
    stats = ShareStats()
    scorer = SharedPrefixScorer(prm, stats)
    scorer.budget, scorer.packed, scorer.row_tokens = 60, packed, 1
    got = scorer.score(problems, steps, groups)
    for a, b in zip(got, prm.score(problems, steps)):
        assert a == pytest.approx(b, abs=1e-4)
    assert stats.forwards > 4


def test_a_tree_longer_than_a_row_is_split_into_rows_with_their_ancestors():
    prm = HFPRM(sharp("classes"), tiny.tokenizer(), PRESETS["prmkit"], F32)
    problems, steps, groups = split()
    want = prm.score(problems, steps)
    whole, rows = ShareStats(), ShareStats()
    SharedPrefixScorer(prm, whole).score(problems, steps, groups)
    scorer = SharedPrefixScorer(prm, rows)
    scorer.row_tokens = 1   # a row at most its tree's longest solution: nodes repeated per row
    got = scorer.score(problems, steps, groups)
    for a, b in zip(got, want):
        assert a == pytest.approx(b, abs=1e-4)
    assert whole.computed < rows.computed < rows.plain
    assert rows.candidates == whole.candidates == 14
    assert scorer.plan(problems, steps, groups).computed == rows.computed   # rows counted too


@pytest.mark.parametrize("preset,name", [
    ("math-shepherd", "mistral"), ("trl", "smollm2"), ("rlhflow", "smollm2"), ("qwen-prm", "qwen"),
    ("prmkit", "smollm2"), ("math-shepherd", "gemma3")], ids=lambda x: x)
def test_shared_equals_one_pass_on_real_tokenizers(shared_data, preset, name):
    """Eight candidates per problem that share leading steps, on each preset's real tokenizer."""
    from test_recipes import gsm8k, tiny_model, tokenizer_for

    tok = tokenizer_for(preset, name)
    kind = "lm" if PRESETS[preset].reading == "label-tokens" else "classes"
    prm = HFPRM(tiny_model(len(tok), kind), tok, PRESETS[preset],
                HFConfig(dtype="float32", max_length=8192))
    problems, steps, groups = [], [], []
    for g, (problem, sol) in enumerate(gsm8k(shared_data)[:3]):
        for k in range(8):   # g steps common to the group, then its own: more of the
            other = gsm8k(shared_data)[(g + k + 1) % 9][1]   # solution, another's steps
            problems.append(problem)
            steps.append(sol[:g] + sol[g:g + k % 3] + other[:1 + k % 2])
            groups.append(str(g))
    stats = ShareStats()
    got = score_shared(prm, problems, steps, groups, stats)
    want = prm.score(problems, steps)
    for a, b in zip(got, want):
        assert a == pytest.approx(b, abs=1e-4)
    assert stats.computed < stats.plain and stats.groups == 3
    print(f"{preset} on {name}: computed {stats.computed} of {stats.plain} tokens, "
          f"{stats.fallbacks} fallbacks")


# ---------------------------------------------------------------------------------------------
# the command line: score and eval bestofn share by default, --no-share-prefix reads whole


def candidates_file(path, n_problems=3, n=4, lone=True):
    import json

    rows = []
    for g in range(n_problems):
        for k in range(n):
            steps = [f"{g} + {g} = {2 * g}."] + [f"Then {k} + {j} = {k + j}." for j in range(1 + k % 3)]
            rows.append({"id": f"p{g}-{k}", "problem": f"{PROBLEMS_CLI[g % 2]} ({g})",
                         "steps": steps, "group": f"p{g}", "is_correct": k % 2 == 0,
                         "answer": str(k), "reference": "0"})
    if lone:
        rows.append({"id": "lone", "problem": PROBLEMS_CLI[0], "steps": ["a.", "b."]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


PROBLEMS_CLI = [P1, P2]


def test_score_shares_prefixes_by_default_and_prints_the_tokens(tmp_path, capsys):
    from test_eval_model import tiny_model

    from prmkit import cli
    from prmkit.records import read_records

    model = tiny_model(tmp_path / "m")
    src = candidates_file(tmp_path / "c.jsonl")
    outs = {}
    for flag in ((), ("--no-share-prefix",)):
        out = tmp_path / f"s{len(flag)}.jsonl"
        assert cli.main(["score", "--model", model, "--format", "math-shepherd", "--dtype",
                         "float32", "--input", str(src), "--output", str(out), *flag]) == 0
        outs[flag] = (read_records(str(out)), capsys.readouterr().err)
    (shared, err), (plain, err_plain) = outs[()], outs[("--no-share-prefix",)]
    for a, b in zip(shared, plain):
        assert a.id == b.id and a.step_scores == pytest.approx(b.step_scores, abs=1e-4)
    line = next(x for x in err.splitlines() if x.startswith("prefix sharing:"))
    prm = HFPRM(tiny.causal_lm(), tiny.tokenizer(), PRESETS["math-shepherd"], F32)
    batch = [(r.problem, r.steps, r.group) for r in plain]
    want_plain, want_computed, _ = expected_trie_tokens(prm, batch)   # tiny Llama: one pass
    assert f"computed {want_computed} of {want_plain} tokens" in line
    assert f"saved {want_plain - want_computed};" in line and want_computed < want_plain
    assert "prefix sharing" not in err_plain


def test_eval_bestofn_scores_with_a_model_on_shared_prefixes(tmp_path, capsys):
    import json

    from test_eval_model import tiny_model

    from prmkit import cli

    model = tiny_model(tmp_path / "m")
    src = candidates_file(tmp_path / "c.jsonl", lone=False)
    res = {}
    for flag in ((), ("--no-share-prefix",)):
        out = tmp_path / f"b{len(flag)}.json"
        assert cli.main(["eval", "bestofn", "--input", str(src), "--model", model, "--format",
                         "math-shepherd", "--dtype", "float32", "--n", "1,2,4", "--output",
                         str(out), "--plot", "", *flag]) == 0
        res[flag] = json.loads(out.read_text())
        capsys.readouterr()
    shared, plain = res[()], res[("--no-share-prefix",)]
    assert "prm-min" in shared["methods"] and shared["methods"] == plain["methods"]
    sharing = shared["scored_by"]["prefix_sharing"]
    assert sharing["groups"] == 3 and 0 < sharing["computed"] < sharing["plain"]
    assert "prefix_sharing" not in plain["scored_by"]


# ---------------------------------------------------------------------------------------------
# a companion: a second head on the same body, read in the first one's pass


def companion_of(model, seed=1):
    """A class-head model on ``model``'s body: the same body weights, its own random head."""
    import copy

    import torch
    from transformers import LlamaForTokenClassification

    torch.manual_seed(seed)
    other = LlamaForTokenClassification(tiny.llama_config(num_labels=2, initializer_range=0.2)).eval()
    other.model = copy.deepcopy(model.model)
    return other


@pytest.mark.parametrize("head", ["classes", "surprisal"])
def test_a_companion_on_the_same_body_is_read_in_the_same_pass(head):
    """The demo's case (a surprisal PRM and a class-head ORM on one frozen base) and two class
    heads: each model's scores equal its own one-pass scoring, for the tokens of one pass."""
    from test_surprisal import tied_pair

    from prmkit.models.load import wrap_model
    from prmkit.lab.verifiers.sharedpair import score_shared_pair
    from prmkit.train.common import training_format

    if head == "surprisal":
        prm = wrap_model(tied_pair(5)[0], tiny.tokenizer(), training_format("prmkit", "surprisal"), F32)
    else:
        prm = HFPRM(sharp("classes"), tiny.tokenizer(), PRESETS["prmkit"], F32)
    orm = HFPRM(companion_of(prm.model), tiny.tokenizer(), PRESETS["prmkit"], F32)
    problems, steps, groups = split()
    stats = ShareStats()
    mine, theirs = score_shared_pair(prm, orm, problems, steps, groups, stats)
    for got, model in ((mine, prm), (theirs, orm)):
        for a, b in zip(got, model.score(problems, steps)):
            assert a == pytest.approx(b, rel=1e-4, abs=1e-6)
    flat = [x for row in theirs for x in row]
    assert max(flat) - min(flat) > 0.01       # 100 times the tolerance: a wrong read shows
    assert stats.computed == expected_trie_tokens(prm)[1]    # one pass: the tree's tokens once
    # another body: each is read in its own passes, still right
    import torch

    with torch.no_grad():
        orm.model.model.layers[0].mlp.up_proj.weight.add_(0.01)
    apart = ShareStats()
    _, theirs = score_shared_pair(prm, orm, problems, steps, groups, apart)
    for a, b in zip(theirs, orm.score(problems, steps)):
        assert a == pytest.approx(b, rel=1e-4, abs=1e-6)
    assert apart.computed == 2 * stats.computed


def test_extra_heads_are_each_read_in_the_same_pass():
    """The general hook under the companion: two extra heads on one body, each scored as its
    own model scores one pass at a time, for the tokens of the scored PRM's pass alone."""
    from prmkit.lab.verifiers.companion import companion_probs
    from prmkit.models.sharing.prefix import ExtraHead, SharedPrefixScorer

    prm = HFPRM(sharp("classes"), tiny.tokenizer(), PRESETS["prmkit"], F32)
    others = [HFPRM(companion_of(prm.model, seed), tiny.tokenizer(), PRESETS["prmkit"], F32)
              for seed in (1, 2)]
    heads = [ExtraHead(o, lambda hidden, o=o: companion_probs(o, hidden)) for o in others]
    problems, steps, groups = split()
    stats = ShareStats()
    scorer = SharedPrefixScorer(prm, stats, heads=heads)
    mine = scorer.score(problems, steps, groups)
    assert len(scorer.head_scores) == 2
    for got, model in [(mine, prm)] + list(zip(scorer.head_scores, others)):
        for a, b in zip(got, model.score(problems, steps)):
            assert a == pytest.approx(b, rel=1e-4, abs=1e-6)
    assert scorer.head_scores[0] != scorer.head_scores[1]      # two heads, not one read twice
    assert stats.computed == expected_trie_tokens(prm)[1]
