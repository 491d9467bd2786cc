"""PRMBench: fine-grained step-level error detection, per error category.

Song et al. 2025, "PRMBench: A Fine-grained and Challenging Benchmark for Process-Level Reward
Models", arXiv:2501.03124. The definition is the benchmark's own code, github.com/ssmisya/
PRMBench: ``mr_eval/tasks/prmtest_classified/task.py`` (``evaluate_function``,
``eval_on_hallucination_step``) and the PRMScore of ``mr_visualize/eval_res_view/draw_tabs/
form_latex_strs.ipynb`` (``get_prmscore_from_current_res_dict``).

Each sample is a solution (``modified_process``, the only text the model sees) with errors
injected at ``error_steps`` (1-based). Per step, the model judges it **valid** when its score is
**above** the threshold (0.5, as mr_eval's models); the gold label is positive (correct) unless
the step is in ``error_steps``, also after the first error. TP = correct judged valid, FN =
correct judged invalid, TN = error judged invalid, FP = error judged valid; unscored steps and
error steps past the solution's end are not counted.

Per category (circular, confidence, counterfactual, deception, domain_inconsistency,
missing_condition, redundency, step_contradiction, multi_solutions), over the summed counts:
``f1`` = 2TP / (2TP + FP + FN), ``negative_f1`` = 2TN / (2TN + FN + FP), ``prmscore`` = 0.5 *
f1 + 0.5 * negative_f1 (``f1`` alone for ``multi_solutions``, which has no error steps). The
overall PRMScore uses the counts summed over every category; the paper's groups (simplicity,
soundness, sensitivity) are plain means of their categories' PRMScores. All in percent. Also
per category, as mr_eval: ``first_error_acc``, ``correct_step_acc``, ``wrong_step_acc``,
``total_step_acc``.

Unlike mr_eval, an F1 with nothing to count is null (mr_eval writes -1 and clips a negative
PRMScore to 0), and a PRMScore with one F1 null is the other; ``original_process`` and its
``similarity`` metric are not reported, since the model is never shown ``original_process``.
"""

from __future__ import annotations

import glob
import math
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

from prmkit.errors import PrmkitError
from prmkit.records import Record

PAPER = "Song et al. 2025, PRMBench, arXiv:2501.03124"
SOURCE = ("github.com/ssmisya/PRMBench: mr_eval/tasks/prmtest_classified/task.py "
          "(evaluate_function, eval_on_hallucination_step) and "
          "mr_visualize/eval_res_view/draw_tabs/form_latex_strs.ipynb (PRMScore)")
GROUPS = {
    "simplicity": ("redundency", "circular"),
    "soundness": ("counterfactual", "step_contradiction", "domain_inconsistency", "confidence"),
    "sensitivity": ("missing_condition", "deception", "multi_solutions"),
}
F1_ONLY = ("multi_solutions",)


@dataclass
class Confusion:
    """Step-level counts; positive = a correct step."""

    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0

    def add(self, other: "Confusion") -> None:
        self.tp += other.tp
        self.fp += other.fp
        self.tn += other.tn
        self.fn += other.fn


def error_indices(record: Record) -> list[int]:
    """The record's 0-based error steps that lie inside the solution."""
    steps = record.meta.get("error_steps")
    if steps is None:
        raise PrmkitError(f"record {record.id!r}: no meta['error_steps']; read PRMBench files "
                          f"with the prmbench format")
    return sorted({e - 1 for e in steps if 1 <= e <= len(record.steps)})


def confusion(errors: Sequence[int], valid: Sequence[bool | None]) -> Confusion:
    """Counts for one solution: ``errors`` are 0-based error steps, ``valid[i]`` the model's
    judgement of step i (None = not scored, not counted)."""
    c = Confusion()
    bad = set(errors)
    for i, v in enumerate(valid):
        if v is None:
            continue
        if i in bad:
            if v:
                c.fp += 1
            else:
                c.tn += 1
        elif v:
            c.tp += 1
        else:
            c.fn += 1
    return c


def f1_scores(c: Confusion) -> tuple[float | None, float | None]:
    """(positive F1, negative F1) as percentages; None where there is nothing to count."""
    pos = 2 * c.tp + c.fp + c.fn
    neg = 2 * c.tn + c.fn + c.fp
    return (100.0 * 2 * c.tp / pos if pos else None, 100.0 * 2 * c.tn / neg if neg else None)


def prmscore(c: Confusion, f1_only: bool = False) -> float | None:
    """0.5 * F1 + 0.5 * negative F1 (F1 alone if ``f1_only``); one F1 alone if the other is None."""
    f1, nf1 = f1_scores(c)
    if f1_only or nf1 is None:
        return f1
    if f1 is None:
        return nf1
    return 0.5 * f1 + 0.5 * nf1


@dataclass
class CategoryResult:
    n: int
    tp: int
    fp: int
    tn: int
    fn: int
    f1: float | None
    negative_f1: float | None
    prmscore: float | None
    first_error_acc: float | None
    correct_step_acc: float | None
    wrong_step_acc: float | None
    total_step_acc: float | None


