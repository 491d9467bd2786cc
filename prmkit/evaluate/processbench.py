"""ProcessBench: can a PRM find the first wrong step of a solution?

Zheng et al. 2024, "ProcessBench: Identifying Process Errors in Mathematical Reasoning",
arXiv:2412.06559 (github.com/QwenLM/ProcessBench, ``code/run_eval_prm_*.py``).

Each sample's ``label`` is the 0-based index of its first wrong step, or -1. A PRM predicts
**the first step scored below the threshold**, or -1 (:func:`predicted_first_error`); a null
score never predicts an error. Per split (gsm8k, math, olympiadbench, omnimath), in percent:
``error_acc`` (samples with ``label != -1`` predicted exactly), ``correct_acc`` (samples with
``label == -1`` predicted -1), ``f1`` (their harmonic mean) and ``n``. ``average_f1`` is the
plain mean of ``f1`` over the splits, as the paper reports it.

Where the paper's code divides by zero, prmkit defines: an accuracy with no samples is null, and
so is ``f1``; both accuracies 0 give ``f1 = 0``; ``average_f1`` averages the splits whose ``f1``
is not null (``average_over``), null when there is none.

``--calibrate-on SPLIT`` (as the paper does for PRMs that output a scalar) tries as thresholds
the midpoints between consecutive distinct scores of that split, the lowest score and the
smallest float above the highest; the lowest threshold with the highest F1 wins.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from prmkit import formats
from prmkit.errors import PrmkitError
from prmkit.evaluate.threshold import calibrate_threshold
from prmkit.records import Record

SPLITS = ("gsm8k", "math", "olympiadbench", "omnimath")
PAPER = "Zheng et al. 2024, ProcessBench, arXiv:2412.06559"


@dataclass
class SplitMetrics:
    """ProcessBench's figures for one split (percentages; None = undefined, see the module)."""

    error_acc: float | None
    correct_acc: float | None
    f1: float | None
    n: int
    n_error: int
    n_correct: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class ProcessBenchConfig:
    """How predictions are made from scores, and how the baselines are drawn."""

    threshold: float | None = field(default=None, metadata={
        "help": "a step whose score is below this is the predicted first error; default: the "
                "threshold saved with the model (prmkit_threshold.json), else 0.5"})
    calibrate_on: str | None = field(default=None, metadata={
        "help": "pick the threshold that maximises F1 on this split instead"})
    random_draws: int = field(default=100, metadata={
        "help": "draws of the random baseline, whose figures are averaged"})
    seed: int = field(default=0, metadata={"help": "seed of the random baseline"})

    def __post_init__(self) -> None:
        if self.threshold is not None and not math.isfinite(self.threshold):
            raise PrmkitError(f"threshold must be a finite number, got {self.threshold}")
        if self.random_draws < 1:
            raise PrmkitError(f"random_draws must be positive, got {self.random_draws}")


# ---------------------------------------------------------------------------------------------
# the metric (pure functions)


def predicted_first_error(step_scores: Sequence[float | None], threshold: float) -> int:
    """The index of the first step scored below ``threshold``; -1 if there is none."""
    for i, s in enumerate(step_scores):
        if s is not None and s < threshold:
            return i
    return -1


def harmonic_f1(error_acc: float | None, correct_acc: float | None) -> float | None:
    """The harmonic mean of the two accuracies; None if either is None; 0 if both are 0."""
    if error_acc is None or correct_acc is None:
        return None
    if error_acc + correct_acc == 0:
        return 0.0
    return 2 * error_acc * correct_acc / (error_acc + correct_acc)


def split_metrics(labels: Sequence[int], predictions: Sequence[int]) -> SplitMetrics:
    """ProcessBench's figures for one split from gold labels and predicted first errors."""
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} labels but {len(predictions)} predictions")
    err = [p == y for y, p in zip(labels, predictions) if y != -1]
    cor = [p == -1 for y, p in zip(labels, predictions) if y == -1]
    error_acc = 100.0 * sum(err) / len(err) if err else None
    correct_acc = 100.0 * sum(cor) / len(cor) if cor else None
    return SplitMetrics(error_acc, correct_acc, harmonic_f1(error_acc, correct_acc),
                        len(labels), len(err), len(cor))


