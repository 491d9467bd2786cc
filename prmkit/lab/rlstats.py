"""The statistics of ``prmkit lab rl``: curves over seeds, samples to a target, the claims.

Each run is a curve of exact held-out accuracy after 0 .. U updates; seeds are paired across
arms. :func:`samples_to_reach` reads where the mean curve first reaches a target (linear
between updates); :func:`sample_ratio` is outcome-only's samples to its own final mean accuracy
over the arm's (0 when the arm never reaches it, at most :data:`RATIO_CAP`), with a percentile
bootstrap over seeds resampled in pairs (Efron and Tibshirani 1993). The claims' rules are in
docs/lab-rl.md.
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np

from prmkit.lab.stats import cover, percentile_interval, write_summary

RATIO_CAP = 100.0
FLAG_SHARE = 0.5


def samples_to_reach(curve: Sequence[float], per_update: float, target: float) -> float:
    """Samples at which ``curve`` (a point per update, from 0) first reaches ``target``."""
    if curve[0] >= target:
        return 0.0
    for i in range(1, len(curve)):
        if curve[i] >= target:
            frac = (target - curve[i - 1]) / (curve[i] - curve[i - 1])
            return per_update * (i - 1 + frac)
    return math.inf


def sample_ratio(base: np.ndarray, arm: np.ndarray, per_update: float) -> tuple[float, float]:
    """(ratio, target) for mean curves over the rows (seeds) of ``base`` and ``arm``."""
    b, a = base.mean(axis=0), arm.mean(axis=0)
    target = float(b[-1])
    need_b, need_a = samples_to_reach(b, per_update, target), samples_to_reach(a, per_update, target)
    if need_a == 0.0:
        return (1.0 if need_b == 0.0 else RATIO_CAP), target
    return min(RATIO_CAP, need_b / need_a), target


def ratio_claim(base: np.ndarray, arm: np.ndarray, per_update: float, bootstrap: int,
                seed: int) -> dict[str, Any]:
    """The ratio, its paired bootstrap interval over seeds, and whether it is above 1."""
    ratio, target = sample_ratio(base, arm, per_update)
    rng = np.random.default_rng(seed)
    n = len(base)
    draws = [sample_ratio(base[idx], arm[idx], per_update)[0]
             for idx in rng.integers(0, n, size=(bootstrap, n))]
    ratio = round(ratio, 3)
    lo, hi = cover(ratio, *percentile_interval(draws))
    return {"holds": bool(lo > 1.0), "difference": ratio, "ratio": ratio,
            "ci95": [lo, hi], "target_accuracy": round(100 * target, 2), "seeds": n}


def mean_ci(values: Sequence[float], bootstrap: int, seed: int) -> tuple[float, list[float]]:
    """The mean of ``values`` and its 95% percentile-bootstrap interval."""
    v = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(bootstrap, len(v)))].mean(axis=1)
    mean = round(float(v.mean()), 3)
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


def summarise(cfg: Any, runs: dict[str, list[dict[str, Any]]], tuned: dict[str, Any],
              prm: dict[str, Any]) -> dict[str, Any]:
    """summary.json's content: claims, figures per arm, the tuned rates, the trained PRM."""
    from dataclasses import asdict

    from prmkit.evaluate.paired import paired_difference

    per_update = cfg.problems_per_update * cfg.group
    window = max(2, cfg.updates // 5)
    curves = {a: np.array([r["curve"] for r in rs]) for a, rs in runs.items()}
    base = {str(j): c[-1] for j, c in enumerate(curves["outcome"])}
    arms: dict[str, Any] = {}
    for arm, c in curves.items():
        final, ci = mean_ci(100 * c[:, -1], cfg.bootstrap, cfg.seed)
        row = {"lr": tuned[arm]["lr"], "final_accuracy": final, "final_ci95": ci,
               "start_accuracy": round(100 * float(c[0, 0]), 3),
               "hacking": hacking(runs[arm], window, cfg.bootstrap, cfg.seed)}
        if arm != "outcome":
            row["difference_at_budget"] = paired_difference(
                {str(j): x[-1] for j, x in enumerate(c)}, base, cfg.bootstrap, cfg.seed).to_dict()
            if arm != "prm-only":
                row["sample_ratio"] = ratio_claim(curves["outcome"], c, per_update,
                                                  cfg.bootstrap, cfg.seed)
        arms[arm] = row
    claims = {}
    if "gold" in arms:
        claims["step_rewards_fewer_samples"] = arms["gold"]["sample_ratio"]
    if "prm-only" in arms:
        claims["prm_only_reward_hacking"] = arms["prm-only"]["hacking"]
    return {"claims": claims, "arms": arms, "budget_samples": per_update * cfg.updates,
            "samples_per_update": per_update, "window": window, "trained_prm": prm,
            "mean_curves": {a: [round(float(x), 5) for x in c.mean(axis=0)]
                            for a, c in curves.items()},
            "config": asdict(cfg)}


def lines(result: dict[str, Any]) -> list[str]:
    """The printed summary: one line per arm, then the claims, YES or NO with intervals."""
    out = []
    for arm, row in result["arms"].items():
        text = (f"  {arm:9s} lr {row['lr']:g}: accuracy {row['start_accuracy']:.1f}% -> "
                f"{row['final_accuracy']:.1f}% [{row['final_ci95'][0]:.1f}, {row['final_ci95'][1]:.1f}]")
        if "difference_at_budget" in row:
            d = row["difference_at_budget"]
            text += f"; vs outcome {d['difference']:+.1f} pts [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]"
        if "sample_ratio" in row:
            r = row["sample_ratio"]
            text += f"; sample ratio {r['ratio']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]"
        text += f"; flagged {row['hacking']['flagged_share']:.0%} of seeds"
        out.append(text)
    for name, c in result["claims"].items():
        out.append(f"{name}: {'YES' if c['holds'] else 'NO'} ({c['difference']:+.3f}, 95% CI "
                   f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}])")
    return out


def write(out: str, result: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> None:
    """summary.json and report.html in ``out``."""
    from prmkit.lab import rlreport

    write_summary(out, result)
    rlreport.write_report(os.path.join(out, "report.html"), result, runs)
