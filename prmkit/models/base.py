"""The PRM protocol: the seam between scorers and everything that uses step scores."""

from __future__ import annotations

from typing import Iterable, Protocol, Sequence


class PRM(Protocol):
    """A process reward model.

    ``score`` returns one score per step of each solution, in the order given. A step that could
    not be scored (for example because the solution is longer than the model allows) gets None,
    never a made-up value, and never a shifted one.
    """

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        ...


def collect(n: int, scored: Iterable[tuple[int, list[float | None]]]) -> list[list[float | None]]:
    """``score`` from a ``score_iter``: the ``(index, step_scores)`` pairs, put back in order."""
    out: list[list[float | None]] = [[] for _ in range(n)]
    for i, scores in scored:
        out[i] = scores
    return out
