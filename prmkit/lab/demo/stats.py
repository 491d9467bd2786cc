"""The lab demo's claims, each a paired difference over problems with a 95% bootstrap interval
(:mod:`prmkit.evaluate.paired`).

* ``prm_beats_majority``, ``prm_beats_orm``: at the largest N, the PRM's best-of-N beats
  majority voting and the ORM (Lightman et al. 2023); interval above 0.
* ``gap_grows_with_n``: (PRM - ORM at N) - (PRM - ORM at 2), paired per problem (Lightman et
  al. 2023, figure 3); interval above 0.
* ``beam_matches_4x_best_of_n``: beam search against best-of-4B by the same PRM on harder
  problems of the search stage's own, at each width B, Holm-corrected over the widths (Snell
  et al. 2024, figure 3; :mod:`prmkit.lab.demo.search`), with each width's claim
  ``beam_b{B}_matches_best_of_{4B}`` beside it.

The PRM's selection method (``--select``) is fixed before the run (docs/lab.md).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from prmkit.evaluate.paired import (Claim, difference_of_differences, paired_difference,
                                    per_problem_accuracy)
from prmkit.lab.stats import verdict
from prmkit.records import Record

CLAIMS = ("prm_beats_majority", "prm_beats_orm", "gap_grows_with_n", "beam_matches_4x_best_of_n")


def bestofn_claims(scored: Sequence[Record], method: str, n: int, seed: int,
                   draws: int = 200) -> dict[str, Claim]:
    """The three best-of-N claims on the scored test candidates."""
    acc = {(m, k): per_problem_accuracy(scored, m, k, draws, seed)
           for m in (method, "orm", "majority") for k in (2, n)}
    return {
        "prm_beats_majority": paired_difference(acc[method, n], acc["majority", n], seed=seed),
        "prm_beats_orm": paired_difference(acc[method, n], acc["orm", n], seed=seed),
        "gap_grows_with_n": difference_of_differences(acc[method, 2], acc["orm", 2],
                                                      acc[method, n], acc["orm", n], seed=seed),
    }


def verdict_line(claim: Claim, what: str) -> tuple[str, str]:
    """A summary row: YES or NO, the difference and its interval."""
    return what, verdict(claim.to_dict())


def claims_json(claims: Mapping[str, Claim],
                extra: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The claims as ``summary.json`` holds them: the four first, then each beam width's, each
    with its ``extra`` figures (Holm's, for the beam claims) beside."""
    order = [k for k in CLAIMS if k in claims] + sorted(k for k in claims if k not in CLAIMS)
    return {k: {**claims[k].to_dict(), **(extra or {}).get(k, {})} for k in order}
