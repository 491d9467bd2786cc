"""The statistics of ``prmkit lab rl``: curves over seeds, the area under them, samples to a
target, the claims.

Each run is a curve of exact held-out accuracy after 0 .. U updates; seeds are paired across
arms (seed j draws the same problem batches in every arm).

* :func:`auc`: a run's mean held-out accuracy over updates 1 .. U (the area under its curve
  over the budget, per update). The primary claim is the gold arm's minus outcome-only's,
  paired over seeds (:func:`prmkit.lab.stats.paired_difference`).
* :func:`halfway_target`: ``share`` of the way from the start accuracy to the ceiling.
  :func:`samples_to_reach` reads where a curve first reaches it (linear between updates);
  :func:`sample_ratio` is outcome-only's samples over the arm's, on the mean curves over seeds,
  with a percentile bootstrap over seeds resampled in pairs (Efron and Tibshirani 1993).
  Censoring (a mean curve that never reaches the target within the budget) takes the bound
  least favourable to the arm: the arm censored gives ratio 0; outcome-only censored gives its
  samples as the budget, a lower bound of the ratio. Censored resamples are counted.

The claims' rules are in docs/lab-rl.md.
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np

from prmkit.evaluate.bootstrap import bootstrap_means, resamples
from prmkit.lab.stats import cover, paired_difference, percentile_interval, verdict, write_summary

PRIMARY = "step_rewards_learn_faster"
RATIO_CAP = 100.0
FLAG_SHARE = 0.5


def auc(curve: Sequence[float]) -> float:
    """The mean of ``curve`` over updates 1 .. U (the point at update 0 left out)."""
    return float(np.mean(curve[1:]))


def halfway_target(start: float, ceiling: float, share: float = 0.5) -> float:
    """The accuracy ``share`` of the way from ``start`` to ``ceiling``."""
    return start + share * (ceiling - start)


def samples_to_reach(curve: Sequence[float], per_update: float, target: float) -> float:
    """Samples at which ``curve`` (a point per update, from 0) first reaches ``target``."""
    if curve[0] >= target:
        return 0.0
    for i in range(1, len(curve)):
        if curve[i] >= target:
            frac = (target - curve[i - 1]) / (curve[i] - curve[i - 1])
            return per_update * (i - 1 + frac)
    return math.inf


def sample_ratio(base: np.ndarray, arm: np.ndarray, per_update: float,
                 target: float) -> tuple[float, str]:
    """(ratio, censored) for the mean curves over the rows (seeds) of ``base`` and ``arm``:
    the samples ``base`` needs to reach ``target`` over those ``arm`` needs, and which mean
    curve never reaches it within the budget ("", "arm", "base" or "both"; see the module's
    rule)."""
    b, a = base.mean(axis=0), arm.mean(axis=0)
    need_b, need_a = samples_to_reach(b, per_update, target), samples_to_reach(a, per_update, target)
    if math.isinf(need_a):
        return 0.0, "both" if math.isinf(need_b) else "arm"
    censored = ""
    if math.isinf(need_b):
        need_b, censored = per_update * (len(b) - 1), "base"
    if need_a == 0.0:
        return (1.0 if need_b == 0.0 else RATIO_CAP), censored
    return min(RATIO_CAP, need_b / need_a), censored


def ratio_claim(base: np.ndarray, arm: np.ndarray, per_update: float, target: float,
                bootstrap: int, seed: int) -> dict[str, Any]:
    """The ratio, its paired bootstrap interval over seeds, whether it is above 1, the samples
    each mean curve needs (None: not within the budget), the seeds whose own curve reaches the
    target, and the censored resamples."""
    ratio, censored = sample_ratio(base, arm, per_update, target)
    rng = np.random.default_rng(seed)
    n = len(base)
    draws = [sample_ratio(base[idx], arm[idx], per_update, target)
             for idx in resamples(n, bootstrap, rng)]
    ratio = round(float(ratio), 3)
    lo, hi = cover(ratio, *percentile_interval([d[0] for d in draws]))

    def need(c: np.ndarray) -> float | None:
        x = samples_to_reach(c.mean(axis=0), per_update, target)
        return None if math.isinf(x) else round(x, 2)

    def reached(c: np.ndarray) -> int:
        return int(sum(not math.isinf(samples_to_reach(row, per_update, target)) for row in c))

    return {"holds": bool(lo > 1.0), "difference": ratio, "ratio": ratio, "ci95": [lo, hi],
            "target_accuracy": round(100 * target, 2),
            "samples_outcome": need(base), "samples_arm": need(arm),
            "seeds_reaching": {"outcome": reached(base), "arm": reached(arm)},
            "censored": censored,
            "censored_resamples": {k: sum(d[1] == k for d in draws) for k in ("arm", "base", "both")},
            "seeds": n}


def auc_claim(base: np.ndarray, arm: np.ndarray, bootstrap: int, seed: int,
              margin: float) -> dict[str, Any]:
    """The arm's :func:`auc` minus outcome-only's, in points, paired over seeds, with its 95%
    interval; holds when the interval's lower end is above ``-margin``."""
    c = paired_difference({str(j): auc(r) for j, r in enumerate(arm)},
                          {str(j): auc(r) for j, r in enumerate(base)}, bootstrap, seed, margin)
    lo, hi = cover(c.difference, *c.ci95)
    return {"holds": bool(lo > -margin), "difference": c.difference, "ci95": [lo, hi],
            "margin": margin, "seeds": c.problems}


