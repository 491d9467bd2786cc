"""Active learning: choose the solutions most worth labelling next.

Lightman et al. 2023, "Let's Verify Step by Step", section 4.1: labelling "convincing
wrong-answer" solutions (ones the current PRM rates highly but whose final answer is wrong)
made each human label count far more than labelling random samples. Such a solution must hold
a step the PRM misjudges, so its labels correct the PRM where it is most wrong.

:func:`convincing_wrong` ranks the wrong-answer candidates by their aggregated PRM score and
returns the top ``k``, at most ``per_problem`` from any one problem (Let's Verify capped the
selections per problem so a few problems cannot take the whole budget). A candidate is wrong
when ``is_correct`` is false, or, without ``is_correct``, when its ``answer`` is not equivalent
to its ``reference``. Ties: higher score, then input order.
"""

from __future__ import annotations

from typing import Sequence

from prmkit import answers
from prmkit.aggregate import aggregate
from prmkit.errors import PrmkitError
from prmkit.records import Record


def is_wrong(r: Record) -> bool | None:
    """True for a wrong final answer, None when it cannot be told."""
    if r.is_correct is not None:
        return not r.is_correct
    if r.reference is None:
        return None
    answer = r.answer if r.answer is not None else answers.extract_answer(r.steps[-1])
    return not answers.is_equivalent(answer, r.reference)


def convincing_wrong(records: Sequence[Record], k: int, how: str = "prod",
                     per_problem: int | None = None) -> list[Record]:
    """The ``k`` wrong-answer candidates the PRM rates highest (records need step_scores)."""
    if k < 1:
        raise PrmkitError(f"--k must be at least 1, got {k}")
    if per_problem is not None and per_problem < 1:
        raise PrmkitError(f"--per-problem must be at least 1, got {per_problem}")
    ranked: list[tuple[float, int, Record]] = []
    unknown = 0
    for i, r in enumerate(records):
        wrong = is_wrong(r)
        if wrong is None:
            unknown += 1
            continue
        if not wrong:
            continue
        if r.step_scores is None:
            raise PrmkitError(f"record {r.id!r}: no step_scores (score it first, or pass --model)")
        ranked.append((aggregate(r.step_scores, how), i, r))
    if unknown == len(records) and records:
        raise PrmkitError("no record says whether its answer is right: each needs is_correct, "
                          "or answer (or a last step with one) and reference")
    ranked.sort(key=lambda t: (-t[0], t[1]))
    chosen: list[Record] = []
    taken: dict[str, int] = {}
    for score, _, r in ranked:
        problem = r.group or r.problem
        if per_problem is not None and taken.get(problem, 0) >= per_problem:
            continue
        taken[problem] = taken.get(problem, 0) + 1
        r.meta["selection_score"] = score
        chosen.append(r)
        if len(chosen) == k:
            break
    return chosen
