"""Implicit PRM (outcome labels only) against an explicit PRM (Monte Carlo step labels), lab world.

The question of Yuan et al. 2024 ("Free Process Rewards without Process Labels"): is a PRM
trained from outcome labels alone, through the implicit reward beta * log(pi/pi_ref), as good
as one trained on step labels that cost rollouts to make? Both sides run in this one process:

* Problems: the lab world (:mod:`prmkit.lab`), ``--train-problems`` for training and
  ``--test-problems`` for testing (other seeds), ``--min-steps`` .. ``--max-steps`` operations.
* Candidates: ``--n`` solutions per problem from the lab policy (``--policy``, default ``lab``:
  a synthetic solver that slips with a known rate and carries its slips on), graded against the
  reference answer (``is_correct``), split one step per line.
* Labels: the implicit PRM gets ``is_correct`` only. The explicit PRM gets Monte Carlo step
  labels (:func:`prmkit.label.mc.label_mc`, Math-Shepherd per-step hard estimates,
  ``--rollouts`` rollouts per step from the same lab policy); the bench prints what those
  rollouts cost in generated tokens, the price the implicit PRM does not pay.
* Models: SmolLM2-135M-Instruct, the same training solutions and seed, bfloat16 autocast for
  training. The implicit PRM trains the last ``--last-k`` layers and final norm for
  ``--epochs`` epochs at ``--lr``. The explicit PRM (``prmkit train prm``, format ``prmkit``)
  takes, with ``--explicit-recipe surprisal`` (the default), the recipe of ``prmkit demo``:
  the surprisal head alone on the frozen body (cached), 16 epochs at lr 1e-3 in batches of
  4096 tokens, a few seconds an epoch; with ``class``, a new 2-class head with the implicit
  PRM's layers, epochs, learning rate and token budget (the recipe of the 2026-11-30 run).
  Implicit: ``prmkit train implicit-prm`` (cross-entropy, ``--beta``, the policy's chat
  layout). The number of optimiser steps each took is printed (their sequences differ in
  length, so token budgets pack them differently).
* Test: every test candidate scored by both in float32. Best-of-N accuracy by each selection
  rule (prm-min is the weakest-step rule; prm-last is the outcome view: for the implicit
  PRM sigmoid(r)), beside what no learned model needs: a PRM with random scores (fixed per
  solution text: right lab solutions are often the same text, so this is the real chance level
  of a PRM, far below the mean accuracy of a candidate), a random candidate, majority voting,
  the gold PRM of the lab world, and the oracle. Against the
  lab's exact gold step labels (:func:`prmkit.lab.gold_labels`): ProcessBench first-error F1 at
  threshold 0.5 and step AUC.

Usage: ``flock /tmp/prmkit-cpu.lock .venv/bin/python bench/implicit_prm.py [--out DIR] ...``.
Writes ``DIR/result.json`` and the trained folders in ``DIR``. The last line is the headline:
``RESULT best-of-N implicit X% vs explicit Y% (majority M%) | first-error F1 implicit A vs explicit B``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from prmkit import select  # noqa: E402
from prmkit.evaluate.processbench import predicted_first_error, split_metrics  # noqa: E402
from prmkit.evaluate.stepwise import auc  # noqa: E402
from prmkit.generate.run import Problem, candidate_record  # noqa: E402
from prmkit.generate.stepwise import solve  # noqa: E402
from prmkit.lab import GoldPRM, LabConfig, gold_record, load_lab_policy, make_problems  # noqa: E402
from prmkit.label.mc import MCConfig, label_mc  # noqa: E402
from prmkit.models.backends.hf import HFConfig  # noqa: E402
from prmkit.models.load import load_prm  # noqa: E402
from prmkit.records import Record, write_records  # noqa: E402
from prmkit.train.implicit import ImplicitTrainConfig, train_implicit  # noqa: E402
from prmkit.train.loop import LoopConfig  # noqa: E402
from prmkit.train.prm import PRMTrainConfig, train_prm  # noqa: E402

RULES = ("prm-min", "prm-last", "prm-prod", "prm-mean")


def candidates(problems: list[Record], policy: str, n: int, seed: int) -> tuple[list[Record], int]:
    gen, prompter = load_lab_policy(policy)
    sols = solve(gen, prompter, [p.problem for p in problems], n=n, seed=seed)
    recs = [candidate_record(Problem(p.id, p.problem, p.reference), k, s, prompter.rule, {})
            for p, row in zip(problems, sols) for k, s in enumerate(row)]
    return recs, gen.tokens_generated


def mc_labels(records: list[Record], policy: str, rollouts: int) -> tuple[list[Record], int]:
    gen, prompter = load_lab_policy(policy)
    cfg = MCConfig(rollouts=rollouts, strategy="per-step", mode="hard", seed=0)
    labelled = {r.id: r for r in label_mc(records, gen, prompter, cfg, policy=policy)}
    return [labelled[r.id] for r in records], gen.tokens_generated


def evaluate(name: str, scores: list[list[float | None]], test: list[Record],
             gold: list[Record]) -> dict[str, float | None]:
    for r, s in zip(test, scores):
        r.step_scores = s
    out: dict[str, float | None] = {}
    for rule in RULES:
        try:
            out[rule] = select.accuracy(select.select(test, rule))
        except Exception as e:  # prod needs probabilities; say why a rule is missing
            print(f"  {name} {rule}: {e}", file=sys.stderr)
            out[rule] = None
    ys = [g.first_error for g in gold]
    preds = [predicted_first_error(s, 0.5) for s in scores]
    out["first_error_f1"] = split_metrics(ys, preds).f1
    flat_s, flat_y = [], []
    for g, s in zip(gold, scores):
        for y, x in zip(g.labels or [], s):
            if x is not None:
                flat_s.append(x)
                flat_y.append(y >= 0.5)
    out["step_auc"] = auc(flat_s, flat_y)
    return out


def random_prm_accuracy(test: list[Record]) -> float:
    """Expected best-of-N accuracy of a PRM whose score is random but fixed per solution text:
    the same text always gets the same score, so every distinct text is equally likely to win.
    Lab solutions that are right are often word for word the same, so this is far below the mean
    accuracy of a candidate: the bar a PRM that learned nothing sits at."""
    total = 0.0
    groups = select.groups(test)
    for g in groups:
        texts = {"\n".join(r.steps): bool(r.is_correct) for r in g}
        total += sum(texts.values()) / len(texts)
    return total / len(groups)


def pct(x: float | None) -> str:
    return "   -  " if x is None else f"{100 * x:5.1f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/bench_implicit", help="folder for data, models, result")
    ap.add_argument("--base", default="smollm2-135m", help="base model of both PRMs")
    ap.add_argument("--policy", default="lab", help="lab policy (lab, or lab:SLIP)")
    ap.add_argument("--train-problems", type=int, default=40, help="training problems")
    ap.add_argument("--test-problems", type=int, default=50, help="test problems")
    ap.add_argument("--min-steps", type=int, default=2, help="fewest operations per problem")
    ap.add_argument("--max-steps", type=int, default=4, help="most operations per problem")
    ap.add_argument("--n", type=int, default=8, help="candidates per problem (best-of-N)")
    ap.add_argument("--rollouts", type=int, default=8, help="MC rollouts per step (explicit PRM)")
    ap.add_argument("--epochs", type=int, default=2, help="training epochs, both PRMs")
    ap.add_argument("--lr", type=float, default=2e-4, help="peak learning rate, both PRMs")
    ap.add_argument("--last-k", type=int, default=2, help="trained layers, both PRMs")
    ap.add_argument("--batch-tokens", type=int, default=2048, help="token budget per batch")
    ap.add_argument("--beta", type=float, default=0.05, help="implicit PRM's beta")
    ap.add_argument("--explicit-recipe", choices=["surprisal", "class"], default="surprisal",
                    help="surprisal: the explicit PRM with prmkit demo's recipe (surprisal "
                         "head alone on the frozen body, cached, 16 epochs at lr 1e-3, 4096-"
                         "token batches); class: a new class head with the implicit PRM's "
                         "layers, epochs, lr and batches (the recipe of the 2026-11-30 run)")
    ap.add_argument("--seed", type=int, default=0, help="seed of problems, sampling, training")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()

    train_p = make_problems(LabConfig(n=args.train_problems, min_steps=args.min_steps,
                                      max_steps=args.max_steps, seed=1000 + args.seed))
    test_p = make_problems(LabConfig(n=args.test_problems, min_steps=args.min_steps,
                                     max_steps=args.max_steps, seed=2000 + args.seed))
    train, _ = candidates(train_p, args.policy, args.n, args.seed)
    test, _ = candidates(test_p, args.policy, args.n, args.seed + 1)
    mc, rollout_tokens = mc_labels(train, args.policy, args.rollouts)
    mc_agree = n_steps = 0  # how often a Monte Carlo label equals the exact gold label
    for m, g in zip(mc, (gold_record(r) for r in train)):
        for x, y in zip(m.labels or [], g.labels or []):
            if x is not None:
                n_steps += 1
                mc_agree += int((x >= 0.5) == (y >= 0.5))
    write_records(os.path.join(args.out, "train_outcome.jsonl"),
                  [Record(**{**r.to_dict(), "labels": None, "first_error": None}) for r in train])
    write_records(os.path.join(args.out, "train_mc.jsonl"), mc)
    acc_train = sum(bool(r.is_correct) for r in train) / len(train)
    print(f"data: {len(train)} training candidates ({acc_train:.1%} correct, {n_steps} steps), "
          f"{len(test)} test candidates; MC labels: {args.rollouts} rollouts per step, "
          f"{rollout_tokens} generated tokens, {mc_agree / max(n_steps, 1):.1%} of step labels agree "
          f"with gold", flush=True)

    loop = dict(train="last-k", last_k=args.last_k, epochs=args.epochs, lr=args.lr,
                batch_tokens=args.batch_tokens, seed=args.seed, resume=False, warmup=0.05)
    runs = {}
    t = time.time()
    explicit_cfg = PRMTrainConfig(base=args.base, data=os.path.join(args.out, "train_mc.jsonl"),
                                  output=os.path.join(args.out, "explicit"), format="prmkit",
                                  head="class", dtype="bfloat16", max_length=512,
                                  loop=LoopConfig(**loop))
    if args.explicit_recipe == "surprisal":   # prmkit demo's PRM recipe
        explicit_cfg = PRMTrainConfig(
            base=args.base, data=explicit_cfg.data, output=explicit_cfg.output, format="prmkit",
            head="surprisal", dtype="bfloat16", max_length=512, cache_frozen=True,
            loop=LoopConfig(**{**loop, "last_k": 0, "epochs": 16, "lr": 1e-3,
                               "batch_tokens": 4096}))
    hist = train_prm(explicit_cfg)
    runs["explicit"] = {"steps": hist[-1]["step"], "train_seconds": round(time.time() - t, 1),
                        "train_loss": hist[-1]["train_loss"]}
    t = time.time()
    implicit_cfg = ImplicitTrainConfig(base=args.base,
                                       data=os.path.join(args.out, "train_outcome.jsonl"),
                                       output=os.path.join(args.out, "implicit"), beta=args.beta,
                                       dtype="bfloat16", max_length=512, loop=LoopConfig(**loop))
    hist = train_implicit(implicit_cfg)
    runs["implicit"] = {"steps": hist[-1]["step"], "train_seconds": round(time.time() - t, 1),
                        "train_loss": hist[-1]["train_loss"]}
    print(f"trained: explicit {runs['explicit']}, implicit {runs['implicit']}", flush=True)

    gold = [gold_record(r) for r in test]
    problems, steps = [r.problem for r in test], [r.steps for r in test]
    results = {}
    for name in ("explicit", "implicit"):
        t = time.time()
        prm = load_prm(os.path.join(args.out, name, "last"), config=HFConfig(dtype="float32"))
        scores = prm.score(problems, steps)
        results[name] = evaluate(name, scores, test, gold)
        results[name]["score_seconds"] = round(time.time() - t, 1)
    results["gold PRM"] = evaluate("gold", GoldPRM().score(problems, steps), test, gold)
    for r in test:
        r.step_scores = None
    baselines = {"random PRM (per text)": random_prm_accuracy(test),
                 "random candidate": sum(bool(r.is_correct) for r in test) / len(test),
                 "majority": select.accuracy(select.select(test, "majority")),
                 "oracle": select.accuracy(select.select(test, "oracle"))}

    print(f"\nbest-of-{args.n} accuracy on {len(test_p)} test problems (float32 scores)")
    print(f"{'':18s}" + "".join(f"{r:>10s}" for r in RULES) + "   first-error F1   step AUC")
    for name in ("explicit", "implicit", "gold PRM"):
        res = results[name]
        f1_, a = res["first_error_f1"], res["step_auc"]
        print(f"{name:18s}" + "".join(f"{pct(res[r]):>10s}" for r in RULES)
              + f"   {'-' if f1_ is None else f'{f1_:5.1f}':>14s}   "
              + f"{'-' if a is None else f'{a:.3f}':>8s}")
    for k, v in baselines.items():
        print(f"{k:24s} {pct(v)}")
    result = {"args": vars(args), "runs": runs, "results": results, "baselines": baselines,
              "mc_rollout_tokens": rollout_tokens, "mc_label_agreement": mc_agree / max(n_steps, 1),
              "train_candidates": len(train), "test_candidates": len(test),
              "seconds": round(time.time() - t0, 1), "load_average": os.getloadavg()}
    with open(os.path.join(args.out, "result.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    imp, exp = results["implicit"], results["explicit"]
    def f1(x: float | None) -> str:
        return "-" if x is None else f"{x:.1f}"

    print(f"RESULT best-of-{args.n} (prm-min) implicit {pct(imp['prm-min']).strip()} vs explicit "
          f"{pct(exp['prm-min']).strip()} (majority {pct(baselines['majority']).strip()}) | "
          f"first-error F1 implicit {f1(imp['first_error_f1'])} vs explicit "
          f"{f1(exp['first_error_f1'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
