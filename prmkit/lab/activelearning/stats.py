"""Label efficiency of active learning, read off fitted learning curves, with its interval.

Lightman et al. 2023 (figure 4): active learning is about 2.6 times as data-efficient. Each
arm's quality q (best-of-N accuracy, points) is fitted as ``q = a_arm + b * log2(L)`` in the
labels per problem L, one slope b shared by the arms; the efficiency ratio is
``r = 2 ** ((a_active - a_uniform) / b)``, undefined when b <= 0. The interval resamples test
problems and seeds together, paired across arms. ``active_learning_efficiency`` holds when the
interval is above 1 and at most 2.5% of the resamples have no ratio (docs/lab-active-learning.md).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from prmkit.evaluate.bootstrap import resamples
from prmkit.lab import stats

ARMS = ("uniform", "active", "random-wrong")
PAPER_RATIO = 2.6
BOOTSTRAP = 2000


def shared_slope_ratio(xs: Sequence[float], active: Sequence[float],
                       uniform: Sequence[float]) -> float | None:
    """The efficiency ratio of two curves measured at the same ``xs`` (log2 labels per
    problem), fitted with one shared slope; None when the slope is not positive."""
    x = np.asarray(xs, dtype=float)
    ya, yu = np.asarray(active, dtype=float), np.asarray(uniform, dtype=float)
    dx = x - x.mean()
    slope = float((dx @ (ya - ya.mean()) + dx @ (yu - yu.mean())) / (2 * (dx @ dx)))
    if not slope > 1e-9:
        return None
    return float(2.0 ** ((ya.mean() - yu.mean()) / slope))


def resampled_quality(acc: np.ndarray, pidx: np.ndarray, sidx: np.ndarray) -> np.ndarray:
    """The mean quality (points) of each resample: ``acc`` is (seeds, problems) in 0..1,
    ``pidx`` (B, problems) and ``sidx`` (B, seeds) the resampled indices."""
    per_seed = acc[:, pidx].mean(axis=-1)                          # (seeds, B)
    picked = np.take_along_axis(per_seed.T, sidx, axis=1)          # (B, seeds)
    return 100.0 * picked.mean(axis=1)


def efficiency(curves: dict[str, dict[int, np.ndarray]], a: str, b: str, budgets: Sequence[int],
               seed: int, bootstrap: int = BOOTSTRAP) -> dict[str, Any]:
    """The ratio of arm ``a`` over arm ``b`` (labels ``b`` needs / labels ``a`` needs), with
    its bootstrap interval over problems and seeds; ``curves[arm][k]`` is (seeds, problems)."""
    xs = np.log2(budgets)
    point = shared_slope_ratio(xs, [100 * curves[a][k].mean() for k in budgets],
                               [100 * curves[b][k].mean() for k in budgets])
    seeds, problems = curves[a][budgets[0]].shape
    rng = np.random.default_rng(seed)
    pidx = resamples(problems, bootstrap, rng)
    sidx = resamples(seeds, bootstrap, rng)
    qa = np.stack([resampled_quality(curves[a][k], pidx, sidx) for k in budgets], axis=1)
    qb = np.stack([resampled_quality(curves[b][k], pidx, sidx) for k in budgets], axis=1)
    ratios = [shared_slope_ratio(xs, qa[i], qb[i]) for i in range(bootstrap)]
    defined = np.array([r for r in ratios if r is not None])
    undefined = bootstrap - len(defined)
    lo, hi = stats.percentile_interval(defined)
    diff = round(point, 3) if point is not None else 0.0
    ci95 = [min(lo, diff), max(hi, diff)]   # the interval printed is the one that decides
    holds = point is not None and undefined <= 0.025 * bootstrap and ci95[0] > 1.0
    return {"holds": bool(holds), "difference": diff, "ci95": ci95,
            "problems": problems, "seeds": seeds, "defined": point is not None,
            "undefined_resamples": undefined,
            "paper": PAPER_RATIO}


def figures(config: Any, results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The curves (quality and step AUC per arm and budget, bands over problems and seeds),
    the efficiency ratios and the claim."""
    budgets = config.budget_list
    problems = sorted(results[0]["accuracy"])
    curves: dict[str, dict[int, np.ndarray]] = {arm: {} for arm in ARMS}
    aucs: dict[str, dict[int, list]] = {arm: {k: [] for k in budgets} for arm in ARMS}
    for arm in ARMS:
        for k in budgets:
            rows = sorted((r for r in results if r["arm"] == arm and r["budget"] == k),
                          key=lambda r: r["seed"])
            curves[arm][k] = np.array([[r["accuracy"][p] for p in problems] for r in rows])
            aucs[arm][k] = [r["step_auc"] for r in rows]
    rng = np.random.default_rng(config.world.seed)
    seeds = config.seeds
    pidx = resamples(len(problems), BOOTSTRAP, rng)
    sidx = resamples(seeds, BOOTSTRAP, rng)
    table = {}
    for arm in ARMS:
        table[arm] = []
        for k in budgets:
            q = resampled_quality(curves[arm][k], pidx, sidx)
            auc = [a for a in aucs[arm][k] if a is not None]
            table[arm].append({"labels": k, "accuracy": round(100 * float(curves[arm][k].mean()), 3),
                               "ci95": stats.percentile_interval(q),
                               "step_auc": round(float(np.mean(auc)), 4) if auc else None})
    ratios = {f"{a}/{b}": efficiency(curves, a, b, budgets, config.world.seed)
              for a, b in (("active", "uniform"), ("random-wrong", "uniform"),
                           ("active", "random-wrong"))}
    claim = {k: v for k, v in ratios["active/uniform"].items()}
    return {"budgets": budgets, "curves": table, "ratios": ratios,
            "claims": {"active_learning_efficiency": claim}}
