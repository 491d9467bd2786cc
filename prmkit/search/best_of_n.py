"""Best-of-N with a PRM (Cobbe et al. 2021, "Training Verifiers to Solve Math Word Problems";
Lightman et al. 2023, "Let's Verify Step by Step").

Sample ``n`` whole solutions per problem, split each into steps by the rule the prompt teaches,
score every step with the PRM (a problem's solutions on their shared prefixes, so its prompt is
read once: :func:`prmkit.models.sharing.prefix.score_by_problem`, the scores one-pass scoring gives;
one forward pass per solution for a PRM that cannot share), and choose one with ``select``
(:mod:`prmkit.select`: the best aggregated score, or PRM-weighted majority voting). It is the
baseline every tree search must beat at the same budget: its candidates are independent, so
it spends nothing on the PRM until the end and nothing is pruned too early.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from prmkit.generate.base import Generator
from prmkit.generate.prompts import Prompter
from prmkit.generate.run import Problem
from prmkit.generate.stepwise import solve
from prmkit.models.sharing.incremental import Prefix
from prmkit.models.sharing.policy import sharing_of
from prmkit.models.sharing.prefix import score_by_problem
from prmkit.models.sharing.stats import ShareStats
from prmkit.search.base import ComputeAccount, Node, SearchConfig, SearchResult, finish, make_scorer
from prmkit.steps import split_steps
from prmkit.models.base import PRM

BestOfNConfig = SearchConfig


def best_of_n(problems: Sequence[Problem], generator: Generator, prompter: Prompter, prm: PRM,
              config: SearchConfig | None = None) -> SearchResult:
    """``config.n`` whole solutions per problem, scored, one chosen (see the module docstring)."""
    config = config or SearchConfig()
    scorer = make_scorer(prm, config)
    account = ComputeAccount()
    started = time.perf_counter()
    solutions = solve(generator, prompter, [p.problem for p in problems], n=config.n,
                      max_tokens=config.max_tokens, temperature=config.temperature,
                      top_p=config.top_p, seed=config.seed)
    rows = [(i, sol) for i, row in enumerate(solutions) for sol in row]
    steps = [[s.strip() for s in split_steps(sol.text.strip(), prompter.rule)] if sol.text.strip() else []
             for _, sol in rows]
    nonempty = [j for j, s in enumerate(steps) if s]
    paths: list[Prefix] = [Prefix(problems[i].problem) for i, _ in rows]
    todo = ([problems[rows[j][0]].problem for j in nonempty], [steps[j] for j in nonempty])
    shared = config.kv_reuse and sharing_of(prm).can_share
    scored = _score_shared(prm, *todo) if shared else scorer.score_full(*todo)
    for j, path in zip(nonempty, scored):
        paths[j] = path
    candidates: list[list[Node]] = [[] for _ in problems]
    for (i, sol), path in zip(rows, paths):
        c = sol.completion
        account.charge(problems[i].id, c.n_tokens, path.cost)
        candidates[i].append(Node(path, i, True, c.finish_reason, c.n_tokens))
    extra = [[{"sample": k} for k in range(len(row))] for row in candidates]
    return finish(problems, candidates, config, "best-of-n", account, started, extra)


def _score_shared(prm: PRM, problems: Sequence[str],
                  steps: Sequence[Sequence[str]]) -> list[Prefix]:
    """Whole solutions scored on their problems' shared prefixes, all problems in one call (so
    the passes hold many problems' trees). What the trees fed is shared out over the solutions
    by their own lengths: each one's cost is its share of the call's computed tokens."""
    stats = ShareStats()
    scores = score_by_problem(prm, problems, steps, stats)
    plain = [len(prm.bound.encode(p, s, max_length=prm.max_length).input_ids)
             for p, s in zip(problems, steps)]
    total = max(1, sum(plain))
    return [Prefix(p, tuple(st), tuple(sc), round(stats.computed * n / total))
            for p, st, sc, n in zip(problems, steps, scores, plain)]
