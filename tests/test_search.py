"""Search methods with a scripted generator and an oracle PRM: every expectation worked by hand.

The script (TREE) says which next steps a partial solution gets, sample by sample; the oracle
scores every prefix from a table (SCORES). The fake generator counts a token per word (plus
one for the end of text), the oracle one PRM token per word of the problem and of each step.
"""

from __future__ import annotations

import dataclasses

import importlib
import json
from types import SimpleNamespace

import pytest

from prmkit.errors import PrmkitError
from prmkit.generate.fake import FakeGenerator, count_tokens
from prmkit.generate.prompts import STYLES, Prompter
from prmkit.generate.run import Problem
from prmkit.models.sharing.incremental import RescoringScorer
from prmkit.search import (BeamConfig, MCTSConfig, SearchConfig, beam_search, best_of_n, dvts,
                           mcts, run_search)
from prmkit.search.mcts import TreeNode

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
CHAT = Prompter(STYLES["chat"], CHATML)
P = Problem("p", "What is 3 + 4?", "7")

A7, A8, A9 = "The answer is 7.", "The answer is 8.", "The answer is 9."
# partial solution -> what sample k writes next
TREE = {
    (): ["a", "b", "c", "d"],
    ("b",): ["b1", "b2"], ("c",): ["c1", A7],
    ("c", "c1"): [A7, A8], ("b", "b2"): [A9, A7],
}
SCORES = {
    ("a",): 0.5, ("b",): 0.9, ("c",): 0.7, ("d",): 0.1,
    ("b", "b1"): 0.2, ("b", "b2"): 0.6, ("c", "c1"): 0.8, ("c", A7): 0.95,
    ("c", "c1", A7): 0.9, ("c", "c1", A8): 0.3, ("b", "b2", A9): 0.4, ("b", "b2", A7): 0.85,
}


def scripted(tree=TREE, problem=P.problem):
    head = CHAT.prompt(problem)

    def script(prompt: str, k: int) -> str:
        written = prompt[len(head):]
        steps = tuple(written.split("\n")[:-1]) if written else ()
        step = tree[steps][k % len(tree[steps])]
        return step if "answer" in step else step + "\n"

    return FakeGenerator(script)


class Oracle:
    """A PRM whose scores come from a table of prefixes. It counts one token per word of the
    problem and of every step it reads (exposed like an HF PRM's step format, so the rescoring
    scorer can count them)."""

    def __init__(self, scores=SCORES):
        self.scores, self.read, self.max_length = scores, 0, None
        self.bound = self

    def score(self, problems, steps):
        out = []
        for problem, s in zip(problems, steps):
            self.read += self.count(problem, s)
            out.append([self.scores[tuple(s[:k + 1])] for k in range(len(s))])
        return out

    def encode(self, problem, steps, max_length=None):
        return SimpleNamespace(input_ids=[0] * self.count(problem, steps))

    @staticmethod
    def count(problem, steps):
        return count_tokens(problem) + sum(count_tokens(s) for s in steps)


def prompts(fake):
    """The partial solutions each generator call asked about, and its n."""
    head = CHAT.prompt(P.problem)
    return [([tuple(p[len(head):].split("\n")[:-1]) for p in call["prompts"]], call["n"])
            for call in fake.calls]


def paths(result):
    return [(tuple(r.steps), r.step_scores, r.meta["selected"]) for r in result.records]


# ---------------------------------------------------------------------------------------------
# beam search


def test_beam_keeps_exactly_the_expected_beams():
    fake, oracle = scripted(), Oracle()
    result = beam_search([P], fake, CHAT, oracle, BeamConfig(n=4, m=2))
    # depth 0: a .5, b .9, c .7, d .1 -> keep b, c (best first); each expanded by 2
    # depth 1: b1 .2, b2 .6, c1 .8, c->7 .95 (finished) -> keep c1, b2
    # depth 2: all four finish: 5 finished >= n = 4, stop
    assert prompts(fake) == [([()], 4), ([("b",), ("c",)], 2), ([("c", "c1"), ("b", "b2")], 2)]
    assert paths(result) == [
        (("c", A7), [0.7, 0.95], True),
        (("c", "c1", A7), [0.7, 0.8, 0.9], False),
        (("b", "b2", A7), [0.9, 0.6, 0.85], False),
        (("b", "b2", A9), [0.9, 0.6, 0.4], False),      # c1 -> 8 (.3) is the fifth: dropped
    ]
    rec = result.records[0]
    assert (rec.answer, rec.is_correct, rec.group, rec.id) == ("7", True, "p", "p-0")
    assert result.records[3].is_correct is False and all(r.meta["complete"] for r in result.records)


