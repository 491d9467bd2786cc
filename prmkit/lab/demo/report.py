"""The lab demo's last stages: best-of-N curves, the claims, the summary and the report.
Every figure comes from the run's own files; each claim is written to ``summary.json`` under
``claims`` as ``{"holds", "difference", "ci95", "problems"}``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Sequence

from prmkit.lab.demo import stats as lab_claims
from prmkit.lab.demo.search import beam_claims, width_claim_name
from prmkit.lab.stages import settings_of
from prmkit.lab.stats import print_rows, verdict, write_summary
from prmkit.evaluate.stepwise import step_auc
from prmkit.records import Record

PRM_METHODS = ("prm-prod", "prm-min", "prm-last")
BON_METHODS = PRM_METHODS + ("orm", "majority", "weighted-majority", "gold-prm", "oracle")


@dataclass
class Labels:
    """Stage 2's figures: per-step and binary-search MC label quality, and rollouts spent."""

    q_step: Any
    q_bin: Any
    spent: tuple[int, int]
    quality: dict[str, Any]


@dataclass
class BestOfN:
    """Stage 4's figures: the curves of every method, and the exact-label PRM's scores."""

    curve: dict[str, Any]
    top: dict[str, float]
    gold_scored: list[Record]


@dataclass
class Results:
    config: Any
    scored: list[Record]
    bon: BestOfN
    labels: Labels
    search: dict[str, Any] | None   # None: the search stage did not run (no --full)
    gold: dict[str, Record]
    implicit: dict[str, Any] | None = None   # prmkit.lab.demo.implicit.implicit_figures


def bestofn_stage(config: Any, scored: Sequence[Record], say: Any) -> BestOfN:
    """4. best-of-N for every method, the exact-label PRM included."""
    from prmkit.evaluate import bestofn
    from prmkit.lab import GoldPRM

    gold_scores = GoldPRM().score([r.problem for r in scored], [r.steps for r in scored])
    ns = sorted({1, 2, 4, config.split.n} | {k for k in (8, 16) if k <= config.split.n})
    curve = bestofn.curve(scored, bestofn.BestOfNConfig(n=ns, draws=200, seed=config.world.seed))
    gold_scored = [with_scores(r, s) for r, s in zip(scored, gold_scores)]
    curve["methods"]["gold-prm"] = bestofn.curve(
        gold_scored, bestofn.BestOfNConfig(n=ns, draws=200, seed=config.world.seed,
                                           methods=["prm-min"]))["methods"]["prm-min"]
    top = {m: pts[-1]["accuracy"] for m, pts in curve["methods"].items()}
    problems = curve["problems_total"]
    say.stage(4, f"best-of-{ns[-1]} on {problems} test problems: " + ", ".join(
        f"{m} {top[m]:.1f}%" for m in BON_METHODS if m in top))
    return BestOfN(curve, top, gold_scored)


def claims_of(res: Results) -> dict[str, lab_claims.Claim]:
    """The claims: best-of-N's from the scored test candidates, and the beam claim from the
    search rows where the search stage ran (``--full``)."""
    cfg = res.config
    out = lab_claims.bestofn_claims(res.scored, cfg.select, cfg.split.n, cfg.world.seed)
    if res.search is not None:
        out.update(beam_claims(res.search, cfg.margin, cfg.world.seed)[0])
    return out


def search_row(search: dict[str, Any], method: str, n: int) -> dict[str, Any]:
    """The search stage's row of ``method`` (beam, or best-of-n) at width or size ``n``."""
    return next(r for r in search["rows"] if r["method"] == method and r["n"] == n)


