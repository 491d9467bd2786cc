"""Exact verification chains for lab solutions: what a verifier that sets each step against
the problem would write (``prmkit train verifier --chains lab``).

For each step up to the first wrong one, the review first restates what the problem calls for
next, from the problem's own sentence and the true quantity before it (``She finds 8 more
apples: 20 + 8``; for the last step, the last true quantity), then what the step claims, copied
(``the step says 20 + 8 = 29``); the verdict follows. The reasoning comes before the verdict, as
in ThinkPRM's chains, and needs no arithmetic written out: the operation is read off the story,
the quantity before it off the chain so far, and the claim sits next to the verdict, where a
wrong result or a wrong operation shows. The verdicts are the gold labels
(:func:`prmkit.world.problems.gold_labels`; a step that skipped ahead to a later true value
counts as right).
"""

from __future__ import annotations

from typing import Sequence

from prmkit.world.problems import SYMBOL, check_step, load_problem, number, stated_claim


def lab_reviews(problem: str, steps: Sequence[str], labels: Sequence[float]) -> list[tuple[str, bool]]:
    """``(review, correct)`` for each step up to and including the first wrong one
    (``labels``: 1 right, 0 wrong, as :func:`prmkit.world.problems.gold_labels` gives them)."""
    p = load_problem(problem)
    values, out, nxt = p.values, [], 0
    for step, label in zip(steps, labels):
        if nxt < len(p.ops):
            before = p.start if nxt == 0 else values[nxt - 1]
            op = p.ops[nxt]
            wanted = f"{p.sentence(nxt)[:-1]}: {number(before)} {SYMBOL[op.kind]} {op.k}"
        else:
            wanted = f"The last quantity is {number(p.answer)}"
        right = bool(label)
        out.append((f"{wanted}; the step says {stated_claim(step)}.", right))
        if not right:
            break
        verdict, at = check_step(step, values, p.answer, min(nxt, len(values) - 1))
        if verdict is not None and nxt < len(p.ops):
            nxt = at + 1
    return out
