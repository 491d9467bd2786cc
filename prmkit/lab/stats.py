"""The lab's statistics, shared by every experiment: claims, intervals, the summary file.

* :class:`Claim` and :func:`paired_difference` (:mod:`prmkit.evaluate.paired`): a paired
  difference over problems with its percentile-bootstrap interval (Efron and Tibshirani 1993,
  ch. 13); :func:`paired` is the same at any level.
* :func:`ratio_difference`: the difference of two ratios of sums (a trace error: flawed picks
  over right picks), resampling the problems and recomputing both ratios.
* :func:`percentile_interval` and :func:`cover`: a bootstrap's interval, widened where it must
  be to hold its point estimate.
* :func:`wilson` (Wilson 1927) and :func:`clopper_pearson` (Clopper and Pearson 1934): intervals
  for a count of k in n. A percentile bootstrap over counts that are all 0 gives [0, 0]; these
  do not (0 of 100 at 95%: Wilson [0, 3.70%], Clopper-Pearson [0, 3.62%]).
* :func:`holm` (Holm 1979): which of several hypotheses a step-down test rejects at a
  family-wise level; :func:`holm_draws`: non-inferiority tests read from bootstrap draws, each
  at its Holm level; :func:`paired_holm`: the same for paired claims over problems.
* :func:`write_summary` (atomic ``summary.json``), :func:`verdict` and :func:`print_rows`.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Mapping, Sequence

import numpy as np

from prmkit.evaluate.bootstrap import bootstrap_means, resamples
from prmkit.evaluate.paired import Claim, paired_difference

__all__ = ["Claim", "paired_difference", "paired", "ratio_difference", "percentile_interval",
           "cover", "wilson", "clopper_pearson", "holm", "holm_draws", "paired_holm", "write_summary", "verdict",
           "print_rows"]


def percentile_interval(values: Sequence[float], level: float = 0.95,
                        digits: int = 3) -> list[float]:
    """The central ``level`` percentile interval of ``values``, rounded as verdicts read it
    ([0, 0] when there are none)."""
    if len(values) == 0:
        return [0.0, 0.0]
    tail = 100.0 * (1.0 - level) / 2.0
    return [round(float(np.percentile(values, tail)), digits),
            round(float(np.percentile(values, 100.0 - tail)), digits)]


def cover(x: float, lo: float, hi: float) -> tuple[float, float]:
    """An interval widened, where it must be, to hold its own point estimate (a ratio's
    percentile interval can miss it); never narrowed."""
    return min(lo, x), max(hi, x)


def paired(a: Mapping[str, float], b: Mapping[str, float], level: float = 0.95,
           margin: float = 0.0, bootstrap: int = 10000, seed: int = 0) -> Claim:
    """``a - b`` in points (values in 0..1) over the problems both have, with the central
    ``level`` paired percentile-bootstrap interval (stored in ``ci95`` whatever the level).
    At 0.95 it is :func:`paired_difference`, draw for draw."""
    if level == 0.95:
        return paired_difference(a, b, bootstrap, seed, margin)
    common = sorted(set(a) & set(b))
    d = np.array([a[k] - b[k] for k in common]) * 100.0
    means = bootstrap_means(d, bootstrap, seed)
    lo, hi = percentile_interval(means, level)
    return Claim(holds=bool(lo > -margin), difference=round(float(d.mean()), 3), ci95=[lo, hi],
                 problems=len(common))


def ratio_difference(cols: np.ndarray, bootstrap: int = 10000, seed: int = 0,
                     level: float = 0.95) -> tuple[float, list[float], int]:
    """``100 * (sum x1 / sum y1 - sum x2 / sum y2)`` for ``cols`` (problems, 4) = (x1, y1,
    x2, y2) per problem: the point estimate, the paired percentile interval (resamples with a
    zero denominator left out) and how many resamples were left out."""
    n = len(cols)
    idx = resamples(n, bootstrap, np.random.default_rng(seed))
    sums = cols[idx].sum(axis=1)
    ok = (sums[:, 1] > 0) & (sums[:, 3] > 0)
    diffs = 100.0 * (sums[ok, 0] / sums[ok, 1] - sums[ok, 2] / sums[ok, 3])
    total = cols.sum(axis=0)
    point = 100.0 * (total[0] / total[1] - total[2] / total[3]) if total[1] and total[3] else 0.0
    return round(float(point), 3), percentile_interval(diffs, level), int(bootstrap - ok.sum())


def _z(level: float) -> float:
    """The standard normal quantile at (1 + level) / 2, by bisection on erf."""
    lo, hi, p = 0.0, 10.0, (1.0 + level) / 2.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if 0.5 * (1.0 + math.erf(mid / math.sqrt(2.0))) < p else (lo, mid)
    return (lo + hi) / 2.0


def wilson(k: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """Wilson's score interval for a share of ``k`` in ``n`` (0..1); ``k`` and ``n`` may be
    fractional (picks averaged over draws). (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    z = _z(level)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p)."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 1.0 if k >= n else 0.0
    return sum(math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                        + i * math.log(p) + (n - i) * math.log1p(-p)) for i in range(k + 1))


