"""The statistics of ``prmkit lab compute-optimal``: exact best-of-N curves, the per-bin choice
vectorised over bootstrap weights, and Snell et al. 2024's efficiency against best-of-N
(figure 4). Definitions: docs/lab-compute-optimal.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Sequence

import numpy as np

from prmkit.errors import PrmkitError
from prmkit.lab.stats import percentile_interval


def bon_curve(scores: Sequence[float], correct: Sequence[float]) -> np.ndarray:
    """Expected best-of-n accuracy for n = 1 .. N over all n-subsets of the pool, exactly
    (:func:`pick_chances`); ``scores`` pick (higher is better, ties to the earlier sample),
    ``correct`` are 0/1."""
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


def samples_needed(curve: np.ndarray, target: float) -> float:
    """The smallest best-of-N budget whose accuracy reaches ``target``: linear between the
    integers where the curve first crosses it; 1 when one sample is enough; ``inf`` when
    none does."""
    reached = np.nonzero(curve >= target - 1e-12)[0]
    if len(reached) == 0:
        return math.inf
    k = int(reached[0])
    if k == 0:
        return 1.0
    lo, hi = curve[k - 1], curve[k]
    return k + (target - lo) / (hi - lo)          # k = n - 1 of curve[k - 1], 1-based


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
    """One budget n of the grid: the strategies run at it, per problem."""

    n: int
    names: list[str]
    acc: np.ndarray               # (strategies, problems), in [0, 1]
    tokens: np.ndarray            # (strategies, problems), generated tokens


@dataclass
class Data:
    """Everything the figures read, per problem (one column per problem, in one order)."""

    budgets: list[Budget]
    curves: np.ndarray            # (problems, N): best-of-n accuracy, n = 1 .. N
    sample_tokens: np.ndarray     # (problems,): tokens of one best-of-N sample, on average
    probe_samples: int            # charged to the compute-optimal search per problem
    probe_tokens: np.ndarray      # (problems,)
    folds: int = 2
    bins: dict[str, np.ndarray] = field(default_factory=dict)   # binning name -> (problems,)


def figures(data: Data, binning: str, weights: np.ndarray, charge_probe: bool) -> dict[str, list]:
    """Per budget: compute-optimal and best-single accuracy (cross-validated), their tokens, the
    best-of-N budget that matches compute-optimal, and E(n) = that budget / cost(n) in samples and
    in tokens, capped at N / cost(n) and marked censored when best-of-N never reaches it."""
    bins = data.bins[binning]
    folds = fold_ids(bins.tolist(), data.folds)
    one = np.zeros_like(bins)
    total = weights.sum()
    curve = weights @ data.curves / total
    per_sample = float(weights @ data.sample_tokens / total)
    probe_s = data.probe_samples if charge_probe else 0
    probe_t = float(weights @ data.probe_tokens / total) if charge_probe else 0.0
    out: dict[str, list] = {k: [] for k in ("n", "co", "single", "co_tokens", "single_tokens",
                                            "bon_n", "e_samples", "e_tokens", "censored")}
    cols = np.arange(len(bins))
    for b in data.budgets:
        co = cv_choice(b.acc, b.tokens, bins, folds, weights)
        single = cv_choice(b.acc, b.tokens, one, folds, weights)
        co_acc = float(b.acc[co, cols] @ weights / total)
        co_tok = float(b.tokens[co, cols] @ weights / total) + probe_t
        needed = samples_needed(curve, co_acc)
        censored = math.isinf(needed)
        needed = float(len(curve)) if censored else needed
        out["n"].append(b.n)
        out["co"].append(co_acc)
        out["single"].append(float(b.acc[single, cols] @ weights / total))
        out["co_tokens"].append(co_tok)
        out["single_tokens"].append(float(b.tokens[single, cols] @ weights / total))
        out["bon_n"].append(needed)
        out["e_samples"].append(needed / (b.n + probe_s))
        out["e_tokens"].append(needed * per_sample / co_tok)
        out["censored"].append(censored)
    return out


def bootstrap(data: Data, binning: str, charge_probe: bool, resamples: int, seed: int
              ) -> list[dict[str, list]]:
    """:func:`figures` on ``resamples`` bootstrap resamples of the problems (the choice redone
    in each)."""
    rng = np.random.default_rng(seed)
    n_problems = data.curves.shape[0]
    out = []
    for _ in range(resamples):
        counts = np.bincount(rng.integers(0, n_problems, n_problems), minlength=n_problems)
        out.append(figures(data, binning, counts.astype(float), charge_probe))
    return out


def interval(values: Sequence[float]) -> list[float]:
    """The 2.5th and 97.5th percentiles, rounded as the verdicts read them."""
    return percentile_interval(np.asarray(values, dtype=float), digits=4)
