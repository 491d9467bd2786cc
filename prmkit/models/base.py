"""The PRM protocol: the seam between scorers and everything that uses step scores."""

from __future__ import annotations

from typing import Protocol, Sequence


class PRM(Protocol):
    """A process reward model.

    ``score`` returns one score per step of each solution, in the order given. A step that could
    not be scored (for example because the solution is longer than the model allows) gets None,
    never a made-up value, and never a shifted one.
    """

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        ...