def average_f1(per_split: dict[str, SplitMetrics]) -> tuple[float | None, list[str]]:
    """The plain mean of F1 over the splits where it is defined, and those splits' names."""
    used = [name for name, m in per_split.items() if m.f1 is not None]
    if not used:
        return None, []
    return math.fsum(per_split[s].f1 for s in used) / len(used), used  # type: ignore[misc]


def evaluate(labels: dict[str, list[int]], predictions: dict[str, list[int]]) -> dict[str, Any]:
    """Per-split metrics and the average F1, as a JSON-ready dict."""
    per = {s: split_metrics(labels[s], predictions[s]) for s in labels}
    avg, used = average_f1(per)
    return {"splits": {s: m.to_dict() for s, m in per.items()}, "average_f1": avg,
            "average_over": used}


# ---------------------------------------------------------------------------------------------
# data


def load_splits(path: str) -> dict[str, list[Record]]:
    """The splits of ProcessBench at ``path``: a folder holding some of ``gsm8k.json``,
    ``math.json``, ``olympiadbench.json``, ``omnimath.json`` (as shipped; other files are
    ignored), or one file (a JSON list or JSONL), whose name without extension names the split.
    Ids must be unique across splits."""
    if os.path.isdir(path):
        files = {s: os.path.join(path, f"{s}.{ext}") for s in SPLITS for ext in ("json", "jsonl")
                 if os.path.isfile(os.path.join(path, f"{s}.{ext}"))}
        if not files:
            raise PrmkitError(f"{path}: no ProcessBench split here (expected some of "
                              f"{', '.join(s + '.json' for s in SPLITS)})")
    elif os.path.isfile(path):
        files = {os.path.splitext(os.path.basename(path))[0]: path}
    else:
        raise PrmkitError(f"{path}: no such file or folder")
    splits: dict[str, list[Record]] = {}
    seen: dict[str, str] = {}
    for name, f in files.items():
        splits[name] = list(formats.read("processbench", f))
        for r in splits[name]:
            if r.id in seen:
                raise PrmkitError(f"{f}: id {r.id!r} is also in split {seen[r.id]!r}")
            seen[r.id] = name
    return splits


def gold(records: Sequence[Record]) -> list[int]:
    out = []
    for r in records:
        if r.first_error is None:
            raise PrmkitError(f"record {r.id!r}: no first error label")
        out.append(r.first_error)
    return out


# ---------------------------------------------------------------------------------------------
# what no model achieves


def always_correct(splits: dict[str, list[Record]]) -> dict[str, Any]:
    """Predict -1 (no error) for every sample: error_acc 0, correct_acc 100, F1 0."""
    out = evaluate({s: gold(r) for s, r in splits.items()},
                   {s: [-1] * len(r) for s, r in splits.items()})
    out["how"] = "predict -1 (all steps correct) for every sample"
    return out


def random_first_error(splits: dict[str, list[Record]], draws: int, seed: int) -> dict[str, Any]:
    """Predict a first error drawn uniformly from {-1, 0, ..., n_steps - 1} for each sample.

    Each of ``draws`` draws is evaluated on its own; every figure is the mean over the draws
    (F1 is averaged, not recomputed from averaged accuracies), and ``average_f1_std`` is the
    standard deviation of the average F1 across draws.
    """
    rng = np.random.default_rng(seed)
    labels = {s: gold(r) for s, r in splits.items()}
    runs = []
    for _ in range(draws):
        preds = {s: [int(rng.integers(-1, len(x.steps))) for x in r] for s, r in splits.items()}
        runs.append(evaluate(labels, preds))
    per: dict[str, Any] = {}
    for s in splits:
        row: dict[str, Any] = {}
        for key in ("error_acc", "correct_acc", "f1"):
            vals = [run["splits"][s][key] for run in runs]
            row[key] = None if any(v is None for v in vals) else math.fsum(vals) / draws
        row.update({k: runs[0]["splits"][s][k] for k in ("n", "n_error", "n_correct")})
        per[s] = row
    avgs = [run["average_f1"] for run in runs if run["average_f1"] is not None]
    return {"splits": per, "average_f1": math.fsum(avgs) / len(avgs) if avgs else None,
            "average_over": runs[0]["average_over"],
            "average_f1_std": float(np.std(avgs)) if avgs else None,
            "draws": draws, "seed": seed,
            "how": f"first error drawn uniformly from {{-1, 0, ..., n_steps-1}}, "
                   f"mean over {draws} draws (seed {seed})"}


