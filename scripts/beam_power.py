"""The power of the demo's beam claim at n search problems: the simulation that sized it.

    python scripts/beam_power.py RUN [RUN ...] [--sizes 80,200,320] [--draws 600]

Each RUN is a ``prmkit demo --full`` output folder (its ``summary.json``). The script pools
every search problem of the runs: per problem, beam search's outcome at each width B and
best-of-4B's (0 or 1). For each size n it draws n problems from the pool with replacement (the
widths of a problem together), decides the family exactly as the demo does
(:func:`prmkit.lab.demo.search.beam_claims`: ``paired_holm`` over the widths, margin
``--margin``), and reports the share of draws in which the claim holds.

The demo's size (320 search problems, docs/lab.md "The beam claim's power") came from this
reckoning over the runs at 80 search problems of seeds 0, 9002, 9003 and 9004:

    for s in 0 9002 9003 9004; do
      prmkit demo --full --seed $s --search-problems 80 --output demo_80_$s
    done
    python scripts/beam_power.py demo_80_0 demo_80_9002 demo_80_9003 demo_80_9004 \\
        --sizes 80,200,300,320,340,360,400 --draws 600
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from prmkit.lab.demo.search import beam_claims  # noqa: E402

Problem = dict[int, tuple[float, float]]   # width B -> (beam at B, best-of-4B), each 0 or 1


def pool_of(summaries: list[dict]) -> list[Problem]:
    """Every search problem of the runs, with its outcome at each width."""
    pool = []
    for doc in summaries:
        search = doc.get("search")
        if not search:
            raise SystemExit("a run without its search stage: run `prmkit demo --full`")
        rows = {(r["method"], r["n"]): r["per_problem"] for r in search["rows"]}
        widths = sorted(n for m, n in rows if m == "beam")
        for pid in sorted(rows[("beam", widths[0])]):
            pool.append({b: (rows[("beam", b)][pid], rows[("best-of-n", 4 * b)][pid])
                         for b in widths})
    return pool


def holds(problems: list[Problem], margin: float, seed: int) -> bool:
    """The demo's verdict on these problems: the family of widths, Holm-corrected."""
    widths = sorted(problems[0])
    rows = [{"method": "beam", "n": b, "per_problem": {i: p[b][0] for i, p in enumerate(problems)}}
            for b in widths]
    rows += [{"method": "best-of-n", "n": 4 * b,
              "per_problem": {i: p[b][1] for i, p in enumerate(problems)}} for b in widths]
    return beam_claims({"rows": rows}, margin, seed)[0]["beam_matches_4x_best_of_n"].holds


def power(pool: list[Problem], n: int, draws: int, margin: float, seed: int = 0) -> float:
    """The share of ``draws`` samples of ``n`` problems (with replacement) where the claim holds."""
    rng = random.Random(seed)
    return sum(holds([rng.choice(pool) for _ in range(n)], margin, seed + d)
               for d in range(draws)) / draws


def summary(pool: list[Problem]) -> str:
    """Per width: beam minus best-of-4B per problem, its mean and SD in points."""
    out = []
    for b in sorted(pool[0]):
        d = [100 * (p[b][0] - p[b][1]) for p in pool]
        mean = sum(d) / len(d)
        sd = (sum((x - mean) ** 2 for x in d) / (len(d) - 1)) ** 0.5
        out.append(f"B={b}: {mean:+.1f} points (SD {sd:.1f})")
    return f"{len(pool)} problems pooled; beam minus best-of-4B per problem: " + "; ".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="prmkit demo --full output folders")
    ap.add_argument("--sizes", default="80,200,300,320,340,360,400",
                    help="search problem counts to try, comma-separated")
    ap.add_argument("--draws", type=int, default=600, help="samples drawn at each size")
    ap.add_argument("--margin", type=float, default=5.0, help="the demo's --margin, in points")
    ap.add_argument("--seed", type=int, default=0, help="seed of the draws")
    args = ap.parse_args()
    docs = []
    for run in args.runs:
        path = os.path.join(run, "summary.json")
        if not os.path.exists(path):
            raise SystemExit(f"{path}: not found; each RUN is a `prmkit demo --full` folder")
        with open(path, encoding="utf-8") as f:
            docs.append(json.load(f))
    pool = pool_of(docs)
    print(summary(pool))
    print("| search problems | the claim holds |\n|---|---|")
    for n in (int(x) for x in args.sizes.split(",")):
        print(f"| {n} | {100 * power(pool, n, args.draws, args.margin, args.seed):.1f}% "
              f"({args.draws} draws) |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
