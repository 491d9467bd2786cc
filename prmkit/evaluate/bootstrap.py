"""The bootstrap, prmkit's one (Efron and Tibshirani 1993, "An Introduction to the Bootstrap",
ch. 13, the percentile interval): resample the n items (problems, seeds) with replacement and
recompute the statistic on each resample. Every interval in ``evaluate`` and the lab draws its
resamples here, so one seed gives the same resamples everywhere.

* :func:`resamples`: ``draws`` resamples of ``n`` indices, one row each, from a generator (the
  rows are drawn in order, as ``draws`` calls of ``rng.integers(0, n, n)`` would draw them);
* :func:`bootstrap_means`: the mean of each resample of ``values``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def resamples(n: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """``(draws, n)`` indices into ``n`` items, each row one resample with replacement."""
    return rng.integers(0, n, size=(draws, n))


def bootstrap_means(values: Sequence[float] | np.ndarray, draws: int, seed: int) -> np.ndarray:
    """The mean of ``values`` on each of ``draws`` resamples (seeded by ``seed``)."""
    v = np.asarray(values, dtype=float)
    return v[resamples(len(v), draws, np.random.default_rng(seed))].mean(axis=1)