def first_errors(records: Sequence[Record], scores: dict[str, Sequence[float | None]] | None,
                 fixed: dict[str, int] | None, threshold: float) -> list[int]:
    """Predicted first errors: a given one when ``fixed`` has it, else from the scores."""
    out = []
    for r in records:
        if fixed is not None and r.id in fixed:
            out.append(fixed[r.id])
        else:
            out.append(predicted_first_error(scores[r.id], threshold))  # type: ignore[index]
    return out


def position_length(splits: dict[str, list[Record]], train: Sequence[Record] | None = None,
                    train_name: str | None = None, calibrate_on: str | None = None,
                    ) -> dict[str, Any]:
    """The position/length heuristic (:mod:`prmkit.evaluate.heuristic`), fitted on:

    1. ``train`` (``--heuristic-train FILE``) when given;
    2. else the calibration split, when the model's threshold is calibrated on one (the model
       and the heuristic then see the same labelled data);
    3. else, with two or more splits, each split's predictions come from a heuristic fitted on
       the other splits (leave one split out), so no split is predicted by a fit that saw it;
    4. else (one split, nothing else) on the split itself: in-sample, and marked so.

    Its threshold is always tuned on what it was fitted on.
    """
    from prmkit.evaluate import heuristic

    labels = {s: gold(r) for s, r in splits.items()}
    preds: dict[str, list[int]] = {}
    fits: dict[str, Any] = {}
    if train is not None or calibrate_on is not None or len(splits) == 1:
        if train is not None:
            fit_on = f"training file {train_name}"
            model = heuristic.fit(train)
        else:
            name = calibrate_on if calibrate_on is not None else next(iter(splits))
            fit_on = (f"split {name} (the calibration split)" if calibrate_on is not None
                      else f"split {name} itself (in-sample: no training file given)")
            model = heuristic.fit(splits[name])
        fits["all"] = model.to_dict()
        for s, recs in splits.items():
            preds[s] = [predicted_first_error(model.step_scores(r), model.threshold) for r in recs]
    else:
        fit_on = "the other splits (leave one split out)"
        for s, recs in splits.items():
            model = heuristic.fit([r for o, rs in splits.items() if o != s for r in rs])
            fits[s] = model.to_dict()
            preds[s] = [predicted_first_error(model.step_scores(r), model.threshold) for r in recs]
    out = evaluate(labels, preds)
    out["how"] = (f"logistic regression on step index, relative position, step length and "
                  f"solution length; fitted and threshold-tuned on {fit_on}")
    out["fit_on"] = fit_on
    out["fits"] = fits
    out["predictions"] = preds   # per split, in the order of the samples
    return out