def test_beam_compute_adds_up():
    fake, oracle = scripted(), Oracle()
    result = beam_search([P], fake, CHAT, oracle, BeamConfig(n=4, m=2))
    # a step line "b\n" is 2 tokens; "The answer is 7." 4 words + the end of text
    assert result.account.total.tokens_generated == fake.tokens_generated == 4 * 2 + 3 * 2 + 5 + 4 * 5
    scored = [("a",), ("b",), ("c",), ("d",), ("b", "b1"), ("b", "b2"), ("c", "c1"), ("c", A7),
              ("c", "c1", A7), ("c", "c1", A8), ("b", "b2", A9), ("b", "b2", A7)]
    expected = sum(Oracle.count(P.problem, s) for s in scored)
    assert result.account.total.prm_tokens == oracle.read == expected
    compute = result.records[0].meta["compute"]
    assert (compute["tokens_generated"], compute["prm_tokens"]) == (39, expected)


def test_beam_lookahead_ranks_by_the_rollout():
    # with lookahead 1 a candidate is ranked by its greedy next step: a .05 (a1), b .2 (b1),
    # c .8 (c1), d .75 (d1), so c and d are kept, not b and c as without lookahead
    tree = {**TREE, ("a",): ["a1"], ("d",): ["d1", "d2"], ("d", "d1"): [A9], ("d", "d2"): [A8]}
    scores = {**SCORES, ("a", "a1"): 0.05, ("d", "d1"): 0.75, ("d", "d2"): 0.3,
              ("d", "d1", A9): 0.5, ("d", "d2", A8): 0.5}
    fake, oracle = scripted(tree), Oracle(scores)
    result = beam_search([P], fake, CHAT, oracle, BeamConfig(n=4, m=2, max_depth=2, lookahead=1))
    # the roll-outs are asked greedily, one sample for every unfinished candidate
    assert prompts(fake)[:3] == [([()], 4), ([("a",), ("b",), ("c",), ("d",)], 1),
                                 ([("c",), ("d",)], 2)]
    assert all(c["prompts"] for c in fake.calls)
    # roll-outs are spent compute: generated and read like any step
    assert result.account.total.tokens_generated == fake.tokens_generated
    assert result.account.total.prm_tokens == oracle.read


def test_problems_in_lockstep_are_charged_separately():
    q = Problem("q", "What is 1 + 1?", "2")
    tree_q = {(): ["x", "y", "z", "w"], ("x",): ["The answer is 2.", "x1"],
              ("y",): ["y1", "The answer is 3."]}
    scores_q = {("x",): 0.6, ("y",): 0.5, ("z",): 0.1, ("w",): 0.2, ("x", "The answer is 2."): 0.9,
                ("x", "x1"): 0.1, ("y", "y1"): 0.3, ("y", "The answer is 3."): 0.2}

    def both(prompt, k):
        for problem, tree in ((P.problem, TREE), (q.problem, tree_q)):
            if prompt.startswith(CHAT.prompt(problem)):
                return scripted(tree, problem).script(prompt, k)
        raise KeyError(prompt)

    oracle = Oracle({**SCORES, **scores_q})
    together = beam_search([P, q], FakeGenerator(both), CHAT, oracle, BeamConfig(n=4, m=2, max_depth=2))
    for problem in (P, q):
        alone_fake, alone_oracle = FakeGenerator(both), Oracle({**SCORES, **scores_q})
        alone = beam_search([problem], alone_fake, CHAT, alone_oracle, BeamConfig(n=4, m=2, max_depth=2))
        mine = together.account.per_problem[problem.id]
        assert mine.tokens_generated == alone_fake.tokens_generated
        assert mine.prm_tokens == alone_oracle.read
        assert paths(alone) == [(tuple(r.steps), r.step_scores, r.meta["selected"])
                                for r in together.records if r.group == problem.id]
    total = together.account.total
    assert total.tokens_generated == sum(c.tokens_generated for c in together.account.per_problem.values())
    assert total.prm_tokens == oracle.read


# ---------------------------------------------------------------------------------------------
# DVTS