def _solve(f: Any, target: float) -> float:
    """The p in [0, 1] where the decreasing function ``f`` crosses ``target``, by bisection."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if f(mid) > target else (lo, mid)
    return (lo + hi) / 2.0


def clopper_pearson(k: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """The exact (Clopper-Pearson) interval for ``k`` successes in ``n`` trials (0..1):
    0 of n gives [0, 1 - (alpha/2)^(1/n)]."""
    if n <= 0:
        return 0.0, 1.0
    alpha = 1.0 - level
    lo = 0.0 if k == 0 else _solve(lambda p: _binom_cdf(k - 1, n, p), 1.0 - alpha / 2)
    hi = 1.0 if k == n else _solve(lambda p: _binom_cdf(k, n, p), alpha / 2)
    return lo, hi


def holm(pvalues: Mapping[str, float], alpha: float) -> dict[str, tuple[bool, float]]:
    """Holm's step-down test (Holm 1979, "A simple sequentially rejective multiple test
    procedure"): with the m p-values sorted ascending (ties in the given order), the k-th (k = 0, 1, ...)
    is tested at ``alpha / (m - k)`` and rejected when it is at or below that and every
    smaller one was rejected. The family-wise error is at most ``alpha``. For each name:
    (rejected, the level it was tested at)."""
    order = sorted(pvalues, key=lambda k: pvalues[k])      # stable: ties keep their order
    out: dict[str, tuple[bool, float]] = {}
    going = True
    for k, name in enumerate(order):
        level = alpha / (len(order) - k)
        going = going and pvalues[name] <= level
        out[name] = (going, level)
    return out


def holm_draws(draws: Mapping[Any, Sequence[float]], margin: float, level: float = 0.95,
               digits: int = 3) -> dict[Any, dict[str, Any]]:
    """Several non-inferiority tests ``difference > -margin`` read from bootstrap draws of
    their differences, one family under :func:`holm`.

    A test's one-sided p-value is the share of its draws at or below ``-margin``; the family's
    one-sided level is ``(1 - level) / 2``, the tail a ``level`` interval leaves on each side,
    so one test alone is read as its ``level`` interval. The k-th test in Holm's order (k = 0,
    1, ... of m) is read at its central ``1 - (1 - level) / (m - k)`` interval, and holds when
    every test before it held and that interval, as written (``digits``), lies above
    ``-margin`` (at a tie of the draws, the stricter reading of ``p <= alpha_k``). For each
    name, in Holm's order: ``holds``, ``p``, ``level``, ``ci`` and ``step`` (1-based)."""
    p = {name: float(np.mean(np.asarray(d, dtype=float) <= -margin)) for name, d in draws.items()}
    out: dict[Any, dict[str, Any]] = {}
    going = True
    for step, (name, (_, alpha_k)) in enumerate(holm(p, (1.0 - level) / 2.0).items(), start=1):
        lvl = 1.0 - 2.0 * alpha_k
        ci = percentile_interval(np.asarray(draws[name], dtype=float), lvl, digits)
        going = going and ci[0] > -margin
        out[name] = {"holds": going, "p": p[name], "level": round(lvl, 6), "ci": ci, "step": step}
    return out


def paired_holm(pairs: Mapping[str, tuple[Mapping[str, float], Mapping[str, float]]],
                margin: float, level: float = 0.95, bootstrap: int = 10000, seed: int = 0,
                ) -> dict[str, dict[str, Any]]:
    """Several paired non-inferiority claims ``a - b > -margin`` (points; values in 0..1) as
    one family, :func:`holm_draws` over their paired bootstrap means (resampled as
    :func:`paired` resamples), so one claim alone is :func:`paired`'s. For each name, in
    Holm's order: ``claim`` (a :class:`Claim` whose ``holds`` is Holm's verdict and whose
    ``ci95`` is the 95% interval), and Holm's ``p_value``, ``holm_step``, ``holm_level`` and
    ``ci_holm`` (the interval at that level, which decides)."""
    draws, points = {}, {}
    for name, (a, b) in pairs.items():
        common = sorted(set(a) & set(b))
        d = np.array([a[k] - b[k] for k in common]) * 100.0
        draws[name] = bootstrap_means(d, bootstrap, seed)
        points[name] = (round(float(d.mean()), 3), len(common))
    out: dict[str, dict[str, Any]] = {}
    for name, h in holm_draws(draws, margin, level).items():
        claim = Claim(holds=h["holds"], difference=points[name][0],
                      ci95=percentile_interval(draws[name], 0.95), problems=points[name][1])
        out[name] = {"claim": claim, "p_value": round(h["p"], 5), "holm_step": h["step"],
                     "holm_level": h["level"], "ci_holm": h["ci"]}
    return out


def write_summary(out: str, doc: Mapping[str, Any], indent: int = 2) -> str:
    """``out/summary.json``, written whole (a temporary file, then renamed); its path."""
    path = os.path.join(out, "summary.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=indent)
    os.replace(tmp, path)
    return path


def verdict(c: Mapping[str, Any], unit: str = "points", level: str = "95%", digits: int = 1,
            ) -> str:
    """A claim as every summary row reads it: YES or NO, the difference and its interval (a
    ratio, ``unit="x"``, unsigned), then Holm's step, level and interval where the claim has
    them (:func:`paired_holm`, :func:`holm_draws`)."""
    lo, hi = c["ci95"]
    if unit == "x":
        text = f"{c['difference']:.{digits}f}x, {level} CI [{lo:.{digits}f}, {hi:.{digits}f}]"
    else:
        text = (f"{c['difference']:+.{digits}f} {unit}, {level} CI "
                f"[{lo:+.{digits}f}, {hi:+.{digits}f}]")
    if "problems" in c:
        text += f" over {c['problems']} problems"
    if "ci_holm" in c:
        margin = f", margin -{c['margin']:g}" if "margin" in c else ""
        text += (f"; Holm step {c['holm_step']} at {100 * c['holm_level']:g}%: "
                 f"[{c['ci_holm'][0]:+.{digits}f}, {c['ci_holm'][1]:+.{digits}f}]{margin}")
    return f"{'YES' if c['holds'] else 'NO'}: {text}"


def print_rows(title: str, rows: Sequence[tuple[str, str]]) -> None:
    """The printed summary: a title, then each row's name padded to one width and its value."""
    print(f"\n{title}")
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"  {k.ljust(width)}  {v}")
