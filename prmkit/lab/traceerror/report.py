"""The figures, claims, summary and report of ``prmkit lab trace-error``
(:mod:`prmkit.lab.traceerror.run`): computed from the run's stored scores alone."""

from __future__ import annotations

import os
from typing import Any, Sequence

from prmkit.lab import stats
from prmkit.lab.stages import settings_of

from prmkit.lab.traceerror import stats as tracestats
from prmkit.lab.stats import Claim, paired_difference
from prmkit.records import Record

CLAIMS = ("trace_error_prm_below_majority", "final_error_similar", "exact_labels_beat_mc")
CONTRASTS = ("trace_error_orm_minus_prm", "trace_error_mc_minus_prm")
VERIFIERS = ("orm", "prm-mc", "prm-exact")
PICKERS = ("majority",) + VERIFIERS
SETTINGS = ("calculator", "no-calculator")
CLAIM_SETTING = "no-calculator"
EQUIVALENCE_LEVEL = 0.90


def scorer(verifier: str, scores: dict[str, list], select: str) -> Any:
    """A candidate's score for its verifier's pick: the ORM's last step, a PRM's by ``select``."""
    from prmkit.aggregate import aggregate

    how = "last" if verifier == "orm" else select.split("-", 1)[1]
    return lambda r: aggregate(scores[r.id], how)


def flawed(r: Record) -> bool:
    """A wrong step by the gold labels the test candidates carry."""
    return any(y is not None and y < 0.5 for y in r.labels or [])


def interval_of(per: tracestats.PerProblem, seed: int) -> dict[str, Any]:
    """A picker's final error (percent, bootstrap interval over problems) and trace error
    (percent, Wilson interval: :func:`tracestats.trace_interval`)."""
    err = paired_difference({k: 1.0 - v for k, v in per.right.items()},
                            {k: 0.0 for k in per.right}, seed=seed)
    return {"final_error": err.difference, "final_error_ci95": err.ci95,
            "trace_error": per.trace_error(), "trace_error_ci95": tracestats.trace_interval(per),
            "problems": len(per.right)}


def claims_of(per: dict[str, tracestats.PerProblem], margin: float, seed: int) -> dict[str, Claim]:
    """The three claims, and the two contrasts reported beside them, on one setting's picks."""
    return {
        "trace_error_prm_below_majority": tracestats.ratio_difference(
            per["majority"], per["prm-exact"], seed=seed),
        "final_error_similar": tracestats.equivalent(per["orm"].right, per["prm-exact"].right,
                                                     margin, EQUIVALENCE_LEVEL, seed=seed),
        "exact_labels_beat_mc": stats.paired(per["prm-exact"].right, per["prm-mc"].right,
                                             seed=seed),
        "trace_error_orm_minus_prm": tracestats.ratio_difference(per["orm"], per["prm-exact"],
                                                                 seed=seed),
        "trace_error_mc_minus_prm": tracestats.ratio_difference(per["prm-mc"], per["prm-exact"],
                                                                seed=seed),
    }


def picks_at(config: Any, test: Sequence[Record], by_verifier: dict[str, dict], groups:
             dict[str, int], n: int) -> dict[str, tracestats.PerProblem]:
    """Every picker's picks at N = ``n``, on the same draws."""
    draws = tracestats.subsets(groups, n, config.draws, config.world.seed)
    per = {v: tracestats.picks(test, scorer(v, by_verifier[v], config.select), flawed, draws)
           for v in VERIFIERS}
    per["majority"] = tracestats.majority_picks(test, flawed, draws)
    return per


