"""``prmkit lab verifier-labels``' statistics: each arm's step AUC, pooled over the labelled
steps of the test candidates, and the difference of two arms' AUCs with its percentile-bootstrap
interval over the test problems (Efron and Tibshirani 1993, ch. 13; the resamples are
:mod:`prmkit.evaluate.bootstrap`'s): each resample draws the problems with replacement, takes
every labelled step of every candidate of each drawn problem, and scores both arms on those
same steps. A step an arm left unscored counts as ``ABSTAIN``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from prmkit.evaluate.bootstrap import resamples
from prmkit.evaluate.stepwise import auc
from prmkit.lab.stats import percentile_interval
from prmkit.records import Record

ABSTAIN = 0.5   # the score of a step an arm left unscored (a verifier that wrote no verdict)


@dataclass
class Steps:
    """The labelled test steps: by problem (row indices), whether each is correct, and each
    arm's score of it."""

    by_problem: list[np.ndarray]
    correct: np.ndarray
    scores: dict[str, np.ndarray]
    unscored: dict[str, int]


def steps_of(test: Sequence[Record], scores: Mapping[str, Mapping[str, Any]]) -> Steps:
    """The labelled steps of ``test`` and each arm's scores of them (``scores[arm][record id]``:
    a record's step scores, None where a step got none)."""
    rows: dict[str, list[int]] = {}
    correct: list[bool] = []
    got: dict[str, list[float]] = {arm: [] for arm in scores}
    unscored = {arm: 0 for arm in scores}
    for r in test:
        for j, label in enumerate(r.labels or []):
            if label is None:
                continue
            rows.setdefault(str(r.group or r.problem), []).append(len(correct))
            correct.append(label >= 0.5)
            for arm, by_id in scores.items():
                row = by_id.get(r.id) or []
                s = row[j] if j < len(row) else None
                unscored[arm] += s is None
                got[arm].append(ABSTAIN if s is None else float(s))
    return Steps([np.array(v) for _, v in sorted(rows.items())], np.array(correct, dtype=bool),
                 {arm: np.array(v, dtype=float) for arm, v in got.items()}, unscored)


def arm_auc(steps: Steps, arm: str) -> float | None:
    return auc(steps.scores[arm], steps.correct)


def auc_difference(steps: Steps, a: str, b: str, margin: float, draws: int,
                   seed: int) -> dict[str, Any]:
    """AUC(a) - AUC(b) over the test steps, its 95% interval over resampled problems, and
    whether the interval's lower end lies above ``-margin`` (``holds``)."""
    point_a, point_b = arm_auc(steps, a), arm_auc(steps, b)
    if point_a is None or point_b is None:
        return {"difference": None, "ci95": None, "holds": False, "draws": 0}
    diffs = []
    for row in resamples(len(steps.by_problem), draws, np.random.default_rng(seed)):
        idx = np.concatenate([steps.by_problem[i] for i in row])
        x, y = auc(steps.scores[a][idx], steps.correct[idx]), \
            auc(steps.scores[b][idx], steps.correct[idx])
        if x is not None and y is not None:
            diffs.append(x - y)
    lo, hi = percentile_interval(diffs, 0.95)
    return {"difference": round(point_a - point_b, 4), "ci95": [lo, hi],
            "holds": bool(lo > -margin), "margin": margin, "draws": len(diffs), "problems": len(steps.by_problem)}
