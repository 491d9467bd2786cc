"""Monte Carlo labeling: binary search (OmegaPRM) against per-step rollouts (Math-Shepherd), in
one run, on the same solutions and the same seeded rollouts.

Solutions: the lab world (:mod:`prmkit.lab`). ``--problems`` problems of ``--min-ops`` to
``--max-ops`` operations (one step each, plus the answer line), two solutions each sampled from
the lab policy (``--policy``, default ``lab``: one arithmetic step per line, slips at a known
rate and carries a slipped value on); only solutions of at least ``--min-steps`` steps are kept.
Both strategies label every solution with the same ``K`` rollouts per probe, for each K in
``--rollouts``, in hard mode (wrong = no rollout right, OmegaPRM's rule) and in soft mode with
``--soft-threshold`` (wrong = at most that fraction right). Printed per mode and K:

* rollouts used by binary search over rollouts used by per-step (all solutions, and the
  solutions with a wrong final answer, where binary search must bisect; a solution whose own
  answer is right costs binary search nothing);
* the share of solutions where the two strategies name the same first error;
* each strategy's first-error agreement with the gold labels (:func:`prmkit.lab.gold_labels`,
  exact step checking), via :mod:`prmkit.label.quality`.

``--smollm N`` adds a real-model slice: the first N ProcessBench GSM8K dev solutions with at
least ``--min-steps`` steps (references from GSM8K, gold first errors from ProcessBench),
labelled by both strategies with SmolLM2-135M rolling out (K=2, ``--smollm-tokens`` per
rollout; about a minute per solution on 2 CPU cores).

The last line is the headline: the rollout ratio and the agreement in hard mode at the largest K.

Usage: ``python bench/labeling.py [--problems 100] [--rollouts 4,8,16] [--smollm 0]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time

from prmkit.shareddata import shared_data_dir

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = shared_data_dir()


def lab_solutions(args):
    """Sampled lab solutions of at least ``min_steps`` steps, as records with a reference."""
    from prmkit.generate.load import load_policy
    from prmkit.generate.run import Problem, candidate_record
    from prmkit.generate.stepwise import solve
    from prmkit.lab import LabConfig, make_problems

    problems = make_problems(LabConfig(n=args.problems, min_steps=args.min_ops,
                                       max_steps=args.max_ops, seed=args.seed))
    policy, prompter = load_policy(args.policy)
    sols = solve(policy, prompter, [p.problem for p in problems], n=2, seed=args.seed)
    out = []
    for p, row in zip(problems, sols):
        for k, sol in enumerate(row):
            rec = candidate_record(Problem(p.id, p.problem, p.reference), k, sol, prompter.rule, {})
            if len(rec.steps) >= args.min_steps:
                out.append(rec)
    return out, policy, prompter


def label(records, policy, prompter, strategy, k, max_tokens=512, policy_name="", mode="hard",
          threshold=0.0):
    from prmkit.label.mc import MCConfig, label_mc
    from prmkit.records import Record

    config = MCConfig(rollouts=k, mode=mode, threshold=threshold, strategy=strategy,
                      max_tokens=max_tokens, chunk=16)
    start = time.perf_counter()
    out = {r.id: r for r in label_mc([Record.from_dict(r.to_dict()) for r in records], policy,
                                     prompter, config, policy=policy_name)}
    return [out[r.id] for r in records], time.perf_counter() - start


def compare(records, per, binary):
    """(rollout ratio all, ratio on wrong answers, first-error agreement %) of two labellings."""
    def spent(recs, keep=lambda r: True):
        return sum(r.meta["mc"]["rollouts_spent"] for r in recs if keep(r))

    wrong = lambda r: r.is_correct is False   # noqa: E731
    ratio = spent(binary) / max(1, spent(per))
    ratio_wrong = spent(binary, wrong) / max(1, spent(per, wrong))
    agree = 100.0 * sum(a.first_error == b.first_error for a, b in zip(per, binary)) / len(records)
    return ratio, ratio_wrong, agree


def smollm_slice(args):
    """Both strategies with SmolLM2-135M rolling out real ProcessBench GSM8K solutions; the
    reference answers come from GSM8K (every ProcessBench gsm8k problem is a GSM8K test problem),
    the gold first errors from ProcessBench."""
    from prmkit.formats import read
    from prmkit.generate.load import load_policy
    from prmkit.label.quality import label_quality

    pb = os.path.join(DATA, "processbench_dev", "gsm8k.json")
    gsm8k = os.path.join(DATA, "gsm8k", "test.jsonl")
    if not (os.path.isfile(pb) and os.path.isfile(gsm8k)):
        print(f"smollm slice skipped: {pb} or {gsm8k} is missing")
        return None
    with open(gsm8k, encoding="utf-8") as f:
        answers = {row["question"].strip(): row["answer"].split("####")[-1].strip()
                   for row in map(json.loads, f)}
    records = [r for r in read("processbench", pb)
               if len(r.steps) >= args.min_steps and r.problem.strip() in answers]
    records = records[:args.smollm]
    for r in records:
        r.reference = answers[r.problem.strip()]
    gold = {r.id: r for r in records}
    policy, prompter = load_policy("smollm2-135m", threads=args.threads)
    per, t_per = label(records, policy, prompter, "per-step", 2, args.smollm_tokens, "smollm2-135m")
    binary, t_bin = label(records, policy, prompter, "binary", 2, args.smollm_tokens, "smollm2-135m")
    ratio, _, agree = compare(records, per, binary)
    [q_per], [q_bin] = label_quality(per, gold), label_quality(binary, gold)
    print(f"smollm2-135m (bfloat16), {len(records)} ProcessBench gsm8k solutions of "
          f"{args.min_steps}+ steps, K=2, {args.smollm_tokens} tokens per rollout: per-step "
          f"{t_per:.0f} s, binary {t_bin:.0f} s; rollouts binary/per-step {ratio:.3f}; first "
          f"errors agree {agree:.1f}%; gold agreement per-step {q_per.first_error_agreement:.1f}%, "
          f"binary {q_bin.first_error_agreement:.1f}%")
    print(f"  gold {[r.first_error for r in records]}, per-step {[r.first_error for r in per]}, "
          f"binary {[r.first_error for r in binary]}")
    return {"solutions": len(records), "ratio": ratio, "agreement": agree,
            "seconds_per_step": t_per, "seconds_binary": t_bin,
            "gold_per_step": q_per.to_dict(), "gold_binary": q_bin.to_dict()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=100, help="lab problems (2 solutions each)")
    ap.add_argument("--min-ops", type=int, default=6, help="fewest operations per problem")
    ap.add_argument("--max-ops", type=int, default=9, help="most operations per problem")
    ap.add_argument("--min-steps", type=int, default=6, help="keep solutions of this many steps")
    ap.add_argument("--rollouts", default="4,8,16", help="values of K, comma-separated")
    ap.add_argument("--soft-threshold", type=float, default=0.1,
                    help="also run soft mode with this threshold (0 = hard mode only)")
    ap.add_argument("--policy", default="lab", help="lab or lab:SLIP")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--smollm", type=int, default=0, help="also label this many real solutions")
    ap.add_argument("--smollm-tokens", type=int, default=256, help="max tokens per smollm rollout")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads for smollm")
    ap.add_argument("--output", default=None, help="write every figure as JSON here")
    args = ap.parse_args()

    from prmkit.lab import gold_record
    from prmkit.label.quality import label_quality

    records, policy, prompter = lab_solutions(args)
    gold = {r.id: gold_record(r) for r in records}
    n_wrong = sum(r.is_correct is False for r in records)
    steps = sum(len(r.steps) for r in records) / len(records)
    print(f"lab world: {len(records)} solutions of {args.min_steps}+ steps (mean {steps:.1f}), "
          f"{n_wrong} with a wrong answer, {sum(g.first_error >= 0 for g in gold.values())} with "
          f"a wrong step (gold); policy {args.policy}; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'mode':<14}  {'K':>3}  {'per-step':>9}  {'binary':>8}  {'ratio':>6}  "
          f"{'ratio (wrong ans)':>17}  {'agree':>6}  {'gold: per-step':>14}  {'gold: binary':>12}")
    results = []
    modes = [("hard", 0.0)] + ([("soft", args.soft_threshold)] if args.soft_threshold else [])
    for (mode, threshold), k in itertools.product(modes, [int(x) for x in args.rollouts.split(",")]):
        runs = {strategy: label(records, policy, prompter, strategy, k, policy_name=args.policy,
                                mode=mode, threshold=threshold)[0]
                for strategy in ("per-step", "binary")}
        per, binary = runs["per-step"], runs["binary"]
        ratio, ratio_wrong, agree = compare(records, per, binary)
        [q_per] = label_quality(per, gold)
        [q_bin] = label_quality(binary, gold)
        spent_per = sum(r.meta["mc"]["rollouts_spent"] for r in per)
        spent_bin = sum(r.meta["mc"]["rollouts_spent"] for r in binary)
        results.append({"mode": mode, "threshold": threshold, "k": k,
                        "per_step_rollouts": spent_per, "binary_rollouts": spent_bin,
                        "ratio": ratio, "ratio_wrong_answers": ratio_wrong, "agreement": agree,
                        "gold_per_step": q_per.to_dict(), "gold_binary": q_bin.to_dict()})
        name = mode if mode == "hard" else f"soft t={threshold:g}"
        print(f"{name:<14}  {k:>3}  {spent_per:>9}  {spent_bin:>8}  {ratio:>6.3f}  "
              f"{ratio_wrong:>17.3f}  {agree:>5.1f}%  {q_per.first_error_agreement:>13.1f}%  "
              f"{q_bin.first_error_agreement:>11.1f}%", flush=True)
    smollm = smollm_slice(args) if args.smollm else None
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump({"solutions": len(records), "results": results, "smollm": smollm}, f,
                      indent=2)
    last = [r for r in results if r["mode"] == "hard"][-1]
    print(f"hard mode: binary/per-step rollouts {last['ratio']:.3f} (goal <= 0.5; "
          f"{last['ratio_wrong_answers']:.3f} on wrong answers), first errors agree {last['agreement']:.1f}% (goal >= 95%), "
          f"K={last['k']}, {len(records)} lab solutions of {args.min_steps}+ steps")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
