"""The PRM protocol: the seam between scorers and everything that uses step scores."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from prmkit.stepformat import BoundFormat


@runtime_checkable
class PRM(Protocol):
    """A process reward model.

    ``score`` returns one score per step of each solution, in the order given. A step that could
    not be scored (for example because the solution is longer than the model allows) gets None,
    never a made-up value, and never a shifted one.
    """

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        ...


@runtime_checkable
class StreamingPRM(Protocol):
    """A PRM that gives its solutions back as their batches finish, ``(index, step_scores)``
    pairs in any order (:func:`collect` puts them back in order)."""

    def score_iter(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
                   ) -> Iterator[tuple[int, list[float | None]]]:
        ...


@runtime_checkable
class Encodes(Protocol):
    """A PRM that says how it reads a solution: its bound step format and its length cut, so a
    caller can count the tokens it reads."""

    bound: "BoundFormat"
    max_length: int | None


@runtime_checkable
class Counted(Protocol):
    """A PRM that counts what its forward passes fed (:class:`prmkit.models.reading.ScoreStats`:
    ``real_tokens``, ``computed_tokens``, ``forwards``)."""

    stats: Any


def collect(n: int, scored: Iterable[tuple[int, list[float | None]]]) -> list[list[float | None]]:
    """``score`` from a ``score_iter``: the ``(index, step_scores)`` pairs, put back in order."""
    out: list[list[float | None]] = [[] for _ in range(n)]
    for i, scores in scored:
        out[i] = scores
    return out