def _category(items: list[tuple[list[int], list[bool | None]]], f1_only: bool) -> CategoryResult:
    total = Confusion()
    first_hits = []
    for errors, valid in items:
        total.add(confusion(errors, valid))
        if errors and errors[0] < len(valid) and valid[errors[0]] is not None:
            first_hits.append(0.0 if valid[errors[0]] else 1.0)
    f1, nf1 = f1_scores(total)

    def rate(a: int, b: int) -> float | None:
        return 100.0 * a / (a + b) if a + b else None

    return CategoryResult(
        n=len(items), tp=total.tp, fp=total.fp, tn=total.tn, fn=total.fn, f1=f1,
        negative_f1=nf1, prmscore=prmscore(total, f1_only),
        first_error_acc=100.0 * math.fsum(first_hits) / len(first_hits) if first_hits else None,
        correct_step_acc=rate(total.tp, total.fn), wrong_step_acc=rate(total.tn, total.fp),
        total_step_acc=rate(total.tp + total.tn, total.fp + total.fn))


def evaluate(records: Sequence[Record], scores: dict[str, Sequence[float | None]],
             threshold: float = 0.5) -> dict[str, Any]:
    """PRMBench's figures for ``records`` (read with the prmbench format) and step ``scores``
    by record id: per category, per group, and overall."""
    valid = {r.id: [None if s is None else s > threshold for s in scores[r.id]] for r in records}
    return evaluate_judgements(records, valid)


def evaluate_judgements(records: Sequence[Record], valid: dict[str, Sequence[bool | None]],
                        ) -> dict[str, Any]:
    """As :func:`evaluate`, from the model's valid/invalid judgement of each step."""
    by_cat: dict[str, list[tuple[list[int], list[bool | None]]]] = {}
    for r in records:
        cat = r.meta.get("classification") or "unknown"
        by_cat.setdefault(cat, []).append((error_indices(r), list(valid[r.id])))
    cats = {c: _category(items, c in F1_ONLY) for c, items in sorted(by_cat.items())}
    total = Confusion()
    for c in cats.values():
        total.add(Confusion(c.tp, c.fp, c.tn, c.fn))
    f1, nf1 = f1_scores(total)
    groups = {}
    for g, members in GROUPS.items():
        vals = [cats[m].prmscore for m in members if m in cats and cats[m].prmscore is not None]
        if vals:
            groups[g] = {"prmscore": math.fsum(vals) / len(vals),
                         "categories": [m for m in members if m in cats]}
    return {"prmscore": prmscore(total), "f1": f1, "negative_f1": nf1,
            "n": len(records), "confusion": asdict(total),
            "categories": {c: asdict(v) for c, v in cats.items()}, "groups": groups}


def random_judgements(records: Sequence[Record], draws: int, seed: int) -> dict[str, Any]:
    """Each step judged valid or invalid by a fair coin; figures averaged over ``draws``."""
    rng = np.random.default_rng(seed)
    runs = [evaluate_judgements(records, {r.id: (rng.random(len(r.steps)) < 0.5).tolist()
                                          for r in records}) for _ in range(draws)]

    def avg(get: Any) -> float | None:
        vals = [get(run) for run in runs]
        return None if any(v is None for v in vals) else math.fsum(vals) / len(vals)

    out = {"prmscore": avg(lambda x: x["prmscore"]), "f1": avg(lambda x: x["f1"]),
           "negative_f1": avg(lambda x: x["negative_f1"]), "n": len(records),
           "categories": {c: {"prmscore": avg(lambda x, c=c: x["categories"][c]["prmscore"])}
                          for c in runs[0]["categories"]},
           "groups": {g: {"prmscore": avg(lambda x, g=g: x["groups"][g]["prmscore"])}
                      for g in runs[0]["groups"]},
           "how": f"each step valid with probability 1/2, mean over {draws} draws (seed {seed})"}
    return out


def load(path: str) -> list[Record]:
    """PRMBench records from one JSONL file or every ``*.jsonl`` in a folder. As in mr_eval, a
    repeated ``classification_idx`` keeps its first occurrence."""
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "*.jsonl")))
        if not files:
            raise PrmkitError(f"{path}: no .jsonl files here")
    elif os.path.isfile(path):
        files = [path]
    else:
        raise PrmkitError(f"{path}: no such file or folder")
    from prmkit.formats import ConvertOptions
    from prmkit.formats import prmbench as reader  # the reader only: repeats are allowed here

    out: dict[str, Record] = {}
    repeats = 0
    for f in files:
        for r in reader.read(f, ConvertOptions()):
            repeats += r.id in out
            out.setdefault(r.id, r)
    if repeats:
        print(f"prmbench: {repeats} repeated records (same classification and idx) dropped, "
              f"keeping the first, as PRMBench's evaluation does", file=sys.stderr)
    return list(out.values())


def print_results(res: dict[str, Any], name: str) -> None:
    from prmkit.evaluate.common import pct, print_table

    cols = [("model", res["model"])] + list(res["baselines"].items())
    rows = []
    for c, m in res["model"]["categories"].items():
        rows.append([c, m["n"], pct(m["f1"]), pct(m["negative_f1"])]
                    + [pct(col["categories"][c]["prmscore"]) for _, col in cols])
    for g in res["model"]["groups"]:
        rows.append([f"[{g}]", "", "", ""] + [pct(col["groups"].get(g, {}).get("prmscore"))
                                               for _, col in cols])
    m = res["model"]
    rows.append(["overall", m["n"], pct(m["f1"]), pct(m["negative_f1"])]
                + [pct(col["prmscore"]) for _, col in cols])
    print_table(["category", "n", "F1", "negF1"] + [f"PRMScore {k}" for k, _ in cols], rows)
    by = res.get("scored_by")
    print(f"model: {name}" + (f" (format {by['format']}, {by['dtype']}, {by['device']})"
                              if by else ""))
    print(f"threshold {res['threshold']:.6g} (a step is judged valid when its score is above "
          f"it); baselines: " + "; ".join(f"{k} = {v['how']}" for k, v in res["baselines"].items()))
