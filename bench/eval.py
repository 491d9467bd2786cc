"""Evaluation figures that need no model, and the speed of the best-of-N curve, in one run.

1. ProcessBench dev slice (``../shared/data/processbench_dev``, 347 solutions): the baselines
   that every ProcessBench result is printed beside: always -1, a random first error (mean of
   100 seeded draws), and the position/length heuristic fitted three ways (leave one split out;
   on the gsm8k split as calibration split; in-sample on everything, an optimistic ceiling).
2. Best-of-N on GSM8K's ``example_model_solutions.jsonl`` (1,319 problems x 4 candidates, with
   synthetic step scores): the vectorised draws of ``prmkit.evaluate.bestofn`` against calling
   ``prmkit.select.select`` on each drawn subset, on the same subsets. Prints whether the
   accuracies agree and the speed ratio.
3. ``prmkit report`` on the scored dev slice: render time, and, when chromium is installed, a
   headless screenshot checked for content (dark pixels) and the DOM checked for the solutions.

Usage: ``python bench/eval.py [--draws 20]``. Prints the ratios last.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import tempfile
import time

import numpy as np

from prmkit import select
from prmkit.realdata import gsm8k_candidates
from prmkit.evaluate import bestofn, heuristic
from prmkit.evaluate import processbench as pb
from prmkit.evaluate.common import pct, print_table
from prmkit.report import build
from prmkit.shareddata import shared_data_dir

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = shared_data_dir()


def processbench_baselines() -> None:
    splits = pb.load_splits(os.path.join(DATA, "processbench_dev"))
    rows = [("always -1", pb.always_correct(splits)),
            ("random (100 draws, seed 0)", pb.random_first_error(splits, 100, 0)),
            ("pos/len, leave one split out", pb.position_length(splits)),
            ("pos/len, fitted on gsm8k", pb.position_length(splits, calibrate_on="gsm8k"))]
    everything = [r for rs in splits.values() for r in rs]
    model = heuristic.fit(everything)
    preds = {s: [pb.predicted_first_error(model.step_scores(r), model.threshold) for r in rs]
             for s, rs in splits.items()}
    rows.append(("pos/len, in-sample on all", pb.evaluate({s: pb.gold(rs) for s, rs in splits.items()},
                                                          preds)))
    print_table(["baseline"] + list(splits) + ["average F1"],
                [[name] + [pct(r["splits"][s]["f1"]) for s in splits] + [pct(r["average_f1"])]
                 for name, r in rows])


def bestofn_speed(draws: int) -> float:
    recs = gsm8k_candidates(os.path.join(DATA, "gsm8k", "example_model_solutions.jsonl"))
    rng = random.Random(0)
    for r in recs:
        r.step_scores = [min(1.0, max(0.0, rng.gauss(0.65 if r.is_correct else 0.55, 0.2)))
                         for _ in r.steps]
    methods = [m for m in select.METHODS if m != "orm"]
    c = bestofn.candidates(recs, methods, "prod")
    subsets = [np.array([np.random.default_rng(d).permutation(g)[:2] for g in c.groups])
               for d in range(draws)]
    t = time.perf_counter()
    fast = {m: np.mean([c.correct[bestofn.choose(c, m, s)].mean() for s in subsets]) for m in methods}
    t_fast = time.perf_counter() - t
    t = time.perf_counter()
    slow = {m: np.mean([np.mean([select.select([recs[i] for i in row], m)[0].is_correct
                                 for row in s]) for s in subsets]) for m in methods}
    t_slow = time.perf_counter() - t
    same = all(abs(fast[m] - slow[m]) < 1e-12 for m in methods)
    print(f"best-of-2 on GSM8K, {draws} draws x {len(c.groups)} problems x {len(methods)} "
          f"methods: vectorised {t_fast:.2f} s, select() per subset {t_slow:.2f} s; "
          f"accuracies identical: {same}")
    return t_slow / t_fast


def report_check() -> tuple[float, str]:
    splits = pb.load_splits(os.path.join(DATA, "processbench_dev"))
    recs = [r for rs in splits.values() for r in rs]
    model = heuristic.fit(recs)
    for r in recs:
        r.step_scores = model.step_scores(r)
    t = time.perf_counter()
    page = build(recs, title="bench report", max_records=100)
    seconds = time.perf_counter() - t
    browser = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)), None)
    if browser is None:
        return seconds, "chromium not installed: screenshot skipped"
    with tempfile.TemporaryDirectory() as d:
        path, shot = os.path.join(d, "r.html"), os.path.join(d, "s.png")
        with open(path, "w", encoding="utf-8") as f:
            f.write(page)
        flags = [browser, "--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", f"--user-data-dir={d}/profile"]
        dom = subprocess.run(flags + ["--dump-dom", f"file://{path}"], capture_output=True,
                             text=True, timeout=120).stdout
        subprocess.run(flags + [f"--screenshot={shot}", "--window-size=1200,1600",
                                f"file://{path}"], capture_output=True, timeout=120)
        from PIL import Image

        img = Image.open(shot).convert("L")
        dark = sum(img.histogram()[:200]) / (img.size[0] * img.size[1])
        shown = sum(1 for r in recs[:100] if f"<summary>{r.id}<" in dom)
    return seconds, (f"chromium: {shown} of 100 solutions in the DOM, screenshot "
                     f"{100 * dark:.1f}% non-white pixels")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--draws", type=int, default=20, help="best-of-N draws to time")
    args = ap.parse_args()
    print("1. ProcessBench dev slice, F1 of the baselines (no model)")
    processbench_baselines()
    print("\n2. best-of-N")
    ratio = bestofn_speed(args.draws)
    print("\n3. report")
    seconds, check = report_check()
    print(f"report of 347 solutions (100 shown) rendered in {seconds:.1f} s; {check}")
    print(f"\nratio: best-of-N vectorised speed over select() per subset: {ratio:.0f}x")


if __name__ == "__main__":
    main()
