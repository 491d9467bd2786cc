"""How often the calculator's notes (prmkit.calculator) land on real wrong steps.

On the ProcessBench dev slice (``../shared/data/processbench_dev``: GSM8K, MATH, OlympiadBench
and Omni-MATH solutions by many models, each with the human-labelled index of its first wrong
step), every step up to and including the first error is annotated, and the bench counts:

* ``flagged right``: steps before the first error that get a note (false alarms; a right step
  can still hold a wrong equation, ProcessBench labels the step, not each equation);
* ``flagged first errors``: first-error steps that get a note (what the calculator catches);
* precision: of the flagged steps, the share that are first errors.

No model runs, so this takes seconds. The figure printed last is the precision over the slice.

    python bench/calculator.py [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from prmkit.calculator import annotate  # noqa: E402
from prmkit.shareddata import shared_data_dir  # noqa: E402

SUBSETS = ("gsm8k", "math", "olympiadbench", "omnimath")


def count(rows: list[dict]) -> dict[str, int]:
    """Steps and flags before the first error and at it, over ProcessBench rows."""
    out = {"right": 0, "flagged_right": 0, "first_errors": 0, "flagged_first_errors": 0}
    for row in rows:
        label, steps = int(row["label"]), row["steps"]
        upto = steps if label < 0 else steps[:label]
        out["right"] += len(upto)
        out["flagged_right"] += sum(annotate(s) != s for s in upto)
        if label >= 0:
            out["first_errors"] += 1
            out["flagged_first_errors"] += annotate(steps[label]) != steps[label]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(shared_data_dir(), "processbench_dev"),
                    help="folder with ProcessBench's gsm8k.json, math.json, ...")
    args = ap.parse_args()
    total: dict[str, int] = {}
    print(f"{'subset':<14} {'right steps':>12} {'flagged':>8} {'first errors':>13} "
          f"{'flagged':>8} {'precision':>10}")
    for name in SUBSETS:
        path = os.path.join(args.data, f"{name}.json")
        if not os.path.isfile(path):
            print(f"{name:<14} (no {path})")
            continue
        with open(path, encoding="utf-8") as f:
            c = count(json.load(f))
        for k, v in c.items():
            total[k] = total.get(k, 0) + v
        print(_row(name, c))
    if not total:
        print(f"no ProcessBench files in {args.data}")
        return 1
    print(_row("all", total))
    flagged = total["flagged_right"] + total["flagged_first_errors"]
    print(f"precision of the calculator's notes on ProcessBench dev: "
          f"{total['flagged_first_errors'] / max(1, flagged):.3f} "
          f"({total['flagged_first_errors']} of {flagged} flagged steps are first errors; "
          f"it flags {total['flagged_first_errors']} of {total['first_errors']} first errors)")
    return 0


def _row(name: str, c: dict[str, int]) -> str:
    flagged = c["flagged_right"] + c["flagged_first_errors"]
    precision = c["flagged_first_errors"] / flagged if flagged else float("nan")
    return (f"{name:<14} {c['right']:>12} {c['flagged_right']:>8} {c['first_errors']:>13} "
            f"{c['flagged_first_errors']:>8} {precision:>10.3f}")


if __name__ == "__main__":
    sys.exit(main())
