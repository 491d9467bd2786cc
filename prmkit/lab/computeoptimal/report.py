"""The HTML report of ``prmkit lab compute-optimal``: accuracy against budget (in samples and
in tokens) for weighted best-of-N (and the argmax pick beside it), every search and
compute-optimal; E in tokens with its interval; the claims and the per-bin choices. Built from
``summary.json`` alone."""

from __future__ import annotations

from typing import Any, Mapping


def _png(fig: Any) -> bytes:
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def accuracy_png(s: Mapping[str, Any], tokens: bool) -> bytes:
    """Accuracy against samples (or generated tokens) per problem, log2 axis."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.8, 4.4), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    per = s["tokens_per_sample"]
    bon = s["best_of_n"]
    xs = [n * per for n in bon["n"]] if tokens else bon["n"]
    ax.plot(xs, [100 * v for v in bon["weighted"]], color="black",
            label="weighted best-of-N (draws)")
    ax.plot(xs, [100 * v for v in bon["argmax_last"]], color="grey", linestyle="--",
            label="argmax best-of-N (exact), not a baseline")
    for name, row in s["accuracy"].items():
        if name == "weighted best-of-n":
            continue
        pts = [(int(n), acc, tok) for n, (acc, tok) in row.items()]
        ax.plot([t if tokens else n for n, _, t in pts], [100 * a for _, a, _ in pts],
                marker="o", label=name)
    for binning, res in s["difficulty"].items():
        p = res["point"]
        extra = s["config"]["probe_n"] if res["probe_charged"] else 0
        xs = p["co_tokens"] if tokens else [n + extra for n in p["n"]]
        ax.plot(xs, [100 * v for v in p["co"]], marker="s", linewidth=2.5,
                label=f"compute-optimal, {binning} bins" + (" (probe charged)" if extra else ""))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("generated tokens per problem" if tokens else "samples per problem")
    ax.set_ylabel("accuracy (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return _png(fig)


def efficiency_png(s: Mapping[str, Any]) -> bytes:
    """E in tokens with its 95% interval, per binning; Snell et al.'s 4x dashed."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.8, 4.0), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for binning, res in s["difficulty"].items():
        p, ci = res["point"], res["ci95"]["e_tokens"]
        line = ax.plot(p["n"], p["e_tokens"], marker="o", label=f"{binning} bins")[0]
        ax.fill_between(p["n"], [c[0] for c in ci], [c[1] for c in ci], alpha=0.15,
                        color=line.get_color(), linewidth=0)
    ax.axhline(4.0, linestyle="--", color="grey", label="Snell et al. 2024: 4x")
    ax.axhline(1.0, linestyle=":", color="black")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("budget n (samples per problem)")
    ax.set_ylabel("E: best-of-N tokens to match / tokens spent")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def _claims(s: Mapping[str, Any]) -> str:
    from prmkit.report import html

    rows = []
    for name, c in s["claims"].items():
        note = c["unit"]
        if "holm_level" in c:
            note += (f"; Holm step {c['holm_step']}, {100 * c['holm_level']:.2f}% interval "
                     f"{c['ci_holm'][0]} .. {c['ci_holm'][1]}, margin -{c['margin']}")
        rows.append([name, "YES" if c["holds"] else "NO", c["difference"],
                     f"{c['ci95'][0]} .. {c['ci95'][1]}", note])
    return html.table(["claim", "holds", "points", "95% CI", "note"], rows)


def _binning(res: Mapping[str, Any]) -> str:
    from prmkit.report import html

    p, ci = res["point"], res["ci95"]
    rows = [[n, f"{100 * p['co'][i]:.1f} [{100 * ci['co'][i][0]:.1f}, {100 * ci['co'][i][1]:.1f}]",
             f"{100 * p['single'][i]:.1f}",
             f"{p['ref_n'][i]}: {100 * p['ref'][i]:.1f} [{100 * ci['ref'][i][0]:.1f}, "
             f"{100 * ci['ref'][i][1]:.1f}]",
             f"{res['minus_best_of_4n'][i]['difference']:+.2f}",
             f"{p['e_tokens'][i]:.2f}{'+' if p['censored'][i] else ''} "
             f"[{ci['e_tokens'][i][0]:.2f}, {ci['e_tokens'][i][1]:.2f}]"]
            for i, n in enumerate(p["n"])]
    table = html.table(["n", "compute-optimal % [95% CI]", "best single %",
                        "weighted best-of-N at", "minus best-of-4n, points",
                        "E in tokens [95% CI]"], rows)
    bins = html.table(["n", "bin", "problems", "chosen (all problems)", "accuracy per strategy"],
                      [[r["n"], r["bin"], r["problems"], r["chosen"],
                        ", ".join(f"{k} {100 * v:.0f}" for k, v in r["accuracy"].items())]
                       for r in res["per_bin"]])
    return table + bins


def write_report(path: str, s: Mapping[str, Any]) -> None:
    from prmkit.report import html

    budgets = sorted({n for row in s["accuracy"].values() for n in row}, key=int)
    acc_rows = [[name] + [f"{100 * row[n][0]:.1f} ({row[n][1]:.0f})" if n in row else "-"
                          for n in budgets] for name, row in s["accuracy"].items()]
    accuracy = html.table(["strategy"] + [f"n={n}" for n in budgets], acc_rows)
    sections = [("Claims", _claims(s)),
                ("Accuracy (%, generated tokens) against budget", accuracy
                 + html.png_img(accuracy_png(s, False), "accuracy against samples")
                 + html.png_img(accuracy_png(s, True), "accuracy against tokens")),
                ("Efficiency in tokens against weighted best-of-N",
                 html.png_img(efficiency_png(s), "E in tokens"))]
    for binning, res in s["difficulty"].items():
        sections.append((f"Compute-optimal, {binning} difficulty bins", _binning(res)))
    c = s["config"]
    with open(path, "w", encoding="utf-8") as f:
        f.write(html.page("prmkit lab compute-optimal",
                          f"{c['problems']} lab problems, seed {c['seed']}, budgets {c['budgets']}",
                          sections))
