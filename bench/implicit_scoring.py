"""Scoring with a last-k implicit PRM: the policy and its reference through their shared bottom
layers once (prmkit.models.backends.sharedbody) against each model read whole, in one run.

Needs a last-k implicit PRM folder and records to score; ``prmkit demo --implicit`` writes both
(``demo_out/implicit/last``, ``demo_out/test_candidates.jsonl``). The two ways are timed in
alternation, ``--rounds`` times each, on the same ``--records``, after one untimed warm-up of
each; the scores must agree to 1e-5.

Usage: ``.venv/bin/python bench/implicit_scoring.py [--model DIR] [--data FILE]``. The last
line: ``RESULT implicit PRM scoring, whole / shared seconds: R``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from prmkit.models.backends.implicit import load_implicit_prm
from prmkit.models.reading import HFConfig
from prmkit.records import read_records


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="demo_out/implicit/last", help="a last-k implicit PRM folder")
    ap.add_argument("--data", default="demo_out/test_candidates.jsonl", help="records to score")
    ap.add_argument("--records", type=int, default=64, help="how many of them")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds of each way")
    ap.add_argument("--dtype", default="float32", help="float32 or bfloat16")
    args = ap.parse_args()
    recs = read_records(args.data)[:args.records]
    problems, steps = [r.problem for r in recs], [r.steps for r in recs]
    prm = load_implicit_prm(args.model, config=HFConfig(dtype=args.dtype))
    scores, times = {}, {"shared": [], "whole": []}
    for k in range(args.rounds + 1):          # round 0: warm-up, untimed
        for way in ("shared", "whole"):
            prm.shared = True if way == "shared" else False   # True: checked below instead
            t = time.perf_counter()
            scores[way] = prm.score(problems, steps)
            if k:
                times[way].append(time.perf_counter() - t)
    worst = max(abs(a - b) for x, y in zip(scores["shared"], scores["whole"])
                for a, b in zip(x, y) if a is not None and b is not None)
    tokens = sum(len(prm.bound.encode(p, s).input_ids) for p, s in zip(problems, steps))
    shared, whole = statistics.median(times["shared"]), statistics.median(times["whole"])
    print(f"{len(recs)} records, {tokens} tokens, {args.dtype}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"shared bottom: {shared:.1f} s (rounds {', '.join(f'{t:.1f}' for t in times['shared'])})")
    print(f"each model whole: {whole:.1f} s (rounds {', '.join(f'{t:.1f}' for t in times['whole'])})")
    print(f"largest score difference {worst:.2e}")
    assert worst <= 1e-5, "the two ways disagree"
    print(f"RESULT implicit PRM scoring, whole / shared seconds: {whole / shared:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
