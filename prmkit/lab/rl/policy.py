"""A lab policy that can learn: a softmax over the world's sentence kinds and operators.

For each operation of a lab problem, of sentence kind c, :class:`StepPolicy` draws the operator
from softmax(theta_op[c]) and whether to show the calculation from sigmoid(theta_show[c]). A
shown calculation slips with chance ``slip_shown``, a hidden one with ``slip_hidden``; later
steps carry a wrong value on. The text is the world's wording, so any PRM reads it.
:func:`fast_labels` equals :func:`prmkit.world.problems.gold_labels` of the text.
:meth:`StepPolicy.grad_log_prob` is REINFORCE's score function (Williams 1992), weighted per
step by the trainer's advantages. :func:`stated_labels` are the gold labels with stated values
checked (a hidden step whose result is wrong is the wrong step), and :class:`StatedGoldPRM`
scores with them. docs/lab-rl.md describes the world.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from prmkit.world.problems import (Problem, answer_text, apply, check_step, load_problem, number,
                              step_text)

KINDS = ("buys", "finds", "gets", "gives away", "loses", "sells", "mul", "div")
OPERATORS = ("add", "sub", "mul", "div")
# The base policy: its chance of the right operator per kind, and the operator it confuses it with.
BASE_RIGHT = (0.97, 0.97, 0.9, 0.55, 0.9, 0.75, 0.95, 0.6)
CONFUSION = ("sub", "sub", "sub", "add", "add", "add", "add", "mul")


def kind_of(problem: Problem, i: int) -> int:
    """The sentence kind (index into :data:`KINDS`) of operation ``i``."""
    op = problem.ops[i]
    return KINDS.index(op.verb if op.kind in ("add", "sub") else op.kind)


@dataclass
class Sample:
    """One solution: the operator and show choice per operation, the text's steps, labels."""

    kinds: list[int]
    ops: list[int]
    shown: list[bool]
    steps: list[str]
    labels: list[int]


class StepPolicy:
    """theta_op (kinds x operators) and theta_show (kinds), and the world's slip chances."""

    def __init__(self, show: float = 0.9, slip_shown: float = 0.03, slip_hidden: float = 0.35):
        self.theta_op = np.full((len(KINDS), len(OPERATORS)), -8.0)
        for c, (right, wrong) in enumerate(zip(BASE_RIGHT, CONFUSION)):
            true = OPERATORS.index(true_op(c))
            self.theta_op[c, true] = np.log(right)
            self.theta_op[c, OPERATORS.index(wrong)] = np.log(1.0 - right)
        self.theta_show = np.full(len(KINDS), float(np.log(show / (1.0 - show))))
        self.slip_shown, self.slip_hidden = slip_shown, slip_hidden
        self._probs: tuple[np.ndarray, np.ndarray] | None = None

    def op_probs(self) -> np.ndarray:
        return self._both()[0]

    def show_probs(self) -> np.ndarray:
        return self._both()[1]

    def _both(self) -> tuple[np.ndarray, np.ndarray]:
        if self._probs is None:
            z = self.theta_op - self.theta_op.max(axis=1, keepdims=True)
            e = np.exp(z)
            self._probs = (e / e.sum(axis=1, keepdims=True),
                           1.0 / (1.0 + np.exp(-self.theta_show)))
        return self._probs

    def update(self, g_op: np.ndarray, g_show: np.ndarray, lr: float) -> None:
        """One step of gradient ascent."""
        self.theta_op += lr * g_op
        self.theta_show += lr * g_show
        self._probs = None

    def sample(self, problem: Problem, rng: random.Random) -> Sample:
        """One solution of ``problem`` (draws from ``rng``)."""
        p_op, p_show = self.op_probs(), self.show_probs()
        x: Fraction | int = problem.start
        kinds, ops, shown, steps = [], [], [], []
        for i, op in enumerate(problem.ops):
            c = kind_of(problem, i)
            o = _draw(p_op[c], rng)
            show = rng.random() < p_show[c]
            y = apply(OPERATORS[o], Fraction(x), op.k)
            if rng.random() < (self.slip_shown if show else self.slip_hidden):
                y = _slip(rng, y)
            y = Fraction(number(y))          # the value as written, carried on
            steps.append(step_text(problem, i, x, y, OPERATORS[o]) if show
                         else hidden_text(problem, i, y))
            kinds.append(c), ops.append(o), shown.append(show)
            x = y
        steps.append(answer_text(x))
        return Sample(kinds, ops, shown, steps, fast_labels(problem, steps, shown, x))

    def success_probability(self, problem: Problem) -> float:
        """The exact chance of a solution with every step right (the right operator and no
        slip at every line), not a sample."""
        p_op, p_show = self.op_probs(), self.show_probs()
        out = 1.0
        for i in range(len(problem.ops)):
            c = kind_of(problem, i)
            right = p_op[c, OPERATORS.index(true_op(c))]
            out *= right * (p_show[c] * (1 - self.slip_shown)
                            + (1 - p_show[c]) * (1 - self.slip_hidden))
        return float(out)

    def grad_log_prob(self, sample: Sample, step_advantages: Sequence[float],
                      g_op: np.ndarray, g_show: np.ndarray) -> None:
        """Add sum_k A_k * grad log pi(choices of step k) to ``g_op`` and ``g_show`` (the answer
        line, step K, is no choice: its advantage is unused)."""
        p_op, p_show = self.op_probs(), self.show_probs()
        for c, o, s, a in zip(sample.kinds, sample.ops, sample.shown, step_advantages):
            g_op[c] -= a * p_op[c]
            g_op[c, o] += a
            g_show[c] += a * (float(s) - p_show[c])


