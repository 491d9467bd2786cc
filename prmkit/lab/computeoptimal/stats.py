"""The statistics of ``prmkit lab compute-optimal``: weighted best-of-N from random draws, the
per-bin choice vectorised over bootstrap weights, the claims' differences and Holm's step-down,
and the efficiency in tokens against best-of-N. Definitions: docs/lab-compute-optimal.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Sequence

import numpy as np

from prmkit.errors import PrmkitError
from prmkit.evaluate.bootstrap import resamples as draw_resamples
from prmkit.lab.stats import holm_draws, percentile_interval

RATIO = 4               # Snell et al. 2024: compute-optimal against best-of-N with 4x the compute
WEIGHT_BY = "last"      # the PRM score that weights an answer's votes (Snell et al. 2024)


def curve_grid(pool: int, budgets: Sequence[int], probe: int) -> list[int]:
    """The best-of-N sizes drawn: 1, 2, 3, 4, 6, 8, 12, ... up to ``pool``, every budget n,
    ``RATIO`` x n, ``RATIO`` x (n + ``probe``), and ``pool`` itself."""
    sizes = {pool}
    for base in (1, 3):
        k = base
        while k <= pool:
            sizes.add(k)
            k *= 2
    for n in budgets:
        sizes |= {n, RATIO * n, RATIO * (n + probe)}
    return sorted(k for k in sizes if k <= pool)


def weighted_draws(records: Sequence[Any], grid: Sequence[int], draws: int,
                   rng: np.random.Generator) -> dict[str, list[float]]:
    """Per problem (the records' groups, each a pool of scored samples), weighted best-of-n
    accuracy for every n of ``grid``: the mean over ``draws`` random n-subsets of the pool,
    each in random order, of whether the candidate :func:`prmkit.select.select` picks with
    ``weighted-majority`` (weights: the last step's score) is right. The draws are those of
    :func:`prmkit.evaluate.bestofn.draw_hits`, fixed by ``rng``."""
    from prmkit.evaluate.bestofn import candidates, draw_hits

    method = "weighted-majority"
    c = candidates(list(records), [method], WEIGHT_BY)
    smallest = min(len(g) for g in c.groups)
    if max(grid) > smallest:
        raise PrmkitError(f"a best-of-N pool of {smallest} samples cannot draw {max(grid)}")
    out = np.zeros((len(c.groups), len(grid)))
    for j, n in enumerate(grid):
        out[:, j] = draw_hits(c, c.groups, [method], n, draws, rng, WEIGHT_BY)[method].mean(axis=0)
    return {records[g[0]].group: [round(float(v), 6) for v in row]
            for g, row in zip(c.groups, out)}


def bon_curve(scores: Sequence[float], correct: Sequence[float]) -> np.ndarray:
    """Expected argmax best-of-n accuracy (the pick: the highest score, ties to the earlier
    sample) for n = 1 .. N over all n-subsets of the pool, exactly (:func:`pick_chances`);
    ``correct`` are 0/1. Reported beside the weighted baseline."""
    n_pool = len(scores)
    if n_pool == 0 or len(correct) != n_pool:
        raise PrmkitError("a best-of-N pool needs as many correctness values as scores, and one "
                          "or more")
    order = sorted(range(n_pool), key=lambda j: (-scores[j], j))
    return pick_chances(n_pool) @ np.array([float(correct[j]) for j in order])


@lru_cache(maxsize=8)
def pick_chances(n_pool: int) -> np.ndarray:
    """(N, N): row n - 1 holds the chance that the sample at rank j (best first) is the best
    of a random n-subset of the pool, C(N-1-j, n-1) / C(N, n)."""
    out = np.zeros((n_pool, n_pool))
    for n in range(1, n_pool + 1):
        total = math.comb(n_pool, n)
        for j in range(n_pool - n + 1):
            out[n - 1, j] = math.comb(n_pool - 1 - j, n - 1) / total
    return out


def samples_needed(grid: Sequence[float], curve: np.ndarray, target: float) -> float:
    """The smallest best-of-N size whose accuracy reaches ``target`` on the curve drawn at
    ``grid``: linear between the two grid sizes where it first crosses it; the first size when
    that one already does; ``inf`` when none does."""
    reached = np.nonzero(curve >= target - 1e-12)[0]
    if len(reached) == 0:
        return math.inf
    k = int(reached[0])
    if k == 0:
        return float(grid[0])
    lo, hi = curve[k - 1], curve[k]
    return float(grid[k - 1] + (grid[k] - grid[k - 1]) * (target - lo) / (hi - lo))


def fold_ids(bins: Sequence[int], folds: int) -> np.ndarray:
    """Each problem's fold: its position within its bin, modulo ``folds`` (the rule of
    :func:`prmkit.search.compute_optimal.compute_optimal`)."""
    seen: dict[int, int] = {}
    out = np.zeros(len(bins), dtype=int)
    for p, b in enumerate(bins):
        out[p] = seen.get(b, 0) % folds
        seen[b] = seen.get(b, 0) + 1
    return out


def best(acc: np.ndarray, tokens: np.ndarray, weights: np.ndarray) -> int:
    """The strategy (row) most accurate under ``weights``; ties to fewer tokens, then the
    earlier row."""
    total = weights.sum()
    a, t = acc @ weights / total, tokens @ weights / total
    a = np.round(a, 12)                               # sums in another order are the same tie
    return int(np.lexsort((np.arange(len(a)), np.round(t, 9), -a))[0])


def cv_choice(acc: np.ndarray, tokens: np.ndarray, bins: np.ndarray, folds: np.ndarray,
              weights: np.ndarray) -> np.ndarray:
    """The strategy each problem gets, by :func:`prmkit.search.compute_optimal.compute_optimal`'s
    rule: per bin the most accurate on the other folds (ties to fewer tokens, then the earlier
    strategy; an empty bin takes the best over all bins). ``acc`` and ``tokens`` are (strategies,
    problems); ``weights`` the problems' bootstrap counts."""
    picked = np.zeros(acc.shape[1], dtype=int)
    for f in np.unique(folds):
        train = np.where(folds != f, weights, 0.0)
        test = folds == f
        fallback = best(acc, tokens, train) if train.sum() > 0 else 0
        for b in np.unique(bins):
            mine = np.where(bins == b, train, 0.0)
            picked[test & (bins == b)] = best(acc, tokens, mine) if mine.sum() > 0 else fallback
    return picked


@dataclass
class Budget:
    """One budget n: the strategies of the choice set run at it, per problem."""

    n: int
    names: list[str]
    acc: np.ndarray               # (strategies, problems), in [0, 1]
    tokens: np.ndarray            # (strategies, problems), generated tokens


@dataclass
class Data:
    """Everything the figures read, per problem (one column per problem, in one order)."""

    budgets: list[Budget]
    grid: list[int]               # the best-of-N sizes of ``curves``
    curves: np.ndarray            # (problems, len(grid)): weighted best-of-n accuracy
    sample_tokens: np.ndarray     # (problems,): tokens of one best-of-N sample, on average
    probe_samples: int            # charged to the compute-optimal search per problem
    probe_tokens: np.ndarray      # (problems,)
    folds: int = 2
    bins: dict[str, np.ndarray] = field(default_factory=dict)   # binning name -> (problems,)

    def at(self, size: int) -> int:
        """The column of ``curves`` that holds best-of-``size``."""
        if size not in self.grid:
            raise PrmkitError(f"best-of-{size} was not drawn (sizes: {self.grid})")
        return self.grid.index(size)


FIGURES = ("n", "co", "single", "ref_n", "ref", "ref4n", "co_tokens", "bon_needed",
           "e_tokens", "censored")


def figures(data: Data, binning: str, weights: np.ndarray, charge_probe: bool) -> dict[str, list]:
    """Per budget n, under the problems' ``weights``: compute-optimal and best-single accuracy
    (both cross-validated over the choice set), weighted best-of-N at ``ref_n`` = RATIO x (n +
    the probe's samples when charged) and at RATIO x n, compute-optimal's tokens (the probe's
    added when charged), and E in tokens: the tokens best-of-N needs to reach compute-optimal's
    accuracy over compute-optimal's tokens, capped at the pool and marked censored where
    best-of-N never reaches it."""
    bins = data.bins[binning]
    folds = fold_ids(bins.tolist(), data.folds)
    one = np.zeros_like(bins)
    total = weights.sum()
    curve = weights @ data.curves / total
    per_sample = float(weights @ data.sample_tokens / total)
    probe_s = data.probe_samples if charge_probe else 0
    probe_t = float(weights @ data.probe_tokens / total) if charge_probe else 0.0
    out: dict[str, list] = {k: [] for k in FIGURES}
    cols = np.arange(len(bins))
    for b in data.budgets:
        co = cv_choice(b.acc, b.tokens, bins, folds, weights)
        single = cv_choice(b.acc, b.tokens, one, folds, weights)
        co_acc = float(b.acc[co, cols] @ weights / total)
        co_tok = float(b.tokens[co, cols] @ weights / total) + probe_t
        needed = samples_needed(data.grid, curve, co_acc)
        censored = math.isinf(needed)
        needed = float(data.grid[-1]) if censored else needed
        ref_n = RATIO * (b.n + probe_s)
        out["n"].append(b.n)
        out["co"].append(co_acc)
        out["single"].append(float(b.acc[single, cols] @ weights / total))
        out["ref_n"].append(ref_n)
        out["ref"].append(float(curve[data.at(ref_n)]))
        out["ref4n"].append(float(curve[data.at(RATIO * b.n)]))
        out["co_tokens"].append(co_tok)
        out["bon_needed"].append(needed)
        out["e_tokens"].append(needed * per_sample / co_tok)
        out["censored"].append(censored)
    return out


def bootstrap(data: Data, binning: str, charge_probe: bool, resamples: int, seed: int
              ) -> list[dict[str, list]]:
    """:func:`figures` on ``resamples`` bootstrap resamples of the problems, the per-bin choice
    and the best single method redone in each (folds stay with their problems)."""
    rng = np.random.default_rng(seed)
    n_problems = data.curves.shape[0]
    out = []
    for idx in draw_resamples(n_problems, resamples, rng):
        counts = np.bincount(idx, minlength=n_problems)
        out.append(figures(data, binning, counts.astype(float), charge_probe))
    return out


def interval(values: Sequence[float], level: float = 0.95) -> list[float]:
    """The central ``level`` percentile interval, rounded as the verdicts read it."""
    return percentile_interval(np.asarray(values, dtype=float), level, digits=4)


def holm(boots: Sequence[Sequence[float]], margin: float, level: float = 0.95
         ) -> list[dict[str, Any]]:
    """Holm's step-down (Holm 1979) over non-inferiority tests read from bootstrap
    distributions of differences, one per test, in the family's order
    (:func:`prmkit.lab.stats.holm_draws`, ties of p taken in that order). The k-th of m in
    Holm's order holds when every earlier one held and the low end of its central
    ``1 - (1 - level) / (m - k)`` interval is above ``-margin``. Returns per test, in the
    family's order, ``holds``, ``p_value``, ``holm_step``, ``holm_level`` and ``ci_holm``."""
    res = holm_draws(dict(enumerate(boots)), margin, level, digits=4)
    return [{"holds": bool(res[i]["holds"]), "p_value": round(res[i]["p"], 5),
             "holm_step": res[i]["step"], "holm_level": res[i]["level"], "ci_holm": res[i]["ci"]}
            for i in range(len(boots))]