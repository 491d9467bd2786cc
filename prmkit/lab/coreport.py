"""The HTML report of ``prmkit lab compute-optimal``: accuracy against budget (in samples and
in tokens) for best-of-N, every search method and compute-optimal; the efficiency E(n) with
its interval; the claims and the per-bin choices. Built from ``summary.json`` alone."""

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
    curve = s["best_of_n_curve"]
    ns = list(range(1, len(curve) + 1))
    ax.plot([n * per for n in ns] if tokens else ns, [100 * v for v in curve], color="black",
            label="best-of-N (exact)")
    names = sorted({name for row in s["accuracy"].values() for name in row} - {"best-of-n"})
    for name in names:
        pts = [(int(n), row[name], s["tokens"][n][name]) for n, row in s["accuracy"].items()
               if name in row]
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
    """E(n) with its 95% interval, per binning; Snell et al.'s 4x dashed."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.8, 4.0), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    for binning, res in s["difficulty"].items():
        p, ci = res["point"], res["ci95"]["e_samples"]
        line = ax.plot(p["n"], p["e_samples"], marker="o", label=f"{binning} bins")[0]
        ax.fill_between(p["n"], [c[0] for c in ci], [c[1] for c in ci], alpha=0.15,
                        color=line.get_color(), linewidth=0)
    ax.axhline(4.0, linestyle="--", color="grey", label="Snell et al. 2024: up to 4x")
    ax.axhline(1.0, linestyle=":", color="black")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("budget n (samples per problem)")
    ax.set_ylabel("E(n): best-of-N samples to match / samples spent")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def write_report(path: str, s: Mapping[str, Any]) -> None:
    from prmkit.report import html

    claims = html.table(["claim", "holds", "figure", "95% CI", "note"], [
        [name, "YES" if c["holds"] else "NO", c["difference"], f"{c['ci95'][0]} .. {c['ci95'][1]}",
         c["unit"] + (f"; at n = {c['budget']}; paper {c['paper']}, interval "
                      f"{'excludes' if c['interval_excludes_paper'] else 'includes'} it"
                      if "paper" in c else "")]
        for name, c in s["claims"].items()])
    acc_rows = [[name] + [f"{100 * s['accuracy'][n].get(name, float('nan')):.1f}"
                          if name in s["accuracy"][n] else "-" for n in s["accuracy"]]
                for name in sorted({k for row in s["accuracy"].values() for k in row})]
    accuracy = html.table(["strategy"] + [f"n={n}" for n in s["accuracy"]], acc_rows)
    sections = [("Claims", claims),
                ("Accuracy against budget", accuracy
                 + html.png_img(accuracy_png(s, False), "accuracy against samples")
                 + html.png_img(accuracy_png(s, True), "accuracy against tokens")),
                ("Efficiency against best-of-N", html.png_img(efficiency_png(s), "E(n)"))]
    for binning, res in s["difficulty"].items():
        p, ci = res["point"], res["ci95"]
        rows = [[n, f"{100 * p['co'][i]:.1f} [{100 * ci['co'][i][0]:.1f}, {100 * ci['co'][i][1]:.1f}]",
                 f"{100 * p['single'][i]:.1f}", f"{p['bon_n'][i]:.1f}{'+' if p['censored'][i] else ''}",
                 f"{p['e_samples'][i]:.2f} [{ci['e_samples'][i][0]:.2f}, {ci['e_samples'][i][1]:.2f}]",
                 f"{p['e_tokens'][i]:.2f}"] for i, n in enumerate(p["n"])]
        table = html.table(["n", "compute-optimal % [95% CI]", "best single %",
                            "best-of-N samples to match", "E (samples) [95% CI]", "E (tokens)"], rows)
        bins = html.table(["n", "bin", "problems", "chosen (all problems)", "accuracy per strategy"],
                          [[r["n"], r["bin"], r["problems"], r["chosen"],
                            ", ".join(f"{k} {100 * v:.0f}" for k, v in r["accuracy"].items())]
                           for r in res["per_bin"]])
        sections.append((f"Compute-optimal, {binning} difficulty bins", table + bins))
    c = s["config"]
    with open(path, "w", encoding="utf-8") as f:
        f.write(html.page("prmkit lab compute-optimal",
                          f"{c['problems']} lab problems, seed {c['seed']}, budgets {c['budgets']}",
                          sections))