def run(splits: dict[str, list[Record]], scores: dict[str, Sequence[float | None]] | None,
        fixed: dict[str, int] | None, config: ProcessBenchConfig,
        heuristic_train: Sequence[Record] | None = None,
        heuristic_train_name: str | None = None) -> dict[str, Any]:
    """The whole evaluation: the model's figures (from step ``scores`` and/or ``fixed`` first
    errors, by record id), the threshold used, the baselines, and per-sample predictions."""
    threshold: float | None = 0.5 if config.threshold is None else config.threshold
    calibration = None
    if config.calibrate_on is not None:
        if config.calibrate_on not in splits:
            raise PrmkitError(f"--calibrate-on {config.calibrate_on}: no such split (have: "
                              f"{', '.join(splits)})")
        recs = splits[config.calibrate_on]
        if scores is None or any(r.id not in scores for r in recs):
            raise PrmkitError("--calibrate-on needs step scores for every sample of the split "
                              "(predictions given as first_error cannot be re-thresholded)")
        threshold, f1 = calibrate_threshold(gold(recs), [scores[r.id] for r in recs])
        calibration = {"split": config.calibrate_on, "f1": f1,
                       "rule": "the lowest candidate threshold (distinct-score midpoints) "
                               "with the highest F1 on the split"}
    if scores is None:
        threshold = None  # every prediction is a given first error
    labels = {s: gold(r) for s, r in splits.items()}
    preds = {s: first_errors(r, scores, fixed, 0.5 if threshold is None else threshold)
             for s, r in splits.items()}
    model = evaluate(labels, preds)
    heur = position_length(splits, heuristic_train, heuristic_train_name, config.calibrate_on)
    beats = None
    if model["average_f1"] is not None and heur["average_f1"] is not None:
        beats = model["average_f1"] > heur["average_f1"]
    return {
        "benchmark": "processbench", "paper": PAPER,
        "threshold": threshold, "calibration": calibration,
        "model": model,
        "baselines": {"always_correct": always_correct(splits),
                      "random": random_first_error(splits, config.random_draws, config.seed),
                      "position_length": heur},
        "beats_position_length": beats,
        "predictions": [{"id": r.id, "split": s, "label": y, "predicted": p}
                        for s, recs in splits.items()
                        for r, y, p in zip(recs, labels[s], preds[s])],
        "definitions": {
            "predicted_first_error": "the first step whose score is below the threshold, "
                                     "else -1 (null scores never count as below)",
            "error_acc": "% of samples with label != -1 whose predicted first error = label",
            "correct_acc": "% of samples with label == -1 predicted -1",
            "f1": "2*error_acc*correct_acc/(error_acc+correct_acc); 0 if both are 0; null "
                  "if the split lacks error or correct samples",
            "average_f1": "plain mean of f1 over the splits in average_over"},
    }


def print_results(res: dict[str, Any], name: str) -> None:
    """The model's figures and the baselines, side by side, one row per split."""
    from prmkit.evaluate.common import pct, print_table

    rows = []
    short = {"always_correct": "always -1", "random": "random", "position_length": "pos/len"}
    cols = [("model", res["model"])] + [(short.get(k, k), v) for k, v in res["baselines"].items()]
    splits = list(res["model"]["splits"])
    for s in splits:
        m = res["model"]["splits"][s]
        rows.append([s, m["n"], pct(m["error_acc"]), pct(m["correct_acc"])]
                    + [pct(c["splits"][s]["f1"]) for _, c in cols])
    rows.append(["average F1", "", "", ""] + [pct(c["average_f1"]) for _, c in cols])
    print_table(["split", "n", "error_acc", "correct_acc"] + [f"F1 {k}" for k, _ in cols], rows)
    for line in dash_reasons(res["model"]["splits"]):
        print(line)
    print(f"model: {name}" + _scored_by(res))
    t = res["threshold"]
    if res["calibration"]:
        print(f"threshold {t:.6g}, calibrated on {res['calibration']['split']} "
              f"(F1 there {pct(res['calibration']['f1'])})")
    elif t is not None:
        print(f"threshold {t:.6g}")
    b = res["baselines"]
    print("baselines (the F1 columns): " + "; ".join(
        f"{short.get(k, k)} = {v['how']}" for k, v in b.items()))
    if res["beats_position_length"] is False:
        print(f"NOTE: {name} does NOT beat the position/length heuristic "
              f"(average F1 {pct(res['model']['average_f1'])} <= "
              f"{pct(b['position_length']['average_f1'])}): it has learned nothing about "
              f"which steps are wrong beyond where they are and how long they are.")


def dash_reasons(splits: dict[str, Any]) -> list[str]:
    """Why a cell of the table is "-": a split without solutions of one kind has no accuracy
    on that kind, and so no F1 (the harmonic mean of the two accuracies)."""
    out = []
    for s, m in splits.items():
        lacks = [f"{kind} ({acc})" for kind, acc in (("with an error", "error_acc"),
                                                      ("without one", "correct_acc"))
                 if m[acc] is None]
        if lacks:
            out.append(f"-: {s} has no solution {' and none '.join(lacks)}, so no F1")
    return out


def _scored_by(res: dict[str, Any]) -> str:
    by = res.get("scored_by")
    return f" (format {by['format']}, {by['dtype']}, {by['device']})" if by else ""
