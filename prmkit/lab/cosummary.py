"""The figures, claims, ``summary.json`` and report of ``prmkit lab compute-optimal``.

Both claims are on the PRM-predicted bins with the probe charged:
``efficiency_vs_best_of_n`` (E at the budget where it peaks, interval above 1; beside it Snell
et al. 2024's 4 as ``paper`` and ``interval_excludes_paper``; a censored E is a lower bound)
and ``difficulty_beats_best_single`` (compute-optimal minus the best single method averaged
over the budgets, interval above 0). The oracle bins are reported beside them, not as claims
(docs/lab-compute-optimal.md).
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any, Mapping

import numpy as np

from prmkit.lab.stats import write_summary
from prmkit.lab.costats import Budget, Data, bon_curve, bootstrap, figures, interval

PAPER_EFFICIENCY = 4.0
BINNINGS = (("predicted", True), ("oracle", False))   # (bins, probe charged)


def mean_tokens(pool: Mapping[str, Any]) -> float:
    """Generated tokens of one best-of-N sample, over the whole pool."""
    rows = list(pool["tokens"].values())
    return sum(sum(r) for r in rows) / max(1, sum(len(r) for r in rows))


def build_data(config: Any, pids: list[str], oracle: Mapping[str, Any], probe: Mapping[str, Any],
               pool: Mapping[str, Any], cells: Mapping[str, Mapping[str, Any]]) -> Data:
    """The arrays :mod:`prmkit.lab.costats` reads, from the stages' files."""
    from prmkit.search.compute_optimal import difficulty_bins

    curves = np.array([bon_curve(pool["score"][p], pool["correct"][p]) for p in pids])
    per_sample = np.array([float(np.mean(pool["tokens"][p])) for p in pids])
    budgets = []
    for n in config.grid():
        names, acc, tok = ["best-of-n"], [curves[:, n - 1]], [n * per_sample]
        for key, cell in cells.items():
            if cell["n"] == n:
                names.append(key.split("@")[0])
                acc.append(np.array([cell["rows"][p][0] for p in pids], dtype=float))
                tok.append(np.array([cell["rows"][p][1] for p in pids], dtype=float))
        budgets.append(Budget(n, names, np.array(acc), np.array(tok)))
    oracle_bins = difficulty_bins({p: 1.0 - oracle["pass1"][p] for p in pids}, config.bins)
    predicted = difficulty_bins(dict(probe["difficulty"]), config.bins)
    return Data(budgets, curves, per_sample, config.probe_n,
                np.array([float(probe["tokens"][p]) for p in pids]), config.folds,
                {"oracle": np.array([oracle_bins[p] for p in pids]),
                 "predicted": np.array([predicted[p] for p in pids])})


def prm_quality(prm: Any, records: list[Any]) -> dict[str, Any]:
    """The trained PRM on held-out lab candidates against gold labels: the step AUC, and the AUC
    of its hazard separating first errors from the right steps before them, split into wrong
    calculations and the rest."""
    from prmkit.calculator import annotate
    from prmkit.evaluate.stepwise import auc
    from prmkit.lab.world.problems import gold_labels

    scores, labels = [], []
    right, calc, other = [], [], []
    for r in records:
        gold = gold_labels(r.problem, r.steps)
        scores += prm.score([r.problem], [r.steps])[0]
        labels += [bool(x) for x in gold]
        for step, label in zip(r.steps, gold):
            if label:
                right.append(prm.hazard(step))
                continue
            (calc if annotate(step) != step else other).append(prm.hazard(step))
            break

    def split(wrong: list[float]) -> float | None:
        value = auc(right + wrong, [True] * len(right) + [False] * len(wrong))
        return None if value is None else round(value, 4)

    step = auc(scores, labels)
    return {"candidates": len(records), "step_auc": None if step is None else round(step, 4),
            "first_error_auc_calculation": split(calc), "first_errors_calculation": len(calc),
            "first_error_auc_other": split(other), "first_errors_other": len(other)}


def per_bin(data: Data, binning: str) -> list[dict[str, Any]]:
    """Per budget and bin, every strategy's accuracy on all problems and the one chosen."""
    bins = data.bins[binning]
    out = []
    for b in data.budgets:
        for k in sorted(set(bins.tolist())):
            mine = bins == k
            acc = b.acc[:, mine].mean(axis=1)
            out.append({"n": b.n, "bin": k, "problems": int(mine.sum()),
                        "accuracy": {name: round(float(a), 4) for name, a in zip(b.names, acc)},
                        "chosen": b.names[int(np.argmax(np.round(acc, 12)))]})
    return out


