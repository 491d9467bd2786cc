"""Stage 5 of the lab demo (:mod:`prmkit.lab.demo.run`): PRM-guided beam search at width B
against best-of-4B by the same PRM (Snell et al. 2024, "Scaling LLM Test-Time Compute Optimally
can be More Effective than Scaling Model Parameters", figure 3: beam search matched best-of-N
at about 4x its budget on the harder questions).

The protocol, fixed before any run of it (docs/lab.md, "The beam-search claim"):

* **The harder setting.** Search runs on problems of its own, ``--search-problems`` lab
  problems of ``--search-min-steps`` to ``--search-max-steps`` operations (seed + 2000), not on
  the test problems, where best-of-N is at its ceiling (pass@8 near 96%) and nothing can be
  told apart. The policy and the PRM are the demo's.
* **Every width.** Beam search runs at each width B of ``--beam-n`` (B / M beams of M samples);
  best-of-4B takes 4B samples per problem of the search problems (4 x the largest B are drawn
  once, from seed + 2, by stage 1; a smaller 4B is the mean over 200 draws of 4B of them),
  chosen by ``--select``.
* **The claims.** Per width, beam minus best-of-4B per problem, a non-inferiority claim with
  margin ``--margin`` points; the widths are one family, corrected by Holm's step-down
  (:func:`prmkit.lab.stats.paired_holm`): one-sided family-wise level 2.5%, the tail of the
  95% intervals the demo's other claims use. ``beam_matches_4x_best_of_n`` holds when beam
  search matches best-of-4B at some width after the correction; its figures are those of the
  first width in Holm's order. Each width is also a claim of its own,
  ``beam_b{B}_matches_best_of_{4B}``. Every claim's ``ci95`` is its 95% interval; Holm's level
  and the interval at it (``holm_level``, ``ci_holm``), which decide, are written beside.

The stage's settings (:data:`FIELDS`) are its own, kept in ``search_settings.json``: changing
them redoes the search problems, their samples, their scores and the beam searches, and no
stage before them.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Sequence

from prmkit.lab.demo.scoring import score_with
from prmkit.lab.stages import own_settings, stage, stage_json
from prmkit.lab.stats import Claim, paired_holm
from prmkit.lab.candidates import candidates_of
from prmkit.records import Record

SEARCH_SEED_OFFSET = 2000
# The DemoConfig fields that only this stage reads: they are not part of the demo's own settings.
FIELDS = ("search_problems", "search_min_steps", "search_max_steps", "beam_n", "beam_m")
MADE = ("search_candidates.jsonl", "search_scored.jsonl", "search.json")


def pool(config: Any) -> int:
    """Best-of-4B's samples per search problem: 4 x the largest width."""
    return 4 * max(config.beam_n)


def search_problems(config: Any) -> list[Record]:
    """The search problems: their own lab problems, harder than the test problems."""
    from prmkit.lab import LabConfig, make_problems

    return make_problems(LabConfig(n=config.search_problems, min_steps=config.search_min_steps,
                                   max_steps=config.search_max_steps,
                                   seed=config.world.seed + SEARCH_SEED_OFFSET))


def search_stage(config: Any, world: Any, prm: Callable[[], Any], out: str) -> dict[str, Any]:
    """5. the search problems, best-of-4B's samples of them (scored by the PRM, each problem's
    samples read as one tree of shared prefixes), and beam search at every width; each part
    reused when finished. ``prm`` gives the PRM when called."""
    own_settings(os.path.join(out, "search_settings.json"),
                 {k: getattr(config, k) for k in FIELDS}, [os.path.join(out, m) for m in MADE])
    problems = search_problems(config)
    samples = stage(out, MADE[0], lambda: candidates_of(
        problems, pool(config), world.policy, world.prompter, world.policy_name,
        config.world.seed + 2))
    scored = stage(out, MADE[1], lambda: [
        Record(**{**r.to_dict(), "step_scores": s})
        for r, s in zip(samples, score_with(prm(), samples, "PRM (search samples)")[0])])
    return stage_json(out, MADE[2], lambda: _search(config, world, problems, prm(), scored))


