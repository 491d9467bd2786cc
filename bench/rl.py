"""GRPO on the default policy with the same budget twice: outcome reward only, and outcome plus
PRM step rewards. Do process rewards help at this scale?

Both runs use :func:`prmkit.rl.grpo.run_rl` (TRL's ``GRPOTrainer``) with identical settings
but the reward: the same starting weights (SmolLM2-135M-Instruct, ``--last-k`` layers trained),
the same lab problems in the same order, the same number of GRPO steps, prompts per step,
group size, completion length, learning rate and seed.

* ``outcome``: 1 if the final answer is right (RLVR).
* ``outcome+prm-steps``: the same outcome advantage plus ``--prm-weight`` x per-step process
  advantages on the step-end tokens (``--shaping``; see :mod:`prmkit.rl.grpo` for how TRL is
  made to take token-level advantages). The PRM (``--prm``) is by default the lab world's gold
  PRM (exact step labels): the question here is whether *process rewards* help GRPO at this
  scale, with the PRM's own errors taken out; pass a trained PRM folder to ask it of that PRM.

Both runs log, per GRPO step, the mean PRM reward, outcome accuracy, length and number of steps
of the sampled completions (the PRM scores the outcome-only run too, without training on it),
and flag steps where the PRM reward rose while accuracy fell. Accuracy before and after is
measured on ``--eval-problems`` held-out lab problems with greedy decoding. With ``--seeds K``
the pair of runs is repeated for seeds ``--seed`` .. ``--seed``+K-1 (other problems, other
samples), and the after-training accuracies are compared problem by problem over all seeds:
the mean difference (process minus outcome-only, in points) with a paired bootstrap 95%
interval over (seed, problem) pairs.

Usage: ``make bench-rl`` or ``flock /tmp/prmkit-cpu.lock .venv-bench/bin/python bench/rl.py``
(TRL and datasets live in ``.venv-bench``). Writes ``OUT/seedS/{outcome,process}/result.json``,
``OUT/seedS/result.json`` and ``OUT/result.json``. The last line: ``RESULT accuracy
outcome-only A -> B | outcome+PRM steps C -> D | difference after D [lo, hi] (...)``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from prmkit.evaluate.paired import paired_difference  # noqa: E402
from prmkit.rl.diagnostics import StepStats, table  # noqa: E402
from prmkit.rl.grpo import RLConfig, run_rl  # noqa: E402


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/bench_rl", help="output folder")
    ap.add_argument("--policy", default="smollm2-135m", help="the policy")
    ap.add_argument("--prm", default="lab-gold", help="PRM for step rewards and diagnostics")
    ap.add_argument("--shaping", default="step-local",
                    help="raw, delta, min, process or step-local")
    ap.add_argument("--prm-weight", type=float, default=0.5, help="weight of step rewards")
    ap.add_argument("--steps", type=int, default=12, help="GRPO steps per run")
    ap.add_argument("--lab-problems", type=int, default=64, help="training problems")
    ap.add_argument("--lab-min-steps", type=int, default=2, help="fewest operations")
    ap.add_argument("--lab-max-steps", type=int, default=2, help="most operations")
    ap.add_argument("--eval-problems", type=int, default=48, help="held-out problems")
    ap.add_argument("--num-generations", type=int, default=4, help="group size")
    ap.add_argument("--prompts-per-step", type=int, default=2, help="prompts per step")
    ap.add_argument("--max-completion-length", type=int, default=64, help="tokens per completion")
    ap.add_argument("--lr", type=float, default=5e-5, help="learning rate")
    ap.add_argument("--last-k", type=int, default=4, help="trained layers")
    ap.add_argument("--seed", type=int, default=0, help="first seed")
    ap.add_argument("--seeds", type=int, default=4, help="how many seeds, from --seed on")
    return ap.parse_args()


def run_seed(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Both arms on one seed; prints their tables and writes ``OUT/seedS/result.json``."""
    common = dict(policy=args.policy, prm=args.prm, shaping=args.shaping,
                  prm_weight=args.prm_weight, max_steps=args.steps,
                  lab_problems=args.lab_problems, lab_min_steps=args.lab_min_steps,
                  lab_max_steps=args.lab_max_steps, eval_problems=args.eval_problems,
                  num_generations=args.num_generations, prompts_per_step=args.prompts_per_step,
                  max_completion_length=args.max_completion_length, lr=args.lr,
                  last_k=args.last_k, seed=seed, save=False)
    out = os.path.join(args.out, f"seed{seed}")
    t0 = time.time()
    results = {}
    for name, reward in (("outcome", "outcome"), ("process", "outcome+prm-steps")):
        print(f"== seed {seed}, {name}: reward {reward}", flush=True)
        results[name] = run_rl(RLConfig(output=os.path.join(out, name), reward=reward,
                                        **common))
    print(f"\nseed {seed}: GRPO, {args.steps} steps x {args.prompts_per_step} prompts x "
          f"{args.num_generations} completions, lr {args.lr}, last {args.last_k} layers, "
          f"{args.policy}; lab problems with {args.lab_min_steps}-{args.lab_max_steps} "
          f"operations; step rewards: PRM {args.prm}, shaping {args.shaping}, weight "
          f"{args.prm_weight}; held-out: {args.eval_problems} problems, greedy")
    print(f"{'':26s}{'accuracy':>10s}{'PRM':>8s}{'length':>8s}{'steps':>7s}")
    for name in ("outcome", "process"):
        for when in ("before", "after"):
            m = results[name][when]
            print(f"{name + ' ' + when:26s}{m.get('accuracy', float('nan')):10.3f}"
                  f"{m.get('prm', float('nan')):8.3f}{m['length_tokens']:8.1f}{m['steps']:7.2f}")
    for name in ("outcome", "process"):
        rows = [StepStats(**r) for r in results[name]["log"]]
        print(f"\nper-step diagnostics, seed {seed}, {name} (sampled completions; length in "
              f"tokens)")
        print(table(rows))
        flags = results[name]["flags"]
        print(f"reward-hacking flags: {len(flags)}" + "".join(
            f"\n  step {f['step']}: PRM {f['prm_change']:+.3f}, "
            f"accuracy {f['accuracy_change']:+.3f}"
            for f in flags))
    summary = {"seed": seed, "seconds": round(time.time() - t0, 1),
               "load_average": os.getloadavg(),
               **{name: {k: results[name][k] for k in ("before", "after", "flags", "train_seconds")}
                  for name in results}}
    with open(os.path.join(out, "result.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    return summary


def per_problem(runs: list[dict[str, Any]], arm: str, when: str) -> dict[str, float]:
    """``{"seed:problem": 0 or 1}`` of one arm, before or after training, over all seeds."""
    return {f"{r['seed']}:{i}": float(c) for r in runs
            for i, c in enumerate(r[arm][when]["correct"]) if c is not None}


def main() -> int:
    args = parse_args()
    t0 = time.time()
    runs = [run_seed(args, seed) for seed in range(args.seed, args.seed + args.seeds)]
    acc = {(arm, when): per_problem(runs, arm, when)
           for arm in ("outcome", "process") for when in ("before", "after")}
    mean = {k: sum(v.values()) / len(v) for k, v in acc.items()}
    diff = paired_difference(acc["process", "after"], acc["outcome", "after"])
    print("\nper seed, held-out accuracy after training: " + ", ".join(
        f"seed {r['seed']} outcome {r['outcome']['after']['accuracy']:.3f} process "
        f"{r['process']['after']['accuracy']:.3f}" for r in runs))
    summary = {"args": vars(args), "seconds": round(time.time() - t0, 1),
               "load_average": os.getloadavg(), "accuracy": {f"{a} {w}": round(m, 4)
                                                              for (a, w), m in mean.items()},
               "process_minus_outcome_after": diff.to_dict(), "seeds": runs}
    with open(os.path.join(args.out, "result.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    print(f"load average {os.getloadavg()[0]:.1f}, {summary['seconds']:.0f} s")
    print(f"RESULT accuracy outcome-only {mean['outcome', 'before']:.3f} -> "
          f"{mean['outcome', 'after']:.3f} | outcome+PRM steps {mean['process', 'before']:.3f} "
          f"-> {mean['process', 'after']:.3f} | difference after {diff.difference:+.1f} points "
          f"[{diff.ci95[0]:+.1f}, {diff.ci95[1]:+.1f}] ({args.seeds} seeds x "
          f"{args.eval_problems} held-out lab problems, {args.steps} GRPO steps each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
