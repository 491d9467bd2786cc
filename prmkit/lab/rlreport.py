"""The HTML report of ``prmkit lab rl``: the curves, the claims and the tuned learning rates."""

from __future__ import annotations

import io
from typing import Any, Sequence

import numpy as np


def _png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def curves_png(result: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> bytes:
    """Exact held-out accuracy against samples used, the mean over seeds of each arm with the
    2.5-97.5 percentiles of bootstrap means shaded."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.8, 4.4), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    per = result["samples_per_update"]
    rng = np.random.default_rng(0)
    for arm, rs in runs.items():
        c = 100 * np.array([r["curve"] for r in rs])
        x = per * np.arange(c.shape[1])
        means = c[rng.integers(0, len(c), size=(500, len(c)))].mean(axis=1)
        line = ax.plot(x, c.mean(axis=0), label=f"{arm} (lr {result['arms'][arm]['lr']:g})")[0]
        ax.fill_between(x, np.percentile(means, 2.5, axis=0), np.percentile(means, 97.5, axis=0),
                        color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xlabel("training samples used")
    ax.set_ylabel("held-out accuracy, exact (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def hacking_png(runs: Sequence[dict[str, Any]], per_update: int) -> bytes:
    """The PRM-only arm's training log: mean PRM score and sampled accuracy per update."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.8, 3.6), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for key, label in (("prm", "trained PRM's score (its reward)"), ("accuracy", "accuracy of its samples")):
        y = np.array([[row[key] for row in r["log"]] for r in runs]).mean(axis=0)
        ax.plot(per_update * np.arange(len(y)), 100 * y, label=label)
    ax.set_xlabel("training samples used")
    ax.set_ylabel("mean over seeds (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def write_report(path: str, result: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> None:
    from prmkit.report.html import esc, page, png_img, table

    claims = [(name, "YES" if c["holds"] else "NO", f"{c['difference']:+.3f}",
               f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]") for name, c in result["claims"].items()]
    arms = []
    for arm, row in result["arms"].items():
        d, r = row.get("difference_at_budget"), row.get("sample_ratio")
        arms.append((arm, f"{row['lr']:g}", f"{row['start_accuracy']:.1f}",
                     f"{row['final_accuracy']:.1f} [{row['final_ci95'][0]:.1f}, {row['final_ci95'][1]:.1f}]",
                     "" if d is None else f"{d['difference']:+.1f} [{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]",
                     "" if r is None else f"{r['ratio']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}]",
                     f"{row['hacking']['flagged_share']:.0%}"))
    sections = [
        ("Claims", table(["claim", "holds", "estimate", "95% CI"], claims)),
        ("Arms", table(["arm", "lr", "start %", f"after {result['budget_samples']} samples %",
                        "minus outcome (pts)", "sample ratio", "flagged seeds"], arms)),
        ("Held-out accuracy against samples", png_img(curves_png(result, runs), "curves"))]
    if "prm-only" in runs:
        sections.append(("The PRM-only arm", png_img(
            hacking_png(runs["prm-only"], result["samples_per_update"]), "reward hacking")))
    prm = result["trained_prm"]
    sections.append(("The trained PRM's weights (hazard logits)", table(
        ["feature", "weight"], list(zip(prm["features"], prm["weights"])))))
    html = page("prmkit lab rl", esc(f"seed {result['config']['seed']}, "
                                     f"{len(next(iter(runs.values())))} seeds per arm"), sections)
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