def hidden_text(problem: Problem, i: int, result: Fraction | int) -> str:
    """Step ``i`` with its result stated and its calculation not shown."""
    op, p, u = problem.ops[i], problem.pronoun, problem.unit
    c = number(result)
    if op.kind in ("add", "sub"):
        more = " more" if op.kind == "add" else ""
        return f"{p} {op.verb} {op.k}{more}, so {p.lower()} has {c} {u}."
    if op.kind == "mul":
        return f"The number is multiplied by {op.k}, which gives {c} {u}."
    return f"One of the {op.k} groups holds {c} {u}."


def fast_labels(problem: Problem, steps: Sequence[str], shown: Sequence[bool],
                final: Fraction | int) -> list[int]:
    """The gold labels of a :class:`StepPolicy` solution from its values, equal to
    :func:`prmkit.world.problems.gold_labels` of its text; a hidden step claims nothing, so it keeps the
    label before it and is never the first error."""
    values, at, ok, labels = problem.values, 0, True, []
    x: Fraction | int = problem.start
    for i, show in enumerate(shown):
        y = _stated(steps[i])
        if ok and show:
            exact = apply(_written_op(steps[i]), Fraction(x), problem.ops[i].k)
            later = [j for j in range(at, len(values)) if values[j] == y]
            ok = abs(float(exact) - float(y)) <= 0.006 and bool(later)
            at = later[0] if ok else at
        labels.append(int(ok))
        x = y
    ok = ok and Fraction(number(final)) == problem.answer
    return labels + [int(ok)]


def stated_labels(problem: Problem, steps: Sequence[str]) -> list[int]:
    """Exact labels that also check stated values: :func:`prmkit.world.problems.gold_labels`, except
    that a step that claims nothing checkable there (a result stated without its calculation)
    is checked on the result it states, as the result of a calculation is: right when it is a
    true value at or after where the solution stands. A hidden slip or a hidden wrong operator
    is then the wrong step itself, not the next shown one; every step after the first wrong
    one is 0."""
    values, answer = problem.values, problem.answer
    labels, ok, at = [], True, 0
    for step in steps:
        if ok:
            verdict, at = check_step(step, values, answer, at)
            if verdict is None and _NUMBER.search(step):
                later = [j for j in range(at, len(values)) if values[j] == _stated(step)]
                verdict, at = bool(later), (later[0] if later else at)
            ok = verdict is not False
        labels.append(int(ok))
    return labels


class StatedGoldPRM:
    """The gold PRM of ``prmkit lab rl``'s gold arms: :func:`stated_labels` as step scores (1.0
    right, 0.0 wrong), through the PRM protocol."""

    def __init__(self) -> None:
        self._problems: dict[str, Problem] = {}

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        out: list[list[float | None]] = []
        for text, sol in zip(problems, steps):
            if text not in self._problems:
                self._problems[text] = load_problem(text)
            out.append([float(x) for x in stated_labels(self._problems[text], sol)])
        return out


_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _stated(step: str) -> Fraction:
    """The last number a step states (its result)."""
    return Fraction(_NUMBER.findall(step)[-1])


def _written_op(step: str) -> str:
    for name, sym in (("add", " + "), ("sub", " - "), ("mul", " * "), ("div", " / ")):
        if sym in step:
            return name
    raise ValueError(f"no operator in {step!r}")


def true_op(c: int) -> str:
    """The operator that sentence kind ``c`` names."""
    kind = KINDS[c]
    if kind in ("buys", "finds", "gets"):
        return "add"
    if kind in ("gives away", "loses", "sells"):
        return "sub"
    return kind


def _draw(p: np.ndarray, rng: random.Random) -> int:
    u, acc = rng.random(), 0.0
    for k, q in enumerate(p):
        acc += q
        if u < acc:
            return k
    return len(p) - 1


def _slip(rng: random.Random, y: Fraction) -> Fraction:
    """A wrong result near ``y`` (the lab policy's slips: off by 1, 2 or 10)."""
    while True:
        wrong = y + rng.choice((-10, -2, -1, 1, 2, 10))
        if wrong != y and (wrong > 0 or y <= -10):
            return wrong
