"""The gold PRM of the lab world: step scores that are the exact step labels.

An upper bound for every learned PRM, and the oracle that search and labeling tests and
benchmarks compare against: ``GoldPRM().score(problems, steps)`` gives 1.0 for a right step and
0.0 for a wrong one (:func:`prmkit.world.problems.gold_labels`), through the ordinary
:class:`prmkit.models.base.PRM` protocol. ``noise`` blurs it into a realistic imperfect PRM: each
score moves towards the wrong side by a uniform draw up to ``noise``, seeded by the text.
"""

from __future__ import annotations

import hashlib
import random
from typing import Sequence

from prmkit.world.problems import gold_labels


class GoldPRM:
    """Scores lab solutions with their exact labels (optionally blurred by ``noise``)."""

    def __init__(self, noise: float = 0.0):
        self.noise = noise

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        out = []
        for problem, sol in zip(problems, steps):
            labels = gold_labels(problem, sol)
            row = []
            for i, label in enumerate(labels):
                value = float(label)
                if self.noise:
                    key = hashlib.sha256(f"{problem}\x00{i}\x00{sol[i]}".encode()).digest()
                    shift = random.Random(key).uniform(0, self.noise)
                    value = value - shift if label else value + shift
                row.append(value)
            out.append(row)
        return out
