"""The figures, claims, summary and report of ``prmkit lab trace-error``
(:mod:`prmkit.lab.traceerror`): computed from the run's stored scores alone."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from typing import Any, Sequence

from prmkit.evaluate.paired import Claim, paired_difference
from prmkit.lab import tracestats
from prmkit.records import Record

CLAIMS = ("trace_error_prm_below_orm", "final_error_similar", "trace_error_mc_prm")
VERIFIERS = ("orm", "prm-mc", "prm-exact")
SETTINGS = ("calculator", "no-calculator")


def scorer(verifier: str, scores: dict[str, list], select: str) -> Any:
    """A candidate's score for its verifier's pick: the ORM's last step, a PRM's by ``select``."""
    from prmkit.aggregate import aggregate

    how = "last" if verifier == "orm" else select.split("-", 1)[1]
    return lambda r: aggregate(scores[r.id], how)


def flawed(r: Record) -> bool:
    """A wrong step by the gold labels the test candidates carry."""
    return any(y is not None and y < 0.5 for y in r.labels or [])


def interval_of(per: tracestats.PerProblem, seed: int) -> dict[str, Any]:
    """A verifier's final error and trace error (percent), each with its bootstrap interval
    over problems."""
    zero = tracestats.PerProblem({k: 1.0 for k in per.right}, {k: 0.0 for k in per.right})
    te = tracestats.ratio_difference(per, zero, seed=seed)
    err = paired_difference({k: 1.0 - v for k, v in per.right.items()},
                            {k: 0.0 for k in per.right}, seed=seed)
    return {"final_error": err.difference, "final_error_ci95": err.ci95,
            "trace_error": per.trace_error(), "trace_error_ci95": te.ci95,
            "problems": len(per.right)}


def claims_of(per: dict[str, tracestats.PerProblem], margin: float, seed: int) -> dict[str, Claim]:
    mc = tracestats.ratio_difference(per["prm-mc"], per["prm-exact"], seed=seed)
    return {
        "trace_error_prm_below_orm": tracestats.ratio_difference(per["orm"], per["prm-exact"],
                                                                 seed=seed),
        "final_error_similar": tracestats.equivalent(per["orm"].right, per["prm-exact"].right,
                                                     margin, seed=seed),
        "trace_error_mc_prm": mc,
    }


def figures(config: Any, test: Sequence[Record], scores: dict[str, dict[str, dict]]) -> dict:
    """Every setting's curves (final and trace error against N), its figures at N = ``--n``
    with intervals, and its claims; the claims of the calculator setting are the run's."""
    groups: dict[str, int] = {}
    for r in test:
        groups[r.group or r.id] = groups.get(r.group or r.id, 0) + 1
    ns = sorted({1, 2, 4, config.n} | {k for k in (8, 16, 32) if k <= config.n})
    doc: dict[str, Any] = {"n": ns, "settings": {}}
    for setting, by_verifier in scores.items():
        curve: dict[str, list] = {v: [] for v in VERIFIERS}
        for n in ns:
            draws = tracestats.subsets(groups, n, config.draws, config.seed)
            per = {v: tracestats.picks(test, scorer(v, by_verifier[v], config.select), flawed,
                                       draws) for v in VERIFIERS}
            for v in VERIFIERS:
                curve[v].append({"n": n, "final_error": round(per[v].final_error(), 3),
                                 "trace_error": per[v].trace_error()})
        claims = claims_of(per, config.margin, config.seed)
        against = tracestats.ratio_difference(per["prm-mc"], per["orm"], seed=config.seed)
        doc["settings"][setting] = {
            "at_n": {v: interval_of(per[v], config.seed) for v in VERIFIERS},
            "curve": curve,
            "claims": {k: {**c.to_dict(), **({"against_orm": against.to_dict()}
                                              if k == "trace_error_mc_prm" else {})}
                       for k, c in claims.items()}}
    doc["claims"] = doc["settings"]["calculator"]["claims"]
    return doc


def verdict(c: dict[str, Any]) -> str:
    return (f"{'YES' if c['holds'] else 'NO'}: {c['difference']:+.1f} points, 95% CI "
            f"[{c['ci95'][0]:+.1f}, {c['ci95'][1]:+.1f}] over {c['problems']} problems")


