"""Paired comparisons of selection methods, problem by problem, with bootstrap intervals.

Two methods run on the same problems are compared by the difference of their per-problem
accuracies, not by whether their separate intervals overlap: a problem that is hard for one
method is usually hard for the other, and pairing removes that shared variance. This is the
paired percentile bootstrap (Efron and Tibshirani 1993, ch. 13): resample the problems with
replacement, take the mean difference of each resample, and read the 2.5th and 97.5th
percentiles.

* :func:`per_problem_accuracy`: a method's best-of-N accuracy on each problem (the mean over
  random draws of N of its candidates, the protocol of :mod:`prmkit.evaluate.bestofn`, whose
  selection rules it uses);
* :func:`paired_difference`: mean of ``a - b`` over the problems both have, and its interval;
* :class:`Claim`: a verdict, ``{"holds", "difference", "ci95"}``, as ``prmkit demo`` writes it.
  A claim that B beats A holds when the whole interval is above 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from prmkit.errors import PrmkitError
from prmkit.evaluate import bestofn
from prmkit.evaluate.bootstrap import bootstrap_means
from prmkit.records import Record


def per_problem_accuracy(records: Sequence[Record], method: str, n: int, draws: int = 200,
                         seed: int = 0, weight_by: str = "prod") -> dict[str, float]:
    """Best-of-``n`` accuracy (0..1) of ``method`` on each problem (group) with at least ``n``
    candidates: the mean over ``draws`` random subsets of ``n`` of its candidates, drawn as
    :func:`prmkit.evaluate.bestofn.curve` draws them."""
    records = list(records)
    methods, skipped = bestofn.supported_methods(records, [method])
    if method not in methods:
        raise PrmkitError(f"method {method!r} cannot run on these records: {skipped[method]}")
    c = bestofn.candidates(records, methods, weight_by)
    keep = [g for g in c.groups if len(g) >= n]
    if not keep:
        return {}
    hits = bestofn.draw_hits(c, keep, methods, n, draws, np.random.default_rng(seed), weight_by)
    per_problem = hits[method].mean(axis=0)
    return {records[g[0]].group or records[g[0]].id: float(v) for g, v in zip(keep, per_problem)}


@dataclass
class Claim:
    """A paired difference in percentage points, its 95% interval, and whether it holds."""

    holds: bool
    difference: float
    ci95: list[float]
    problems: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_difference(a: Mapping[str, float], b: Mapping[str, float], bootstrap: int = 10000,
                      seed: int = 0, margin: float = 0.0) -> Claim:
    """``a - b`` in points (values in 0..1), paired over the problems both have.

    The claim holds when the lower end of the 95% interval is above ``-margin`` points
    (``margin`` 0: a is better than b; a positive margin: a is not worse than b by more than
    the margin, a non-inferiority claim)."""
    common = sorted(set(a) & set(b))
    if not common:
        raise PrmkitError("no problem in common between the two methods")
    d = np.array([a[k] - b[k] for k in common]) * 100.0
    means = bootstrap_means(d, bootstrap, seed)
    lo = round(float(np.percentile(means, 2.5)), 3)   # the verdict reads the interval as
    hi = round(float(np.percentile(means, 97.5)), 3)  # written, so the two always agree
    return Claim(holds=bool(lo > -margin), difference=round(float(d.mean()), 3),
                 ci95=[lo, hi], problems=len(common))


def difference_of_differences(a1: Mapping[str, float], b1: Mapping[str, float],
                              a2: Mapping[str, float], b2: Mapping[str, float],
                              bootstrap: int = 10000, seed: int = 0) -> Claim:
    """(a2 - b2) - (a1 - b1), paired per problem: does a's lead over b grow from setting 1 to
    setting 2 (for example from N=2 to N=8)?"""
    common = sorted(set(a1) & set(b1) & set(a2) & set(b2))
    grow = {k: (a2[k] - b2[k]) - (a1[k] - b1[k]) for k in common}
    return paired_difference(grow, {k: 0.0 for k in common}, bootstrap, seed)

