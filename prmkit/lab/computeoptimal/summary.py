"""The figures, claims, ``summary.json`` and report of ``prmkit lab compute-optimal``.

The claims, all on the PRM-predicted bins (docs/lab-compute-optimal.md):

* ``compute_optimal_at_N_matches_best_of_R`` for every budget N of ``--budgets``: compute-optimal
  at N, the probe charged, against weighted best-of-N at R = 4 x (N + the probe's samples);
  non-inferiority with ``--margin`` points, one family under Holm's step-down;
* ``difficulty_beats_best_single``: compute-optimal minus the best single method of the same
  choice set, averaged over ``--single-budgets``; holds when the 95% interval is above 0.

E in tokens, the oracle bins, compute-optimal against best-of-4N and the searches run beside
the choice set are reported, not claimed.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any, Mapping

import numpy as np

from prmkit.lab.computeoptimal.stats import (RATIO, Budget, Data, bon_curve, bootstrap, figures, holm,
                                interval)
from prmkit.lab.stats import cover, verdict, write_summary

BINNINGS = (("predicted", True), ("oracle", False))   # (bins, probe charged)
WEIGHTED = "weighted best-of-n"


def mean_tokens(pool: Mapping[str, Any]) -> float:
    """Generated tokens of one best-of-N sample, over the whole pool."""
    rows = list(pool["tokens"].values())
    return sum(sum(r) for r in rows) / max(1, sum(len(r) for r in rows))


def build_data(config: Any, pids: list[str], oracle: Mapping[str, Any], probe: Mapping[str, Any],
               pool: Mapping[str, Any], cells: Mapping[str, Mapping[str, Any]]) -> Data:
    """The arrays :mod:`prmkit.lab.computeoptimal.stats` reads, from the stages' files: per budget, weighted
    best-of-n and the searches of ``--methods`` (the choice set)."""
    from prmkit.search.compute_optimal import difficulty_bins

    grid = config.curve_grid()
    curves = np.array([pool["weighted"][p] for p in pids])
    per_sample = np.array([float(np.mean(pool["tokens"][p])) for p in pids])
    chosen = {f"{name}(m={m})" for name, m in config.strategies()}
    budgets = []
    for n in config.grid():
        names, acc, tok = [WEIGHTED], [curves[:, grid.index(n)]], [n * per_sample]
        for key, cell in cells.items():
            if cell["n"] == n and key.split("@")[0] in chosen:
                names.append(key.split("@")[0])
                acc.append(np.array([cell["rows"][p][0] for p in pids], dtype=float))
                tok.append(np.array([cell["rows"][p][1] for p in pids], dtype=float))
        budgets.append(Budget(n, names, np.array(acc), np.array(tok)))
    oracle_bins = difficulty_bins({p: 1.0 - oracle["pass1"][p] for p in pids}, config.bins)
    predicted = difficulty_bins(dict(probe["difficulty"]), config.bins)
    return Data(budgets, grid, curves, per_sample, config.probe_n,
                np.array([float(probe["tokens"][p]) for p in pids]), config.folds,
                {"oracle": np.array([oracle_bins[p] for p in pids]),
                 "predicted": np.array([predicted[p] for p in pids])})


def prm_quality(prm: Any, records: list[Any]) -> dict[str, Any]:
    """The trained PRM on held-out lab candidates against gold labels: the step AUC, and the AUC
    of its hazard separating first errors from the right steps before them, split into wrong
    calculations and the rest."""
    from prmkit.calculator import annotate
    from prmkit.evaluate.stepwise import auc
    from prmkit.world.problems import gold_labels

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


def _points(f: Mapping[str, list], i: int) -> float:
    return 100.0 * (f["co"][i] - f["ref"][i])


def claims(point: Mapping[str, list], boots: list[Mapping[str, list]], margin: float,
           single_budgets: list[int]) -> dict[str, Any]:
    """The claims from the predicted-bin figures (probe charged): one non-inferiority claim per
    budget, the family under :func:`prmkit.lab.computeoptimal.stats.holm`, and the beats-best-single claim."""
    out: dict[str, Any] = {}
    diffs = [[_points(b, i) for b in boots] for i in range(len(point["n"]))]
    for i, h in enumerate(holm(diffs, margin)):
        x = round(_points(point, i), 4)
        lo, hi = cover(x, *interval(diffs[i]))
        n, ref = point["n"][i], point["ref_n"][i]
        out[f"compute_optimal_at_{n}_matches_best_of_{ref}"] = {
            "holds": h["holds"], "difference": x, "ci95": [lo, hi], "margin": margin,
            "budget": n, "best_of_n": ref, "compute_optimal": round(100 * point["co"][i], 2),
            "weighted_best_of_n": round(100 * point["ref"][i], 2), **h,
            "unit": f"points, compute-optimal at n (probe charged) minus weighted best-of-"
                    f"{RATIO}(n + probe); holds when the Holm-level interval is above -margin"}
    at = [point["n"].index(n) for n in single_budgets]

    def gain(f: Mapping[str, list]) -> float:
        return 100.0 * float(np.mean([f["co"][i] - f["single"][i] for i in at]))
    x = round(gain(point), 4)
    lo, hi = cover(x, *interval([gain(b) for b in boots]))
    out["difficulty_beats_best_single"] = {
        "holds": bool(lo > 0.0), "difference": x, "ci95": [lo, hi], "budgets": single_budgets,
        "unit": "points, compute-optimal minus the best single method of the choice set, mean "
                "over the budgets; holds when the interval is above 0"}
    return out


def described(data: Data, point: Mapping[str, list], boots: list[Mapping[str, list]]
              ) -> dict[str, Any]:
    """A binning's figures with their 95% intervals, and compute-optimal minus best-of-4n."""
    ci = {key: [interval([b[key][i] for b in boots]) for i in range(len(point["n"]))]
          for key in ("co", "single", "ref", "e_tokens")}
    vs = [[100.0 * (f["co"][i] - f["ref4n"][i]) for f in [point] + boots]
          for i in range(len(point["n"]))]
    return {"point": point, "ci95": ci, "minus_best_of_4n": [
        {"n": n, "difference": round(v[0], 4), "ci95": list(cover(round(v[0], 4), *interval(v[1:])))}
        for n, v in zip(point["n"], vs)]}


