"""Stage 4 of the lab demo (:mod:`prmkit.lab.demo.run`): the test candidates scored by the PRM and
the ORM, each problem's candidates read as one tree of shared prefixes
(:mod:`prmkit.models.sharing.prefix`); the search stage scores its samples the same way."""

from __future__ import annotations

from typing import Any, Sequence

from prmkit.records import Record


def score_test(world: Any, prm: Any, orm: Any) -> list[Record]:
    """4. the test candidates' step scores by the PRM and the ORM. An ORM that is a class head on
    the PRM's frozen body is read in the PRM's passes (:mod:`prmkit.lab.verifiers.companion`);
    another on its own."""
    from prmkit.lab.verifiers.companion import companion_blocker

    by_group: dict[str, list[Record]] = {}
    for r in world.test:
        by_group.setdefault(r.group, []).append(r)
    test = [r for rs in by_group.values() for r in rs]
    if companion_blocker(prm, orm) is None:
        mine, theirs = score_with(prm, test, "PRM and the ORM (one pass)", also=orm)
    else:
        mine, theirs = score_with(prm, test, "PRM")[0], score_with(orm, test, "ORM")[0]
    scores = dict(zip((r.id for r in test), mine))
    orm_steps = dict(zip((r.id for r in test), theirs))
    scored = []
    for r in world.test:
        g, o = world.gold[r.id], orm_steps[r.id]     # the ORM's last step is the outcome score
        scored.append(Record(**{**r.to_dict(), "step_scores": scores[r.id], "labels": g.labels,
                                "first_error": g.first_error,
                                "meta": {**r.meta, "outcome_score": o[-1], "orm_step_scores": o}}))
    return scored


def score_with(model: Any, test: Sequence[Record], name: str, also: Any = None, chunk: int = 64,
               ) -> tuple[list[list[float | None]], list[list[float | None]]]:
    """Step scores of the test candidates, whole groups at a time, each shared prefix read once
    (:mod:`prmkit.models.sharing.prefix`), and those of the companion ``also``
    (empty without one)."""
    from prmkit.models.sharing.prefix import score_shared
    from prmkit.lab.verifiers.sharedpair import score_shared_pair
    from prmkit.progress import progress

    out: list[list[float | None]] = []
    theirs: list[list[float | None]] = []
    with progress(total=len(test), desc=f"demo: scoring with the {name}", unit="rec") as bar:
        start = 0
        while start < len(test):
            end = min(len(test), start + chunk)
            while end < len(test) and test[end].group == test[end - 1].group:
                end += 1                          # a chunk never splits a group
            part = test[start:end]
            args = ([r.problem for r in part], [r.steps for r in part], [r.group for r in part])
            if also is None:
                out += score_shared(model, *args)
            else:
                a, b = score_shared_pair(model, also, *args)
                out, theirs = out + a, theirs + b
            bar.update(len(part))
            start = end
    return out, theirs
