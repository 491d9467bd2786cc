"""The lab demo: the whole PRM story on one CPU in minutes (``prmkit demo``, ``make demo``).

Every stage is the library code a user runs on real data; only the policy is the lab's
synthetic one (:mod:`prmkit.lab.policy`), because a 135M model writes ~50 tokens/s here and
seldom solves a multi-step problem. The PRM and the ORM are real transformers: SmolLM2-135M
(the default model from PyPI) with a 2-class head, trained here.

1. **Problems and candidates.** Lab problems (:mod:`prmkit.lab.world`) for training and for
   testing, candidates sampled by the lab policy, graded against the reference answer.
2. **Monte Carlo labels** (Math-Shepherd, Wang et al. 2024): per-step hard labels from K
   rollouts per step, compared with the exact gold labels; binary search for the first error
   (OmegaPRM, Luo et al. 2024) on the same candidates, with the rollouts it saves.
3. **Training.** A PRM on the MC step labels and an ORM on the outcome labels, from the same
   base, on the same candidates, with the same optimiser budget.
4. **Best-of-N** on the test candidates (Lightman et al. 2023's protocol): PRM (prod, min,
   last), ORM, majority, PRM-weighted majority, the exact-label PRM (upper bound of any PRM)
   and the oracle (pass@N).
5. **Search**: beam search guided by the trained PRM against best-of-N, at the generated-token
   budgets each one spent (Snell et al. 2024).
6. **Report**: an HTML page with the plots, the tables and every test solution's steps
   coloured by the PRM; the summary table is printed last.

Numbers are what this run measured, with its seed and sizes; nothing is hard-coded, and when
the PRM does not beat the ORM the summary says so. The stages write into ``--output`` as they
go; a rerun with the same settings reuses every finished stage (the trainers resume from their
last checkpoint), so a killed demo continues where it stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Sequence

from prmkit.errors import PrmkitError
from prmkit.records import Record, read_records, write_records

# Stored with the settings: a folder written by another version of the stages starts again
# rather than reusing files the current code would not make. 2: trainers' mixed batches, search
# batches independent of memory addresses (2026-11-30).
STAGES_VERSION = 2
PRM_METHODS = ("prm-prod", "prm-min", "prm-last")
BON_METHODS = PRM_METHODS + ("orm", "majority", "weighted-majority", "gold-prm", "oracle")


@dataclass
class DemoConfig:
    """Sizes and budgets of the lab demo (the defaults fit in a few minutes on 2 cores)."""

    output: str = field(default="demo_out", metadata={"help": "folder for every file the demo writes"})
    seed: int = field(default=0, metadata={"help": "seed of the problems, the sampling and training"})
    train_problems: int = field(default=50, metadata={"help": "lab problems to train on"})
    train_n: int = field(default=4, metadata={"help": "candidates per training problem"})
    test_problems: int = field(default=24, metadata={"help": "lab problems for best-of-N"})
    n: int = field(default=8, metadata={"help": "candidates per test problem (the largest N)"})
    min_steps: int = field(default=2, metadata={"help": "fewest operations per problem"})
    max_steps: int = field(default=5, metadata={"help": "most operations per problem"})
    slip: float = field(default=0.1, metadata={
        "help": "the lab policy's chance of a wrong add/sub calculation (mul/div: twice it)"})
    confuse: float = field(default=0.6, metadata={
        "help": "the lab policy's largest chance of confusing a problem's trap operation"})
    rollouts: int = field(default=4, metadata={"help": "Monte Carlo rollouts per labelled step (K)"})
    base: str = field(default="smollm2-135m", metadata={"help": "base model of the PRM and the ORM"})
    last_k: int = field(default=4, metadata={"help": "transformer layers trained (plus head)"})
    lr: float = field(default=3e-4, metadata={"help": "peak learning rate of both trainers"})
    epochs: int = field(default=1, metadata={"help": "passes over the training candidates"})
    batch_tokens: int = field(default=512, metadata={"help": "token budget of a training batch"})
    search_problems: int = field(default=10, metadata={"help": "test problems for beam search"})
    search_n: list[int] = field(default_factory=lambda: [4, 8], metadata={
        "help": "widths of beam search and best-of-N compared at matched budgets"})
    beam_m: int = field(default=2, metadata={"help": "beam search: next steps sampled per beam"})


def run(config: DemoConfig) -> int:
    t0 = time.time()
    out = config.output
    _prepare(out, config)
    say = _Printer()
    say(f"prmkit demo: the lab world, seed {config.seed}; files in {out}/")

    # 1. problems and candidates -----------------------------------------------------------
    from prmkit.lab import GoldPRM, LabConfig, gold_record, load_lab_policy, make_problems

    policy_name = f"lab:{config.slip}:{config.confuse}"
    policy, prompter = load_lab_policy(policy_name)
    lab = dict(min_steps=config.min_steps, max_steps=config.max_steps)
    train_p = make_problems(LabConfig(n=config.train_problems, seed=config.seed, **lab))
    test_p = make_problems(LabConfig(n=config.test_problems, seed=config.seed + 1000, **lab))
    train = _stage(out, "train_candidates.jsonl", lambda: _candidates(
        train_p, config.train_n, policy, prompter, policy_name, config.seed))
    test = _stage(out, "test_candidates.jsonl", lambda: _candidates(
        test_p, config.n, policy, prompter, policy_name, config.seed + 1))
    gold = {r.id: gold_record(r) for r in train + test}
    say.stage(1, f"{len(train_p)} training problems x {config.train_n} candidates, "
                 f"{len(test_p)} test problems x {config.n}; {config.min_steps}-{config.max_steps} "
                 f"operations, policy {policy_name}: candidate accuracy "
                 f"{_pct(100 * _mean(r.is_correct for r in train + test))}")

    # 2. Monte Carlo labels against gold ----------------------------------------------------
    from prmkit.label.mc import MCConfig, label_mc
    from prmkit.label.quality import label_quality

    mc = _stage(out, "train_mc.jsonl", lambda: list(label_mc(
        train, policy, prompter, MCConfig(rollouts=config.rollouts, mode="hard",
                                          strategy="per-step", seed=config.seed), policy_name)))
    binary = _stage(out, "train_mc_binary.jsonl", lambda: list(label_mc(
        train, policy, prompter, MCConfig(rollouts=config.rollouts, mode="hard",
                                          strategy="binary", seed=config.seed), policy_name)))
    quality = {q.method: q for q in label_quality(mc + binary, gold)}
    q_step = next(q for m, q in quality.items() if "per-step" in m)
    q_bin = next(q for m, q in quality.items() if "binary" in m)
    spent = (sum(r.meta["mc"]["rollouts_spent"] for r in binary),
             sum(r.meta["mc"]["rollouts_spent"] for r in mc))
    say.stage(2, f"Monte Carlo labels (hard, K={config.rollouts}) vs exact gold labels: step "
                 f"agreement {_pct(q_step.step_agreement)}, first-error agreement "
                 f"{_pct(q_step.first_error_agreement)}; binary search: first-error agreement "
                 f"{_pct(q_bin.first_error_agreement)} with {spent[0]} rollouts vs {spent[1]} "
                 f"per step")

    # 3. train a PRM on the MC labels and an ORM on the outcomes, same budget ----------------
    prm_dir, orm_dir = os.path.join(out, "prm"), os.path.join(out, "orm")
    _train(config, "prm", os.path.join(out, "train_mc.jsonl"), prm_dir, say)
    _train(config, "orm", os.path.join(out, "train_candidates.jsonl"), orm_dir, say)
    say.stage(3, f"trained a PRM (MC step labels) and an ORM (outcome labels) from {config.base}: "
                 f"last {config.last_k} layers + head, {config.epochs} epoch(s) over "
                 f"{len(train)} candidates, lr {config.lr}, batches of {config.batch_tokens} tokens")

    # 4. best-of-N ---------------------------------------------------------------------------
    prm = _Lazy(lambda: _load(prm_dir))     # loaded once, for scoring and for search
    scored = _stage(out, "test_scored.jsonl", lambda: _score(test, prm(), orm_dir, gold))
    from prmkit.evaluate import bestofn

    gold_scores = GoldPRM().score([r.problem for r in scored], [r.steps for r in scored])
    ns = sorted({1, 2, 4, config.n} | {k for k in (8, 16) if k <= config.n})
    curve = bestofn.curve(scored, bestofn.BestOfNConfig(n=ns, draws=200, seed=config.seed))
    gold_scored = [_with_scores(r, s) for r, s in zip(scored, gold_scores)]
    curve["methods"]["gold-prm"] = bestofn.curve(
        gold_scored,
        bestofn.BestOfNConfig(n=ns, draws=200, seed=config.seed, methods=["prm-min"]))["methods"]["prm-min"]
    top = {m: pts[-1]["accuracy"] for m, pts in curve["methods"].items()}
    say.stage(4, f"best-of-{ns[-1]} on {len(test_p)} test problems: " + ", ".join(
        f"{m} {top[m]:.1f}%" for m in BON_METHODS if m in top))

    # 5. beam search against best-of-N at matched budgets ----------------------------------
    search = _stage_json(out, "search.json", lambda: _search(config, test_p, policy, prompter,
                                                             prm(), policy_name))
    say.stage(5, "search on {} problems: ".format(config.search_problems) + "; ".join(
        f"{row['method']} n={row['n']} {row['accuracy']:.1f}% at {row['tokens']:.0f} tokens"
        for row in search["rows"]))

    # 6. the report and the summary ----------------------------------------------------------
    rows = _summary_rows(config, curve, top, q_step, q_bin, spent, search,
                         (_step_auc(scored), _step_auc(gold_scored)))
    report = os.path.join(out, "report.html")
    _write_report(report, scored, gold, curve, rows, search, quality)
    say.stage(6, f"report: {report}")
    print("\nprmkit demo summary (lab world, seed "
          f"{config.seed}; measured in this run, {time.time() - t0:.0f} s on "
          f"{os.cpu_count()} cores)")
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k.ljust(width)}  {v}")
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump({"config": asdict(config), "summary": dict(rows), "bestofn": curve,
                   "search": search}, f, indent=2)
    print(f"report written to {report}")
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------------------------------------
# stages


class _Printer:
    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self, text: str) -> None:
        print(text, flush=True)

    def stage(self, k: int, text: str) -> None:
        now = time.time()
        print(f"{k}. {text} [{now - self.t:.0f} s]", flush=True)
        self.t = now


def _prepare(out: str, config: DemoConfig) -> None:
    """Reuse ``out`` when it holds a run with the same settings, else start it afresh."""
    settings = os.path.join(out, "settings.json")
    wanted = {**{k: v for k, v in asdict(config).items() if k != "output"},
              "stages_version": STAGES_VERSION}
    if os.path.isdir(out):
        if not os.path.isfile(settings):
            if os.listdir(out):   # never delete a folder the demo did not make
                raise PrmkitError(f"{out} exists and is not a demo folder (no settings.json): "
                                  f"choose another --output")
            same = False
        else:
            try:
                with open(settings, encoding="utf-8") as f:
                    same = json.load(f) == wanted
            except (OSError, ValueError):
                same = False
        if not same:
            shutil.rmtree(out)
        else:
            print(f"resuming the demo in {out}/ (same settings): finished stages are reused",
                  flush=True)
    os.makedirs(out, exist_ok=True)
    with open(settings, "w", encoding="utf-8") as f:
        json.dump(wanted, f, indent=2)


def _stage(out: str, name: str, make: Callable[[], list[Record]]) -> list[Record]:
    path = os.path.join(out, name)
    if os.path.exists(path):
        return read_records(path)
    records = make()
    write_records(path, records)
    return records


def _stage_json(out: str, name: str, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    path = os.path.join(out, name)
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    value = make()
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
    os.replace(tmp, path)
    return value


def _candidates(problems: Sequence[Record], n: int, policy: Any, prompter: Any, name: str,
                seed: int) -> list[Record]:
    from prmkit.generate.run import Problem, candidate_record
    from prmkit.generate.stepwise import solve

    sols = solve(policy, prompter, [p.problem for p in problems], n=n, seed=seed)
    meta = {"policy": name, "seed": seed}
    return [candidate_record(Problem(p.id, p.problem, p.reference), k, s, prompter.rule, meta)
            for p, row in zip(problems, sols) for k, s in enumerate(row)]


def _train(config: DemoConfig, kind: str, data: str, output: str, say: _Printer) -> None:
    from prmkit.train.loop import LoopConfig

    if os.path.isfile(os.path.join(output, "done.json")):
        return
    loop = LoopConfig(last_k=config.last_k, lr=config.lr, epochs=config.epochs,
                      batch_tokens=config.batch_tokens, seed=config.seed, resume=True)
    if kind == "prm":
        from prmkit.train.prm import PRMTrainConfig, train_prm

        train_prm(PRMTrainConfig(base=config.base, data=data, output=output, dtype="bfloat16",
                                 loop=loop, command="prmkit demo"))
    else:
        from prmkit.train.orm import ORMTrainConfig, train_orm

        train_orm(ORMTrainConfig(base=config.base, data=data, output=output, dtype="bfloat16",
                                 loop=loop, command="prmkit demo"))
    with open(os.path.join(output, "done.json"), "w", encoding="utf-8") as f:
        json.dump({"kind": kind}, f)


class _Lazy:
    """A value made on first use."""

    def __init__(self, make: Callable[[], Any]):
        self.make, self.value = make, None

    def __call__(self) -> Any:
        if self.value is None:
            self.value = self.make()
        return self.value


def _load(model_dir: str) -> Any:
    from prmkit.models.hf import HFConfig, load_hf_prm

    return load_hf_prm(os.path.join(model_dir, "last"), config=HFConfig(dtype="bfloat16"))


def _score(test: Sequence[Record], prm: Any, orm_dir: str,
           gold: dict[str, Record]) -> list[Record]:
    problems, steps = [r.problem for r in test], [r.steps for r in test]
    step_scores = prm.score(problems, steps)
    outcome = [s[-1] for s in _load(orm_dir).score(problems, steps)]
    out = []
    for r, s, o in zip(test, step_scores, outcome):
        g = gold[r.id]
        out.append(Record(**{**r.to_dict(), "step_scores": s, "labels": g.labels,
                             "first_error": g.first_error,
                             "meta": {**r.meta, "outcome_score": o}}))
    return out


def _with_scores(r: Record, scores: list[float | None]) -> Record:
    return Record(**{**r.to_dict(), "step_scores": scores})


def _search(config: DemoConfig, problems: Sequence[Record], policy: Any, prompter: Any,
            prm: Any, policy_name: str) -> dict[str, Any]:
    from prmkit.generate.run import Problem
    from prmkit.search.base import SearchConfig
    from prmkit.search.beam import BeamConfig, beam_search
    from prmkit.search.best_of_n import best_of_n

    chosen = [Problem(p.id, p.problem, p.reference) for p in problems[:config.search_problems]]
    rows = []
    for n in config.search_n:
        for method, fn, cfg in (
                ("best-of-n", best_of_n, SearchConfig(n=n, m=1, seed=config.seed,
                                                     select="prm-min")),
                ("beam", beam_search, BeamConfig(n=n, m=config.beam_m, seed=config.seed,
                                                 select="prm-min"))):
            result = fn(chosen, policy, prompter, prm, cfg)
            picked = [r for r in result.records if r.meta.get("selected")]
            total = result.account.total
            rows.append({"method": method, "n": n, "problems": len(chosen),
                         "accuracy": 100.0 * _mean(r.is_correct for r in picked),
                         "tokens": total.tokens_generated / len(chosen),
                         "prm_tokens": total.prm_tokens / len(chosen),
                         "seconds": total.seconds})
    return {"policy": policy_name, "prm": "the demo's PRM (prm/last)", "rows": rows}


# ---------------------------------------------------------------------------------------------
# summary and report


def _step_auc(scored: Sequence[Record]) -> float | None:
    """The trained PRM's step AUC on the test candidates against their gold labels."""
    from prmkit.evaluate.stepwise import auc

    pairs = [(s, y >= 0.5) for r in scored for s, y in zip(r.step_scores or [], r.labels or [])
             if s is not None and y is not None]
    return auc([s for s, _ in pairs], [y for _, y in pairs])


