"""Best-of-N with a PRM (Cobbe et al. 2021, "Training Verifiers to Solve Math Word Problems";
Lightman et al. 2023, "Let's Verify Step by Step").

Sample ``n`` whole solutions per problem, split each into steps by the rule the prompt teaches,
score every step with the PRM (a problem's solutions on their shared prefixes, so its prompt is
read once: :func:`prmkit.models.shared.score_by_problem`, the scores one-pass scoring gives;
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
from prmkit.models.incremental import Prefix
from prmkit.models.shared import can_share, score_by_problem
from prmkit.models.sharestats import ShareStats
from prmkit.search.base import ComputeAccount, Node, SearchConfig, SearchResult, finish, make_scorer
from prmkit.steps import split_steps

BestOfNConfig = SearchConfig


def best_of_n(problems: Sequence[Problem], generator: Generator, prompter: Prompter, prm: Any,
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
    shared = config.kv_reuse and can_share(prm)
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


def _score_shared(prm: Any, problems: Sequence[str],
                  steps: Sequence[Sequence[str]]) -> list[Prefix]:
    """Whole solutions scored a problem at a time on their shared prefixes; each one's cost is
    an equal share of the tokens its problem's tree fed."""
    by: dict[str, list[int]] = {}
    for j, problem in enumerate(problems):
        by.setdefault(problem, []).append(j)
    out: list[Prefix | None] = [None] * len(problems)
    for problem, js in by.items():
        stats = ShareStats()
        scores = score_by_problem(prm, [problem] * len(js), [steps[j] for j in js], stats)
        for k, (j, sc) in enumerate(zip(js, scores)):
            cost = stats.computed // len(js) + (k < stats.computed % len(js))
            out[j] = Prefix(problem, tuple(steps[j]), tuple(sc), cost)
    return [p for p in out if p is not None]
