"""Step-level quality of a PRM: ranking (AUC), accuracy at a threshold, and calibration (ECE).

Evaluated on every step that has both a label and a score (records with ``labels`` and
``step_scores``; steps where either is null are left out). A step is **positive** (correct)
when its label is >= 0.5.

``auc``
    The probability that a random correct step scores higher than a random wrong one, ties
    counting one half: the Mann-Whitney U statistic divided by (positives x negatives),
    computed from average ranks. Null when all steps are of one kind.
``accuracy``
    The percentage of steps where ``score >= threshold`` agrees with the step being correct.
``ece``
    Expected calibration error (Guo et al. 2017, "On Calibration of Modern Neural Networks";
    Naeini et al. 2015), with ``bins`` equal-width bins over [0, 1]: bin b holds the scores in
    ``[b/B, (b+1)/B)`` (the last bin also holds 1.0). ECE = sum over bins of
    ``(steps in bin / all steps) * |mean label - mean score|``, where the mean label is the
    observed frequency of correct steps (soft labels count as their value). Needs scores in
    [0, 1]; null otherwise. The per-bin figures are returned for the reliability plot.

All figures are percentages except ``auc`` (0 to 1, as usually written) and the bin means.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from prmkit.errors import PrmkitError
from prmkit.records import Record


@dataclass
class StepwiseConfig:
    threshold: float = 0.5
    bins: int = 10

    def __post_init__(self) -> None:
        if self.bins < 1:
            raise PrmkitError(f"bins must be positive, got {self.bins}")
        if not math.isfinite(self.threshold):
            raise PrmkitError(f"threshold must be a finite number, got {self.threshold}")


def pairs(records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray]:
    """(scores, labels) of every step with both, over all records."""
    scores, labels = [], []
    for r in records:
        if r.step_scores is None:
            continue
        lab = r.labels_or_first_error()
        if lab is None:
            continue
        for s, y in zip(r.step_scores, lab):
            if s is not None and y is not None:
                scores.append(s)
                labels.append(y)
    return np.array(scores, dtype=float), np.array(labels, dtype=float)


def step_auc(records: Sequence[Record]) -> float | None:
    """The step AUC of ``records``' step scores against their labels (a label of at least 0.5
    is a right step), over every step that has both; None if either kind is missing."""
    scores, labels = pairs(records)
    return auc(scores, labels >= 0.5)


def auc(scores: Sequence[float], positive: Sequence[bool]) -> float | None:
    """Rank-based ROC AUC with ties as one half; None if either class is empty."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over runs of tied scores
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2
    return float(u / (n_pos * n_neg))


def reliability(scores: Sequence[float], labels: Sequence[float], bins: int = 10,
                ) -> tuple[float | None, list[dict[str, Any]]]:
    """ECE (a percentage) and the per-bin figures; (None, []) if a score is outside [0, 1]."""
    s = np.asarray(scores, dtype=float)
    y = np.asarray(labels, dtype=float)
    if len(s) == 0 or s.min() < 0 or s.max() > 1:
        return None, []
    idx = np.minimum((s * bins).astype(int), bins - 1)
    table, ece = [], 0.0
    for b in range(bins):
        m = idx == b
        count = int(m.sum())
        row: dict[str, Any] = {"lo": b / bins, "hi": (b + 1) / bins, "count": count,
                               "mean_score": None, "mean_label": None}
        if count:
            row["mean_score"] = float(s[m].mean())
            row["mean_label"] = float(y[m].mean())
            ece += count / len(s) * abs(row["mean_label"] - row["mean_score"])
        table.append(row)
    return 100.0 * ece, table


def evaluate(records: Sequence[Record], config: StepwiseConfig | None = None) -> dict[str, Any]:
    """AUC, accuracy at the threshold and ECE over every labelled, scored step."""
    config = config or StepwiseConfig()
    s, y = pairs(records)
    if len(s) == 0:
        raise PrmkitError("no step has both a label and a score: give records with `labels` "
                          "(or `first_error`) and `step_scores`")
    pos = y >= 0.5
    ece, bins = reliability(s, y, config.bins)
    majority = 100.0 * max(pos.mean(), 1 - pos.mean())
    return {
        "steps": int(len(s)), "positive_steps": int(pos.sum()),
        "records": sum(1 for r in records if r.step_scores is not None),
        "auc": auc(s, pos), "threshold": config.threshold,
        "accuracy": 100.0 * float(((s >= config.threshold) == pos).mean()),
        "ece": ece, "bins": config.bins, "reliability": bins,
        "baselines": {"majority_class_accuracy": majority, "random_auc": 0.5},
        "definitions": {
            "positive": "label >= 0.5", "auc": "Mann-Whitney U / (P*N), ties count 1/2",
            "accuracy": "% of steps where (score >= threshold) == positive",
            "ece": f"{config.bins} equal-width bins on [0, 1] ([b/B, (b+1)/B), last bin "
                   f"closed); sum of bin share * |mean label - mean score|, in %"},
    }


def print_results(res: dict[str, Any]) -> None:
    from prmkit.evaluate.common import pct, print_table

    a = res["auc"]
    print_table(["metric", "value", "baseline"], [
        ["steps (correct)", f"{res['steps']} ({res['positive_steps']})", ""],
        ["AUC", "-" if a is None else f"{a:.3f}", "0.500 (random)"],
        [f"accuracy at {res['threshold']:g}", pct(res["accuracy"]),
         f"{pct(res['baselines']['majority_class_accuracy'])} (majority class)"],
        [f"ECE ({res['bins']} bins)", pct(res["ece"]), ""],
    ])
