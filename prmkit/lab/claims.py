"""The lab demo's claims, each a paired difference over problems with a 95% bootstrap interval.

The seed papers' central claims, measured on the demo's own test problems
(:mod:`prmkit.evaluate.paired` for the statistics):

* ``prm_beats_majority`` and ``prm_beats_orm``: at the largest N, best-of-N with the PRM is
  more accurate than majority voting and than the ORM (Lightman et al. 2023, "Let's Verify
  Step by Step": 78.2% against 69.6% and 72.4%). Holds when the interval of the paired
  difference is above 0.
* ``gap_grows_with_n``: the PRM's lead over the ORM is larger at the largest N than at N=2
  (Lightman et al. 2023, figure 3). The difference is (PRM - ORM at N) - (PRM - ORM at 2), paired
  per problem; holds when its interval is above 0.
* ``beam_matches_4x_best_of_n``: PRM-guided beam search with width B is at least as accurate as
  best-of-N with 4B candidates chosen by the same PRM (Snell et al. 2024, "Scaling LLM
  Test-Time Compute Optimally", figure 3: beam search matches best-of-N at about 4x less
  compute). "At least as accurate" is a non-inferiority claim: it holds when the interval of
  beam minus best-of-N lies above minus ``margin`` points (``--margin``, 5 by default), decided
  before the run. The generated tokens both spent are reported beside it.

The selection method of the PRM (``--select``) is fixed before the run, never the best of
several afterwards.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from prmkit.evaluate.paired import (Claim, difference_of_differences, paired_difference,
                                    per_problem_accuracy)
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
    word = "YES" if claim.holds else "NO"
    return (what, f"{word}: {claim.difference:+.1f} points, 95% CI [{claim.ci95[0]:+.1f}, "
                  f"{claim.ci95[1]:+.1f}] over {claim.problems} problems")


def claims_json(claims: Mapping[str, Claim]) -> dict[str, Any]:
    return {k: claims[k].to_dict() for k in CLAIMS if k in claims}
