"""Diverse verifier tree search (DVTS; Beeching et al. 2024, "Scaling test-time compute with
open models", Hugging Face's search-and-learn).

Beam search with a PRM tends to spend its whole width on a few early steps the PRM likes, and
loses diversity. DVTS splits the width ``n`` into ``n / m`` independent subtrees. Each subtree
is a greedy search of width ``m``:

1. sample ``m`` next steps from the subtree's current partial solution (the problem, at first);
2. score them with the PRM and move to the best one (by ``aggregate``; ties: the earlier
   sample);
3. the subtree stops when that best step ends the solution, or at ``max_depth`` steps.

Subtrees never share or prune each other's work, so they explore ``n / m`` different lines.
At the first step all subtrees stand at the problem; they get distinct samples (subtree ``t``
takes samples ``t*m .. t*m+m-1`` of the problem's prompt). As in search-and-learn, the final
candidates are, for every subtree, the ``m`` siblings of its last expansion: ``n`` candidates,
among which ``select`` chooses (finished candidates first; the unchosen siblings may be
unfinished).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from prmkit.generate.base import Generator
from prmkit.generate.prompts import Prompter
from prmkit.generate.run import Problem
from prmkit.search.base import (ComputeAccount, Node, SearchConfig, SearchResult, check_width,
                                expand, finish, grow, make_scorer, roots, value)
from prmkit.models.base import PRM

DVTSConfig = SearchConfig


def dvts(problems: Sequence[Problem], generator: Generator, prompter: Prompter, prm: PRM,
         config: SearchConfig | None = None) -> SearchResult:
    """DVTS on every problem, in lockstep (see the module docstring)."""
    config = config or SearchConfig()
    check_width(config.n, config.m, "dvts")
    scorer = make_scorer(prm, config)
    account = ComputeAccount()
    started = time.perf_counter()
    trees = config.n // config.m
    # every subtree: [its current node, its last siblings, whether it has stopped]
    subtrees = [[root, [], False] for root in roots(scorer, account, problems) for _ in range(trees)]
    for _ in range(config.max_depth):
        active = [t for t in subtrees if not t[2]]
        if not active:
            break
        samples = expand(generator, prompter, problems, [(t[0], config.m) for t in active], config)
        children = grow(scorer, account, problems,
                        [(t[0], s) for t, row in zip(active, samples) for s in row])
        for a, t in enumerate(active):
            kids = children[a * config.m:(a + 1) * config.m]
            best = max(range(len(kids)), key=lambda j: (value(kids[j], config.aggregate), -j))
            t[0], t[1], t[2] = kids[best], kids, kids[best].done
    candidates: list[list[Node]] = [[] for _ in problems]
    extra: list[list[dict[str, Any]]] = [[] for _ in problems]
    for index, (current, siblings, _) in enumerate(subtrees):
        i = index // trees
        for kid in siblings:
            candidates[i].append(kid)
            extra[i].append({"subtree": index % trees, "subtree_best": kid is current})
    return finish(problems, candidates, config, "dvts", account, started, extra)