def claims(point: dict[str, list], boots: list[dict[str, list]]) -> dict[str, Any]:
    """The two claims from the predicted-bin figures."""
    e = point["e_samples"]
    k = int(np.argmax(e))
    lo, hi = interval([b["e_samples"][k] for b in boots])
    diff = [100 * float(np.mean(np.subtract(f["co"], f["single"]))) for f in [point] + boots]
    dlo, dhi = interval(diff[1:])
    return {
        "efficiency_vs_best_of_n": {
            "holds": bool(lo > 1.0), "difference": round(e[k], 4), "ci95": [lo, hi],
            "budget": point["n"][k], "censored": point["censored"][k],
            "paper": PAPER_EFFICIENCY, "interval_excludes_paper": not lo <= PAPER_EFFICIENCY <= hi,
            "unit": "best-of-N samples needed / compute-optimal samples (probe included)"},
        "difficulty_beats_best_single": {
            "holds": bool(dlo > 0.0), "difference": round(diff[0], 4), "ci95": [dlo, dhi],
            "unit": "points, compute-optimal minus the best single method, mean over budgets"},
    }


def finish(config: Any, pids: list[str], oracle: Mapping[str, Any], probe: Mapping[str, Any],
           pool: Mapping[str, Any], cells: Mapping[str, Mapping[str, Any]], out: str,
           prm: Mapping[str, Any]) -> dict[str, Any]:
    """Figures, intervals and claims; ``summary.json`` and ``report.html`` in ``out``."""
    data = build_data(config, pids, oracle, probe, pool, cells)
    results: dict[str, Any] = {}
    for binning, charged in BINNINGS:
        point = figures(data, binning, np.ones(len(pids)), charged)
        boots = bootstrap(data, binning, charged, config.resamples, config.seed)
        ci = {key: [interval([b[key][i] for b in boots]) for i in range(len(point["n"]))]
              for key in ("co", "single", "e_samples", "e_tokens")}
        results[binning] = {"probe_charged": charged, "point": point, "ci95": ci,
                            "per_bin": per_bin(data, binning), "boots": boots}
    summary = {
        "config": asdict(config),
        "claims": claims(results["predicted"]["point"], results["predicted"]["boots"]),
        "prm": dict(prm),
        "oracle_pass1_per_bin": [round(float(np.mean([oracle["pass1"][p] for p, b in
                                                       zip(pids, data.bins["oracle"]) if b == k])), 4)
                                 for k in range(config.bins)],
        "budgets": config.grid(),
        "strategies": {b.n: b.names for b in data.budgets},
        "accuracy": {b.n: {name: round(float(a.mean()), 4) for name, a in zip(b.names, b.acc)}
                     for b in data.budgets},
        "tokens": {b.n: {name: round(float(t.mean()), 1) for name, t in zip(b.names, b.tokens)}
                   for b in data.budgets},
        "best_of_n_curve": [round(float(v), 5) for v in data.curves.mean(axis=0)],
        "tokens_per_sample": round(float(data.sample_tokens.mean()), 2),
        "probe_tokens": round(float(data.probe_tokens.mean()), 1),
        "difficulty": {k: {kk: vv for kk, vv in v.items() if kk != "boots"}
                       for k, v in results.items()},
    }
    write_summary(out, summary, indent=1)
    from prmkit.lab.coreport import write_report

    write_report(os.path.join(out, "report.html"), summary)
    return summary


def lines(summary: Mapping[str, Any]) -> list[str]:
    """The printed summary: the claims, then compute-optimal per budget."""
    c = summary["claims"]
    e, d = c["efficiency_vs_best_of_n"], c["difficulty_beats_best_single"]
    q = summary["prm"]
    out = [f"the trained PRM on {q['candidates']} held-out candidates: step AUC {q['step_auc']}; "
           f"first errors against the right steps before them: wrong calculations AUC "
           f"{q['first_error_auc_calculation']} ({q['first_errors_calculation']}), other errors "
           f"AUC {q['first_error_auc_other']} ({q['first_errors_other']})"]
    out += [f"efficiency_vs_best_of_n: {'YES' if e['holds'] else 'NO'}: E = {e['difference']:.2f}"
           f"{' (censored: at least)' if e['censored'] else ''} at n = {e['budget']}, 95% CI "
           f"[{e['ci95'][0]:.2f}, {e['ci95'][1]:.2f}]; Snell et al.: up to {e['paper']:.0f}x, "
           f"{'outside' if e['interval_excludes_paper'] else 'inside'} the interval",
           f"difficulty_beats_best_single: {'YES' if d['holds'] else 'NO'}: "
           f"{d['difference']:+.2f} points, 95% CI [{d['ci95'][0]:+.2f}, {d['ci95'][1]:+.2f}]"]
    for binning, res in summary["difficulty"].items():
        p, ci = res["point"], res["ci95"]
        for i, n in enumerate(p["n"]):
            out.append(f"  {binning} bins, n={n}: compute-optimal {100 * p['co'][i]:.1f}% vs "
                       f"best single {100 * p['single'][i]:.1f}%, best-of-N needs "
                       f"{p['bon_n'][i]:.1f}{'+' if p['censored'][i] else ''} samples: E = "
                       f"{p['e_samples'][i]:.2f} [{ci['e_samples'][i][0]:.2f}, "
                       f"{ci['e_samples'][i][1]:.2f}], in tokens {p['e_tokens'][i]:.2f}")
    return out
