"""Best-of-N accuracy against N, for every selection method, with confidence intervals.

The protocol of Lightman et al. 2023, "Let's Verify Step by Step" (arXiv:2305.20050), section
on best-of-N search: for each N, many random subsets of N candidates are drawn per problem
(without replacement, from that problem's candidates), a method picks one candidate from each
subset, and the accuracy is averaged over the draws. The methods are those of
``prmkit select`` (same rules, same tie-breaking, applied to the subset in its random draw
order, so ties fall at random), plus the oracle (pass@N: any correct candidate in the subset).

Definitions:

- problems are the records' groups (``Record.group``);
- every candidate needs ``is_correct``; a method is skipped when some candidate lacks what it
  reads (``orm``: ``meta.outcome_score``; ``prm-*`` and ``weighted-majority``: ``step_scores``)
  and the results say which were skipped and why;
- a problem with fewer than N candidates is left out of that N (``problems`` per N says how
  many remain); an N larger than every problem is skipped. When N equals a problem's size, every
  draw holds all its candidates (only their order changes);
- ``accuracy``: the mean over problems of the problem's accuracy averaged over ``draws`` draws,
  as a percentage;
- ``ci95``: a 95% percentile bootstrap over problems (``bootstrap`` resamples of the problems
  with replacement, seeded), which covers the uncertainty from the finite problem set; the
  spread of the draws themselves is ``draw_std`` (standard deviation of the per-draw accuracy).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from prmkit import select
from prmkit.aggregate import AGGREGATES
from prmkit.errors import PrmkitError
from prmkit.evaluate.bootstrap import resamples
from prmkit.records import Record

PAPER = "Lightman et al. 2023, Let's Verify Step by Step, arXiv:2305.20050"


@dataclass
class BestOfNConfig:
    """What to draw and how to summarise it."""

    n: list[int] = field(default_factory=lambda: [1, 2, 4, 8], metadata={
        "help": "the subset sizes N"})
    draws: int = field(default=100, metadata={"help": "random subsets per problem and N"})
    seed: int = field(default=0, metadata={"help": "seed of the draws and the bootstrap"})
    bootstrap: int = field(default=1000, metadata={"help": "bootstrap resamples for the CI"})
    weight_by: str = field(default="prod", metadata={
        "help": "the PRM aggregate that weights weighted-majority votes"})
    methods: list[str] | None = field(default=None, metadata={
        "help": "methods to run (default: every method the data supports)"})

    def __post_init__(self) -> None:
        if not self.n or any(k < 1 for k in self.n):
            raise PrmkitError(f"N must be a list of positive integers, got {self.n}")
        if self.draws < 1 or self.bootstrap < 1:
            raise PrmkitError("draws and bootstrap must be positive")
        if self.weight_by not in AGGREGATES:
            raise PrmkitError(f"unknown weight_by {self.weight_by!r} (known: {', '.join(AGGREGATES)})")
        for m in self.methods or []:
            if m not in select.METHODS:
                raise PrmkitError(f"unknown method {m!r} (known: {', '.join(select.METHODS)})")


def supported_methods(records: Sequence[Record], wanted: Sequence[str] | None = None,
                      ) -> tuple[list[str], dict[str, str]]:
    """The methods the records support (in :data:`prmkit.select.METHODS` order), and for each
    skipped one, why."""
    no_scores = sum(1 for r in records if r.step_scores is None
                    or all(s is None for s in r.step_scores))
    no_orm = sum(1 for r in records if r.meta.get("outcome_score") is None)
    n = len(records)
    ok, skipped = [], {}
    for m in wanted or select.METHODS:
        if (m.startswith("prm-") or m == "weighted-majority") and no_scores:
            skipped[m] = f"{no_scores} of {n} candidates have no step_scores"
        elif m == "orm" and no_orm:
            skipped[m] = f"{no_orm} of {n} candidates have no meta.outcome_score"
        else:
            ok.append(m)
    return ok, skipped


@dataclass
class Candidates:
    """What each method reads from each candidate, computed once, as arrays by candidate."""

    correct: np.ndarray                 # bool
    groups: list[np.ndarray]            # candidate indices of each problem, in input order
    prm: dict[str, np.ndarray]          # aggregate name -> score
    orm: np.ndarray | None
    vote: np.ndarray                    # int answer key id, -1 = no answer


def candidates(records: Sequence[Record], methods: Sequence[str], weight_by: str) -> Candidates:
    from prmkit.select import vote_key, prm_score  # the selection module's own rules

    for r in records:
        if r.is_correct is None:
            raise PrmkitError(f"record {r.id!r}: no is_correct; best-of-N accuracy needs every "
                              f"candidate graded")
    index = {id(r): i for i, r in enumerate(records)}
    groups = [np.array([index[id(r)] for r in g]) for g in select.groups(list(records))]
    aggs = {m[4:] for m in methods if m.startswith("prm-")}
    if "weighted-majority" in methods:
        aggs.add(weight_by)
    prm = {a: np.array([prm_score(r, a) for r in records]) for a in sorted(aggs)}
    orm = None
    if "orm" in methods:
        orm = np.array([select.orm_score(r) for r in records])
    keys: dict[str, int] = {}
    vote = np.full(len(records), -1)
    if "majority" in methods or "weighted-majority" in methods:
        for i, r in enumerate(records):
            k = vote_key(r)
            if k is not None:
                vote[i] = keys.setdefault(k, len(keys))
    return Candidates(np.array([bool(r.is_correct) for r in records]), groups, prm, orm, vote)


def choose(c: Candidates, method: str, subset: np.ndarray, weight_by: str = "prod") -> np.ndarray:
    """The chosen candidate of each row of ``subset`` (problems x N candidate indices, in draw
    order), by the rules of :func:`prmkit.select.select`."""
    rows = np.arange(len(subset))
    if method == "oracle":
        hit = c.correct[subset]
        return subset[rows, np.where(hit.any(axis=1), hit.argmax(axis=1), 0)]
    if method.startswith("prm-") or method == "orm":
        s = c.prm[method[4:]][subset] if method != "orm" else c.orm[subset]  # type: ignore[index]
        return subset[rows, s.argmax(axis=1)]  # the first of the best
    k = c.vote[subset]
    has = k >= 0
    same = (k[:, :, None] == k[:, None, :]) & has[:, None, :]
    counts = np.where(has, same.sum(axis=2), -1)
    if method == "majority":
        return subset[rows, counts.argmax(axis=1)]  # the first appearance of the top answer
    if method == "weighted-majority":
        s = c.prm[weight_by][subset]
        total = np.where(has, (same * s[:, None, :]).sum(axis=2), -np.inf)
        top = total == total.max(axis=1, keepdims=True)
        winner = np.where(top, counts, -2).argmax(axis=1)  # more votes, then first appearance
        members = (k == k[rows, winner][:, None]) & has
        best = np.where(members, s, -np.inf).argmax(axis=1)
        best = np.where(has.any(axis=1), best, s.argmax(axis=1))
        return subset[rows, best]
    raise PrmkitError(f"unknown method {method!r}")


def draw_hits(c: Candidates, groups: Sequence[np.ndarray], methods: Sequence[str], n: int,
              draws: int, rng: np.random.Generator, weight_by: str) -> dict[str, np.ndarray]:
    """For each method, draws x problems: 1 where the candidate it chose from that draw of ``n``
    of the problem's candidates (without replacement, in random order) is correct. Every
    problem in ``groups`` has at least ``n`` candidates."""
    width = max(len(g) for g in groups)
    padded = np.zeros((len(groups), width), dtype=int)
    valid = np.zeros((len(groups), width), dtype=bool)
    for i, g in enumerate(groups):
        padded[i, :len(g)] = g
        valid[i, :len(g)] = True
    hits = {m: np.zeros((draws, len(groups))) for m in methods}
    for d in range(draws):
        order = np.argsort(np.where(valid, rng.random(valid.shape), np.inf), axis=1)[:, :n]
        subset = np.take_along_axis(padded, order, axis=1)
        for m in methods:
            hits[m][d] = c.correct[choose(c, m, subset, weight_by)]
    return hits


def curve(records: Sequence[Record], config: BestOfNConfig | None = None) -> dict[str, Any]:
    """Accuracy against N for every supported method; a JSON-ready dict."""
    config = config or BestOfNConfig()
    records = list(records)
    if not records:
        raise PrmkitError("no candidates to evaluate")
    methods, skipped = supported_methods(records, config.methods)
    c = candidates(records, methods, config.weight_by)
    sizes = np.array([len(g) for g in c.groups])
    rng = np.random.default_rng(config.seed)
    out: dict[str, Any] = {m: [] for m in methods}
    ns, skipped_n, problems = [], {}, {}
    for n in sorted(set(config.n)):
        keep = [g for g in c.groups if len(g) >= n]
        if not keep:
            skipped_n[str(n)] = f"larger than every problem's candidate count (max {sizes.max()})"
            continue
        ns.append(n)
        problems[str(n)] = len(keep)
        hits = draw_hits(c, keep, methods, n, config.draws, rng, config.weight_by)
        for m in methods:
            per_problem = hits[m].mean(axis=0)
            boot = resamples(len(keep), config.bootstrap, rng)
            means = per_problem[boot].mean(axis=1) * 100
            out[m].append({"n": n, "accuracy": float(per_problem.mean() * 100),
                           "ci95": [float(np.percentile(means, 2.5)),
                                    float(np.percentile(means, 97.5))],
                           "draw_std": float(hits[m].mean(axis=1).std() * 100)})
    return {"benchmark": "best-of-N", "protocol": PAPER, "n": ns, "methods": out,
            "skipped_methods": skipped, "skipped_n": skipped_n, "problems": problems,
            "candidates": len(records), "problems_total": len(c.groups),
            "draws": config.draws, "seed": config.seed, "bootstrap": config.bootstrap,
            "weight_by": config.weight_by,
            "definitions": {
                "accuracy": "% correct, mean over problems of the mean over draws",
                "ci95": "95% percentile bootstrap over problems",
                "draw": "N candidates per problem drawn without replacement, in random order"}}


def print_results(res: dict[str, Any]) -> None:
    from prmkit.evaluate.common import print_table

    rows = []
    for m, points in res["methods"].items():
        rows.append([m] + [f"{p['accuracy']:.1f} [{p['ci95'][0]:.1f}, {p['ci95'][1]:.1f}]"
                           for p in points])
    print_table(["method"] + [f"N={n}" for n in res["n"]], rows)
    print(f"accuracy % [95% CI, bootstrap over problems]; {res['draws']} draws per N, "
          f"{res['problems_total']} problems, {res['candidates']} candidates")
    for m, why in res["skipped_methods"].items():
        print(f"skipped {m}: {why}")
    for n, why in res["skipped_n"].items():
        print(f"skipped N={n}: {why}")
    for n, k in res["problems"].items():
        if k < res["problems_total"]:
            print(f"N={n}: {res['problems_total'] - k} problems with fewer than {n} candidates "
                  f"left out")