def figures(config: Any, test: Sequence[Record], scores: dict[str, dict[str, dict]]) -> dict:
    """Every setting's curves (final and trace error against N), its figures at N =
    ``--claim-n`` with intervals, and its claims; the no-calculator setting's are the run's."""
    groups: dict[str, int] = {}
    for r in test:
        groups[r.group or r.id] = groups.get(r.group or r.id, 0) + 1
    most = config.split.n
    ns = sorted({1, 2, 4, config.claim_n, most} | {k for k in (8, 16, 32) if k <= most})
    doc: dict[str, Any] = {"n": ns, "claim_n": config.claim_n, "settings": {}}
    for setting, by_verifier in scores.items():
        curve: dict[str, list] = {v: [] for v in PICKERS}
        for n in ns:
            per = picks_at(config, test, by_verifier, groups, n)
            for v in PICKERS:
                curve[v].append({"n": n, "final_error": round(per[v].final_error(), 3),
                                 "trace_error": per[v].trace_error()})
        per = picks_at(config, test, by_verifier, groups, config.claim_n)
        doc["settings"][setting] = {
            "at_n": {v: interval_of(per[v], config.world.seed) for v in PICKERS}, "curve": curve,
            "claims": {k: c.to_dict() for k, c in claims_of(per, config.margin,
                                                            config.world.seed).items()}}
    doc["claims"] = doc["settings"][CLAIM_SETTING]["claims"]
    return doc


ROWS = {
    "trace_error_prm_below_majority": "majority voting's trace error above the exact-label "
                                      "PRM's?",
    "final_error_similar": "final errors of the ORM and the exact-label PRM within {margin:g} "
                           "points (90% CI)?",
    "exact_labels_beat_mc": "exact-label PRM's best-of-{n} accuracy above the MC-label PRM's?",
    "trace_error_orm_minus_prm": "ORM trace error minus the exact-label PRM's",
    "trace_error_mc_minus_prm": "MC-label PRM trace error minus the exact-label PRM's",
}


def summary_rows(config: Any, doc: dict[str, Any]) -> list[tuple[str, str]]:
    n = doc["claim_n"]
    sizes = config.split
    rows = [("sizes", f"{sizes.train_problems} x {sizes.train_n} training candidates, "
                      f"{sizes.test_problems} x {sizes.n} test candidates, claims at N = {n} "
                      f"({config.draws} draws), seed {config.world.seed}, policy {config.policy}")]
    for setting, s in doc["settings"].items():
        for v, f in s["at_n"].items():
            te = "-" if f["trace_error"] is None else f"{f['trace_error']:.1f}%"
            rows.append((f"{setting}, {v}: best-of-{n} final error / trace error",
                         f"{f['final_error']:.1f}% [{f['final_error_ci95'][0]:.1f}, "
                         f"{f['final_error_ci95'][1]:.1f}] / {te} [{f['trace_error_ci95'][0]:.1f}, "
                         f"{f['trace_error_ci95'][1]:.1f}]"))
    for setting in (CLAIM_SETTING,) + tuple(s for s in SETTINGS if s != CLAIM_SETTING):
        c = doc["settings"][setting]["claims"]
        for k, text in ROWS.items():
            kind = ("claim" if k in CLAIMS else "contrast") if setting == CLAIM_SETTING \
                else "reported"
            level = "90%" if k == "final_error_similar" else "95%"
            rows.append((f"{kind} ({setting}): {text.format(margin=config.margin, n=n)}",
                         stats.verdict(c[k], level=level)))
    return rows


def finish(config: Any, doc: dict[str, Any], out: str, say: Any, seconds: float) -> None:
    """5. the report, the printed summary and ``summary.json``."""
    rows = summary_rows(config, doc)
    report = os.path.join(out, "report.html")
    write_report(report, config, doc, rows)
    say.stage(5, f"report: {report}")
    stats.print_rows(f"prmkit lab trace-error summary (seed {config.world.seed}; measured in this "
                     f"run, {seconds:.0f} s on {os.cpu_count()} cores)", rows)
    stats.write_summary(out, {"config": settings_of(config),
                              "claims": {k: doc["claims"][k] for k in CLAIMS},
                              "contrasts": {k: doc["claims"][k] for k in CONTRASTS},
                              "claim_setting": CLAIM_SETTING, "summary": dict(rows),
                              "n": doc["n"], "claim_n": doc["claim_n"],
                              "settings": doc["settings"]})
    print(f"report written to {report}", flush=True)


def write_report(path: str, config: Any, doc: dict[str, Any], rows: list) -> None:
    from prmkit.report import html, plots

    settings = list(doc["settings"])
    verifiers = list(doc["settings"][settings[0]]["at_n"])
    n = doc["claim_n"]

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
    page = html.page("prmkit lab trace-error", f"seed {config.world.seed}, policy {config.policy}",
                     sections)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
