"""Beam search with a PRM, step by step (Snell et al. 2024, "Scaling LLM Test-Time Compute
Optimally can be More Effective than Scaling Model Parameters"; the implementation follows
Hugging Face's search-and-learn, Beeching et al. 2024, "Scaling test-time compute with open
models").

With width ``n`` and beam width ``m``:

1. sample ``n`` first steps from the problem;
2. score every new step with the PRM and rank each partial solution by its aggregated step
   scores (``aggregate``, default the last step's score);
3. solutions that ended are set aside as finished; of the others keep the best ``n / m`` (ties:
   the earlier sample) and sample ``m`` next steps from each, ``n`` new candidates again.
   Beams that are the same partial solution (the policy wrote the same steps twice) both stay:
   they are asked as one prompt for all their samples, so they get distinct continuations, and
   the width goes where the PRM sees the best line (demoting repeats below worse distinct
   partial solutions cost 19 to 27 points of accuracy in ``bench/search.py``'s oracle run);
4. repeat from 2 until ``n`` solutions have finished, none is left, or ``max_depth`` steps.

The final candidates are the finished solutions (best ``n``), topped up with the best unfinished
ones when fewer than ``n`` finished. The answer is chosen among them by ``select``.

Lookahead (Snell et al. 2024, section 5.1): with ``lookahead = k`` every unfinished candidate is
rolled ``k`` steps further at temperature 0 and ranked by the score where the roll-out stops;
only the candidate's own step is kept. The roll-outs cost generated and PRM tokens, which the
account includes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import Generator
from prmkit.generate.prompts import Prompter
from prmkit.generate.run import Problem
from prmkit.models.sharing.incremental import PrefixScorer
from prmkit.search.base import (ComputeAccount, Node, SearchConfig, SearchResult, check_width,
                                expand, finish, grow, make_scorer, roots, value)
from prmkit.models.base import PRM


@dataclass
class BeamConfig(SearchConfig):
    lookahead: int = field(default=0, metadata={
        "help": "beam: roll each candidate this many steps further at temperature 0 and rank it "
                "by the score there (0 = no lookahead)"})

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.lookahead, bool) or not isinstance(self.lookahead, int) or self.lookahead < 0:
            raise PrmkitError(f"lookahead must be a non-negative integer, got {self.lookahead!r}")


def beam_search(problems: Sequence[Problem], generator: Generator, prompter: Prompter, prm: PRM,
                config: BeamConfig | None = None) -> SearchResult:
    """Beam search on every problem, in lockstep (see the module docstring)."""
    config = config or BeamConfig()
    check_width(config.n, config.m, "beam")
    keep = config.n // config.m
    scorer = make_scorer(prm, config)
    account = ComputeAccount()
    started = time.perf_counter()
    beams: list[list[Node]] = [[root] for root in roots(scorer, account, problems)]
    finished: list[list[Node]] = [[] for _ in problems]
    last: list[list[tuple[float, Node]]] = [[] for _ in problems]   # unfinished, at the end
    for depth in range(config.max_depth):
        requests = [(node, config.n if depth == 0 else config.m) for row in beams for node in row]
        if not requests:
            break
        samples = expand(generator, prompter, problems, requests, config)
        children = grow(scorer, account, problems,
                        [(node, s) for (node, _), row in zip(requests, samples) for s in row])
        ranks = (_lookahead(children, generator, prompter, problems, scorer, account, config)
                 if config.lookahead else [value(c, config.aggregate) for c in children])
        for i in range(len(problems)):
            if not beams[i]:
                continue
            mine = [(r, c) for r, c in zip(ranks, children) if c.pid == i]
            finished[i].extend(c for _, c in mine if c.done)
            open_ = [(r, c) for r, c in mine if not c.done]
            open_ = sorted(open_, key=lambda rc: -rc[0])   # stable: ties keep sample order
            if len(finished[i]) >= config.n or depth == config.max_depth - 1:
                beams[i], last[i] = [], open_
            else:
                beams[i] = [c for _, c in open_[:keep]]
                last[i] = open_[:keep]
    candidates = []
    for i in range(len(problems)):
        done = sorted(finished[i], key=lambda c: -value(c, config.aggregate))[:config.n]
        candidates.append(done + [c for _, c in last[i][:max(0, config.n - len(done))]])
    return finish(problems, candidates, config, "beam", account, started)


def _lookahead(children: list[Node], generator: Generator, prompter: Prompter,
               problems: Sequence[Problem], scorer: PrefixScorer, account: ComputeAccount,
               config: BeamConfig) -> list[float]:
    """Each unfinished child's rank: the value where a greedy roll-out of ``lookahead`` steps
    stops (a finished child keeps its own value)."""
    ranks = [value(c, config.aggregate) for c in children]
    tips = {j: c for j, c in enumerate(children) if not c.done}
    for _ in range(config.lookahead):
        if not tips:
            break
        order = list(tips)
        samples = expand(generator, prompter, problems, [(tips[j], 1) for j in order], config,
                         temperature=0.0)
        nodes = grow(scorer, account, problems, [(tips[j], row[0]) for j, row in zip(order, samples)])
        for j, node in zip(order, nodes):
            ranks[j] = value(node, config.aggregate)
            if node.done:
                del tips[j]
            else:
                tips[j] = node
    return ranks
