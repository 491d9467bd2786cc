"""Graded candidate solutions of lab problems, sampled by a lab policy: the experiments' first
stage (the lab world itself, :mod:`prmkit.world`, sits below generation; this runs it)."""

from __future__ import annotations

from typing import Any, Sequence


def candidates_of(problems: Sequence[Any], n: int, policy: Any, prompter: Any, name: str,
                  seed: int) -> list[Any]:
    """``n`` graded candidate records of each lab problem record, sampled by ``policy`` (named
    ``name`` in their meta) from ``seed``, one step per line."""
    from prmkit.generate.run import Problem as Asked, candidate_record
    from prmkit.generate.stepwise import solve

    sols = solve(policy, prompter, [p.problem for p in problems], n=n, seed=seed)
    meta = {"policy": name, "seed": seed}
    return [candidate_record(Asked(p.id, p.problem, p.reference), k, s, prompter.rule, meta)
            for p, row in zip(problems, sols) for k, s in enumerate(row)]