def _summary_rows(config: DemoConfig, curve: dict[str, Any], top: dict[str, float], q_step: Any,
                  q_bin: Any, spent: tuple[int, int], search: dict[str, Any],
                  step_auc: tuple[float | None, float | None] = (None, None),
                  ) -> list[tuple[str, str]]:
    n = curve["n"][-1]
    problems = curve["problems_total"]
    rows = [("sizes", f"{config.train_problems} x {config.train_n} training candidates, "
                      f"{problems} x {n} test candidates, seed {config.seed}")]
    for m in BON_METHODS:
        if m in top:
            rows.append((f"best-of-{n} accuracy, {m}", f"{top[m]:.1f}%"))
    best_prm = max(PRM_METHODS, key=lambda m: top.get(m, -1.0))
    ci = {m: pts[-1]["ci95"] for m, pts in curve["methods"].items()}

    def verdict(other: str, name: str) -> str:
        gap = top[best_prm] - top[other]
        if gap <= 0:
            return f"NO: the PRM does not beat {name} in this run ({gap:+.1f} points)"
        lo, hi = ci[best_prm], ci[other]
        clear = lo[0] > hi[1]
        return (f"yes, by {gap:.1f} points" + ("" if clear else
                f" (within noise: the 95% intervals over {problems} problems overlap)"))

    rows.append((f"PRM ({best_prm}) beats the ORM at N={n}?", verdict("orm", "the ORM")))
    rows.append((f"PRM ({best_prm}) beats majority at N={n}?", verdict("majority", "majority voting")))
    first = {m: pts[0]["accuracy"] for m, pts in curve["methods"].items()}
    gap_small = first[best_prm] - first["orm"]
    rows.append((f"PRM - ORM gap at N=1 and N={n}", f"{gap_small:+.1f} and "
                                                    f"{top[best_prm] - top['orm']:+.1f} points"))
    trained, exact = step_auc   # how well the PRMs rank steps: the reason for the above
    if trained is not None:
        rows.append(("PRM step AUC vs gold labels (test)", f"{trained:.3f}" + (
            "" if exact is None else f" (the exact-label PRM: {exact:.3f})")))
    rows.append(("MC labels vs gold: step agreement", _pct(q_step.step_agreement)))
    rows.append(("MC labels vs gold: first-error agreement", _pct(q_step.first_error_agreement)))
    rows.append(("binary search: rollouts / per-step rollouts",
                 f"{spent[0] / max(1, spent[1]):.2f} ({spent[0]} / {spent[1]}); first-error "
                 f"agreement with gold {_pct(q_bin.first_error_agreement)}"))
    for row in search["rows"]:
        rows.append((f"search {row['method']} n={row['n']}",
                     f"{row['accuracy']:.1f}% at {row['tokens']:.0f} generated tokens/problem"))
    return rows


