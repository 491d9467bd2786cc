"""``prmkit lab verifier-labels``' figures, claims and report: each arm's step AUC, the AUC
differences the claims read (:mod:`prmkit.lab.verifierlabels.stats`), best-of-N accuracy with
paired intervals (reported, claiming nothing), the printed summary, ``summary.json`` and
``report.html``."""

from __future__ import annotations

import os
from typing import Any, Sequence

from prmkit.lab import stats
from prmkit.lab.stages import settings_of
from prmkit.lab.verifierlabels import stats as vstats
from prmkit.records import Record

ARMS = ("verifier", "prm-same", "prm-more")
CLAIMS = {"verifier_matches_more_labels": ("verifier", "prm-more"),
          "verifier_beats_same_labels": ("verifier", "prm-same")}


def scored(test: Sequence[Record], by_id: dict[str, Any]) -> list[Record]:
    """The test records with one arm's step scores, an unscored step as the abstention."""
    out = []
    for r in test:
        row = by_id.get(r.id) or [None] * len(r.steps)
        out.append(Record(**{**r.to_dict(), "step_scores": [
            vstats.ABSTAIN if s is None else s for s in row]}))
    return out


def figures(config: Any, test: Sequence[Record], scores: dict[str, dict]) -> dict[str, Any]:
    """Each arm's step AUC and best-of-n accuracy, and the claims."""
    from prmkit.evaluate.paired import per_problem_accuracy

    by_arm = {arm: scores[arm]["scores"] for arm in ARMS}
    steps = vstats.steps_of(test, by_arm)
    seed, n = config.world.seed, config.split.n
    acc = {arm: per_problem_accuracy(scored(test, by_arm[arm]), "prm-prod", n, seed=seed)
           for arm in ARMS}
    claims = {}
    for name, (a, b) in CLAIMS.items():
        margin = config.margin if name == "verifier_matches_more_labels" else 0.0
        claims[name] = vstats.auc_difference(steps, a, b, margin, config.bootstrap, seed)
    bon = {f"{a} - {b}": stats.paired_difference(acc[a], acc[b], config.bootstrap, seed).to_dict()
           for a, b in (("verifier", "prm-more"), ("verifier", "prm-same"))}
    return {"auc": {arm: vstats.arm_auc(steps, arm) for arm in ARMS},
            "unscored_steps": steps.unscored, "steps": int(len(steps.correct)),
            "best_of_n": {arm: round(100 * sum(v.values()) / max(1, len(v)), 2)
                          for arm, v in acc.items()},
            "best_of_n_differences": bon, "claims": claims, "n": n,
            "verifier_parse": scores["verifier"].get("parse")}


def summary_rows(config: Any, doc: dict[str, Any]) -> list[tuple[str, str]]:
    s = config.split
    rows = [("sizes", f"k = {s.train_problems} problems x {s.train_n} candidates (verifier, "
                      f"prm-same), {s.train_problems * config.more} x {s.train_n} (prm-more); "
                      f"{s.test_problems} x {s.n} test candidates, {doc['steps']} labelled steps; "
                      f"seed {config.world.seed}")]
    for arm in ARMS:
        a = doc["auc"][arm]
        rows.append((f"step AUC, {arm}", "-" if a is None else
                     f"{a:.3f} ({doc['unscored_steps'][arm]} steps unscored, counted 0.5)"))
    for arm in ARMS:
        rows.append((f"best-of-{doc['n']} accuracy, {arm}", f"{doc['best_of_n'][arm]:.1f}%"))
    for name, c in doc["best_of_n_differences"].items():
        rows.append((f"reported: best-of-{doc['n']} accuracy, {name}",
                     stats.verdict(c).split(": ", 1)[1]))   # a figure, not a claim
    for name, c in doc["claims"].items():
        a, b = CLAIMS[name]
        what = f"AUC({a}) - AUC({b}) above {-c['margin'] if c.get('margin') else 0:g}"
        rows.append((f"claim: {name} ({what})", "-" if c["difference"] is None else
                     f"{'YES' if c['holds'] else 'NO'}: {c['difference']:+.3f}, 95% CI "
                     f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}] over {c['problems']} problems"))
    return rows


def finish(config: Any, doc: dict[str, Any], out: str, say: Any, seconds: float) -> None:
    """6. the report, the printed summary and ``summary.json``."""
    from prmkit.report import html

    rows = summary_rows(config, doc)
    path = os.path.join(out, "report.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write(html.page("prmkit lab verifier-labels", f"seed {config.world.seed}",
                          [("Summary", html.table(["", "measured"], rows))]))
    say.stage(6, f"report: {path}")
    stats.print_rows(f"prmkit lab verifier-labels summary (seed {config.world.seed}; measured in "
                     f"this run, {seconds:.0f} s on {os.cpu_count()} cores)", rows)
    stats.write_summary(out, {"config": settings_of(config), **doc, "summary": dict(rows)})
    print(f"report written to {path}", flush=True)