def test_dvts_grows_independent_greedy_subtrees():
    fake, oracle = scripted(), Oracle()
    result = dvts([P], fake, CHAT, oracle, SearchConfig(n=4, m=2))
    # two subtrees; at the root they share one call of 4 samples: subtree 0 gets a, b -> b;
    # subtree 1 gets c, d -> c. Then b -> b1 .2, b2 .6 -> b2; c -> c1 .8, 7 .95 -> 7 (finished).
    # Only subtree 0 goes on: b2 -> 9 .4, 7 .85 -> 7 (finished).
    assert prompts(fake) == [([()], 4), ([("b",), ("c",)], 2), ([("b", "b2")], 2)]
    got = {(tuple(r.steps), r.meta["subtree"], r.meta["subtree_best"], r.meta["complete"],
            r.meta["selected"]) for r in result.records}
    assert got == {(("b", "b2", A9), 0, False, True, False), (("b", "b2", A7), 0, True, True, False),
                   (("c", "c1"), 1, False, False, False), (("c", A7), 1, True, True, True)}
    assert result.account.total.tokens_generated == fake.tokens_generated == 4 * 2 + 3 * 2 + 5 + 2 * 5
    assert result.account.total.prm_tokens == oracle.read


# ---------------------------------------------------------------------------------------------
# MCTS


def test_mcts_visit_counts_follow_puct():
    tree = {(): ["a", "b"], ("a",): ["a1", "a2"], ("b",): ["b1", "The answer is 3."],
            ("b", "b1"): ["The answer is 4.", "b1x"]}
    scores = {("a",): 0.9, ("b",): 0.5, ("a", "a1"): 0.2, ("a", "a2"): 0.3, ("b", "b1"): 0.6,
              ("b", "The answer is 3."): 0.8, ("b", "b1", "The answer is 4."): 0.7,
              ("b", "b1", "b1x"): 0.1}
    fake, oracle = scripted(tree), Oracle(scores)
    seen: list[TreeNode] = []
    m = importlib.import_module("prmkit.search.mcts")   # the package exports the function

    real_backup = m.backup

    def spy(t, visits, total):
        seen.append(t)
        real_backup(t, visits, total)

    m.backup = spy
    try:
        result = mcts([P], fake, CHAT, oracle, MCTSConfig(n=2, m=2, c_puct=1.0))
    finally:
        m.backup = real_backup
    # Worked by hand (Q + P * sqrt(N_parent) / (1 + N), priors 1/2):
    # 1 expand root: a (1, .9), b (1, .5)                     root N 2
    # 2 a: .9 + .5*1.414/2 = 1.254 > b .854: expand a: a1 .2, a2 .3     a (3, 1.4), root 4
    # 3 a: .467 + .5*2/4 = .717 < b: .5 + .5*2/2 = 1.0: expand b: b1 .6, b3 .8 (finished)
    # 4 root 6: b .633+.306 > a .467+.306; in b (N 3): b3 .8+.433 > b1 .6+.433: b3 again, +.8
    # 5 root 7: b .675+.265 > a .467+.331; in b (N 4): b3 .8+.333 = 1.133 > b1 .6+.5 = 1.1
    # 6 root 8: b .7+.236 > a .467+.354; in b (N 5): b1 .6+.559 > b3 .8+.280: expand b1:
    #   b1 -> 4 .7 (finished), b1x .1: two finished, n = 2, stop
    assert prompts(fake) == [([()], 2), ([("a",)], 2), ([("b",)], 2), ([("b", "b1")], 2)]
    assert [tuple(t.node.path.steps) for t in seen] == [(), ("a",), ("b",), ("b", "The answer is 3."),
                                                        ("b", "The answer is 3."), ("b", "b1")]
    root = seen[0]
    a, b = root.children
    stats = {tuple(t.node.path.steps): (t.visits, round(t.total, 6)) for t in _walk(root)}
    assert stats == {(): (10, 5.7), ("a",): (3, 1.4), ("b",): (7, 4.3), ("a", "a1"): (1, 0.2),
                     ("a", "a2"): (1, 0.3), ("b", "b1"): (3, 1.4), ("b", "The answer is 3."): (3, 2.4),
                     ("b", "b1", "The answer is 4."): (1, 0.7), ("b", "b1", "b1x"): (1, 0.1)}
    assert (a.prior, b.prior) == (0.5, 0.5)
    assert [(r.steps, r.meta["selected"], r.meta["visits"]) for r in result.records] == [
        (["b", "The answer is 3."], True, 3), (["b", "b1", "The answer is 4."], False, 1)]
    assert result.records[0].meta["iterations"] == 6
    assert result.account.total.tokens_generated == fake.tokens_generated == 4 + 4 + (2 + 5) + (5 + 2)
    assert result.account.total.prm_tokens == oracle.read