def finish(res: Results, out: str, say: Any, seconds: float) -> None:
    """6. the report, the printed summary and ``summary.json``."""
    claims = claims_of(res)
    auc = (step_auc(res.scored), step_auc(res.bon.gold_scored), orm_step_auc(res.scored))
    rows = summary_rows(res, claims, auc)
    report = os.path.join(out, "report.html")
    write_report(report, res, rows)
    say.stage(6, f"report: {report}")
    print_rows(f"prmkit demo summary (lab world, seed {res.config.world.seed}; measured in this "
               f"run, {seconds:.0f} s on {os.cpu_count()} cores)", rows)
    doc = {"config": settings_of(res.config), "prm_step_auc": auc[0], "orm_step_auc": auc[2],
           "claims": lab_claims.claims_json(claims, None if res.search is None else beam_claims(
               res.search, res.config.margin, res.config.world.seed)[1]),
           "summary": dict(rows),
           "bestofn": res.bon.curve, "search": res.search, "implicit": res.implicit}
    write_summary(out, doc)
    print(f"report written to {report}")
    sys.stdout.flush()


def orm_step_auc(scored: Sequence[Record]) -> float | None:
    """The ORM's step AUC against the gold labels, its step scores read at every step."""
    return step_auc([Record(**{**r.to_dict(), "step_scores": r.meta.get("orm_step_scores")})
                     for r in scored if r.meta.get("orm_step_scores")])


def calculator_scores(steps: Sequence[str]) -> list[float]:
    """The calculator as a verifier with no model: 1 for each step until one holds a wrong
    equation (:func:`prmkit.calculator.annotate` writes a note), 0 from that step on."""
    from prmkit.calculator import annotate

    out, wrong = [], False
    for step in steps:
        wrong = wrong or annotate(step) != step
        out.append(0.0 if wrong else 1.0)
    return out


def summary_rows(res: Results, claims: dict[str, lab_claims.Claim],
                 auc: tuple[float | None, ...]) -> list[tuple[str, str]]:
    cfg, curve, top = res.config, res.bon.curve, res.bon.top
    n, problems = curve["n"][-1], curve["problems_total"]
    rows = [("sizes", f"{cfg.split.train_problems} x {cfg.split.train_n} training candidates, "
                      f"{problems} x {n} test candidates, seed {cfg.world.seed}")]
    for m in BON_METHODS:
        if m in top:
            rows.append((f"best-of-{n} accuracy, {m}", f"{top[m]:.1f}%"))
    trained, exact, orm = auc   # how well the models rank steps: the reason for what follows
    if trained is not None:
        rows.append(("PRM step AUC vs gold labels (test)", f"{trained:.3f}" + (
            "" if exact is None else f" (the exact-label PRM: {exact:.3f})")))
    if orm is not None:
        how = ("a class head trained at the last step, read at every step"
               if cfg.orm_recipe == "class" else "trained on outcomes only")
        rows.append(("ORM step AUC vs gold labels (test)", f"{orm:.3f} ({how})"))
    rows += implicit_rows(res.implicit)
    if cfg.calculator:
        alone = step_auc([with_scores(r, calculator_scores(r.steps)) for r in res.scored])
        rows.append(("the calculator alone: step AUC", f"{alone:.3f} (1 until a step's "
                     f"equation is wrong, 0 from there; the PRM and the ORM read its notes)"))
    s = cfg.select
    rows += [
        lab_claims.verdict_line(claims["prm_beats_majority"],
                                f"claim: PRM ({s}) beats majority at N={n}?"),
        lab_claims.verdict_line(claims["prm_beats_orm"],
                                f"claim: PRM ({s}) beats the ORM at N={n}?"),
        lab_claims.verdict_line(claims["gap_grows_with_n"],
                                f"claim: PRM - ORM gap larger at N={n} than at N=2?"),
    ]
    if res.search is None:
        rows.append(("claim: beam >= best-of-4B (search stage)",
                     "not run: `prmkit demo --full` runs it (docs/lab.md)"))
        return rows + label_rows(res.labels)
    rows.append(lab_claims.verdict_line(
        claims["beam_matches_4x_best_of_n"],
        f"claim: beam >= best-of-4B at some B in {cfg.beam_n} (margin {cfg.margin:g}, Holm)?"))
    return rows + beam_rows(res, claims) + label_rows(res.labels)