def _search(config: Any, world: Any, problems: Sequence[Record], prm: Any,
            scored_samples: Sequence[Record]) -> dict[str, Any]:
    """Beam search at every width, and best-of-4B on the scored search samples."""
    from prmkit.evaluate.paired import per_problem_accuracy
    from prmkit.generate.run import Problem
    from prmkit.search.beam import BeamConfig, beam_search

    chosen = [Problem(p.id, p.problem, p.reference) for p in problems]
    tokens = sum(int(r.meta.get("completion_tokens", 0)) for r in scored_samples) / pool(config)
    rows = []
    for b in config.beam_n:
        result = beam_search(chosen, world.policy, world.prompter, prm,
                             BeamConfig(n=b, m=config.beam_m, seed=config.world.seed,
                                        select=config.select))
        rows.append(_beam_row(b, result))
        acc = per_problem_accuracy(scored_samples, config.select, 4 * b, seed=config.world.seed)
        rows.append({"method": "best-of-n", "n": 4 * b, "problems": len(acc),
                     "accuracy": 100.0 * sum(acc.values()) / max(1, len(acc)),
                     "tokens": tokens * 4 * b / max(1, len(acc)), "prm_tokens": None,
                     "source": f"{4 * b} of {pool(config)} samples per search problem (seed "
                               f"{config.world.seed + 2}; the mean over 200 draws when fewer)",
                     "per_problem": acc})
    right = sum(bool(r.is_correct) for r in scored_samples)
    return {"policy": world.policy_name, "prm": "the demo's PRM (prm/last)",
            "problems": len(chosen), "operations": [config.search_min_steps,
                                                    config.search_max_steps],
            "sample_accuracy": 100.0 * right / max(1, len(scored_samples)),
            "rows": rows}


def _beam_row(n: int, result: Any) -> dict[str, Any]:
    picked = [r for r in result.records if r.meta.get("selected")]
    total = result.account.total
    k = max(1, len(picked))
    return {"method": "beam", "n": n, "problems": len(picked),
            "accuracy": 100.0 * sum(bool(r.is_correct) for r in picked) / k,
            "tokens": total.tokens_generated / k,
            "prm_tokens": None if total.prm_tokens is None else total.prm_tokens / k,
            "seconds": total.seconds,
            "per_problem": {r.group: float(bool(r.is_correct)) for r in picked}}


def width_claim_name(b: int) -> str:
    return f"beam_b{b}_matches_best_of_{4 * b}"


def beam_claims(search: dict[str, Any], margin: float, seed: int,
                ) -> tuple[dict[str, Claim], dict[str, dict[str, Any]]]:
    """Each width's Holm-corrected claim and ``beam_matches_4x_best_of_n`` (see the module),
    each with ``ci95`` its 95% interval, and Holm's figures of each (``p_value``,
    ``holm_step``, ``holm_level``, ``ci_holm``: the interval at its level, which decides).
    With Holm's step-down a width can hold only when the first in its order does, so the
    family holds exactly when that first one does, and it takes that one's figures."""
    beams = {r["n"]: r for r in search["rows"] if r["method"] == "beam"}
    bon = {r["n"]: r for r in search["rows"] if r["method"] == "best-of-n"}
    family = paired_holm({width_claim_name(b): (row["per_problem"], bon[4 * b]["per_problem"])
                          for b, row in beams.items()}, margin=margin, seed=seed)
    claims = {name: f["claim"] for name, f in family.items()}
    holm = {name: {k: v for k, v in f.items() if k != "claim"} for name, f in family.items()}
    first = next(iter(family))                              # the first in Holm's order
    claims["beam_matches_4x_best_of_n"] = claims[first]
    holm["beam_matches_4x_best_of_n"] = {**holm[first], "width": first}
    return claims, holm
