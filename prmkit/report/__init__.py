"""``prmkit report``: one self-contained HTML page about scored records.

What it shows depends on what the records carry:

- ``step_scores`` and ``first_error`` (or labels): first-error identification as ProcessBench
  measures it (:mod:`prmkit.evaluate.processbench`), per split when ids start with a
  ProcessBench split name, beside always -1;
- ``step_scores`` and ``labels``: AUC, accuracy and ECE (:mod:`prmkit.evaluate.stepwise`), the
  reliability diagram and the score histogram by label;
- ``group`` and ``is_correct`` with two or more candidates per group: the best-of-N curve
  (:mod:`prmkit.evaluate.bestofn`, N = 1, 2, 4, ... up to the largest group);
- always: every solution (up to ``--max-records``), steps coloured by score, with the
  predicted first error (first step below ``--threshold``) and the gold one marked.
"""

from __future__ import annotations

from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.records import Record


def build(records: Sequence[Record], title: str = "prmkit report", source: str = "",
          threshold: float = 0.5, max_records: int = 300,
          extra: Sequence[tuple[str, str]] = (), bestofn: bool = True) -> str:
    """The report page for ``records``, as a string; ``extra`` sections (title, HTML) first.
    ``bestofn=False`` leaves out the best-of-N section (a caller that shows its own)."""
    from prmkit.evaluate import processbench, stepwise
    from prmkit.evaluate.common import pct
    from prmkit.report import html, plots

    if not records:
        raise PrmkitError("no records to report on")
    sections: list[tuple[str, str]] = list(extra)
    scored = [r for r in records if r.step_scores is not None]
    predicted = {r.id: processbench.predicted_first_error(r.step_scores, threshold)
                 for r in scored}

    # first-error identification
    fe = [r for r in scored if r.first_error is not None]
    if fe:
        sections.append(("First-error identification (ProcessBench metric)",
                         _first_error_section(fe, predicted, threshold)))

    # step-level metrics
    pngs: list[str] = []
    try:
        steps = stepwise.evaluate(records, stepwise.StepwiseConfig(threshold=threshold))
    except PrmkitError:
        steps = None
    if steps is not None:
        a = steps["auc"]
        content = html.table(["steps (correct)", "AUC", f"accuracy at {threshold:g}",
                              "majority class", "ECE"],
                             [[f"{steps['steps']} ({steps['positive_steps']})",
                               "-" if a is None else f"{a:.3f}", pct(steps["accuracy"]),
                               pct(steps["baselines"]["majority_class_accuracy"]),
                               pct(steps["ece"])]])
        sections.append(("Step-level metrics", content))
        if steps["ece"] is not None:
            pngs.append(html.png_img(plots.reliability_png(steps), "reliability diagram"))
        s, y = stepwise.pairs(records)
        pngs.append(html.png_img(plots.histogram_png(s[y >= 0.5].tolist(), s[y < 0.5].tolist()),
                                 "score histogram"))

    # best-of-N
    curve = _bestofn(records) if bestofn else None
    if curve is not None:
        rows = [[m] + [f"{p['accuracy']:.1f}" for p in pts] for m, pts in curve["methods"].items()]
        content = html.table(["method"] + [f"N={n}" for n in curve["n"]], rows)
        content += (f'<p class="sub">Accuracy %, mean of {curve["draws"]} random draws of N '
                    f"candidates per problem ({curve['problems_total']} problems).")
        if curve["skipped_methods"]:
            content += " Skipped: " + html.esc("; ".join(f"{k} ({v})" for k, v in
                                                         curve["skipped_methods"].items()))
        content += "</p>"
        sections.append(("Best-of-N", content))
        pngs.append(html.png_img(plots.bestofn_png(curve), "best-of-N accuracy against N"))
    if pngs:
        sections.append(("Plots", f'<div class="plots">{"".join(pngs)}</div>'))

    shown = list(records[:max_records])
    note = (f'<p class="sub">Showing {len(shown)} of {len(records)} solutions '
            f"(--max-records). Click a solution to fold it.</p>")
    sols = "".join(html.solution(r, predicted.get(r.id), open_=True) for r in shown)
    sections.append(("Solutions", note + sols))
    n_groups = len({r.group for r in records if r.group is not None})
    subtitle = (f"{source} · {len(records)} records, {len(scored)} scored"
                + (f", {n_groups} groups" if n_groups else "") + f" · threshold {threshold:g}")
    return html.page(title, subtitle, sections)


def _first_error_section(fe: Sequence[Record], predicted: dict[str, int], threshold: float) -> str:
    """The first-error table (ProcessBench's metric, per split) of records with a first error."""
    from prmkit.evaluate import processbench
    from prmkit.evaluate.common import pct
    from prmkit.report import html

    by_split: dict[str, list[Record]] = {}
    for r in fe:
        prefix = r.id.split("-", 1)[0]
        by_split.setdefault(prefix if prefix in processbench.SPLITS else "all", []).append(r)
    labels = {s: [r.first_error for r in rs] for s, rs in by_split.items()}
    model = processbench.evaluate(labels, {s: [predicted[r.id] for r in rs]  # type: ignore[misc]
                                           for s, rs in by_split.items()})
    always = processbench.evaluate(labels, {s: [-1] * len(rs) for s, rs in by_split.items()})
    rows = [[s, m["n"], m["n_error"], pct(m["error_acc"]), pct(m["correct_acc"]),
             pct(m["f1"]), pct(always["splits"][s]["f1"])]
            for s, m in model["splits"].items()]
    rows.append(["average F1", "", "", "", "", pct(model["average_f1"]),
                 pct(always["average_f1"])])
    content = html.table(["split", "n", "with error", "error_acc", "correct_acc", "F1",
                          "F1 always -1"], rows)
    content += (f'<p class="sub">Predicted first error: the first step scored below '
                f"{threshold:g}. Percentages. For calibrated thresholds and all baselines, "
                f"run <code>prmkit eval processbench</code>.</p>")
    return content


def _bestofn(records: Sequence[Record]) -> dict[str, Any] | None:
    from prmkit import select
    from prmkit.evaluate import bestofn

    groups = select.groups(list(records))
    biggest = max(len(g) for g in groups)
    if biggest < 2 or any(r.is_correct is None for r in records):
        return None
    ns = [1]
    while ns[-1] * 2 <= biggest:
        ns.append(ns[-1] * 2)
    if ns[-1] != biggest:
        ns.append(biggest)
    return bestofn.curve(records, bestofn.BestOfNConfig(n=ns, draws=20, bootstrap=200))