def beam_rows(res: Results, claims: dict[str, lab_claims.Claim]) -> list[tuple[str, str]]:
    """Each width's Holm-corrected verdict at its level, and the tokens both spent."""
    cfg, search = res.config, res.search
    holm = beam_claims(search, cfg.margin, cfg.world.seed)[1]
    rows = []
    for b in cfg.beam_n:
        name, beam, bon = width_claim_name(b), search_row(search, "beam", b), \
            search_row(search, "best-of-n", 4 * b)
        h = holm[name]
        rows += [(f"  beam at B={b} >= best-of-{4 * b}, {beam['accuracy']:.1f}% vs "
                  f"{bon['accuracy']:.1f}%", verdict({**claims[name].to_dict(), **h})),
                 (f"  generated tokens per problem, beam B={b} / best-of-{4 * b}",
                  f"{beam['tokens']:.0f} / {bon['tokens']:.0f}")]
    return rows


def implicit_rows(figures: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The summary's rows for the implicit PRM (:mod:`prmkit.lab.demo.implicit`; none when it
    did not run)."""
    if figures is None:
        return []
    best = figures["best_of_n"]
    auc = figures["step_auc"]
    return [(f"best-of-{figures['n']} accuracy, implicit PRM (prod / min / last)",
             " / ".join(f"{best[m]:.1f}%" for m in PRM_METHODS)),
            ("implicit PRM step AUC vs gold labels (test)",
             ("-" if auc is None else f"{auc:.3f}") + f" (outcome labels only; "
             f"{figures['trained']}; not in the claims)")]


def label_rows(labels: Labels) -> list[tuple[str, str]]:
    q_step, q_bin, spent = labels.q_step, labels.q_bin, labels.spent
    return [("MC labels vs gold: step agreement", pct(q_step.step_agreement)),
            ("MC labels vs gold: first-error agreement", pct(q_step.first_error_agreement)),
            ("binary search: rollouts / per-step rollouts",
             f"{spent[0] / max(1, spent[1]):.2f} ({spent[0]} / {spent[1]}); first-error "
             f"agreement with gold {pct(q_bin.first_error_agreement)}")]


def write_report(path: str, res: Results, rows: list[tuple[str, str]]) -> None:
    from prmkit import report
    from prmkit.report import html, plots

    curve, search = res.bon.curve, res.search
    summary = html.table(["", "measured"], rows)
    bon = html.table(["method"] + [f"N={n}" for n in curve["n"]],
                     [[m] + [f"{p['accuracy']:.1f}" for p in pts]
                      for m, pts in curve["methods"].items()])
    bon += html.png_img(plots.bestofn_png(curve), "best-of-N accuracy against N")
    labels = html.table(["labels", "records", "first-error agreement", "step agreement",
                         "rollouts per record"],
                        [[m, q.records, pct(q.first_error_agreement), pct(q.step_agreement),
                          "-" if q.rollouts_per_record is None else f"{q.rollouts_per_record:.1f}"]
                         for m, q in res.labels.quality.items()])
    extra = [("Summary", summary), ("Best-of-N (all methods)", bon),
             ("Monte Carlo labels against exact labels", labels)]
    if search is not None:
        extra.append(("PRM-guided beam search against best-of-4B", html.table(
            ["method", "n", "accuracy %", "generated tokens / problem", "PRM tokens / problem"],
            [[r["method"], r["n"], f"{r['accuracy']:.1f}", f"{r['tokens']:.0f}",
              "-" if r.get("prm_tokens") is None else f"{r['prm_tokens']:.0f}"]
             for r in search["rows"]])))
    page = report.build(res.scored, title="prmkit demo: the lab world",
                        source="lab test candidates scored by the demo's PRM (steps) and ORM",
                        extra=extra, bestofn=False)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def with_scores(r: Record, scores: list[float | None]) -> Record:
    return Record(**{**r.to_dict(), "step_scores": scores})


def mean(values: Any) -> float:
    vals = [float(bool(v)) for v in values]
    return sum(vals) / len(vals) if vals else 0.0


def pct(x: float | None, digits: int = 1) -> str:
    """A percentage (already in 0..100) as text; "-" for none."""
    return "-" if x is None else f"{x:.{digits}f}%"
