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

from prmkit.lab import stats
from prmkit.lab.stats import Claim
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


def grouped(records: Sequence[Record]) -> dict[str, list[Record]]:
    """The candidates of each problem (its group, else the record's id), in input order."""
    out: dict[str, list[Record]] = {}
    for r in records:
        out.setdefault(r.group or r.id, []).append(r)
    return out


def picks(records: Sequence[Record], score: Callable[[Record], float], flawed: Callable[[Record], bool],
          draws: Mapping[str, np.ndarray]) -> PerProblem:
    """Each problem's pick in each draw: its highest-scored candidate (ties: the first in the
    problem's order). ``flawed(r)``: whether candidate ``r`` holds a wrong step."""
    by_group = grouped(records)
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


def majority_picks(records: Sequence[Record], flawed: Callable[[Record], bool],
                   draws: Mapping[str, np.ndarray]) -> PerProblem:
    """Majority voting's picks in each draw: the answer most of the drawn candidates give
    (ties: the one met first in the draw's random order), and of its candidates the first in
    that order. An unanswered candidate does not vote."""
    from prmkit.select import vote_key

    by_group = grouped(records)
    right, bad = {}, {}
    for g, rows in draws.items():
        cands = by_group[g]
        keys = [vote_key(r) for r in cands]
        hits = []
        for row in rows:
            votes: dict[str, int] = {}
            for i in row:
                if keys[i] is not None:
                    votes[keys[i]] = votes.get(keys[i], 0) + 1
            top = max(votes.values(), default=0)
            pick = next((int(i) for i in row if keys[i] is not None and votes[keys[i]] == top),
                        int(row[0]))
            hits.append(pick)
        right[g] = float(np.mean([bool(cands[i].is_correct) for i in hits]))
        bad[g] = float(np.mean([bool(cands[i].is_correct) and flawed(cands[i]) for i in hits]))
    return PerProblem(right, bad)


def trace_interval(per: PerProblem, level: float = 0.95) -> list[float]:
    """A verifier's trace error interval (points): Wilson's, on the flawed picks among the right
    picks counted in problems (each problem's shares over its draws summed), so that 0 flawed
    picks still give an upper end above 0."""
    lo, hi = stats.wilson(sum(per.flawed.values()), sum(per.right.values()), level)
    return [round(100 * lo, 3), round(100 * hi, 3)]


def newcombe(a: PerProblem, b: PerProblem, level: float = 0.95) -> list[float]:
    """Newcombe's (1998, method 10) hybrid score interval for the difference of the two trace
    errors (points), from each one's Wilson interval: for counts of 0, where a bootstrap has
    nothing to resample. It ignores the pairing, so it is wider than a paired interval."""
    ka, na = sum(a.flawed.values()), sum(a.right.values())
    kb, nb = sum(b.flawed.values()), sum(b.right.values())
    pa, pb = ka / na, kb / nb
    (la, ua), (lb, ub) = stats.wilson(ka, na, level), stats.wilson(kb, nb, level)
    d = pa - pb
    lo = d - ((pa - la) ** 2 + (ub - pb) ** 2) ** 0.5
    hi = d + ((ua - pa) ** 2 + (pb - lb) ** 2) ** 0.5
    return [round(100 * lo, 3), round(100 * hi, 3)]


def ratio_difference(a: PerProblem, b: PerProblem, bootstrap: int = 10000,
                     seed: int = 0) -> Claim:
    """Trace error of ``a`` minus that of ``b``, in points, with the paired percentile
    bootstrap over problems (resamples where either has no right pick are left out); when
    either has no flawed pick at all, Newcombe's interval (:func:`newcombe`) instead. Holds
    when the interval is above 0 (``a`` leaves more trace errors than ``b``)."""
    common = sorted(set(a.right) & set(b.right))
    cols = np.array([[a.flawed[k], a.right[k], b.flawed[k], b.right[k]] for k in common])
    point, ci, _ = stats.ratio_difference(cols, bootstrap, seed)
    total = cols.sum(axis=0)
    if total[1] > 0 and total[3] > 0 and (total[0] == 0 or total[2] == 0):
        ci = newcombe(PerProblem({k: a.right[k] for k in common}, {k: a.flawed[k] for k in common}),
                      PerProblem({k: b.right[k] for k in common}, {k: b.flawed[k] for k in common}))
    ci = list(stats.cover(point, *ci))     # a ratio's percentile interval can miss its point
    return Claim(holds=bool(ci[0] > 0), difference=point, ci95=ci, problems=len(common))


def equivalent(a: Mapping[str, float], b: Mapping[str, float], margin: float,
               level: float = 0.90, seed: int = 0) -> Claim:
    """``a - b`` in points, paired over problems; holds when the whole central ``level``
    interval lies within ``margin`` points of 0: two one-sided tests at 5% each when ``level``
    is 0.90 (Schuirmann 1987), an equivalence claim ("similar", not "not shown different")."""
    c = stats.paired(a, b, level=level, seed=seed)
    c.holds = bool(-margin < c.ci95[0] and c.ci95[1] < margin)
    return c