def _write_report(path: str, scored: Sequence[Record], gold: dict[str, Record],
                  curve: dict[str, Any], rows: list[tuple[str, str]], search: dict[str, Any],
                  quality: dict[str, Any]) -> None:
    from prmkit import report
    from prmkit.report import html, plots

    summary = html.table(["", "measured"], rows)
    bon = html.table(["method"] + [f"N={n}" for n in curve["n"]],
                     [[m] + [f"{p['accuracy']:.1f}" for p in pts]
                      for m, pts in curve["methods"].items()])
    bon += html.png_img(plots.bestofn_png(curve), "best-of-N accuracy against N")
    labels = html.table(["labels", "records", "first-error agreement", "step agreement",
                         "rollouts per record"],
                        [[m, q.records, _pct(q.first_error_agreement),
                          _pct(q.step_agreement),
                          "-" if q.rollouts_per_record is None else f"{q.rollouts_per_record:.1f}"]
                         for m, q in quality.items()])
    srch = html.table(["method", "n", "accuracy %", "generated tokens / problem",
                       "PRM tokens / problem"],
                      [[r["method"], r["n"], f"{r['accuracy']:.1f}", f"{r['tokens']:.0f}",
                        f"{r['prm_tokens']:.0f}"] for r in search["rows"]])
    page = report.build(scored, title="prmkit demo: the lab world",
                        source="lab test candidates scored by the demo's PRM (steps) and ORM",
                        extra=[("Summary", summary), ("Best-of-N (all methods)", bon),
                               ("Monte Carlo labels against exact labels", labels),
                               ("PRM-guided beam search against best-of-N", srch)],
                        bestofn=False)
    with open(path, "w", encoding="utf-8") as f:
        f.write(page)


def _mean(values: Any) -> float:
    vals = [float(bool(v)) for v in values]
    return sum(vals) / len(vals) if vals else 0.0


def _pct(x: float | None, digits: int = 1) -> str:
    """A percentage (already in 0..100) as text; "-" for none."""
    return "-" if x is None else f"{x:.{digits}f}%"


def add_arguments(p: Any) -> None:
    """The demo's options on ``prmkit demo``, from :class:`DemoConfig`."""
    for f in fields(DemoConfig):
        default = DemoConfig().__dict__[f.name]
        flag = f"--{f.name.replace('_', '-')}"
        if isinstance(default, list):
            p.add_argument(flag, type=int, nargs="+", default=default, help=f.metadata["help"])
        else:
            p.add_argument(flag, type=type(default), default=default, help=f.metadata["help"])


def config_from(args: Any) -> DemoConfig:
    return DemoConfig(**{f.name: getattr(args, f.name) for f in fields(DemoConfig)})
