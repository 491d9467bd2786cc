"""PRM-guided search, measured side by side in one run: KV reuse, and accuracy per budget.

Policy: the lab world's synthetic policy (``load_policy("lab")``: one arithmetic step per line,
each calculation slipping with a known chance; instant). Problems: lab problems
(:func:`prmkit.lab.make_problems`), whose answers are known exactly. A lab "token" is a word
(:func:`prmkit.generate.fake.count_tokens`); PRM tokens are the PRM tokenizer's.

1. **KV reuse.** Beam search (n=4, m=2) with the default PRM in float32 on lab problems of
   ``--kv-min-steps`` .. ``--kv-max-steps`` operations (8 or more steps deep), run twice: with
   incremental scoring (each new step read on top of its prefix's key-value cache) and with the
   reference mode (every grown solution re-read whole). Both searches must choose the same
   steps; the figure is the PRM tokens processed without reuse / with reuse.
2. **Accuracy against generated-token budget.** best-of-N, beam (m=4), DVTS (m=4) and MCTS
   (m=4) at each width in ``--budgets`` on the same problems, the answer chosen by the PRM
   (``select`` prm-last); MCTS stops at best-of-N's generated tokens per problem at the same
   width (``budget_tokens``), so every row of a width spends about the same budget. With the
   default PRM (bfloat16) and with a labelled **oracle**: the
   lab's gold step labels blurred by ``--oracle-noise`` (:class:`prmkit.lab.GoldPRM`), what a
   good PRM could do. Each row prints accuracy, generated tokens per problem (the budget
   actually spent), and PRM tokens per problem. Then compute-optimal selection (Snell et al.
   2024: difficulty from a best-of-4 probe scored by the same PRM, 2 bins, method chosen per
   bin with 2-fold cross-validation) at each width, and whether beam or DVTS at a width matches
   best-of-N at 4x that width.

The machine is shared: ``--threads 1`` (the default) is much faster than 2 on a loaded
2-core machine; the load average is printed. The last line is the KV-reuse ratio.

Usage: ``python bench/search.py [--problems 8] [--budgets 4,16] [--kv-problems 2]``
"""

from __future__ import annotations

import argparse
import os
import time


def lab_problems(n: int, min_steps: int, max_steps: int, seed: int):
    from prmkit.generate.run import Problem
    from prmkit.lab import LabConfig, make_problems

    return [Problem(r.id, r.problem, r.reference)
            for r in make_problems(LabConfig(n=n, min_steps=min_steps, max_steps=max_steps, seed=seed))]


def kv_reuse(args, policy, prompter, prm, label: str = "") -> tuple[int, int]:
    from prmkit.models.sharing.incremental import IncrementalPRM
    from prmkit.search import BeamConfig, beam_search

    problems = lab_problems(args.kv_problems, args.kv_min_steps, args.kv_max_steps, seed=7)
    runs = {}
    incremental = IncrementalPRM(prm)   # passed in as the scorer, to read its fallback count
    for reuse in (True, False):
        start = time.perf_counter()
        result = beam_search(problems, policy, prompter, incremental if reuse else prm,
                             BeamConfig(n=4, m=2, kv_reuse=reuse, max_depth=args.kv_max_steps + 2))
        runs[reuse] = (result, time.perf_counter() - start)
    (fast, t_fast), (slow, t_slow) = runs[True], runs[False]
    same = [r.steps for r in fast.records] == [r.steps for r in slow.records]
    diff = max((abs(a - b) for x, y in zip(fast.records, slow.records)
                for a, b in zip(x.step_scores, y.step_scores) if a is not None and b is not None),
               default=0.0)
    depths = [r.meta["depth"] for r in fast.records if r.meta["selected"]]
    with_, without = fast.account.total.prm_tokens, slow.account.total.prm_tokens
    print(f"\n1. KV reuse{label}: beam n=4 m=2, default PRM float32, step format "
          f"{prm.format.name!r} (tokenize {prm.format.tokenize}), {len(problems)} lab problems of "
          f"{args.kv_min_steps}-{args.kv_max_steps} operations (selected solutions "
          f"{min(depths)}-{max(depths)} steps deep)")
    print(f"   with reuse:    {with_:7d} PRM tokens, {t_fast:6.1f} s; fallbacks "
          f"{incremental.fallbacks} (children whose parent's ids were not a prefix of theirs; "
          f"{incremental.partial} of them reused the shared part)")
    print(f"   without reuse: {without:7d} PRM tokens, {t_slow:6.1f} s")
    print(f"   same search: {'yes' if same else 'NO'} (max step-score difference {diff:.1e}); "
          f"generated {fast.account.total.tokens_generated} tokens in each")
    return with_, without