def finish(config: Any, pids: list[str], oracle: Mapping[str, Any], probe: Mapping[str, Any],
           pool: Mapping[str, Any], cells: Mapping[str, Mapping[str, Any]], out: str,
           prm: Mapping[str, Any]) -> dict[str, Any]:
    """Figures, intervals and claims; ``summary.json`` and ``report.html`` in ``out``."""
    data = build_data(config, pids, oracle, probe, pool, cells)
    results: dict[str, Any] = {}
    found: dict[str, Any] = {}
    for binning, charged in BINNINGS:
        point = figures(data, binning, np.ones(len(pids)), charged)
        boots = bootstrap(data, binning, charged, config.resamples, config.seed)
        results[binning] = {"probe_charged": charged, **described(data, point, boots),
                            "per_bin": per_bin(data, binning)}
        if binning == "predicted":
            found = claims(point, boots, config.margin, config.single_grid())
    argmax = np.array([bon_curve(pool["score"][p], pool["correct"][p]) for p in pids]).mean(axis=0)
    summary = {
        "config": asdict(config),
        "claims": found,
        "prm": dict(prm),
        "oracle_pass1_per_bin": [round(float(np.mean([oracle["pass1"][p] for p, b in
                                                       zip(pids, data.bins["oracle"]) if b == k])), 4)
                                 for k in range(config.bins)],
        "budgets": config.grid(),
        "accuracy": accuracy_table(data, cells, pids),
        "best_of_n": {"n": data.grid,
                      "weighted": [round(float(v), 5) for v in data.curves.mean(axis=0)],
                      "argmax_last": [round(float(argmax[k - 1]), 5) for k in data.grid]},
        "tokens_per_sample": round(float(data.sample_tokens.mean()), 2),
        "probe_tokens": round(float(data.probe_tokens.mean()), 1),
        "difficulty": results,
    }
    write_summary(out, summary, indent=1)
    from prmkit.lab.computeoptimal.report import write_report

    write_report(os.path.join(out, "report.html"), summary)
    return summary


def accuracy_table(data: Data, cells: Mapping[str, Mapping[str, Any]], pids: list[str]
                   ) -> dict[str, dict[str, list[float]]]:
    """Per strategy (weighted best-of-n, the choice set and the searches beside it) and budget:
    accuracy and mean generated tokens, on all problems."""
    out: dict[str, dict[str, list[float]]] = {}
    for b in data.budgets:
        row = out.setdefault(WEIGHTED, {})
        row[str(b.n)] = [round(float(b.acc[0].mean()), 4), round(float(b.tokens[0].mean()), 1)]
    for key, cell in cells.items():
        rows = [cell["rows"][p] for p in pids]
        out.setdefault(key.split("@")[0], {})[str(cell["n"])] = [
            round(float(np.mean([r[0] for r in rows])), 4),
            round(float(np.mean([r[1] for r in rows])), 1)]
    return out


def lines(summary: Mapping[str, Any]) -> list[str]:
    """The printed summary: the PRM, the claims, then compute-optimal per budget."""
    q = summary["prm"]
    out = [f"the trained PRM on {q['candidates']} held-out candidates: step AUC {q['step_auc']}; "
           f"first errors against the right steps before them: wrong calculations AUC "
           f"{q['first_error_auc_calculation']} ({q['first_errors_calculation']}), other errors "
           f"AUC {q['first_error_auc_other']} ({q['first_errors_other']})"]
    for name, c in summary["claims"].items():
        out.append(f"{name}: {verdict(c, digits=2)}")
    for binning, res in summary["difficulty"].items():
        p, ci = res["point"], res["ci95"]
        for i, n in enumerate(p["n"]):
            out.append(f"  {binning} bins, n={n}: compute-optimal {100 * p['co'][i]:.1f}%, best "
                       f"single {100 * p['single'][i]:.1f}%, weighted best-of-{p['ref_n'][i]} "
                       f"{100 * p['ref'][i]:.1f}%; E in tokens {p['e_tokens'][i]:.2f}"
                       f"{'+' if p['censored'][i] else ''} [{ci['e_tokens'][i][0]:.2f}, "
                       f"{ci['e_tokens'][i][1]:.2f}]")
    return out
