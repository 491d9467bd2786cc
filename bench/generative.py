"""Generative PRMs against the default discriminative PRM and the position/length heuristic on
a ProcessBench slice, on this machine (docs/generative-prms.md).

The slice: the first ``--per-split`` correct and the first ``--per-split`` wrong solutions of
each split file in ``--data`` (ProcessBench's dev slice by default). Each arm is one
``prmkit eval processbench`` run, one thread; the table gives its average F1 (threshold 0.5; the
default PRM at the threshold saved with it),
the heuristic's F1 from the same run, the parse rate, and seconds (the scoring loop alone) and
generated tokens per solution. Usage:

    python bench/generative.py --per-split 5 --samples 2 --max-new-tokens 160
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SPLITS = ("gsm8k", "math", "olympiadbench", "omnimath")


def make_slice(data: str, per_split: int, splits: list[str], folder: str) -> int:
    n = 0
    for s in splits:
        with open(os.path.join(data, f"{s}.json"), encoding="utf-8") as f:
            rows = json.load(f)
        part = [r for r in rows if r["label"] == -1][:per_split] + \
            [r for r in rows if r["label"] != -1][:per_split]
        with open(os.path.join(folder, f"{s}.json"), "w", encoding="utf-8") as f:
            json.dump(part, f)
        n += len(part)
    return n


def run_arm(name: str, extra: list[str], folder: str, out: str) -> dict:
    cmd = [sys.executable, "-m", "prmkit.cli", "eval", "processbench", "--data", folder,
           "--output", os.path.join(out, f"{name}.json"), *extra]
    start = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        sys.exit(f"{name}: {done.stderr.strip()[-2000:]}")
    with open(os.path.join(out, f"{name}.json"), encoding="utf-8") as f:
        res = json.load(f)
    res["wall_seconds"] = time.time() - start
    return res


def row(name: str, res: dict, n: int) -> str:
    gen = res["scored_by"].get("generative")
    f1 = res["model"]["average_f1"]
    heur = res["baselines"]["position_length"]["average_f1"]
    if gen:
        rate = f"{100 * gen['parsed'] / max(1, gen['samples']):.1f}% ({gen['parsed']}/{gen['samples']})"
        per = f"{gen['seconds'] / n:.1f} s, {gen['tokens_generated'] / n:.0f} tokens"
    else:
        rate, per = "-", f"{res['wall_seconds'] / n:.1f} s (whole command), 0 tokens"
    return f"| {name} | {f1:.1f} | {heur:.1f} | {rate} | {per} | {res['scored_by']['dtype']} |"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared",
                                                  "data", "processbench_dev"))
    p.add_argument("--splits", default="gsm8k,math")
    p.add_argument("--per-split", type=int, default=5)
    p.add_argument("--model", default="smollm2-135m", help="the verifier")
    p.add_argument("--formats", default="plain,thinkprm")
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--out", default=None, help="where the results go (default: a temp folder)")
    args = p.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="prmkit-bench-gen-")
    os.makedirs(out, exist_ok=True)
    folder = os.path.join(out, "slice")
    os.makedirs(folder, exist_ok=True)
    n = make_slice(args.data, args.per_split, args.splits.split(","), folder)
    arms = [("default PRM", ["--model", "default"])]
    for fmt in args.formats.split(","):
        arms.append((f"{args.model} {fmt} K={args.samples}",
                     ["--model", args.model, "--backend", "generative", "--format", fmt,
                      "--samples", str(args.samples), "--max-new-tokens", str(args.max_new_tokens),
                      "--dtype", "float32"]))
    print(f"{n} solutions, results in {out}", file=sys.stderr)
    lines = ["| arm | average F1 | position/length F1 | parse rate | per solution | dtype |",
             "|---|---|---|---|---|---|"]
    for name, extra in arms:
        lines.append(row(name, run_arm(name.replace(" ", "_"), extra, folder, out), n))
        print(lines[-1], file=sys.stderr)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
