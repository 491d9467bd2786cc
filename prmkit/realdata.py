"""``prmkit demo --real-data``: the real-data job (the main job, ``make demo``, is prmkit.lab.demo.run).

It runs on the public data in ``../shared/data`` and prints what it measured:

1. converts real PRM data (ProcessBench dev slice, Math-Shepherd and PRM800K samples) into
   prmkit records;
2. best-of-4 on GSM8K test problems with the four model solutions the GSM8K paper released
   (Cobbe et al., 2021): first candidate, majority vote and the oracle (pass@4), grading each
   extracted answer against the reference;
3. scores ProcessBench solutions with the default model (an untrained backbone read in the
   Math-Shepherd format) in one pass and per prefix, in float32, and reports their largest
   difference and the speed ratio. The scores themselves say nothing about step quality;
4. when the default PRM is installed, best-of-4 again on the first ``bon_problems`` GSM8K
   problems, also choosing by the PRM (min, prod, last of its step scores, bfloat16).
"""

from __future__ import annotations

import json
import os
import sys
import time

from prmkit import formats, select
from prmkit.errors import PrmkitError
from prmkit.formats import gsm8k
from prmkit.formats.options import ConvertOptions
from prmkit.records import Record, write_records
from prmkit.shareddata import shared_data_dir

GSM8K_SOLVERS = gsm8k.SOLVERS


def gsm8k_candidates(path: str) -> list[Record]:
    """The GSM8K paper's model solutions as candidate records, four per test problem."""
    return list(gsm8k.read(path, ConvertOptions()))


