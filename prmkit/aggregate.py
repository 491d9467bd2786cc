"""Turn a solution's step scores into one score (best-of-N, weighted voting, search).

``prod``
    The product: the chance every step is correct if the scores were independent (Lightman et
    al. 2023, "Let's Verify Step by Step"). Computed in log space; a zero score gives 0.
``min``
    The lowest step score (Lightman et al. 2023; Wang et al. 2023, "Math-Shepherd").
``last``
    The last step's score; for PRMs trained on Monte Carlo labels, the chance the solution
    reaches the right answer (Snell et al. 2024 use it with search).
``mean``
    The arithmetic mean.
``geomean``
    The geometric mean: the product normalised by length. Log space; a zero score gives 0.

Null scores (steps that could not be scored) are dropped first, so ``last`` is the last
*scored* step; nothing left raises :class:`~prmkit.errors.PrmkitError`. ``prod`` and ``geomean``
refuse negative scores (a raw value head's): use ``min``, ``last`` or ``mean`` for those.
"""

from __future__ import annotations

import math
from typing import Callable

from prmkit.errors import PrmkitError


def _prod(scores: list[float]) -> float:
    """exp(sum of logs): no intermediate underflow or overflow; 0 if any score is 0."""
    _require_non_negative(scores, "prod")
    if any(s == 0.0 for s in scores):
        return 0.0
    return math.exp(math.fsum(math.log(s) for s in scores))


def _min(scores: list[float]) -> float:
    return min(scores)


def _last(scores: list[float]) -> float:
    return scores[-1]


def _mean(scores: list[float]) -> float:
    return math.fsum(scores) / len(scores)


def _geomean(scores: list[float]) -> float:
    """exp(mean of logs); 0 if any score is 0."""
    _require_non_negative(scores, "geomean")
    if any(s == 0.0 for s in scores):
        return 0.0
    return math.exp(math.fsum(math.log(s) for s in scores) / len(scores))


AGGREGATES: dict[str, Callable[[list[float]], float]] = {
    "prod": _prod,
    "min": _min,
    "last": _last,
    "mean": _mean,
    "geomean": _geomean,
}


def aggregate(scores: list[float | None], how: str) -> float:
    """One score for a solution from its step scores.

    ``how`` is one of :data:`AGGREGATES` (``prod``, ``min``, ``last``, ``mean``, ``geomean``).
    Null scores are dropped first (see the module docstring). Raises
    :class:`~prmkit.errors.PrmkitError` for an unknown ``how``, an empty list, a list of only
    nulls, a score that is not a finite number, or a negative score given to ``prod`` or
    ``geomean``.

    >>> round(aggregate([0.97, 0.93, 0.95, 0.94], "prod"), 3)
    0.806
    >>> aggregate([0.9, None, 0.5, None], "last")
    0.5
    """
    if how not in AGGREGATES:
        raise PrmkitError(f"unknown aggregate {how!r} (known: {', '.join(AGGREGATES)})")
    if not scores:
        raise PrmkitError(f"cannot aggregate an empty list of step scores with {how!r}")
    kept: list[float] = []
    for i, s in enumerate(scores):
        if s is None:
            continue
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not math.isfinite(s):
            raise PrmkitError(f"step score {i} is {s!r}, expected a finite number or null")
        kept.append(float(s))
    if not kept:
        raise PrmkitError(f"cannot aggregate with {how!r}: all {len(scores)} step scores are "
                          f"null (no step was scored)")
    return AGGREGATES[how](kept)


def _require_non_negative(scores: list[float], how: str) -> None:
    for s in scores:
        if s < 0.0:
            raise PrmkitError(f"{how!r} needs non-negative step scores (probabilities), got "
                              f"{s}; use 'min', 'last' or 'mean' for raw values")
