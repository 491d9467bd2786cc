"""Monte Carlo tree search over solution steps, with the PRM as the value (PUCT selection as in
AlphaZero, Silver et al. 2017; applied to LLM reasoning steps with a process reward as value in
e.g. Zhang et al. 2024, "ReST-MCTS*", and rStar, Qi et al. 2024).

A node is a partial solution. Each node keeps ``N`` (evaluations in its subtree, its own
included) and ``W`` (the sum of their values); ``Q = W / N``. One iteration:

1. **Select**: from the root, repeatedly go to the child with the highest
   ``Q(c) + c_puct * P(c) * sqrt(N(parent)) / (1 + N(c))``, ties to the earlier child, until a
   node with no children.
2. **Expand and evaluate**: if that node is unfinished and above ``max_depth``, sample ``m`` next
   steps from it. Identical steps become one child whose prior ``P`` is its share of the
   samples (``count / m``: the policy's own frequency), so the prior needs no log-probabilities
   and works with every backend. Every new child is scored by the PRM; its value ``v`` is its
   aggregated step scores (``aggregate``, default the last step's score), and it starts with
   ``N = 1, W = v``.
3. **Back up**: the expanded node and every ancestor get ``N += (number of new children)`` and
   ``W += (sum of their values)``. When the selected node is finished (or at ``max_depth``)
   there is nothing to expand: it and its ancestors get ``N += 1, W += v`` of that node.

So ``N`` of a node is exactly the number of PRM evaluations in its subtree, and ``Q`` their
mean. The search stops for a problem when ``n`` finished solutions are in its tree, after
``max_iterations`` iterations (default ``n * max_depth``), or once it has generated
``budget_tokens`` tokens (to compare methods at a matched budget). The candidates are the finished
solutions (best ``n`` by value); when none finished, the leaf reached by following the most
visited children from the root.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import Generator
from prmkit.generate.prompts import Prompter
from prmkit.generate.run import Problem
from prmkit.generate.stepwise import Step
from prmkit.search.base import (ComputeAccount, Node, SearchConfig, SearchResult, expand, finish,
                                grow, make_scorer, roots, value)
from prmkit.models.base import PRM


@dataclass
class MCTSConfig(SearchConfig):
    c_puct: float = field(default=1.0, metadata={
        "help": "mcts: exploration weight of PUCT (higher explores more)"})
    max_iterations: int | None = field(default=None, metadata={
        "help": "mcts: the most iterations per problem; default n * max_depth"})
    budget_tokens: int | None = field(default=None, metadata={
        "help": "mcts: stop a problem's search once it has generated this many tokens (for "
                "comparisons at a matched budget; the expansion under way finishes)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.c_puct, (int, float)) or self.c_puct < 0:
            raise PrmkitError(f"c_puct must be a number >= 0, got {self.c_puct!r}")
        if self.max_iterations is not None and (isinstance(self.max_iterations, bool)
                                                or not isinstance(self.max_iterations, int)
                                                or self.max_iterations < 1):
            raise PrmkitError(f"max_iterations must be a positive integer, got {self.max_iterations!r}")
        if self.budget_tokens is not None and (isinstance(self.budget_tokens, bool)
                                               or not isinstance(self.budget_tokens, int)
                                               or self.budget_tokens < 1):
            raise PrmkitError(f"budget_tokens must be a positive integer, got {self.budget_tokens!r}")


@dataclass(eq=False)
class TreeNode:
    """A node of the search tree with its PUCT statistics."""

    node: Node
    parent: "TreeNode | None" = None
    prior: float = 1.0
    visits: int = 0          # N: evaluations in this subtree
    total: float = 0.0       # W: the sum of their values
    children: list["TreeNode"] = field(default_factory=list)

    @property
    def q(self) -> float:
        return self.total / self.visits if self.visits else 0.0


def puct(parent: TreeNode, child: TreeNode, c_puct: float) -> float:
    return child.q + c_puct * child.prior * math.sqrt(parent.visits) / (1 + child.visits)


def select_leaf(root: TreeNode, c_puct: float) -> TreeNode:
    """Follow the highest PUCT child (ties: the earlier one) down to a node with no children."""
    t = root
    while t.children:
        scores = [puct(t, c, c_puct) for c in t.children]
        t = t.children[scores.index(max(scores))]
    return t


def backup(t: TreeNode | None, visits: int, total: float) -> None:
    while t is not None:
        t.visits += visits
        t.total += total
        t = t.parent


def mcts(problems: Sequence[Problem], generator: Generator, prompter: Prompter, prm: PRM,
         config: MCTSConfig | None = None) -> SearchResult:
    """MCTS on every problem, in lockstep: one iteration of every unfinished problem's search
    per generator call (see the module docstring)."""
    config = config or MCTSConfig()
    limit = config.max_iterations or config.n * config.max_depth
    scorer = make_scorer(prm, config)
    account = ComputeAccount()
    started = time.perf_counter()
    trees = [TreeNode(root) for root in roots(scorer, account, problems)]
    found: list[list[TreeNode]] = [[] for _ in problems]
    iterations = [0] * len(problems)

    def _spent(i: int) -> bool:
        spent = account.per_problem[problems[i].id].tokens_generated
        return config.budget_tokens is not None and spent >= config.budget_tokens
    while True:
        active = [i for i in range(len(problems))
                  if len(found[i]) < config.n and iterations[i] < limit and not _spent(i)]
        if not active:
            break
        leaves = []
        for i in active:
            iterations[i] += 1
            leaf = select_leaf(trees[i], config.c_puct)
            if leaf.node.done or leaf.node.depth >= config.max_depth:
                backup(leaf, 1, value(leaf.node, config.aggregate))
            else:
                leaves.append(leaf)
        if not leaves:
            continue
        samples = expand(generator, prompter, problems, [(t.node, config.m) for t in leaves], config)
        merged = [_merge(row) for row in samples]
        for t, row in zip(leaves, merged):   # tokens of merged duplicates are spent too
            account.charge(problems[t.node.pid].id, sum(s.n_tokens for s, _ in row[1]), 0)
        kids = iter(grow(scorer, account, problems,
                         [(t.node, step) for t, (unique, _) in zip(leaves, merged) for step, _ in unique]))
        for t, (unique, _) in zip(leaves, merged):
            values = []
            for step, count in unique:
                child = next(kids)
                v = value(child, config.aggregate)
                c = TreeNode(child, t, count / config.m, 1, v)
                t.children.append(c)
                values.append(v)
                if child.done:
                    found[child.pid].append(c)
            backup(t, len(values), sum(values))
    candidates: list[list[Node]] = []
    extra: list[list[dict[str, Any]]] = []
    for i, root in enumerate(trees):
        chosen = sorted(found[i], key=lambda c: -value(c.node, config.aggregate))[:config.n]
        if not chosen:
            chosen = [_most_visited_leaf(root)]
        candidates.append([c.node for c in chosen])
        extra.append([{"visits": c.visits, "q": c.q, "iterations": iterations[i],
                       "tree_size": _size(root)} for c in chosen])
    return finish(problems, candidates, config, "mcts", account, started, extra)


def _merge(samples: list[Step]) -> tuple[list[tuple[Step, int]], list[tuple[Step, int]]]:
    """``(unique, duplicates)``: each distinct step (by its text and whether it ends the
    solution) once with its count, in order of first appearance; and the repeats."""
    unique: dict[tuple[str, bool], list[Any]] = {}
    dupes: list[tuple[Step, int]] = []
    for s in samples:
        key = (s.step, s.done)
        if key in unique:
            unique[key][1] += 1
            dupes.append((s, 1))
        else:
            unique[key] = [s, 1]
    return [(s, c) for s, c in unique.values()], dupes


def _most_visited_leaf(root: TreeNode) -> TreeNode:
    t = root
    while t.children:
        visits = [c.visits for c in t.children]
        t = t.children[visits.index(max(visits))]
    return t


def _size(root: TreeNode) -> int:
    return 1 + sum(_size(c) for c in root.children)