def run(data: str | None, output: str, score_n: int = 16, bon_problems: int = 100) -> int:
    data = data or shared_data_dir()
    if not os.path.isdir(data):
        raise PrmkitError(f"{data}: no shared data folder (pass --data DIR or set PRMKIT_SHARED_DATA)")
    os.makedirs(output, exist_ok=True)
    rows: list[tuple[str, str]] = []
    t0 = time.time()
    pb = _conversions(data, output, rows)
    cands = _gsm8k_baselines(data, output, rows)
    if score_n > 0:
        _one_pass_vs_per_prefix(pb, score_n, output, rows)
    from prmkit.models.pypi import DEFAULT_PRM_DIR

    if bon_problems > 0 and os.path.isfile(os.path.join(DEFAULT_PRM_DIR, "prmkit_format.json")):
        _best_of_4_with_the_default_prm(cands, bon_problems, output, rows)
    elif bon_problems > 0:
        rows.append(("best-of-4 with the default PRM", "skipped: no default PRM installed"))

    width = max(len(k) for k, _ in rows)
    print("\nprmkit demo: what was measured (data: " + data + ")")
    for k, v in rows:
        print(f"  {k.ljust(width)}  {v}")
    print(f"files in {output}/; total {time.time() - t0:.0f} s on {os.cpu_count()} cores")
    with open(os.path.join(output, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(dict(rows), f, indent=2)
    sys.stdout.flush()
    return 0


def _conversions(data: str, output: str, rows: list[tuple[str, str]]) -> list[Record]:
    """1. real PRM data converted to prmkit records; returns the ProcessBench dev records."""
    print("1. converting real PRM data to prmkit records", flush=True)
    pb: list[Record] = []
    for split in ("gsm8k", "math", "olympiadbench", "omnimath"):
        path = os.path.join(data, "processbench_dev", f"{split}.json")
        if os.path.exists(path):
            pb += list(formats.read("processbench", path))
    write_records(os.path.join(output, "processbench_dev.jsonl"), pb)
    n_err = sum(1 for r in pb if r.first_error != -1)
    rows.append(("ProcessBench dev records (with an error / all correct)",
                 f"{len(pb)} ({n_err} / {len(pb) - n_err})"))
    for fmt, name in (("math-shepherd", "samples_math-shepherd.jsonl"),
                      ("prm800k", "samples_prm800k.jsonl")):
        recs = list(formats.read(fmt, os.path.join(data, "format_samples", name)))
        write_records(os.path.join(output, f"{fmt}_sample.jsonl"), recs)
        labelled = sum(1 for r in recs for x in (r.labels or []) if x is not None)
        rows.append((f"{fmt} sample: records, labelled steps", f"{len(recs)}, {labelled}"))
    return pb


def _gsm8k_baselines(data: str, output: str, rows: list[tuple[str, str]]) -> list[Record]:
    """2. best-of-4 baselines on GSM8K; returns the candidates."""
    print("2. best-of-4 on GSM8K test with the GSM8K paper's model solutions", flush=True)
    cands = gsm8k_candidates(os.path.join(data, "gsm8k", "example_model_solutions.jsonl"))
    write_records(os.path.join(output, "gsm8k_candidates.jsonl"), cands)
    n_groups = len({c.group for c in cands})
    first = [c for c in cands if c.meta["solver"] == GSM8K_SOLVERS[0]]
    best_single = max(GSM8K_SOLVERS, key=lambda s: sum(bool(c.is_correct) for c in cands
                                                       if c.meta["solver"] == s))
    single = [c for c in cands if c.meta["solver"] == best_single]
    for label, chosen in (("first candidate (6b_finetuning)", first),
                          (f"best single solver ({best_single})", single),
                          ("majority vote of 4", select.select(cands, "majority")),
                          ("oracle, pass@4", select.select(cands, "oracle"))):
        acc = select.accuracy(chosen)
        rows.append((f"GSM8K test, {n_groups} problems: {label}", f"{100 * acc:.1f}%"))
    return cands


def _one_pass_vs_per_prefix(pb: list[Record], score_n: int, output: str,
                            rows: list[tuple[str, str]]) -> None:
    """3. one-pass against per-prefix scoring with the default model."""
    print(f"3. scoring {score_n} ProcessBench solutions with smollm2-135m (float32), "
          f"one pass and per prefix", flush=True)
    from prmkit.models.load import load_prm
    from prmkit.models.reading import HFConfig

    prm = load_prm("smollm2-135m", "math-shepherd", HFConfig(dtype="float32"))
    sample = pb[:score_n]
    problems, steps = [r.problem for r in sample], [r.steps for r in sample]
    t = time.perf_counter()
    one = prm.score(problems, steps)
    t_one = time.perf_counter() - t
    t = time.perf_counter()
    pre = prm.score_per_prefix(problems, steps)
    t_pre = time.perf_counter() - t
    diff = max(abs(a - b) for x, y in zip(one, pre) for a, b in zip(x, y)
               if a is not None and b is not None)
    for rec, s in zip(sample, one):
        rec.step_scores = s
    write_records(os.path.join(output, "processbench_scored_backbone.jsonl"), sample)
    n_steps = sum(len(s) for s in steps)
    rows.append((f"scoring {score_n} solutions / {n_steps} steps, float32: "
                 f"max |one-pass - per-prefix|", f"{diff:.1e}"))
    rows.append(("  one-pass speed over per-prefix speed", f"{t_pre / t_one:.1f}x "
                 f"({t_one:.1f} s vs {t_pre:.1f} s)"))


def _best_of_4_with_the_default_prm(cands: list[Record], bon_problems: int, output: str,
                                    rows: list[tuple[str, str]]) -> None:
    """4. best-of-4 again, also choosing by the default PRM."""
    from prmkit.models.load import load_prm
    from prmkit.models.pypi import DEFAULT_PRM_DIR
    from prmkit.models.reading import HFConfig
    from prmkit.scoring import score_records

    groups = sorted({c.group for c in cands}, key=lambda g: int(g.split("-")[1]))[:bon_problems]
    keep = set(groups)
    sub = [c for c in cands if c.group in keep]
    print(f"4. best-of-4 on {len(groups)} GSM8K problems with the default PRM (bfloat16)",
          flush=True)
    prm = load_prm(DEFAULT_PRM_DIR, config=HFConfig(dtype="bfloat16"))
    score_records(sub, prm, chunk=None, desc="best-of-4")
    write_records(os.path.join(output, "gsm8k_candidates_scored.jsonl"), sub)
    accs = {}
    for method in ("majority", "prm-min", "prm-prod", "prm-last", "weighted-majority", "oracle"):
        accs[method] = select.accuracy(select.select(sub, method))
        rows.append((f"GSM8K, first {len(groups)} problems, best-of-4 by {method}",
                     f"{100 * accs[method]:.1f}%"))
    best_prm = max(accs[m] for m in ("prm-min", "prm-prod", "prm-last"))
    rows.append(("  the default PRM beats majority voting here?",
                 "yes" if best_prm > accs["majority"] else
                 "NO: it is a small CPU-trained PRM (see its model card)"))