def mean_ci(values: Sequence[float], bootstrap: int, seed: int) -> tuple[float, list[float]]:
    """The mean of ``values`` and its 95% percentile-bootstrap interval."""
    means = bootstrap_means(values, bootstrap, seed)
    mean = round(float(np.mean(values)), 3)
    return mean, list(cover(mean, *percentile_interval(means)))


def window_change(log: Sequence[dict[str, Any]], key: str, window: int) -> float:
    """The mean of ``key`` over the last ``window`` log rows minus over the first ``window``."""
    values = [float(r[key]) for r in log if r.get(key) is not None]
    return float(np.mean(values[-window:]) - np.mean(values[:window]))


def hacking(runs: Sequence[dict[str, Any]], window: int, bootstrap: int, seed: int) -> dict[str, Any]:
    """The reward-hacking signature of one arm's runs and the diagnostic's verdicts."""
    from prmkit.rl.diagnostics import StepStats, hacking_flags

    acc = [100 * (r["curve"][-1] - r["curve"][0]) for r in runs]
    prm = [window_change(r["log"], "prm", window) for r in runs]
    flagged = [bool(hacking_flags([StepStats(**x) for x in r["log"]], window)) for r in runs]
    d_acc, ci_acc = mean_ci(acc, bootstrap, seed)
    d_prm, ci_prm = mean_ci(prm, bootstrap, seed)
    share = sum(flagged) / len(flagged)
    holds = ci_acc[1] < 0 and ci_prm[0] > 0 and share >= FLAG_SHARE
    return {"holds": bool(holds), "difference": d_acc, "ci95": ci_acc,
            "prm_change": d_prm, "prm_ci95": ci_prm, "flagged_share": round(share, 3),
            "seeds": len(runs)}


def arm_row(cfg: Any, arm: str, runs: Sequence[dict[str, Any]], curves: dict[str, np.ndarray],
            lr: float, target: float, window: int) -> dict[str, Any]:
    """One arm's figures: accuracy at the start and the budget, area under the curve, the
    chance of showing a calculation at the end, the hacking signature, and against
    outcome-only (paired over seeds): the difference at the budget and in area, the samples
    ratio to ``target``."""
    c, b = curves[arm], curves["outcome"]
    final, ci = mean_ci(100 * c[:, -1], cfg.bootstrap, cfg.seed)
    area, area_ci = mean_ci([100 * auc(r) for r in c], cfg.bootstrap, cfg.seed)
    row: dict[str, Any] = {
        "lr": lr, "start_accuracy": round(100 * float(c[0, 0]), 3), "final_accuracy": final,
        "final_ci95": ci, "auc": area, "auc_ci95": area_ci,
        "show_final": round(float(np.mean([r["show"] for r in runs])), 4),
        "hacking": hacking(runs, window, cfg.bootstrap, cfg.seed)}
    if arm != "outcome":
        row["difference_at_budget"] = paired_difference(
            {str(j): x[-1] for j, x in enumerate(c)}, {str(j): x[-1] for j, x in enumerate(b)},
            cfg.bootstrap, cfg.seed).to_dict()
        row["auc_vs_outcome"] = auc_claim(b, c, cfg.bootstrap, cfg.seed, cfg.margin)
        if arm != "prm-only":
            row["sample_ratio"] = ratio_claim(b, c, cfg.problems_per_update * cfg.group, target,
                                              cfg.bootstrap, cfg.seed)
    return row


