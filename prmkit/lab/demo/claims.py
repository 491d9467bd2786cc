"""The lab demo's claims, each a paired difference over problems with a 95% bootstrap interval
(:mod:`prmkit.evaluate.paired`).

* ``prm_beats_majority``, ``prm_beats_orm``: at the largest N, the PRM's best-of-N beats
  majority voting and the ORM (Lightman et al. 2023); interval above 0.
* ``gap_grows_with_n``: (PRM - ORM at N) - (PRM - ORM at 2), paired per problem (Lightman et
  al. 2023, figure 3); interval above 0.
* ``beam_matches_4x_best_of_n``: beam search at width B against best-of-4B by the same PRM
  (Snell et al. 2024, figure 3), a non-inferiority claim: interval above minus ``margin``
  points. The generated tokens both spent are reported beside it.

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


def beam_claim(beam_correct: Mapping[str, float], best_of_4b: Mapping[str, float],
               margin: float, seed: int) -> Claim:
    """Beam search at width B against best-of-4B, per problem, as a non-inferiority claim."""
    return paired_difference(beam_correct, best_of_4b, seed=seed, margin=margin)


def verdict_line(claim: Claim, what: str) -> tuple[str, str]:
    """A summary row: YES or NO, the difference and its interval."""
    return what, verdict(claim.to_dict())


def claims_json(claims: Mapping[str, Claim]) -> dict[str, Any]:
    return {k: claims[k].to_dict() for k in CLAIMS if k in claims}
