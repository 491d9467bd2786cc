"""``prmkit lab active-learning``'s summary and report: the printed rows, ``summary.json`` and
``report.html`` from the figures :func:`prmkit.lab.activelearning.stats.figures` makes."""

from __future__ import annotations

import os
from typing import Any

from prmkit.lab import stats
from prmkit.lab.stages import settings_of


def summary_rows(config: Any, doc: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [("sizes", f"{config.train_problems} training problems x {config.pool_n} pool "
                      f"samples, {config.test_problems} x {config.test_n} test candidates, "
                      f"{config.seeds} seeds, policy {config.policy}, calculator "
                      f"{'on' if config.calculator else 'off'}; budgets dropped by rule "
                      f"(round({config.active_share:g} k) = k): "
                      f"{', '.join(map(str, config.dropped_budgets)) or 'none'}")]
    for arm, points in doc["curves"].items():
        rows.append((f"{arm}: best-of-{config.test_n} accuracy at " + "/".join(
            str(p["labels"]) for p in points) + " labels per problem",
                     " / ".join(f"{p['accuracy']:.1f}%" for p in points)))
        rows.append((f"{arm}: step AUC", " / ".join(
            "-" if p["step_auc"] is None else f"{p['step_auc']:.3f}" for p in points)))
    for name, r in doc["ratios"].items():
        rows.append((f"efficiency ratio {name}", ratio_text(r)))
    c = doc["claims"]["active_learning_efficiency"]
    rows.append(("claim: active learning more label-efficient than uniform (ratio > 1)?",
                 (stats.verdict(c, unit="x", digits=2) + undefined_text(c) if c["defined"]
                  else f"NO: {ratio_text(c)}") + f"; the paper: {c['paper']}x"))
    return rows


def ratio_text(r: dict[str, Any]) -> str:
    if not r["defined"]:
        return "no ratio: the fitted curves do not rise"
    return (f"{r['difference']:.2f}x, 95% CI [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]"
            + undefined_text(r))


def undefined_text(r: dict[str, Any]) -> str:
    return (f" ({r['undefined_resamples']} resamples without a rising curve)"
            if r["undefined_resamples"] else "")


def finish(config: Any, doc: dict[str, Any], out: str, say: Any, seconds: float) -> None:
    """The report, the printed summary and ``summary.json``."""
    rows = summary_rows(config, doc)
    report = os.path.join(out, "report.html")
    write_report(report, config, doc, rows)
    say.stage(2 + config.seeds, f"report: {report}")
    stats.print_rows(f"prmkit lab active-learning summary (seed {config.world.seed}; measured in "
                     f"this run, {seconds:.0f} s on {os.cpu_count()} cores)", rows)
    stats.write_summary(out, {"config": settings_of(config), "claims": doc["claims"],
                              "summary": dict(rows), "curves": doc["curves"],
                              "ratios": doc["ratios"],
                              "dropped_budgets": config.dropped_budgets})
    print(f"report written to {report}", flush=True)


def write_report(path: str, config: Any, doc: dict[str, Any], rows: list) -> None:
    from prmkit.report import html, plots

    xs = doc["budgets"]
    curves = {arm: {"y": [p["accuracy"] for p in pts], "low": [p["ci95"][0] for p in pts],
                    "high": [p["ci95"][1] for p in pts]} for arm, pts in doc["curves"].items()}
    png = plots.curves_png(xs, curves, "labelled solutions per training problem",
                           f"best-of-{config.test_n} accuracy (%)",
                           "label efficiency: each arm's PRM, bands over problems and seeds")
    table = html.table(["arm"] + [f"{k} labels" for k in xs], [
        [arm] + [f"{p['accuracy']:.1f} [{p['ci95'][0]:.1f}, {p['ci95'][1]:.1f}], AUC "
                 + ("-" if p["step_auc"] is None else f"{p['step_auc']:.3f}") for p in pts]
        for arm, pts in doc["curves"].items()])
    page = html.page("prmkit lab active-learning",
                     f"seed {config.world.seed}, policy {config.policy}",
                     [("Summary", html.table(["", "measured"], rows)),
                      ("Learning curves", html.png_img(png, "accuracy against labels") + table)])
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)
