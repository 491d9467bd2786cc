"""A PRM that reads no text: step correctness guessed from step position and length alone.

This is the floor a PRM must clear (ARCHITECTURE.md, "Contracts"). If a model cannot tell a wrong
step from a right one better than "late steps and long steps are more often wrong", it has
learned nothing about the mathematics.

The model is a logistic regression, ``P(step correct) = sigmoid(w . x)``, on four features of
step ``k`` (0-based) of a solution of ``n`` steps, each standardised with the training mean and
standard deviation:

- ``k``: the step index;
- ``(k + 1) / n``: the relative position;
- ``log(1 + characters in the step)``;
- ``log(n)``: the solution's length in steps.

It is fitted by Newton's method (iteratively reweighted least squares) on every labelled step
(labels >= 0.5 count as correct; unlabelled steps, such as those after ProcessBench's first
error, are left out), with an L2 penalty of ``l2`` on the weights (not on the bias). Its first
error threshold is then tuned on the same training records with
:func:`prmkit.evaluate.threshold.calibrate_threshold`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from prmkit.errors import PrmkitError
from prmkit.evaluate.threshold import calibrate_threshold
from prmkit.records import Record, first_error_from_labels

FEATURES = ("step_index", "relative_position", "log_step_chars", "log_num_steps")


def features(record: Record) -> np.ndarray:
    """The raw (unstandardised) features of each step, shape (n_steps, 4)."""
    n = len(record.steps)
    return np.array([[k, (k + 1) / n, math.log1p(len(s)), math.log(n)]
                      for k, s in enumerate(record.steps)], dtype=float)


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1.0, iterations: int = 100,
                 tol: float = 1e-10, add_bias: bool = True) -> np.ndarray:
    """Weights ``[bias, w...]`` of an L2-regularised logistic regression (Newton's method),
    prmkit's one logistic fit.

    ``y`` holds 0/1 targets. With ``add_bias`` a bias column is put before ``x``'s; without it
    ``x``'s first column is the bias. The bias is not penalised. Newton's steps stop after
    ``iterations`` or when no weight moves by ``tol`` or more.
    """
    z = np.c_[np.ones(len(x)), x] if add_bias else x
    w = np.zeros(z.shape[1])
    penalty = np.full(z.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        grad = z.T @ (p - y) + penalty * w
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.max(np.abs(step)) < tol:
            break
    return w


@dataclass
class PositionLengthPRM:
    """A fitted position/length heuristic. ``score`` follows the PRM protocol."""

    weights: list[float]   # bias first, then one weight per standardised feature
    mean: list[float]
    std: list[float]
    threshold: float       # tuned on the training records
    n_steps: int           # labelled steps it was fitted on
    n_records: int

    def step_scores(self, record: Record) -> list[float]:
        x = (features(record) - np.array(self.mean)) / np.array(self.std)
        w = np.array(self.weights)
        return (1.0 / (1.0 + np.exp(-(w[0] + x @ w[1:])))).tolist()

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float]]:
        return [self.step_scores(Record(id="x", problem=p or " ", steps=list(s)))
                for p, s in zip(problems, steps)]

    def to_dict(self) -> dict[str, object]:
        return {"features": list(FEATURES), "weights": self.weights, "mean": self.mean,
                "std": self.std, "threshold": self.threshold, "fitted_on_steps": self.n_steps,
                "fitted_on_records": self.n_records}


def fit(records: Sequence[Record], l2: float = 1.0) -> PositionLengthPRM:
    """Fit the heuristic on records with ``labels`` or ``first_error``, and tune its threshold."""
    xs, ys = [], []
    for r in records:
        labels = r.labels_or_first_error()
        if labels is None:
            continue
        f = features(r)
        for k, label in enumerate(labels):
            if label is not None:
                xs.append(f[k])
                ys.append(1.0 if label >= 0.5 else 0.0)
    if not xs or len(set(ys)) < 2:
        raise PrmkitError("cannot fit the position/length heuristic: the training records need "
                          "labelled steps of both kinds (correct and wrong)")
    x = np.array(xs)
    mean, std = x.mean(axis=0), x.std(axis=0)
    std[std == 0] = 1.0
    w = fit_logistic((x - mean) / std, np.array(ys), l2=l2)
    model = PositionLengthPRM(w.tolist(), mean.tolist(), std.tolist(), 0.5, len(xs), 0)
    gold, scores = [], []
    for r in records:
        fe = r.first_error
        if fe is None and r.labels is not None:
            fe = first_error_from_labels(r.labels)
        if fe is not None:
            gold.append(fe)
            scores.append(model.step_scores(r))
    model.n_records = len(gold)
    if any(g == -1 for g in gold) and any(g != -1 for g in gold):
        model.threshold = calibrate_threshold(gold, scores)[0]
    return model