def summarise(cfg: Any, runs: dict[str, list[dict[str, Any]]], tuned: dict[str, Any],
              models: dict[str, Any], ceiling: float) -> dict[str, Any]:
    """summary.json's content: the claims (the primary named), the ceiling and the target,
    figures per arm, the tuned rates, the trained PRM and ORM."""
    from dataclasses import asdict

    per_update = cfg.problems_per_update * cfg.group
    window = max(2, cfg.updates // 5)
    curves = {a: np.array([r["curve"] for r in rs]) for a, rs in runs.items()}
    start = float(curves["outcome"][0, 0])
    target = halfway_target(start, ceiling, cfg.target_share)
    arms = {arm: arm_row(cfg, arm, runs[arm], curves, tuned[arm]["lr"], target, window)
            for arm in curves}
    claims = {}
    if "gold" in arms:
        claims[PRIMARY] = arms["gold"]["auc_vs_outcome"]
        claims["step_rewards_fewer_samples"] = arms["gold"]["sample_ratio"]
    if "prm-only" in arms:
        claims["prm_only_reward_hacking"] = arms["prm-only"]["hacking"]
    return {"claims": claims, "primary": PRIMARY,
            "ceiling_accuracy": round(100 * ceiling, 3), "start_accuracy": round(100 * start, 3),
            "target_accuracy": round(100 * target, 3), "arms": arms,
            "budget_samples": per_update * cfg.updates, "samples_per_update": per_update,
            "window": window, "trained_prm": models["prm"], "orm": models["orm"],
            "tuning": tuned,
            "mean_curves": {a: [round(float(x), 5) for x in c.mean(axis=0)]
                            for a, c in curves.items()},
            "config": asdict(cfg)}


def lines(result: dict[str, Any]) -> list[str]:
    """The printed summary: the ceiling and target, one line per arm, then the claims, YES or
    NO with intervals."""
    out = [f"  start {result['start_accuracy']:.1f}%, ceiling {result['ceiling_accuracy']:.1f}%, "
           f"target {result['target_accuracy']:.1f}%"]
    for arm, row in result["arms"].items():
        text = (f"  {arm:9s} lr {row['lr']:g}: final {row['final_accuracy']:.1f}% "
                f"[{row['final_ci95'][0]:.1f}, {row['final_ci95'][1]:.1f}], "
                f"mean over updates {row['auc']:.1f}%")
        if "auc_vs_outcome" in row:
            d = row["auc_vs_outcome"]
            text += f"; vs outcome {d['difference']:+.1f} pts [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]"
        if "sample_ratio" in row:
            r = row["sample_ratio"]
            text += f"; sample ratio {r['ratio']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]"
        text += f"; flagged {row['hacking']['flagged_share']:.0%} of seeds"
        out.append(text)
    for name, c in result["claims"].items():
        unit = "x" if name == "step_rewards_fewer_samples" else "points"
        out.append(f"{name}{' (primary)' if name == result['primary'] else ''}: "
                   f"{verdict(c, unit=unit, digits=3 if unit == 'points' else 2)}")
    return out


def write(out: str, result: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> None:
    """summary.json and report.html in ``out``."""
    from prmkit.lab.rl import report as rlreport

    write_summary(out, result)
    rlreport.write_report(os.path.join(out, "report.html"), result, runs)