def accuracy_table(args, policy, prompter, prms) -> list[str]:
    from prmkit.search import BeamConfig, MCTSConfig, SearchConfig, beam_search, best_of_n, dvts, mcts
    from prmkit.search.compute_optimal import (compute_optimal, difficulty_bins,
                                               estimate_difficulty, outcomes_of)

    problems = lab_problems(args.problems, args.min_steps, args.max_steps, seed=3)
    budgets = [int(b) for b in args.budgets.split(",")]
    methods = [("best-of-n", best_of_n, SearchConfig, 4), ("beam", beam_search, BeamConfig, 4),
               ("dvts", dvts, SearchConfig, 4), ("mcts", mcts, MCTSConfig, 4)]
    verdicts = []
    print(f"\n2. Accuracy against budget: {len(problems)} lab problems of {args.min_steps}-"
          f"{args.max_steps} operations, lab policy (slip 0.12 per add/sub, 0.24 per mul/div), "
          f"selection prm-last")
    for label, prm in prms:
        print(f"\n   PRM: {label}")
        print(f"   {'method':<12} {'n':>3} {'accuracy':>9} {'gen tok/problem':>16} "
              f"{'PRM tok/problem':>16} {'seconds':>8}")
        outcomes: dict[int, dict[str, dict]] = {}
        last_bon: list = []
        bon_tokens: dict[int, int] = {}
        acc: dict[tuple[str, int], float] = {}
        for n in budgets:
            for name, fn, cls, m in methods:
                if name != "best-of-n" and n < m:
                    continue
                config = cls(n=n, m=m, max_depth=args.max_steps + 3, seed=args.seed)
                if name == "mcts":   # matched to best-of-n's budget at this width
                    config = cls(n=n, m=m, max_depth=args.max_steps + 3, seed=args.seed,
                                 budget_tokens=bon_tokens[n])
                start = time.perf_counter()
                result = fn(problems, policy, prompter, prm, config)
                seconds = time.perf_counter() - start
                out = outcomes_of(result.records)
                total = result.account.total
                if name == "best-of-n":
                    last_bon = result.records
                    bon_tokens[n] = max(1, round(total.tokens_generated / len(problems)))
                outcomes.setdefault(n, {})[name] = out
                acc[(name, n)] = sum(o.correct for o in out.values()) / len(problems)
                prm_tok = "n/a" if total.prm_tokens is None else f"{total.prm_tokens / len(problems):.0f}"
                print(f"   {name:<12} {n:>3} {100 * acc[(name, n)]:>8.1f}% "
                      f"{total.tokens_generated / len(problems):>16.0f} {prm_tok:>16} {seconds:>8.1f}")
        overall, within = step_auc(last_bon)
        print(f"   step AUC of this PRM against the lab's gold step labels, on the best-of-n "
              f"candidates above: {overall:.3f} over all steps, {within:.3f} among steps at the "
              f"same position (0.5 = chance)")
        values, probe_tokens = estimate_difficulty(problems, policy, prompter, prm, probe_n=4,
                                                   config=SearchConfig(seed=args.seed + 1))
        bins = difficulty_bins(values, 2)
        probe = sum(probe_tokens.values()) / len(problems)
        for n in budgets:
            report = compute_optimal(outcomes[n], bins, folds=2)
            choice = ", ".join(f"bin {b}: {c}" for b, c in sorted(report.choice.items()))
            print(f"   {'compute-opt':<12} {n:>3} {100 * report.accuracy:>8.1f}% "
                  f"{report.tokens:>16.0f} {'':>16} {'':>8}  (+{probe:.0f} probe tokens; {choice})")
        for n in budgets:
            if 4 * n in budgets and ("best-of-n", 4 * n) in acc:
                target = acc[("best-of-n", 4 * n)]
                for name in ("beam", "dvts"):
                    if (name, n) in acc:
                        verdict = "matches" if acc[(name, n)] >= target else "does NOT match"
                        verdicts.append(f"{label}: {name} at n={n} ({100 * acc[(name, n)]:.1f}%) "
                                        f"{verdict} best-of-N at n={4 * n} ({100 * target:.1f}%)")
    return verdicts


