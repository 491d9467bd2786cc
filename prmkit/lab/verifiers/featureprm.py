"""A learned PRM of the lab world that reads a step's text, and its blind spot.

:class:`FeaturePRM` is a discrete-time hazard model: ``h_k = sigmoid(w . f_k)`` is the chance
that step k is the first wrong step given that the steps before it were right, and the score
of step k is ``prod_{j <= k} (1 - h_j)``. The features (:data:`FEATURES`) of a step: ``bias``,
``hidden`` (a result with no calculation), ``calc`` (a wrong calculation), ``operator`` (not
the sentence's), ``carry`` (its first number is not the previous result), ``answer`` and
``answer_carry``. Fitted by :func:`fit` on exact labels. A hidden wrong calculation is never
the first error in the gold labels, so the fit learns that hidden steps are safe: the blind spot
that ``prmkit lab rl``'s PRM-only arm exploits (reward hacking; Gao et al. 2023, DeepSeek-AI
2025). docs/lab-rl.md.

:class:`FeatureORM` is the outcome model fitted the same way on the same texts: a logistic
regression of whether the final answer is right on a solution's counts of those features
(:data:`ORM_FEATURES`, :func:`orm_row`); its score is the last step's, the steps before it
score None. Outcome labels see a hidden slip through the wrong answer, so it has no such blind
spot.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any, Sequence

import numpy as np

from prmkit.evaluate.heuristic import fit_logistic
from prmkit.world.problems import Problem, load_problem

FEATURES = ("bias", "hidden", "calc", "operator", "carry", "answer", "answer_carry")
ORM_FEATURES = ("bias", "steps", "hidden", "calc", "operator", "carry", "answer_carry")
SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_CALC = re.compile(r"(?P<a>-?\d+(?:\.\d+)?) (?P<op>[-+*/]) (?P<b>\d+) = (?P<c>-?\d+(?:\.\d+)?)")
_ANSWER = re.compile(r"answer is (?P<v>-?\d+(?:\.\d+)?)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def features(problem: Problem, steps: Sequence[str]) -> np.ndarray:
    """The feature rows (steps x FEATURES) of one solution."""
    rows = np.zeros((len(steps), len(FEATURES)))
    prev: Fraction = Fraction(problem.start)
    for k, step in enumerate(steps):
        f = rows[k]
        f[0] = 1.0
        calc, ans = _CALC.search(step), _ANSWER.search(step)
        if ans:
            f[5] = 1.0
            f[6] = float(Fraction(ans.group("v")) != prev)
        elif calc:
            a, b, c = Fraction(calc.group("a")), int(calc.group("b")), Fraction(calc.group("c"))
            exact = {"+": a + b, "-": a - b, "*": a * b, "/": a / b}[calc.group("op")]
            f[2] = float(abs(float(exact - c)) > 0.006)
            want = SYMBOLS[problem.ops[k].kind] if k < len(problem.ops) else None
            f[3] = float(calc.group("op") != want)
            f[4] = float(a != prev)
        else:
            f[1] = 1.0
        numbers = _NUMBER.findall(step)
        if numbers and not ans:
            prev = Fraction(numbers[-1])
    return rows


class FeaturePRM:
    """The hazard PRM with weights ``w`` (one per feature), through the PRM protocol."""

    def __init__(self, w: Sequence[float]):
        self.w = np.asarray(w, dtype=float)
        self._problems: dict[str, Problem] = {}

    def problem(self, text: str) -> Problem:
        if text not in self._problems:
            self._problems[text] = load_problem(text)
        return self._problems[text]

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        return [self.solution_scores(self.problem(problem), sol) if sol else []
                for problem, sol in zip(problems, steps)]

    def solution_scores(self, problem: Problem, steps: Sequence[str]) -> list[float | None]:
        """One solution's step scores: P(no error up to each step), the hazards multiplied."""
        h = 1.0 / (1.0 + np.exp(-(features(problem, steps) @ self.w)))
        return [float(x) for x in np.cumprod(1.0 - h)]

    def to_dict(self) -> dict[str, Any]:
        return {"features": list(FEATURES), "weights": [round(float(x), 6) for x in self.w]}


def orm_row(problem: Problem, steps: Sequence[str]) -> np.ndarray:
    """One solution's ORM features (:data:`ORM_FEATURES`): 1, its number of steps, and how many
    of its steps have each of the step features hidden .. carry and answer_carry."""
    counts = features(problem, steps).sum(axis=0)
    named = dict(zip(FEATURES, counts))
    return np.array([1.0, float(len(steps))] + [float(named[k]) for k in ORM_FEATURES[2:]])


class FeatureORM(FeaturePRM):
    """The outcome model with weights ``w`` (one per :data:`ORM_FEATURES`), through the PRM
    protocol: P(the final answer is right) on the last step, None on the others."""

    def solution_scores(self, problem: Problem, steps: Sequence[str]) -> list[float | None]:
        p = 1.0 / (1.0 + np.exp(-float(orm_row(problem, steps) @ self.w)))
        return [None] * (len(steps) - 1) + [p]

    def to_dict(self) -> dict[str, Any]:
        return {"features": list(ORM_FEATURES), "weights": [round(float(x), 6) for x in self.w]}


def hazard_rows(problem: Problem, steps: Sequence[str], labels: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """The training rows of one solution: its steps up to and with the first wrong one, the
    target 1 at the first wrong step, 0 before it."""
    x = features(problem, steps)
    first = next((k for k, label in enumerate(labels) if not label), len(labels) - 1)
    y = np.zeros(first + 1)
    if not labels[first]:
        y[first] = 1.0
    return x[:first + 1], y


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, iterations: int = 50) -> np.ndarray:
    """Logistic regression of ``y`` on ``x`` (whose first column is the bias; L2 penalty ``l2``
    on every weight but the bias): :func:`prmkit.evaluate.heuristic.fit_logistic`."""
    return fit_logistic(x, y, l2=l2, iterations=iterations, tol=1e-8, add_bias=False)
