"""Scoring speed, measured side by side in one run.

Data: the ProcessBench dev slice (``../shared/data/processbench_dev``, 347 solutions, about 9
steps each). Model: the default SmolLM2-135M backbone read in the Math-Shepherd format (the
scores are meaningless, the speed is not), bfloat16 on CPU unless ``--dtype`` says otherwise.

Three ratios:

1. one-pass over per-prefix speed: ``HFPRM.score`` (every step of a solution in one forward
   pass) against ``HFPRM.score_per_prefix`` (every prefix in its own pass). Goal: >= 5x.
2. our scoring throughput over a bare forward pass of the same padded batches: ``score`` end to
   end (tokenising, batching, reading) against only the model's backbone run on exactly the
   batches ``score`` built, with no mask (the least compute that reads every step). Goal: >= 0.9.
   For reference it also times the plain ``model(input_ids, attention_mask)`` call that a user
   would write, full vocabulary logits included.
3. real tokens over computed tokens after length bucketing (1 - padding waste). Goal: >= 0.9.

Usage: ``python bench/scoring.py [--limit N] [--dtype bfloat16] [--skip-per-prefix]
[--skip-bare]``.
Prints the three ratios last.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

from prmkit.models.backends.hf import HFConfig, load_hf_prm, pad_right
from prmkit.shareddata import shared_data_dir

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = shared_data_dir()


def load(data: str, limit: int | None) -> tuple[list[str], list[list[str]]]:
    rows = []
    for split in ("gsm8k", "math", "olympiadbench", "omnimath"):
        with open(os.path.join(data, "processbench_dev", f"{split}.json"), encoding="utf-8") as f:
            rows += json.load(f)
    rows = rows[:limit] if limit else rows
    return [r["problem"] for r in rows], [r["steps"] for r in rows]


def bare_forward(prm, encs, batches, full_model: bool) -> float:
    """Time the model alone on the same right-padded batches that ``score`` builds."""
    seconds = 0.0
    for batch in batches:
        ids, mask = pad_right([encs[i].input_ids for i in batch], prm.pad_id)
        t = time.perf_counter()
        with torch.inference_mode():
            if full_model:
                prm.model(input_ids=ids, attention_mask=mask)
            else:
                prm.reader.backbone(input_ids=ids)
        seconds += time.perf_counter() - t
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=DEFAULT_DATA, help="the shared data folder")
    ap.add_argument("--limit", type=int, default=None, help="use only the first N solutions")
    ap.add_argument("--every", type=int, default=1,
                    help="use every k-th solution (a sample spread over all four splits)")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--token-budget", type=int, default=16384)
    ap.add_argument("--batch-overhead", type=int, default=128,
                    help="HFConfig.batch_overhead (the least-padding cut; -1: the greedy cut)")
    ap.add_argument("--skip-per-prefix", action="store_true", help="skip the slow reference")
    ap.add_argument("--skip-bare", action="store_true",
                    help="skip the two bare-forward timings (ratio 2), about 10 minutes on 2 cores")
    args = ap.parse_args()
    if not os.path.isdir(os.path.join(args.data, "processbench_dev")):
        print(f"no ProcessBench dev slice under {args.data}", file=sys.stderr)
        return 2

    problems, steps = load(args.data, args.limit)
    problems, steps = problems[::args.every], steps[::args.every]
    prm = load_hf_prm("smollm2-135m", "math-shepherd",
                      HFConfig(dtype=args.dtype, token_budget=args.token_budget,
                               batch_overhead=None if args.batch_overhead < 0
                               else args.batch_overhead))
    n_steps = sum(len(s) for s in steps)
    print(f"data: ProcessBench dev, {len(problems)} solutions, {n_steps} steps; model "
          f"smollm2-135m ({args.dtype}), format math-shepherd, token budget {args.token_budget}, "
          f"{torch.get_num_threads()} threads", flush=True)

    prm.score(problems[:2], steps[:2])  # warm up
    prm.stats.__init__()
    t = time.perf_counter()
    prm.score(problems, steps)
    t_one = time.perf_counter() - t
    stats = prm.stats
    one_tokens = stats.real_tokens
    efficiency = stats.padding_efficiency()   # one-pass alone (per-prefix adds to the stats)
    print(f"one-pass scoring: {t_one:.1f} s, {stats.forwards} forwards, {stats.real_tokens} real "
          f"tokens, {stats.computed_tokens} computed; {stats.real_tokens / t_one:.0f} real tokens/s",
          flush=True)

    t_bare = t_full = None
    if not args.skip_bare:
        encs = [prm.bound.encode(p, s) for p, s in zip(problems, steps)]
        batches = prm.batches([len(e.input_ids) for e in encs])
        t_bare = bare_forward(prm, encs, batches, full_model=False)
        print(f"bare backbone forward on the same batches, no mask: {t_bare:.1f} s", flush=True)
        t_full = bare_forward(prm, encs, batches, full_model=True)
        print(f"plain model(input_ids, attention_mask) on the same batches: {t_full:.1f} s",
              flush=True)

    ratio_prefix = None
    if not args.skip_per_prefix:
        t = time.perf_counter()
        before = prm.stats.real_tokens
        prm.score_per_prefix(problems, steps)
        t_pre = time.perf_counter() - t
        ratio_prefix = t_pre / t_one
        pre_tokens = prm.stats.real_tokens - before
        # the bound: at the same speed per token, the ratio is the tokens' ratio (less where
        # attention's cost, quadratic in length, weighs: the prefixes are shorter)
        print(f"per-prefix scoring: {t_pre:.1f} s, {pre_tokens} real tokens "
              f"({pre_tokens / one_tokens:.2f}x one-pass's), "
              f"{pre_tokens / t_pre:.0f} real tokens/s", flush=True)

    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if t_full is not None:
        print(f"throughput vs the plain masked full-logits forward: {t_full / t_one:.2f}")
    prefix = f"{ratio_prefix:.2f}x" if ratio_prefix else "skipped"
    bare = f"{t_bare / t_one:.2f}" if t_bare is not None else "skipped"
    print(f"RESULT one-pass/per-prefix speed {prefix} (goal >= 5) | "
          f"scoring/bare-forward throughput {bare} (goal >= 0.9) | "
          f"real/computed tokens {efficiency:.3f} (goal >= 0.9)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
