"""Two models on one body scored in one pass: :func:`score_shared_pair`."""

from __future__ import annotations

from typing import Any, Hashable, Sequence

from prmkit.lab.verifiers.companion import companion_blocker, companion_probs
from prmkit.models.sharing.policy import sharing_of
from prmkit.models.sharing.prefix import ExtraHead, ShareStats, SharedPrefixScorer, score_shared
from prmkit.stepformat import Encoded


def score_shared_pair(prm: Any, other: Any, problems: Sequence[str],
                      steps: Sequence[Sequence[str]], groups: Sequence[Hashable | None],
                      stats: ShareStats | None = None,
                      ) -> tuple[list[list[float | None]], list[list[float | None]]]:
    """:func:`score_shared` of ``prm`` and of ``other``, a companion on the same body, in one tree
    pass (:mod:`prmkit.lab.verifiers.companion`). Where that cannot hold for some solution, or the model
    reads no tree in one pass, each is scored on its own."""
    stats = stats if stats is not None else ShareStats()
    sharing = sharing_of(prm)
    if sharing.can_share and sharing.pack is None and companion_blocker(prm, other) is None \
            and all(_same_reads(prm.encode(p, s), other.encode(p, s))
                    for p, s in zip(problems, steps)):
        head = ExtraHead(other, lambda hidden: companion_probs(other, hidden))
        scorer = SharedPrefixScorer(prm, stats, heads=[head])
        return scorer.score(problems, steps, groups), scorer.head_scores[0]
    return (score_shared(prm, problems, steps, groups, stats),
            score_shared(other, problems, steps, groups, stats))


def _same_reads(a: Encoded, b: Encoded) -> bool:
    return list(a.input_ids) == list(b.input_ids) and list(a.read_positions) == list(b.read_positions)