def summary_rows(config: Any, doc: dict[str, Any]) -> list[tuple[str, str]]:
    n = doc["n"][-1]
    rows = [("sizes", f"{config.train_problems} x {config.train_n} training candidates, "
                      f"{config.test_problems} x {config.n} test candidates, seed {config.seed}, "
                      f"policy {config.policy}")]
    for setting, s in doc["settings"].items():
        for v, f in s["at_n"].items():
            te = "-" if f["trace_error"] is None else f"{f['trace_error']:.1f}%"
            rows.append((f"{setting}, {v}: best-of-{n} final error / trace error",
                         f"{f['final_error']:.1f}% [{f['final_error_ci95'][0]:.1f}, "
                         f"{f['final_error_ci95'][1]:.1f}] / {te} [{f['trace_error_ci95'][0]:.1f}, "
                         f"{f['trace_error_ci95'][1]:.1f}]"))
    c = doc["claims"]
    rows += [
        ("claim (calculator): exact-label PRM trace error below the ORM's?",
         verdict(c["trace_error_prm_below_orm"])),
        (f"claim (calculator): final errors of the ORM and the exact-label PRM within "
         f"{config.margin:g} points?", verdict(c["final_error_similar"])),
        ("claim (calculator): MC-label PRM trace error above the exact-label PRM's?",
         verdict(c["trace_error_mc_prm"])),
        ("  MC-label PRM trace error minus the ORM's (calculator)",
         verdict(c["trace_error_mc_prm"]["against_orm"]).split(": ", 1)[1]),
    ]
    other = doc["settings"]["no-calculator"]["claims"]
    rows += [(f"the same, without the calculator (not claims): {k}", verdict(v))
             for k, v in other.items()]
    return rows


def finish(config: Any, doc: dict[str, Any], out: str, say: Any, seconds: float) -> None:
    """5. the report, the printed summary and ``summary.json``."""
    rows = summary_rows(config, doc)
    report = os.path.join(out, "report.html")
    write_report(report, config, doc, rows)
    say.stage(5, f"report: {report}")
    print(f"\nprmkit lab trace-error summary (seed {config.seed}; measured in this run, "
          f"{seconds:.0f} s on {os.cpu_count()} cores)")
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k.ljust(width)}  {v}")
    out_doc = {"config": asdict(config), "claims": {k: doc["claims"][k] for k in CLAIMS},
               "summary": dict(rows), "n": doc["n"], "settings": doc["settings"]}
    tmp = os.path.join(out, "summary.json.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out_doc, f, indent=2)
    os.replace(tmp, os.path.join(out, "summary.json"))
    print(f"report written to {report}", flush=True)


def write_report(path: str, config: Any, doc: dict[str, Any], rows: list) -> None:
    from prmkit.report import html, plots

    settings = list(doc["settings"])
    verifiers = list(doc["settings"][settings[0]]["at_n"])
    n = doc["n"][-1]

    def bars(key: str) -> dict[str, list]:
        return {v: [(f[key] or 0.0, *f[f"{key}_ci95"]) for f in
                    (doc["settings"][s]["at_n"][v] for s in settings)] for v in verifiers}

    plots_html = (
        html.png_img(plots.bars_png(settings, bars("trace_error"), "trace error (%)",
                                    f"right-answer best-of-{n} picks with a wrong step"),
                     "trace error by verifier")
        + html.png_img(plots.bars_png(settings, bars("final_error"), "final-answer error (%)",
                                      f"best-of-{n} picks with a wrong answer"),
                       "final-answer error by verifier"))
    curve = html.table(["setting", "verifier"] + [f"N={k}" for k in doc["n"]], [
        [s, v] + [f"{p['final_error']:.1f} / " + ("-" if p["trace_error"] is None
                                                   else f"{p['trace_error']:.1f}")
                  for p in doc["settings"][s]["curve"][v]]
        for s in settings for v in verifiers])
    sections = [("Summary", html.table(["", "measured"], rows)),
                ("Trace error and final-answer error", plots_html),
                ("Final error / trace error (%) against N", curve)]
    page = html.page("prmkit lab trace-error", f"seed {config.seed}, policy {config.policy}",
                     sections)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