def test_mcts_stops_at_a_token_budget():
    tree = {(): ["a", "b"], ("a",): ["a1", "a2"]}
    fake = scripted(tree)
    result = mcts([P], fake, CHAT, Oracle({("a",): 0.9, ("b",): 0.5}),
                  MCTSConfig(n=2, m=2, budget_tokens=4))
    # the first expansion writes "a\n" and "b\n" (4 tokens): the budget is spent; nothing
    # finished, so the candidate is the most visited leaf (a tie of one visit each: the first)
    assert len(fake.calls) == 1 and result.account.total.tokens_generated == 4
    assert [(r.steps, r.meta["complete"]) for r in result.records] == [(["a"], False)]


def _walk(t):
    yield t
    for c in t.children:
        yield from _walk(c)


def test_mcts_merges_identical_samples_into_one_child_with_their_share_as_prior():
    tree = {(): ["a", "a", "a", "b"], ("a",): [A7], ("b",): [A8]}
    scores = {("a",): 0.5, ("b",): 0.5, ("a", A7): 0.9, ("b", A8): 0.1}
    fake = scripted(tree)
    result = mcts([P], fake, CHAT, Oracle(scores), MCTSConfig(n=1, m=4, c_puct=1.0))
    # root: a (prior 3/4), b (1/4), equal values: a has the larger prior and is expanded
    assert prompts(fake)[1] == ([("a",)], 4)
    assert result.records[0].steps == ["a", A7]
    assert result.account.total.tokens_generated == fake.tokens_generated   # repeats count too


# ---------------------------------------------------------------------------------------------
# best-of-N


def test_best_of_n_scores_whole_solutions_and_chooses():
    solutions = {P.problem: [["a", "b", A8], ["c", A7], ["d"]]}
    scores = {("a",): 0.9, ("a", "b"): 0.9, ("a", "b", A8): 0.2, ("c",): 0.7, ("c", A7): 0.8,
              ("d",): 0.99}
    fake, oracle = FakeGenerator.from_solutions(CHAT, solutions), Oracle(scores)
    result = best_of_n([P], fake, CHAT, oracle, SearchConfig(n=3))
    assert [(r.steps, r.step_scores, r.meta["sample"]) for r in result.records] == [
        (["d"], [0.99], 2), (["c", A7], [0.7, 0.8], 1), (["a", "b", A8], [0.9, 0.9, 0.2], 0)]
    chosen = [r for r in result.records if r.meta["selected"]]
    assert [r.steps for r in chosen] == [["d"]] and chosen[0].is_correct is False
    # weighted majority over the same candidates: 7 (.8) beats 8 (.2); d has no answer
    wm = best_of_n([P], FakeGenerator.from_solutions(CHAT, solutions), CHAT, Oracle(scores),
                   SearchConfig(n=3, select="weighted-majority"))
    assert [r.answer for r in wm.records if r.meta["selected"]] == ["7"]
    assert result.account.total.tokens_generated == fake.tokens_generated
    assert result.account.total.prm_tokens == oracle.read == sum(
        Oracle.count(P.problem, s) for s in solutions[P.problem])


def test_a_prm_that_cannot_count_tokens_gives_an_unknown_count():
    class Remote:   # scores, but no step format to count tokens with
        score = Oracle().score

    result = beam_search([P], scripted(), CHAT, Remote(), BeamConfig(n=4, m=2))
    assert result.account.total.prm_tokens is None
    assert isinstance(RescoringScorer(Remote()).tokens, type(None))


def test_bad_configs_are_clear_errors():
    with pytest.raises(PrmkitError, match="multiple of m"):
        beam_search([P], scripted(), CHAT, Oracle(), BeamConfig(n=6, m=4))
    with pytest.raises(PrmkitError, match="aggregate"):
        SearchConfig(aggregate="median")
    with pytest.raises(PrmkitError, match="lookahead"):
        BeamConfig(lookahead=-1)


# ---------------------------------------------------------------------------------------------
# the job: resume after a kill


def _rows(path):
    out = []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            row["meta"]["compute"].pop("seconds")
            out.append(row)
    return out


