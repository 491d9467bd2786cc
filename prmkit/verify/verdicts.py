"""Reading the verdicts out of a verification, and the rule that turns them into step scores.

* ``thinkprm`` and ``plain``: a verification covers every step. A verdict is
  ``\\boxed{correct}`` or ``\\boxed{incorrect}`` (any case, spaces inside the braces allowed);
  it belongs to the step of the last ``Step i:`` before it (a verdict with no header before it to
  the next step not yet judged), and a step's last verdict counts (a verification may revise
  itself). A verification with no verdict at all is unparsable.
* ``genprm``: one verification per step; its verdict is the first ``Yes}`` or ``No}`` (any case)
  of the text written after ``$\\boxed``, GenPRM's own ``get_reward_score`` regex. None when
  there is none (GenPRM scores that 0.5; prmkit counts it as unparsable instead).

The rule (:func:`step_values`), for one verification: a step judged scores its P(correct)
(1 or 0 without log-probabilities). Every step after the first step judged incorrect scores as
that step does: its prefix holds a wrong step, as in ThinkPRM's training verifications, which
end at PRM800K's first wrong step. A step never reached, with no wrong step before it, is None
for that verification. GenPRM judges every step in its own turn, so none is ever inherited.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

_HEADER = re.compile(r"Step\s*(\d+)\s*:")
_BOXED = re.compile(r"\\boxed\s*\{\s*(correct|incorrect)\s*\}", re.IGNORECASE)
_GENPRM = re.compile(r"(Yes|No)\}", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    """One step's verdict: correct or not, and where its word starts in the text."""

    correct: bool
    at: int


def parse_whole(text: str, n_steps: int) -> list[Verdict | None] | None:
    """The verdict of each of ``n_steps`` steps in a ThinkPRM or plain verification (None for a
    step it does not judge), or None when it judges none."""
    headers = [(m.start(), int(m.group(1))) for m in _HEADER.finditer(text)]
    out: list[Verdict | None] = [None] * n_steps
    found = False
    for m in _BOXED.finditer(text):
        before = [k for at, k in headers if at < m.start()]
        if before:
            k = before[-1]
        else:
            k = next((i + 1 for i, v in enumerate(out) if v is None), n_steps + 1)
        if 1 <= k <= n_steps:
            out[k - 1] = Verdict(m.group(1).lower() == "correct", m.start(1))
            found = True
    return out if found else None


def parse_genprm(text: str) -> Verdict | None:
    """The verdict of a GenPRM step verification's output part (the text after ``$\\boxed``)."""
    m = _GENPRM.search(text)
    return None if m is None else Verdict(m.group(1).lower() == "yes", m.start(1))


def step_values(verdicts: Sequence[Verdict | None],
                probs: Sequence[float | None] | None = None) -> list[float | None]:
    """One verification's step scores under the rule of the module docstring; ``probs`` the
    P(correct) read at each verdict (None where the backend gave none: the verdict counts)."""
    out: list[float | None] = []
    inherited: float | None = None
    for i, v in enumerate(verdicts):
        if inherited is not None:
            out.append(inherited)
            continue
        if v is None:
            out.append(None)
            continue
        p = probs[i] if probs is not None and probs[i] is not None else float(v.correct)
        out.append(p)
        if not v.correct:
            inherited = p
    return out


def combine(values: Sequence[Sequence[float | None]], n_steps: int) -> list[float | None]:
    """The step scores of K verifications: each step's mean over the verifications that score
    it (the share that call it correct, without log-probabilities); None where none does."""
    out: list[float | None] = []
    for j in range(n_steps):
        got = [v[j] for v in values if v[j] is not None]
        out.append(sum(got) / len(got) if got else None)
    return out
