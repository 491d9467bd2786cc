"""A trained PRM that fits a CPU budget: a hazard head on a step's word n-grams and the
calculator's notes, fitted to Monte Carlo step labels (Math-Shepherd, Wang et al. 2024).

* **Input** of step k: its text with the calculator's notes (:func:`prmkit.calculator.annotate`),
  lower-cased, numbers as ``<num>`` (``<dec>``, ``<neg>``), cut into words and symbols; the
  features are which vocabulary unigrams and bigrams occur (those seen ``min_count`` times).
* **Head**: ``h_k = sigmoid(b + w . x_k)`` = P(step k right | every step before it right); the
  step's score is ``prod_{j <= k} h_j``.
* **Training**: L2-regularised logistic regression by Newton's method
  (:func:`prmkit.evaluate.heuristic.fit_logistic`) on every step up to and including each
  candidate's first step labelled 0.

docs/lab-compute-optimal.md says why the experiment uses it and what it cannot learn.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from prmkit.calculator import annotate
from prmkit.errors import PrmkitError
from prmkit.evaluate.heuristic import fit_logistic
from prmkit.records import Record

_NUMBER = re.compile(r"(?<![\w.])(-?)\d+(\.\d+)?")
_TOKEN = re.compile(r"<num>|<dec>|<neg>|\[calculator:|[a-z]+|[+\-*/=:]")


def words(step: str) -> list[str]:
    """The words and symbols the PRM reads of a step (the calculator's note included)."""
    text = annotate(step).lower()
    text = _NUMBER.sub(lambda m: "<neg>" if m.group(1) else "<dec>" if m.group(2) else "<num>",
                       text)
    return _TOKEN.findall(text)


def ngrams(step: str) -> set[str]:
    """The step's unigrams and bigrams."""
    w = words(step)
    return set(w) | {f"{a} {b}" for a, b in zip(w, w[1:])}


@dataclass
class NgramPRM:
    """A fitted hazard head on n-grams; ``score`` follows the PRM protocol."""

    vocab: list[str]
    weights: list[float]          # bias first, then one weight per vocabulary entry
    fitted_on_steps: int = 0
    cache: dict[str, float] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.weights) != len(self.vocab) + 1:
            raise PrmkitError(f"n-gram PRM: {len(self.weights)} weights for a vocabulary of "
                              f"{len(self.vocab)} (want one more, the bias)")
        self.index = {g: i for i, g in enumerate(self.vocab)}

    def hazard(self, step: str) -> float:
        """P(this step is right | the steps before it are right); cached by the step's text."""
        h = self.cache.get(step)
        if h is None:
            z = self.weights[0] + sum(self.weights[1 + self.index[g]] for g in ngrams(step)
                                      if g in self.index)
            h = 1.0 / (1.0 + math.exp(-max(-50.0, min(50.0, z))))
            self.cache[step] = h
        return h

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]
              ) -> list[list[float | None]]:
        out: list[list[float | None]] = []
        for sol in steps:
            row, alive = [], 1.0
            for step in sol:
                alive *= self.hazard(step)
                row.append(alive)
            out.append(row)
        return out

    def to_dict(self) -> dict[str, object]:
        return {"kind": "lab-ngram-hazard", "vocab": self.vocab, "weights": self.weights,
                "fitted_on_steps": self.fitted_on_steps}

    def save(self, path: str) -> None:
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.to_dict(), f)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> "NgramPRM":
        try:
            with open(path, encoding="utf-8") as f:
                d = json.load(f)
            return cls(list(d["vocab"]), [float(x) for x in d["weights"]],
                       int(d.get("fitted_on_steps", 0)))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise PrmkitError(f"{path}: not an n-gram PRM ({e})") from None


def hazard_examples(records: Sequence[Record]) -> tuple[list[str], list[float]]:
    """The steps a hazard head learns from, with their targets: every step up to and
    including a record's first step labelled below 0.5 (1 before it, 0 at it)."""
    steps, targets = [], []
    for r in records:
        if r.labels is None:
            raise PrmkitError(f"record {r.id!r} has no step labels to train the n-gram PRM on")
        for step, label in zip(r.steps, r.labels):
            if label is None:
                break
            steps.append(step)
            targets.append(1.0 if label >= 0.5 else 0.0)
            if label < 0.5:
                break
    return steps, targets


def fit_ngram_prm(records: Sequence[Record], min_count: int = 2, l2: float = 1.0) -> NgramPRM:
    """Fit the hazard head on labelled records."""
    steps, targets = hazard_examples(records)
    if len(set(targets)) < 2:
        raise PrmkitError("cannot fit the n-gram PRM: the labels need right and wrong steps")
    grams = [ngrams(s) for s in steps]
    counts = Counter(g for row in grams for g in row)
    vocab = sorted(g for g, c in counts.items() if c >= min_count)
    index = {g: i for i, g in enumerate(vocab)}
    x = np.zeros((len(steps), len(vocab)))
    for i, row in enumerate(grams):
        for g in row:
            if g in index:
                x[i, index[g]] = 1.0
    w = fit_logistic(x, np.array(targets), l2=l2, iterations=50)
    return NgramPRM(vocab, [float(v) for v in w], len(steps))
