"""What every search method shares: the config, the compute account, tree nodes, expansion,
and turning final candidates into records.

The contract (ARCHITECTURE.md, "Contracts"): a search method is a function

    method(problems, generator, prompter, prm, config) -> SearchResult

``problems`` are :class:`prmkit.generate.run.Problem` (id, text, reference); ``generator`` and
``prompter`` come from :func:`prmkit.generate.load.load_policy` (any backend); ``prm`` is any
PRM (:class:`prmkit.models.base.PRM`) or a ready :class:`prmkit.models.sharing.incremental.PrefixScorer`.
The problems of one call are searched in lockstep, so every generator call and every PRM pass
holds the work of all of them (a backend batches it). A :class:`SearchResult` holds, per
problem, the final candidates as records (one group per problem, best first, the chosen one
marked ``meta.selected``) and a :class:`ComputeAccount`.

Expansion goes through :func:`prmkit.generate.stepwise.next_steps`, so every backend works.
Partial solutions that are the same text are asked for once, with as many samples as all of
them together need: sample ``k`` of a prompt is seeded from ``(seed, prompt, k)``, so two
identical beams asked separately would get identical samples.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from prmkit.aggregate import AGGREGATES, aggregate
from prmkit.answers import extract_answer, is_equivalent
from prmkit.errors import PrmkitError
from prmkit.generate.base import Generator, check_sampling
from prmkit.generate.prompts import Prompter
from prmkit.generate.run import Problem
from prmkit.generate.stepwise import Step, next_steps
from prmkit.models.sharing.incremental import Prefix, PrefixScorer, prefix_scorer, release
from prmkit.records import Record
from prmkit.models.base import PRM

SELECT_METHODS = ("prm-last", "prm-min", "prm-prod", "prm-mean", "prm-geomean", "majority",
                  "weighted-majority")


@dataclass
class SearchConfig:
    """Settings every search method takes (each method's own config adds its fields)."""

    n: int = field(default=16, metadata={
        "help": "the width, i.e. the generation budget: best-of-n samples n solutions, beam keeps "
                "n beams, dvts grows n/m subtrees of m, mcts searches until n solutions are "
                "complete"})
    m: int = field(default=4, metadata={
        "help": "beam: keep n/m beams and expand each by m; dvts: subtree width m; mcts: next "
                "steps sampled per expansion"})
    max_depth: int = field(default=10, metadata={"help": "the most steps per solution"})
    max_step_tokens: int = field(default=96, metadata={"help": "the most tokens per step"})
    max_tokens: int = field(default=512, metadata={
        "help": "best-of-n: the most tokens per whole solution"})
    temperature: float = field(default=0.7, metadata={"help": "sampling temperature"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling threshold"})
    seed: int = field(default=0, metadata={
        "help": "sample k of a prompt is seeded from (seed, prompt, k): reruns give the same search"})
    aggregate: str = field(default="last", metadata={
        "help": "how a partial solution's step scores rank it (last, min, prod, mean, geomean); "
                "last follows Snell et al. 2024 and search-and-learn"})
    select: str = field(default="prm-last", metadata={
        "help": "how the answer is chosen among the final candidates: " + ", ".join(SELECT_METHODS)})
    kv_reuse: bool = field(default=True, metadata={
        "help": "reuse the prefix's key-value cache: score only the new step of a grown "
                "solution (HF PRMs; without it every grown solution is re-scored whole)"})

    def __post_init__(self) -> None:
        check_sampling(self.n, self.max_step_tokens, self.temperature, self.top_p, self.seed)
        if self.seed is None:
            raise PrmkitError("search needs an integer seed")
        for name in ("m", "max_depth", "max_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PrmkitError(f"{name} must be a positive integer, got {value!r}")
        if self.aggregate not in AGGREGATES:
            raise PrmkitError(f"unknown aggregate {self.aggregate!r}; known: {', '.join(AGGREGATES)}")
        if self.select not in SELECT_METHODS:
            raise PrmkitError(f"unknown selection {self.select!r}; known: {', '.join(SELECT_METHODS)}")


# ---------------------------------------------------------------------------------------------
# the compute account


@dataclass
class Compute:
    """What one problem's search (or a sum of them) spent.

    ``prm_tokens`` is None when the PRM cannot count its tokens (a remote PRM). ``seconds`` of a
    problem is its batch's wall time divided by the problems in the batch (they run in
    lockstep)."""

    tokens_generated: int = 0
    prm_tokens: int | None = 0
    seconds: float = 0.0

    def add(self, other: "Compute") -> "Compute":
        prm = None if self.prm_tokens is None or other.prm_tokens is None else self.prm_tokens + other.prm_tokens
        return Compute(self.tokens_generated + other.tokens_generated, prm, self.seconds + other.seconds)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Compute":
        return cls(int(d.get("tokens_generated", 0)), d.get("prm_tokens"), float(d.get("seconds", 0.0)))


@dataclass
class ComputeAccount:
    """Compute per problem id, and the total."""

    per_problem: dict[str, Compute] = field(default_factory=dict)

    @property
    def total(self) -> Compute:
        out = Compute()
        for c in self.per_problem.values():
            out = out.add(c)
        return out

    def charge(self, pid: str, tokens: int = 0, prm_tokens: int | None = 0) -> None:
        c = self.per_problem.setdefault(pid, Compute())
        c.tokens_generated += tokens
        c.prm_tokens = None if c.prm_tokens is None or prm_tokens is None else c.prm_tokens + prm_tokens


@dataclass
class SearchResult:
    records: list[Record]
    account: ComputeAccount


# ---------------------------------------------------------------------------------------------
# nodes


@dataclass(eq=False)
class Node:
    """A partial (or complete) solution in a search: its scored steps, whether it ended, and
    the tokens generated along its path."""

    path: Prefix                     # steps and step scores (and the PRM's cache, if any)
    pid: int                         # index of its problem in the call
    done: bool = False               # the solution ended here
    finish_reason: str = ""          # of the step that ended it ("stop", "eos", "length")
    tokens: int = 0                  # generated along the path, root to here

    @property
    def depth(self) -> int:
        return len(self.path.steps)


def value(node: Node, how: str) -> float:
    """The node's aggregated step scores (0.0 when no step is scored: the worst)."""
    scores = [s for s in node.path.scores if s is not None]
    return aggregate(scores, how) if scores else 0.0


def complete(node: Node) -> bool:
    """The solution ended on its own (not cut by a token limit or the depth limit)."""
    return node.done and node.finish_reason != "length"


def expand(generator: Generator, prompter: Prompter, problems: Sequence[Problem],
           requests: Sequence[tuple[Node, int]], config: SearchConfig,
           temperature: float | None = None) -> list[list[Step]]:
    """``samples`` next steps for each ``(node, samples)``, all in one generator call per
    distinct sample count. Requests for the same partial solution are merged, so they get
    distinct samples (the first request samples 0..a-1, the next a..a+b-1, ...)."""
    keys: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for r, (node, count) in enumerate(requests):
        keys.setdefault((problems[node.pid].problem, node.path.steps), []).append(r)
    totals = {key: sum(requests[r][1] for r in rs) for key, rs in keys.items()}
    out: list[list[Step]] = [[] for _ in requests]
    for n in sorted(set(totals.values())):
        batch = [key for key in keys if totals[key] == n]
        steps = next_steps(generator, prompter, [(p, list(s)) for p, s in batch], n=n,
                           max_tokens=config.max_step_tokens,
                           temperature=config.temperature if temperature is None else temperature,
                           top_p=config.top_p, seed=config.seed)
        for key, samples in zip(batch, steps):
            at = 0
            for r in keys[key]:
                count = requests[r][1]
                out[r] = samples[at:at + count]
                at += count
    return out


def grow(scorer: PrefixScorer, account: ComputeAccount, problems: Sequence[Problem],
         pairs: Sequence[tuple[Node, Step]]) -> list[Node]:
    """The children of ``(parent, sampled step)`` pairs, scored in one scorer call; generated
    tokens and PRM tokens are charged to each problem. A sample that ends the solution with no
    further step gives a finished copy of its parent (nothing to score)."""
    scored = [(parent, step) for parent, step in pairs if step.step]
    paths = iter(scorer.extend([(parent.path, step.step) for parent, step in scored]))
    out = []
    for parent, step in pairs:
        path = next(paths) if step.step else parent.path
        if step.done and step.step:
            release(path)          # a finished solution is never extended: free its cache
        child = Node(path, parent.pid, step.done, step.finish_reason, parent.tokens + step.n_tokens)
        account.charge(problems[parent.pid].id, step.n_tokens, path.cost if step.step else 0)
        out.append(child)
    return out


def roots(scorer: PrefixScorer, account: ComputeAccount, problems: Sequence[Problem]) -> list[Node]:
    """One empty solution per problem; reading the problem is charged to it."""
    out = []
    for i, (problem, path) in enumerate(zip(problems, scorer.roots([p.problem for p in problems]))):
        account.charge(problem.id, 0, path.cost)
        out.append(Node(path, i))
    return out


def make_scorer(prm: PRM, config: SearchConfig) -> PrefixScorer:
    return prefix_scorer(prm, kv_reuse=config.kv_reuse)


# ---------------------------------------------------------------------------------------------
# records


def finish(problems: Sequence[Problem], candidates: Sequence[Sequence[Node]], config: SearchConfig,
           method: str, account: ComputeAccount, started: float,
           extra: Sequence[Sequence[dict[str, Any]]] | None = None) -> SearchResult:
    """Records of each problem's final candidates (complete ones first, then by
    ``config.aggregate``), the chosen one marked; the batch's wall time shared out over its
    problems."""
    share = (time.perf_counter() - started) / max(1, len(problems))
    records: list[Record] = []
    for i, (problem, nodes) in enumerate(zip(problems, candidates)):
        account.per_problem.setdefault(problem.id, Compute()).seconds += share
        metas = list(extra[i]) if extra is not None else [{} for _ in nodes]
        order = sorted(range(len(nodes)), key=lambda j: (not complete(nodes[j]),
                                                         -value(nodes[j], config.aggregate)))
        recs = [candidate_record(problem, k, nodes[j], method, config, metas[j])
                for k, j in enumerate(order)]
        if recs:
            chosen = choose(recs, config.select)
            for r in recs:
                r.meta["selected"] = r is chosen
                r.meta["candidates"] = len(recs)
                r.meta["compute"] = account.per_problem[problem.id].to_dict()
        records.extend(recs)
    return SearchResult(records, account)


def candidate_record(problem: Problem, k: int, node: Node, method: str, config: SearchConfig,
                     extra: dict[str, Any]) -> Record:
    """Candidate ``k`` of a problem: steps, step scores, answer, is_correct, meta."""
    steps = list(node.path.steps)
    scores = list(node.path.scores)
    meta: dict[str, Any] = {"method": method, "rank": k, "complete": complete(node),
                            "finish_reason": node.finish_reason or None, "depth": len(steps),
                            "completion_tokens": node.tokens, "value": value(node, config.aggregate),
                            "n": config.n, "m": config.m, "seed": config.seed}
    meta.update(extra)
    if not steps:
        steps, scores, meta["empty"] = [""], [None], True
    answer = extract_answer("\n".join(steps))
    correct = None if problem.reference is None else is_equivalent(answer, problem.reference)
    return Record(id=f"{problem.id}-{k}", problem=problem.problem, steps=steps, answer=answer,
                  reference=problem.reference, is_correct=correct, group=problem.id,
                  step_scores=scores, meta=meta)


def choose(records: list[Record], method: str) -> Record:
    """The chosen candidate: by ``method`` (a :mod:`prmkit.select` method) among the complete
    candidates with a scored step (all candidates when none is complete)."""
    from prmkit import select

    pool = [r for r in records if r.meta.get("complete")] or records
    if method.startswith("prm-") or method == "weighted-majority":
        scored = [r for r in pool if any(s is not None for s in r.step_scores or [])]
        if not scored:
            return pool[0]
        pool = scored
    return select.select(pool, method)[0]


def check_width(n: int, m: int, method: str) -> None:
    if n % m or n < m:
        raise PrmkitError(f"{method}: n ({n}) must be a multiple of m ({m})")


def budget_line(total: Compute) -> str:
    prm = "unknown" if total.prm_tokens is None else str(total.prm_tokens)
    return (f"generated {total.tokens_generated} tokens, PRM read {prm} tokens, "
            f"{total.seconds:.1f} s")
