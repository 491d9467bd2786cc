"""Scoring on Ray workers (prmkit/distributed.py, ``prmkit score --ray local --workers N``):
throughput of 1, 2 and 4 local workers against one process without Ray.

Data: the lab demo's test candidates, ``--per`` per problem (``prmkit.lab``: ``make_problems``
with the demo's test seed 1000 and 2-5 operations, ``load_lab_policy("lab:0.1:0.6")``,
``prmkit.lab.candidates.candidates_of``), grouped by problem, so every worker gets whole groups and
shares their prefixes. Model: the default PRM (SmolLM2-135M-Instruct, prmkit format), float32.

Each run is ``prmkit.scoring.score_records`` as ``prmkit score`` calls it, into a fresh output
file, with a fresh private Ray instance (``--ray local``; started and shut down inside the run,
so its wall time includes Ray's start and every worker loading the model); each worker reserves
one CPU, so torch runs one thread per worker (Ray sets ``OMP_NUM_THREADS``), and 4 workers on
this 2-core machine oversubscribe it. "scoring" is the scoring alone, once the model is loaded
(``ScoreResult.seconds``: without Ray the scoring loop; on Ray from the first batch's start on
a worker to the last batch's end, so neither Ray's start nor the model loads count). Every run's scores are compared with the run without
Ray. The load average is printed before and after each run.

Usage: ``python bench/score_ray.py [--problems 8] [--per 8] [--workers 1,2,4]``; its figure is
printed last.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time


def load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def lab_candidates(problems: int, per: int):
    from prmkit.lab import LabConfig, load_lab_policy, make_problems
    from prmkit.lab.candidates import candidates_of

    policy, prompter = load_lab_policy("lab:0.1:0.6")
    ps = make_problems(LabConfig(n=problems, seed=1000, min_steps=2, max_steps=5))
    return candidates_of(ps, per, policy, prompter, "lab:0.1:0.6", 1)


def run(recs, workers: int | None, chunk: int, folder: str):
    from prmkit.distributed import RayConfig
    from prmkit.models.reading import HFConfig
    from prmkit.resume import Header
    from prmkit.scoring import open_scorer, score_records

    fresh = [type(r).from_dict(r.to_dict()) for r in recs]
    out = os.path.join(folder, f"w{workers or 0}.jsonl")
    ray = RayConfig(ray="local", workers=workers) if workers else None
    start = time.perf_counter()
    result = score_records(fresh, functools.partial(open_scorer, "hf", None, None, None,
                                                    HFConfig(dtype="float32")),
                           out, resume=False, chunk=chunk, share_prefix=True, ray=ray,
                           header=Header("bench score_ray", {"dtype": "float32"}))
    return fresh, time.perf_counter() - start, result.seconds, result.sharing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=8)
    ap.add_argument("--per", type=int, default=8, help="candidates per problem")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--chunk", type=int, default=8, help="records per batch (whole groups)")
    args = ap.parse_args()
    recs = lab_candidates(args.problems, args.per)
    print(f"{len(recs)} lab candidates, {args.problems} groups; {os.cpu_count()} cores; "
          f"{load()}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        base = None
        for n in [None] + [int(x) for x in args.workers.split(",")]:
            name = "no Ray (1 process)" if n is None else f"{n} worker{'s' * (n > 1)}"
            print(f"{name}: starting; {load()}", flush=True)
            scored, wall, scoring, sharing = run(recs, n, args.chunk, folder)
            base = base or scored
            diff = max(abs(a - b) for x, y in zip(scored, base)
                       for a, b in zip(x.step_scores, y.step_scores) if a is not None)
            rows.append((name, wall, scoring))
            print(f"{name}: {wall:.1f} s in all, {len(recs) / wall:.2f} records/s; scoring "
                  f"{scoring:.1f} s, {len(recs) / scoring:.2f} records/s; "
                  f"max |score - no Ray| {diff:.1e}; {sharing.summary() if sharing else ''}; "
                  f"{load()}", flush=True)
    print("records/s in all (scoring alone): " + ", ".join(
        f"{name} {len(recs) / wall:.2f} ({len(recs) / scoring:.2f})" for name, wall, scoring in rows))


if __name__ == "__main__":
    main()
