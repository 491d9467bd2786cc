"""Group advantages that put a PRM's step scores on the steps that earned them.

The shapings of :mod:`prmkit.rl.shaping` turn one completion's step scores into rewards whose
returns-to-go a trainer centres by a group baseline. The two forms here are advantages made
from a whole GRPO group at once (each completion's step scores ``s_i0 .. s_i(K_i - 1)``),
returned per step: every token of step k (the tokens after step k-1's end, up to and with
step k's end) takes the value of step k (:func:`spread` places them on a policy's tokens).

``process``     DeepSeekMath's process-supervised GRPO (Shao et al. 2024, "DeepSeekMath:
                Pushing the Limits of Mathematical Reasoning in Open Language Models",
                section 4.1.3). The step rewards of the whole group are normalised together,
                r~ = (r - mean(R)) / std(R) (population std over every step of every
                completion; all equal: every r~ is 0), and a token's advantage is the sum of
                the normalised rewards of the steps that end at or after it. Tokens after the
                last step get 0. Credit flows back: a right step before a wrong one carries the
                wrong one's negative reward too.
``step-local``  The outcome advantage A_i (GRPO's, one number per completion) plus
                ``weight * (s_k - s_(k-1))`` on step k, with s_(-1) = 0: the potential-based
                difference of :mod:`prmkit.rl.shaping`'s ``delta``, not summed to go, so a
                step is credited only for the change in the PRM's opinion it caused itself.
                Tokens after the last step keep A_i.

:func:`outcome_advantages` is GRPO's outcome advantage, (o_i - mean(o)) / std(o) over the
group (sample std, as TRL; all equal: 0). :func:`returns_advantages` gives today's shapings
(raw, delta, min) as the same per-step group advantages, to set beside these two.
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
    """Today's shapings as group advantages: the returns-to-go of ``shape(s, how)`` (raw,
    delta, min; :mod:`prmkit.rl.shaping`) minus the group's mean return at step 0, per step
    (what the GRPO trainer puts on each step's tokens)."""
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
