"""Turn a solution's step scores into one score.

A PRM scores every step, but best-of-N selection, weighted voting and search need one number
per solution. These are the usual ways to get it:

``prod``
    The product of the step scores: the probability that every step is correct, if the steps'
    scores were independent. Lightman et al. 2023, "Let's Verify Step by Step" (PRM800K), rank
    solutions by it. Computed in log space (a sum of logs, then ``exp``); a zero score gives 0.
``min``
    The lowest step score: a solution is as good as its worst step. Lightman et al. 2023
    compare it with the product; Wang et al. 2023, "Math-Shepherd", use it as their main rule.
``last``
    The score of the last step. For PRMs trained on Monte Carlo labels the last step's score
    estimates the chance the whole solution reaches the right answer (Snell et al. 2024,
    "Scaling LLM Test-Time Compute Optimally", use it with search).
``mean``
    The arithmetic mean of the step scores.
``geomean``
    The geometric mean: the product, normalised by length, so long solutions are not punished
    for having more steps. Computed in log space; a zero score gives 0.

Null scores. ``Record.step_scores`` may hold ``None`` for a step that could not be scored (for
example because the solution was longer than the model's context). Every rule here uses one
rule for them: **nulls are dropped, then the rule is applied to what remains.** So ``last`` is
the score of the last *scored* step: a truncated solution is judged by the furthest step the
model saw. An empty list, or one where every score is null, raises
:class:`~prmkit.errors.PrmkitError`, since there is nothing to aggregate.

``prod`` and ``geomean`` need non-negative scores (probabilities); a negative score (from a raw
value head, say) raises :class:`~prmkit.errors.PrmkitError`. Use ``min``, ``last`` or ``mean``
for those.
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
