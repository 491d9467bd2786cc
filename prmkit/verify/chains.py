"""Verification chains to train a generative verifier on (ThinkPRM's recipe: Khalifa et al. 2025,
"Process Reward Models That Think", arXiv:2504.16828, section 3).

A chain is what the verifier should write after its template's prompt
(:func:`prmkit.verify.templates.whole_prompt`) for one step-labelled solution: one review per
step, ``Step i: REVIEW The step is \\boxed{correct}`` (or ``incorrect``), up to and including the
first wrong step, then ``Is the solution correct? Yes`` (or ``No``), where the template's stop
string ends a verification. Steps after the first wrong one are not reviewed: their score is
inherited from it (:func:`prmkit.verify.verdicts.step_values`), as ThinkPRM's training chains end
at PRM800K's first wrong step.

Where the reviews come from (``--chains``):

* ``labels``: no review, the verdict alone: the baseline that shows what reasoning adds;
* ``lab``: each step copied, then set against what its problem calls for, from the lab
  world's exact values (:mod:`prmkit.world.chains`);
* ``teacher``: chains a teacher model writes with the template, kept only where every verdict
  it gives agrees with the step labels up to the first wrong step (ThinkPRM's filter).

A record's step labels are read up to its first wrong step (``labels`` 1/0, or ``first_error``);
a record whose labels stop (null) before that point has no chain and is counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from prmkit.records import Record
from prmkit.verify.templates import THINKPRM_END
from prmkit.verify.verdicts import parse_whole

SOURCES = ("labels", "lab", "teacher")
COPYING = ("lab",)   # the sources whose reviews begin with the step copied as the prompt shows it
TEMPLATES = ("thinkprm", "plain")   # the templates that verify a whole solution at once
END = THINKPRM_END


@dataclass
class Chain:
    """One solution's prompt parts and the verification to train on."""

    record: Record
    text: str


def known_labels(record: Record) -> list[bool] | None:
    """The step labels up to and including the first wrong step (True right), or None when
    the record does not say them all (a null before its first wrong step, or no labels)."""
    if record.labels is not None:
        out = []
        for label in record.labels:
            if label is None:
                return None
            out.append(label >= 0.5)
            if not out[-1]:
                return out
        return out if len(out) == len(record.steps) else None
    if record.first_error is None:
        return None
    if record.first_error < 0:
        return [True] * len(record.steps)
    return [True] * record.first_error + [False]


def chain_text(reviews: Sequence[tuple[str, bool]], word: tuple[str, str] = ("correct", "incorrect"),
               ) -> str:
    """The verification of ``reviews`` (``(review, right)`` per step up to the first wrong
    one): a line per step, then the closing question and its answer."""
    lines = []
    for i, (review, right) in enumerate(reviews, 1):
        said = f"{review} " if review else ""
        lines.append(f"Step {i}: {said}The step is \\boxed{{{word[0] if right else word[1]}}}")
    ok = all(right for _, right in reviews)
    return "\n" + "\n".join(lines) + f"\n{END} {'Yes' if ok else 'No'}"


def label_reviews(labels: Sequence[bool]) -> list[tuple[str, bool]]:
    """The ``labels`` source: the verdicts with no review."""
    return [("", right) for right in labels]


def agrees(text: str, labels: Sequence[bool], n_steps: int) -> bool:
    """Whether a teacher's verification judges every step up to the first wrong one as the
    labels do (ThinkPRM's filter)."""
    verdicts = parse_whole(text, n_steps)
    if verdicts is None:
        return False
    return all(v is not None and v.correct == right for v, right in zip(verdicts, labels))
