"""The plots of the evaluations, as PNG bytes (matplotlib's Agg canvas, no pyplot, no display).

Each function takes the JSON-ready results of an evaluation and returns a PNG, which the
commands write to a file and the HTML report embeds as base64.
"""

from __future__ import annotations

import io
from typing import Any, Sequence


def _figure(width: float = 6.4, height: float = 4.2) -> Any:
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def bestofn_png(res: dict[str, Any]) -> bytes:
    """Accuracy against N (log2 axis), one line per method, the 95% CI shaded."""
    fig = _figure()
    ax = fig.add_subplot()
    for method, points in res["methods"].items():
        if not points:
            continue
        ns = [p["n"] for p in points]
        acc = [p["accuracy"] for p in points]
        style = {"linestyle": "--", "color": "black"} if method == "oracle" else {}
        line = ax.plot(ns, acc, marker="o", label=method, **style)[0]
        ax.fill_between(ns, [p["ci95"][0] for p in points], [p["ci95"][1] for p in points],
                        color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(res["n"], [str(n) for n in res["n"]])
    ax.set_xlabel("N (candidates per problem)")
    ax.set_ylabel("accuracy (%)")
    ax.set_title(f"best-of-N, {res['problems_total']} problems, {res['draws']} draws per N")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _png(fig)


def reliability_png(res: dict[str, Any]) -> bytes:
    """The reliability diagram of ``prmkit eval steps``: observed frequency of correct steps
    against mean score per bin, with the step count of each bin below."""
    fig = _figure(4.4, 4.6)
    top, bottom = fig.subplots(2, 1, height_ratios=[3, 1], sharex=True)
    bins = res["reliability"]
    width = 1.0 / res["bins"]
    centres = [(b["lo"] + b["hi"]) / 2 for b in bins]
    top.plot([0, 1], [0, 1], color="gray", linestyle="--", label="perfect calibration")
    filled = [(c, b) for c, b in zip(centres, bins) if b["count"]]
    top.bar([c for c, _ in filled], [b["mean_label"] for _, b in filled], width=width * 0.9,
            color="#4c72b0", alpha=0.8, label="observed frequency")
    top.plot([b["mean_score"] for _, b in filled], [b["mean_label"] for _, b in filled],
             "o", color="#dd8452", label="(mean score, frequency)")
    top.set_xlim(0, 1)
    top.set_ylim(0, 1)
    top.set_ylabel("fraction of correct steps")
    ece = res["ece"]
    top.set_title(f"reliability, ECE {ece:.1f}%" if ece is not None else "reliability")
    top.legend(fontsize=8, loc="upper left")
    bottom.bar(centres, [b["count"] for b in bins], width=width * 0.9, color="gray")
    bottom.set_xlabel("step score")
    bottom.set_ylabel("steps")
    return _png(fig)


def histogram_png(correct: Sequence[float], wrong: Sequence[float]) -> bytes:
    """Step scores of correct and of wrong steps, overlaid."""
    fig = _figure(5.8, 3.6)
    ax = fig.add_subplot()
    lo = min(list(correct) + list(wrong) + [0.0])
    hi = max(list(correct) + list(wrong) + [1.0])
    bins = [lo + (hi - lo) * i / 20 for i in range(21)]
    ax.hist(list(correct), bins=bins, alpha=0.6, color="#55a868", label=f"correct steps ({len(correct)})")
    ax.hist(list(wrong), bins=bins, alpha=0.6, color="#c44e52", label=f"wrong steps ({len(wrong)})")
    ax.set_xlabel("step score")
    ax.set_ylabel("steps")
    ax.legend(fontsize=8)
    ax.set_title("step scores by gold label")
    return _png(fig)


def f1_bars_png(results: dict[str, dict[str, Any]]) -> bytes:
    """F1 per split for the model and each baseline (ProcessBench-style results)."""
    fig = _figure(6.4, 3.6)
    ax = fig.add_subplot()
    names = list(results)
    splits = list(next(iter(results.values()))["splits"]) + ["average"]
    w = 0.8 / max(len(names), 1)
    for i, name in enumerate(names):
        r = results[name]
        vals = [r["splits"][s]["f1"] if s != "average" else r["average_f1"] for s in splits]
        ax.bar([j + i * w for j in range(len(splits))], [v or 0.0 for v in vals], width=w,
               label=name)
    ax.set_xticks([j + w * (len(names) - 1) / 2 for j in range(len(splits))], splits)
    ax.set_ylabel("F1 (%)")
    ax.set_title("first-error F1 by split")
    ax.legend(fontsize=8)
    return _png(fig)


def bars_png(groups: Sequence[str], series: dict[str, Sequence[tuple[float, float, float]]],
             ylabel: str, title: str) -> bytes:
    """Grouped bars: for each series (a verifier), one bar per group (a setting), each bar a
    (value, low, high) with its interval as an error bar."""
    fig = _figure()
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(series))
    for i, (name, bars) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        vals = [b[0] for b in bars]
        err = [[max(0.0, b[0] - b[1]) for b in bars], [max(0.0, b[2] - b[0]) for b in bars]]
        ax.bar(xs, vals, width, yerr=err, capsize=3, label=name)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, loc="best")
    return _png(fig)


def curves_png(xs: Sequence[float], curves: dict[str, dict[str, Sequence[float]]], xlabel: str,
               ylabel: str, title: str) -> bytes:
    """Lines against ``xs`` (log2 axis), each curve ``{"y", "low", "high"}`` with its band
    shaded, and an optional fitted line ``"fit"`` drawn dashed."""
    fig = _figure()
    ax = fig.add_subplot()
    for name, c in curves.items():
        line = ax.plot(xs, c["y"], marker="o", label=name)[0]
        ax.fill_between(xs, c["low"], c["high"], color=line.get_color(), alpha=0.15, linewidth=0)
        if c.get("fit"):
            ax.plot(xs, c["fit"], linestyle="--", color=line.get_color(), linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(xs), [f"{x:g}" for x in xs])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _png(fig)