def step_auc(records) -> tuple[float, float]:
    """How well the PRM's step scores separate right from wrong steps (exact lab labels):
    over all steps, and within each step position (averaged, weighted by steps), which a
    score that only falls with position cannot game. Beam search compares steps at the same
    position, so the second figure is the one search feels."""
    from prmkit.evaluate.stepwise import auc
    from prmkit.lab import gold_labels

    by_depth: dict[int, tuple[list[float], list[bool]]] = {}
    for r in records:
        if r.meta.get("empty"):
            continue
        for k, (s, label) in enumerate(zip(r.step_scores, gold_labels(r.problem, r.steps))):
            if s is not None:
                by_depth.setdefault(k, ([], []))[0].append(s)
                by_depth[k][1].append(bool(label))
    overall = auc([s for v in by_depth.values() for s in v[0]], [x for v in by_depth.values() for x in v[1]])
    parts = [(auc(v[0], v[1]), len(v[0])) for v in by_depth.values()]
    parts = [(a, n) for a, n in parts if a is not None]
    within = sum(a * n for a, n in parts) / sum(n for _, n in parts) if parts else None
    nan = float("nan")
    return (nan if overall is None else overall), (nan if within is None else within)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=8, help="lab problems for the accuracy table")
    ap.add_argument("--min-steps", type=int, default=5, help="fewest operations per problem")
    ap.add_argument("--max-steps", type=int, default=8, help="most operations per problem")
    ap.add_argument("--budgets", default="4,16", help="widths n to compare (comma-separated)")
    ap.add_argument("--kv-problems", type=int, default=2, help="lab problems for the KV-reuse run")
    ap.add_argument("--kv-min-steps", type=int, default=8, help="fewest operations (KV-reuse run)")
    ap.add_argument("--kv-max-steps", type=int, default=10, help="most operations (KV-reuse run)")
    ap.add_argument("--oracle-noise", type=float, default=0.7,
                    help="the oracle: gold step labels blurred by up to this much")
    ap.add_argument("--seed", type=int, default=0, help="sampling seed")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--prms", default="default,oracle",
                    help="which PRMs the accuracy table uses: default, oracle (comma-separated)")
    ap.add_argument("--skip-kv", action="store_true", help="skip the KV-reuse run")
    ap.add_argument("--skip-accuracy", action="store_true", help="only the KV-reuse run")
    args = ap.parse_args()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")   # as the prmkit command does

    import torch

    from prmkit.generate.load import load_policy
    from prmkit.lab import GoldPRM
    from prmkit.models.backends.hf import HFConfig, load_hf_prm
    from prmkit.models.pypi import DEFAULT_PRM_DIR

    torch.set_num_threads(args.threads)
    print(f"bench/search.py: {time.strftime('%Y-%m-%d %H:%M')}, torch threads {args.threads}, "
          f"load average {os.getloadavg()[0]:.1f}")
    policy, prompter = load_policy("lab")
    with_ = without = None
    whole = None
    if not args.skip_kv:
        import dataclasses

        from prmkit.models.backends.hf import HFPRM
        from prmkit.stepformat import PRESETS

        prm32 = load_hf_prm(DEFAULT_PRM_DIR, config=HFConfig(dtype="float32"))
        with_, without = kv_reuse(args, policy, prompter, prm32)
        # the same model under a whole-text rule (Math-Shepherd's: one tokenizer call on the
        # whole text, so a prefix's ids are checked against the child's, per solution)
        fmt = dataclasses.replace(PRESETS["math-shepherd"], reading="classes", positive_class=1)
        whole = kv_reuse(args, policy, prompter,
                         HFPRM(prm32.model, prm32.tokenizer, fmt, HFConfig(dtype="float32")),
                         label=" under a whole-text step format")
        del prm32
    verdicts: list[str] = []
    if not args.skip_accuracy:
        prms = []
        for name in args.prms.split(","):
            if name == "default":
                prms.append(("default PRM (bfloat16)",
                             load_hf_prm(DEFAULT_PRM_DIR, config=HFConfig(dtype="bfloat16"))))
            elif name == "oracle":
                prms.append((f"ORACLE: lab gold labels, noise {args.oracle_noise}",
                             GoldPRM(noise=args.oracle_noise)))
            else:
                ap.error(f"--prms: unknown PRM {name!r}")
        verdicts = accuracy_table(args, policy, prompter, prms)
        print("\n   A quarter of the budget:")
        for v in verdicts or ["(needs widths n and 4n in --budgets)"]:
            print(f"   {v}")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")
    if with_ is not None and without is not None:
        print(f"RESULT KV reuse: the PRM read {without} tokens without reuse, {with_} with: "
              f"{without / with_:.2f}x fewer (beam search, {args.kv_min_steps}+ steps deep)")
    if whole is not None:
        print(f"RESULT KV reuse, whole-text format: {whole[1]} tokens without reuse, {whole[0]} "
              f"with: {whole[1] / whole[0]:.2f}x fewer")


if __name__ == "__main__":
    main()