@pytest.mark.parametrize("method", ["beam", "dvts", "mcts", "best-of-n"])
def test_resume_after_a_kill_gives_the_same_records(tmp_path, method):
    qs = [Problem(f"p{i}", f"What is 3 + {4 + i}?", str(7 + i)) for i in range(3)]
    tree = {(): ["a", "b", "c", "d"], ("a",): [A7, "a1"], ("b",): [A8, A7], ("c",): [A7, A9],
            ("d",): [A9, A8], ("a", "a1"): [A7, A7]}

    def gen():
        def script(prompt, k):
            for q in qs[::-1]:
                if prompt.startswith(CHAT.prompt(q.problem)):
                    return scripted(tree, q.problem).script(prompt, k)
            raise KeyError(prompt)
        return FakeGenerator(script)

    class Scores(dict):
        def __missing__(self, key):
            return round(0.1 + 0.8 * ((sum(map(len, key)) * 7) % 10) / 10, 3)

    from prmkit.search.run import METHODS

    config = METHODS[method][1](n=4, m=2)
    whole = tmp_path / "whole.jsonl"
    run_search(method, qs, gen(), CHAT, Oracle(Scores()), str(whole), config, progress=False)

    killed = tmp_path / "killed.jsonl"

    def kill(done):
        if done == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_search(method, qs, gen(), CHAT, Oracle(Scores()), str(killed), config,
                   progress=False, on_chunk=kill)
    assert not killed.exists() and (tmp_path / "killed.jsonl.partial").exists()
    fake = gen()
    summary = run_search(method, qs, fake, CHAT, Oracle(Scores()), str(killed), config, progress=False)
    assert summary.searched == 1 and summary.problems == 3
    assert _rows(killed) == _rows(whole)
    # a partial without its header (the first line of a finished output) is refused, not mixed in
    (tmp_path / "x.jsonl.partial").write_text((tmp_path / "whole.jsonl").read_text().splitlines()[0] + "\n")
    with pytest.raises(PrmkitError, match="x.jsonl.partial holds 1 finished rows but no header"):
        run_search(method, qs, gen(), CHAT, Oracle(Scores()), str(tmp_path / "x.jsonl"),
                   METHODS[method][1](n=8, m=2), progress=False)
    # so are another n, another PRM dtype, other search settings and other problem texts
    from prmkit.resume import Header
    from prmkit.search.run import search_header

    def header(config, dtype="float32"):
        return Header("search", {**search_header(method, config, "", "", 1).identity,
                                 "prm_dtype": dtype})

    with pytest.raises(KeyboardInterrupt):
        run_search(method, qs, gen(), CHAT, Oracle(Scores()), str(tmp_path / "y.jsonl"), config,
                   progress=False, on_chunk=kill, header=header(config))
    with pytest.raises(PrmkitError, match='prm_dtype="float32", this run has prm_dtype="bfloat16"'):
        run_search(method, qs, gen(), CHAT, Oracle(Scores()), str(tmp_path / "y.jsonl"), config,
                   progress=False, header=header(config, "bfloat16"))
    for other, named in ((dataclasses.replace(config, temperature=config.temperature + 0.5),
                          "temperature="), (METHODS[method][1](n=8, m=2), "n=4")):
        with pytest.raises(PrmkitError, match=named):
            run_search(method, qs, gen(), CHAT, Oracle(Scores()), str(tmp_path / "y.jsonl"),
                       other, progress=False, header=header(other))
    changed = [dataclasses.replace(q, problem=q.problem + " ") for q in qs]
    with pytest.raises(PrmkitError, match="would not write"):
        run_search(method, changed, gen(), CHAT, Oracle(Scores()), str(tmp_path / "y.jsonl"),
                   config, progress=False, header=header(config))


# ---------------------------------------------------------------------------------------------
# the command


def test_cli_search(tmp_path, monkeypatch, capsys):
    from prmkit import cli

    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"id": "p", "problem": P.problem, "reference": "7"}) + "\n")
    monkeypatch.setattr("prmkit.generate.cli.load_policy", lambda name, **kw: (scripted(), CHAT))
    monkeypatch.setattr("prmkit.search.cli.open_prm", lambda *a, **kw: Oracle())
    out = tmp_path / "out.jsonl"
    args = ["search", "--method", "beam", "--policy", "scripted", "--input", str(problems),
            "--input-format", "problems", "-n", "4", "-m", "2", "--output", str(out)]
    assert cli.main(args) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["steps"] for r in rows if r["meta"]["selected"]] == [["c", A7]]
    assert "selected accuracy 100.0%" in capsys.readouterr().err
    # a user mistake: one line, exit 2
    assert cli.main(args[:-6] + ["-n", "6", "-m", "4", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "multiple of m" in err[0]
    assert cli.main(["search", "--method", "dvts", "--policy", "x", "--input", str(tmp_path / "nope"),
                     "--output", str(out)]) == 2


def test_repeated_beams_both_stay_and_get_distinct_samples():
    # the root's samples repeat "b" (.9): both copies are kept (not the distinct c, .7) and
    # asked as one prompt for 2 x 2 samples, so they continue differently
    fake = scripted({**TREE, (): ["b", "b", "c", "d"], ("b",): ["b1", "b2", A7, "b1"]})
    beam_search([P], fake, CHAT, Oracle({**SCORES, ("b", A7): 0.5}), BeamConfig(n=4, m=2, max_depth=2))
    assert prompts(fake)[1] == ([("b",)], 4)
