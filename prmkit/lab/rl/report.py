"""The HTML report of ``prmkit lab rl``: the claims, the arms, the curves with the ceiling and
the target, the PRM-only arm's log, and the trained PRM's and ORM's weights."""

from __future__ import annotations

import io
from typing import Any, Sequence

import numpy as np

from prmkit.evaluate.bootstrap import resamples


def _png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def curves_png(result: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> bytes:
    """Exact held-out accuracy against samples used, the mean over seeds of each arm with the
    2.5-97.5 percentiles of bootstrap means shaded; the ceiling and the secondary claim's
    target as dashed lines."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.8, 4.4), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    per = result["samples_per_update"]
    rng = np.random.default_rng(0)
    for arm, rs in runs.items():
        c = 100 * np.array([r["curve"] for r in rs])
        x = per * np.arange(c.shape[1])
        means = c[resamples(len(c), 500, rng)].mean(axis=1)
        line = ax.plot(x, c.mean(axis=0), label=f"{arm} (lr {result['arms'][arm]['lr']:g})")[0]
        ax.fill_between(x, np.percentile(means, 2.5, axis=0), np.percentile(means, 97.5, axis=0),
                        color=line.get_color(), alpha=0.15, linewidth=0)
    for key, label in (("ceiling_accuracy", "ceiling"), ("target_accuracy", "target")):
        ax.axhline(result[key], color="grey", linestyle="--", linewidth=0.8)
        ax.annotate(f"{label} {result[key]:.1f}%", (0, result[key]), fontsize=7,
                    xytext=(2, 2), textcoords="offset points")
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


def _arm_cells(arm: str, row: dict[str, Any]) -> tuple[str, ...]:
    def ci(x: dict[str, Any] | None, f: str) -> str:
        return "" if x is None else (f"{x['difference']:{f}} [{x['ci95'][0]:{f}}, "
                                     f"{x['ci95'][1]:{f}}]")

    return (arm, f"{row['lr']:g}", f"{row['start_accuracy']:.1f}",
            f"{row['final_accuracy']:.1f} [{row['final_ci95'][0]:.1f}, {row['final_ci95'][1]:.1f}]",
            f"{row['auc']:.1f} [{row['auc_ci95'][0]:.1f}, {row['auc_ci95'][1]:.1f}]",
            ci(row.get("auc_vs_outcome"), "+.1f"), ci(row.get("difference_at_budget"), "+.1f"),
            ci(row.get("sample_ratio"), ".2f"), f"{row['show_final']:.3f}",
            f"{row['hacking']['flagged_share']:.0%}")


def write_report(path: str, result: dict[str, Any], runs: dict[str, list[dict[str, Any]]]) -> None:
    from prmkit.report.html import esc, page, png_img, table

    claims = [(name + (" (primary)" if name == result["primary"] else ""),
               "YES" if c["holds"] else "NO", f"{c['difference']:+.3f}",
               f"[{c['ci95'][0]:+.3f}, {c['ci95'][1]:+.3f}]")
              for name, c in result["claims"].items()]
    arms = [_arm_cells(arm, row) for arm, row in result["arms"].items()]
    sections = [
        ("Claims", table(["claim", "holds", "estimate", "95% CI"], claims)),
        ("Arms", table(["arm", "lr", "start %", f"after {result['budget_samples']} samples %",
                        "mean over updates %", "minus outcome, mean over updates (pts)",
                        "minus outcome at the end (pts)", "samples ratio to the target",
                        "chance of showing at the end", "flagged seeds"], arms)),
        ("Held-out accuracy against samples", png_img(curves_png(result, runs), "curves"))]
    if "prm-only" in runs:
        sections.append(("The PRM-only arm", png_img(
            hacking_png(runs["prm-only"], result["samples_per_update"]), "reward hacking")))
    for key, title in (("trained_prm", "The trained PRM's weights (hazard logits)"),
                       ("orm", "The ORM's weights (logits)")):
        sections.append((title, table(["feature", "weight"],
                                      list(zip(result[key]["features"], result[key]["weights"])))))
    html = page("prmkit lab rl", esc(
        f"seed {result['config']['seed']}, {len(next(iter(runs.values())))} seeds per arm; "
        f"ceiling {result['ceiling_accuracy']:.1f}%, target {result['target_accuracy']:.1f}%"),
        sections)
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
