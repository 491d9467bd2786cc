"""The ProcessBench threshold: the one that maximises first-error F1 on a split. Used by the
ProcessBench evaluation (``--calibrate-on``) and by the position/length heuristic's fit."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from prmkit.errors import PrmkitError


def calibrate_threshold(labels: Sequence[int], scores: Sequence[Sequence[float | None]],
                        ) -> tuple[float, float | None]:
    """The threshold that maximises F1 on one split, and that F1 (see :mod:`prmkit.evaluate.processbench`).

    Each sample is predicted right for the thresholds in an interval ``(lo, hi]``: a sample
    with an error at L needs ``score[L] < t <= min(score[:L])``; a correct one needs
    ``t <= min(scores)``. Counting, for each candidate, the intervals that hold it gives F1.
    """
    values = sorted({s for row in scores for s in row if s is not None})
    if not values:
        raise PrmkitError("cannot calibrate a threshold: the split has no step scores")
    cands = np.array([values[0]] + [(a + b) / 2 for a, b in zip(values, values[1:])]
                     + [float(np.nextafter(values[-1], np.inf))])
    lo_e, hi_e, hi_c = [], [], []
    for y, row in zip(labels, scores):
        clean = [math.inf if s is None else s for s in row]
        if y == -1:
            hi_c.append(min(clean))
        else:
            lo_e.append(clean[y])  # a null score at the error never flags it
            hi_e.append(min(clean[:y]) if y > 0 else math.inf)
    t = cands[:, None]
    err = (((t > np.array(lo_e)) & (t <= np.array(hi_e))).mean(axis=1) * 100) if lo_e else None
    cor = ((t <= np.array(hi_c)).mean(axis=1) * 100) if hi_c else None
    if err is None or cor is None:
        raise PrmkitError("cannot calibrate a threshold: the split needs samples with an error "
                          "and samples without one")
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(err + cor > 0, 2 * err * cor / (err + cor), 0.0)
    best = int(np.argmax(f1))  # the first (lowest) of the best
    return float(cands[best]), float(f1[best])
