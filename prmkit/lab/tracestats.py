"""Best-of-N picks and their trace error, per problem, with paired bootstrap intervals.

Uesato et al. 2022: a verifier's final-answer error and its trace error, the fraction of
right-answer picks that hold a wrong step. Each problem's pick is drawn ``draws`` times from
random subsets of N of its candidates, the same subsets for every verifier. The trace error
is summed over problems as a ratio; its paired interval resamples problems and recomputes both
ratios (:func:`ratio_difference`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from prmkit.evaluate.paired import Claim, paired_difference
from prmkit.records import Record


@dataclass
class PerProblem:
    """A verifier's best-of-N picks on each problem, averaged over the draws: ``right`` the
    share of draws whose pick has the right answer, ``flawed`` the share whose pick has the
    right answer and a wrong step."""

    right: dict[str, float]
    flawed: dict[str, float]

    def final_error(self) -> float:
        """Percent of picks with a wrong answer."""
        return 100.0 * (1.0 - sum(self.right.values()) / len(self.right))

    def trace_error(self) -> float | None:
        """Percent of right-answer picks with a wrong step (None without a right pick)."""
        right = sum(self.right.values())
        return None if right == 0 else 100.0 * sum(self.flawed.values()) / right


def subsets(groups: Mapping[str, int], n: int, draws: int, seed: int) -> dict[str, np.ndarray]:
    """For each problem with at least ``n`` candidates, ``draws`` random subsets of ``n`` of
    its candidate positions (one row each); a problem with exactly ``n`` has one draw."""
    rng = np.random.default_rng(seed)
    out = {}
    for g in sorted(groups):
        size = groups[g]
        if size < n:
            continue
        if size == n:
            out[g] = np.arange(n)[None, :]
        else:
            out[g] = np.stack([rng.choice(size, n, replace=False) for _ in range(draws)])
    return out


def picks(records: Sequence[Record], score: Callable[[Record], float], flawed: Callable[[Record], bool],
          draws: Mapping[str, np.ndarray]) -> PerProblem:
    """Each problem's pick in each draw: its highest-scored candidate (ties: the first in the
    problem's order). ``flawed(r)``: whether candidate ``r`` holds a wrong step."""
    by_group: dict[str, list[Record]] = {}
    for r in records:
        by_group.setdefault(r.group or r.id, []).append(r)
    right, bad = {}, {}
    for g, rows in draws.items():
        cands = by_group[g]
        s = np.array([score(r) for r in cands])
        ok = np.array([bool(r.is_correct) for r in cands])
        wrong_step = np.array([bool(r.is_correct) and flawed(r) for r in cands])
        chosen = [row[int(np.argmax(s[row]))] for row in draws[g]]
        right[g] = float(np.mean(ok[chosen]))
        bad[g] = float(np.mean(wrong_step[chosen]))
    return PerProblem(right, bad)


def ratio_difference(a: PerProblem, b: PerProblem, bootstrap: int = 10000,
                     seed: int = 0) -> Claim:
    """Trace error of ``a`` minus that of ``b``, in points, with the paired percentile
    bootstrap over problems (resamples where either has no right pick are left out). Holds
    when the interval is above 0 (``a`` leaves more trace errors than ``b``)."""
    common = sorted(set(a.right) & set(b.right))
    cols = np.array([[a.flawed[k], a.right[k], b.flawed[k], b.right[k]] for k in common])
    idx = np.random.default_rng(seed).integers(0, len(common), size=(bootstrap, len(common)))
    sums = cols[idx].sum(axis=1)
    ok = (sums[:, 1] > 0) & (sums[:, 3] > 0)
    diffs = 100.0 * (sums[ok, 0] / sums[ok, 1] - sums[ok, 2] / sums[ok, 3])
    total = cols.sum(axis=0)
    point = 100.0 * (total[0] / total[1] - total[2] / total[3]) if total[1] and total[3] else 0.0
    lo = round(float(np.percentile(diffs, 2.5)), 3) if len(diffs) else 0.0
    hi = round(float(np.percentile(diffs, 97.5)), 3) if len(diffs) else 0.0
    return Claim(holds=bool(lo > 0), difference=round(float(point), 3), ci95=[lo, hi],
                 problems=len(common))


def equivalent(a: Mapping[str, float], b: Mapping[str, float], margin: float,
               seed: int = 0) -> Claim:
    """``a - b`` in points, paired over problems; holds when the whole 95% interval lies
    within ``margin`` points of 0 (an equivalence claim: "similar", not "not shown different")."""
    c = paired_difference(a, b, seed=seed)
    c.holds = bool(-margin < c.ci95[0] and c.ci95[1] < margin)
    return c
