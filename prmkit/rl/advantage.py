"""Group advantages that put a PRM's step scores on the steps that earned them.

Made from a whole GRPO group at once (each completion's step scores ``s_i0 .. s_i(K_i - 1)``)
and returned per step; every token of step k takes step k's value (:func:`spread`).

``process``     DeepSeekMath's process-supervised GRPO (Shao et al. 2024, section 4.1.3): the
                group's step rewards normalised together, r~ = (r - mean(R)) / std(R)
                (population std; all equal: 0); a token's advantage is the sum of r~ over the
                steps ending at or after it, 0 after the last step. A right step before a
                wrong one carries the wrong one's negative reward too.
``step-local``  GRPO's outcome advantage A_i plus ``weight * (s_k - s_(k-1))`` on step k
                (s_(-1) = 0): the difference of :mod:`prmkit.rl.shaping`'s ``delta``, not
                summed, so a step is credited only for the change it caused. Tokens after the
                last step keep A_i.

:func:`outcome_advantages` is GRPO's (o_i - mean(o)) / std(o) (sample std, as TRL; all equal:
0); :func:`returns_advantages` gives the shapings raw, delta and min in the same form.
"""

from __future__ import annotations

import math
from typing import Sequence

from prmkit.errors import PrmkitError

GROUP_FORMS = ("process", "step-local")


def outcome_advantages(outcomes: Sequence[float]) -> list[float]:
    """GRPO's advantage of each completion: its outcome minus the group's mean, over the
    group's sample standard deviation (0 for every completion when all outcomes are equal)."""
    n = len(outcomes)
    if n == 0:
        return []
    mean = math.fsum(outcomes) / n
    var = math.fsum((o - mean) ** 2 for o in outcomes) / max(1, n - 1)
    if var <= 1e-12:
        return [0.0] * n
    sd = math.sqrt(var)
    return [(o - mean) / sd for o in outcomes]


def group_stats(group: Sequence[Sequence[float]]) -> tuple[float, float]:
    """(mean, population std) of every step score of every completion in the group."""
    flat = [float(x) for row in group for x in row]
    if not flat:
        return 0.0, 0.0
    mean = math.fsum(flat) / len(flat)
    return mean, math.sqrt(math.fsum((x - mean) ** 2 for x in flat) / len(flat))


def normalised_returns(scores: Sequence[float], mean: float, std: float) -> list[float]:
    """One completion's process advantage per step: the sum of r~_j = (s_j - mean) / std over
    the steps j >= k (all 0 when ``std`` is 0)."""
    if std <= 1e-12:
        return [0.0] * len(scores)
    out, total = [], 0.0
    for s in reversed(scores):
        total += (float(s) - mean) / std
        out.append(total)
    return out[::-1]


def process_supervision(group: Sequence[Sequence[float]]) -> list[list[float]]:
    """DeepSeekMath's process advantages of a group, per step of each completion."""
    mean, std = group_stats(group)
    return [normalised_returns(row, mean, std) for row in group]


def local_deltas(scores: Sequence[float], weight: float = 1.0) -> list[float]:
    """``weight * (s_k - s_(k-1))`` for each step k, with s_(-1) = 0."""
    prev, out = 0.0, []
    for s in scores:
        out.append(weight * (float(s) - prev))
        prev = float(s)
    return out


def step_local(outcome_adv: Sequence[float], group: Sequence[Sequence[float]],
               weight: float = 1.0) -> list[list[float]]:
    """The step-local advantages of a group, per step: A_i + weight * (s_k - s_(k-1))."""
    if len(outcome_adv) != len(group):
        raise PrmkitError(f"{len(outcome_adv)} outcome advantages for a group of {len(group)}")
    return [[a + d for d in local_deltas(row, weight)] for a, row in zip(outcome_adv, group)]


def group_advantages(form: str, outcomes: Sequence[float], group: Sequence[Sequence[float]],
                     weight: float = 1.0) -> list[list[float]]:
    """Per-step advantages of a group by ``form`` (``process`` ignores ``outcomes``; for it,
    ``weight`` scales the whole advantage)."""
    if form == "process":
        return [[weight * a for a in row] for row in process_supervision(group)]
    if form == "step-local":
        return step_local(outcome_advantages(outcomes), group, weight)
    raise PrmkitError(f"unknown group advantage {form!r} (known: {', '.join(GROUP_FORMS)})")


def returns_advantages(group: Sequence[Sequence[float]], how: str) -> list[list[float]]:
    """The shapings of :mod:`prmkit.rl.shaping` (raw, delta, min) as group advantages: the
    returns-to-go of ``shape(s, how)`` minus the group's mean return at step 0, per step."""
    from prmkit.rl.shaping import returns, shape

    rets = [returns(shape(row, how)) for row in group]
    starts = [r[0] for r in rets if r]
    base = math.fsum(starts) / len(starts) if starts else 0.0
    return [[g - base for g in r] for r in rets]


def spread(step_values: Sequence[float], end_tokens: Sequence[int | None], n_tokens: int,
           after: float = 0.0) -> list[float]:
    """Per-token values: token t takes the value of the first step whose end token is at or
    after t; tokens after the last step's end take ``after``. A step with no token (None: past
    a cut) gives its value to no token."""
    if len(step_values) != len(end_tokens):
        raise PrmkitError(f"{len(step_values)} step values for {len(end_tokens)} steps")
    out = [after] * n_tokens
    start = 0
    for v, end in zip(step_values, end_tokens):
        if end is None:
            break
        for t in range(start, min(end + 1, n_tokens)):
            out[t] = v
        start = max(start, end + 1)
    return out
