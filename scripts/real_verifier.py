"""A generative verifier trained on real step labels, measured on the ProcessBench dev slice
beside the default PRM (docs/generative-prms.md, "Trained on real data"). Needs ../shared/data.

1. Training records: ``--n-prm800k`` PRM800K phase-1 train records (human step labels,
   converted with ``--prm800k-alternatives``, neutral as correct) and ``--n-prmbench`` PRMBench
   train processes (its modified ones with a known first error, and one original process per
   problem, all steps correct), each of at most ``--max-steps`` steps, shuffled with ``--seed``.
2. ``prmkit train verifier --base smollm2-135m --chains labels`` on them (the verdicts alone:
   real problems have no lab world to recompute their steps, and no teacher is reachable here),
   with ``--verdict-weight`` (default 1, the plain token loss the docs' figures were measured
   with), every other setting at its default.
3. ``prmkit eval processbench --limit N`` (the first N/2 solutions with an error and N/2
   without, per split) with the verifier (``--backend generative``) and with the default PRM.

Every command is printed before it runs; the figures go to ``OUT/figures.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from prmkit import formats  # noqa: E402
from prmkit.records import Record, write_records  # noqa: E402
from prmkit.shareddata import shared_data_dir  # noqa: E402


def training_records(args: argparse.Namespace) -> list[Record]:
    data = shared_data_dir()
    opts = formats.ConvertOptions(prm800k_alternatives=True, skip_empty=True)
    path = os.path.join(data, "prm800k_stepwise_critic", "phase1_train_plus.stepwise-critic.parquet")
    short = [r for r in formats.read("prm800k", path, opts)
             if len(r.steps) <= args.max_steps and any(x is not None for x in r.labels or [])]
    rng = random.Random(args.seed)
    rng.shuffle(short)
    bench: list[Record] = []
    folder = os.path.join(data, "prmbench_train_p1_first400")
    originals: dict[str, Record] = {}
    for name in sorted(os.listdir(folder)):
        for r in formats.read("prmbench", os.path.join(folder, name), formats.ConvertOptions()):
            if r.first_error is None or len(r.steps) > args.max_steps:
                continue
            bench.append(r)
            steps = list(r.meta.get("original_process") or [])
            idx = r.meta["idx"]
            if steps and len(steps) <= args.max_steps and idx not in originals:
                originals[idx] = Record(id=f"original-{idx}", group=idx, steps=steps,
                                        problem=r.meta.get("original_question", r.problem),
                                        labels=[1.0] * len(steps))
    rng.shuffle(bench)
    half = args.n_prmbench // 2
    chosen = short[:args.n_prm800k] + bench[:args.n_prmbench - half] + \
        sorted(originals.values(), key=lambda r: str(r.id))[:half]
    rng.shuffle(chosen)
    return chosen


def run(cmd: list[str], log: str) -> float:
    print("$ " + " ".join(cmd), flush=True)
    start = time.time()
    with open(log, "w", encoding="utf-8") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        raise SystemExit(f"{cmd[1:3]} failed (exit {rc}): see {log}")
    return time.time() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-prm800k", type=int, default=300)
    p.add_argument("--n-prmbench", type=int, default=200)
    p.add_argument("--max-steps", type=int, default=12)
    p.add_argument("--limit", type=int, default=20, help="ProcessBench solutions per split")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--verdict-weight", type=float, default=1.0,
                   help="train verifier's --verdict-weight (1: the plain token loss)")
    p.add_argument("--out", default=os.path.join(ROOT, "runs", "real_verifier"))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    prmkit = os.path.join(os.path.dirname(sys.executable), "prmkit")
    train = os.path.join(args.out, "train.jsonl")
    records = training_records(args)
    write_records(train, records)
    ver = os.path.join(args.out, "verifier")
    pb = os.path.join(shared_data_dir(), "processbench_dev")
    times = {"train": run([prmkit, "train", "verifier", "--base", "smollm2-135m", "--data", train,
                           "--output", ver, "--chains", "labels",
                           "--verdict-weight", str(args.verdict_weight)],
                          os.path.join(args.out, "train.log"))}
    for name, model in (("verifier", ["--model", ver, "--backend", "generative"]),
                        ("default", ["--model", "default"])):
        times[name] = run([prmkit, "eval", "processbench", *model, "--data", pb, "--limit",
                           str(args.limit), "--output", os.path.join(args.out, f"{name}.json")],
                          os.path.join(args.out, f"{name}.log"))
    out = {"args": vars(args), "train_records": len(records), "seconds": times,
           "results": {n: json.load(open(os.path.join(args.out, f"{n}.json"), encoding="utf-8"))
                       for n in ("verifier", "default")}}
    with open(os.path.join(args.out, "figures.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=2)
    print(f"figures: {os.path.join(args.out, 'figures.json')}")


if __name__ == "__main__":
    main()
