"""Exact verification chains for lab solutions: what a verifier that sets each step against
the problem would write (``prmkit train verifier --chains lab``).

For each step up to the first wrong one, the review first copies the step as the verifier's
prompt shows it (with the calculator's notes where the verifier reads them: ``He gets 8 more,
so he has 20 + 8 = 29 [calculator: 28] apples.``), then says what the problem calls for at this
point, from the operation of its own sentence and the true quantity before it (``Gets 8 more: 20
+ 8.``; for the answer step, ``The last quantity: 28.``); the verdict follows. The reasoning comes
before the verdict, as in ThinkPRM's chains, and needs no arithmetic written out: the evidence
sits next to the verdict, where a wrong result (the calculator's note) or a wrong operation (the
step's sign against the one called for) shows. The verdicts are the gold labels
(:func:`prmkit.world.problems.gold_labels`; a step that skipped ahead to a later true value
counts as right).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Sequence

from prmkit.world.problems import SYMBOL, Problem, check_step, load_problem, number


def called_for(problem: Problem, i: int, before: int | Fraction) -> str:
    """What the problem calls for at operation ``i`` from the true quantity ``before``."""
    op = problem.ops[i]
    what = {"add": f"{op.verb} {op.k} more", "sub": f"{op.verb} {op.k}",
            "mul": f"multiplied by {op.k}", "div": f"{op.k} equal groups"}[op.kind]
    return f"{what[0].upper()}{what[1:]}: {number(before)} {SYMBOL[op.kind]} {op.k}."


def lab_reviews(problem: str, steps: Sequence[str], labels: Sequence[float],
                shown: Sequence[str] | None = None) -> list[tuple[str, bool]]:
    """``(review, correct)`` for each step up to and including the first wrong one
    (``labels``: 1 right, 0 wrong, as :func:`prmkit.world.problems.gold_labels` gives them);
    ``shown``: the steps as the verifier's prompt shows them (default: as written)."""
    p = load_problem(problem)
    values, out, nxt = p.values, [], 0
    for step, text, label in zip(steps, shown if shown is not None else steps, labels):
        if nxt < len(p.ops):
            wanted = called_for(p, nxt, p.start if nxt == 0 else values[nxt - 1])
        else:
            wanted = f"The last quantity: {number(p.answer)}."
        right = bool(label)
        out.append((f"{text} {wanted}", right))
        if not right:
            break
        verdict, at = check_step(step, values, p.answer, min(nxt, len(values) - 1))
        if verdict is not None and nxt < len(p.ops):
            nxt = at + 1
    return out
