"""Incremental PRM scoring for search: each token of a search tree goes through the PRM once.

Search (:mod:`prmkit.search`) grows partial solutions one step at a time. A partial solution is
a :class:`Prefix`: its steps, its step scores and, for a transformers PRM, the key-value cache
of its tokens. Extending it feeds only the new step's tokens on top of the prefix's cache and
reads the score through the PRM's own :class:`prmkit.models.backends.hf.Reader`.

Two scorers, one contract (:class:`PrefixScorer`):

* :class:`IncrementalPRM` wraps an :class:`~prmkit.models.backends.hf.HFPRM` and reuses caches.
* :class:`RescoringScorer` wraps any PRM and re-scores every grown solution whole; over an
  HFPRM it is the reference for the incremental scorer (same scores to 1e-4 in float32).

Reuse is checked, not assumed: every grown solution is encoded with the step format, and a
child whose ids do not begin with its parent's reuses only the cache of the ids they share and
is counted in ``fallbacks`` (``partial``: those that still reused a part). Models that cannot
reuse a cache (bidirectional, sliding-window) get the rescoring scorer from
:func:`prefix_scorer`. A prefix keeps the cache of its own segment only, plus a reference to its
parent, so a pruned node's cache is freed when nothing refers to it (:func:`release`).

``tokens`` counts the tokens fed through the PRM's forward passes (padding excluded);
``Prefix.cost`` is one prefix's share. Batching, memory and why reuse is exact:
docs/scoring.md, "Design notes".
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol, Sequence, runtime_checkable

from prmkit.errors import PrmkitError
from prmkit.models.base import PRM, Encodes
# re-exported: where a PRM can share is decided in prmkit.models.sharing.policy
from prmkit.models.sharing.policy import reuse_blocker, share_blocker, sharing_of  # noqa: F401
from prmkit.models.sharing.cachedpass import CachedPass, cached_forward

if TYPE_CHECKING:
    from prmkit.models.backends.hf import HFPRM


@dataclass(eq=False)
class Prefix:
    """A scored partial solution: its steps, a score per step, and the scorer's private state.

    ``cost`` is the PRM tokens processed to create it (None when the PRM cannot tell). The
    later fields belong to :class:`IncrementalPRM`: the full ids, the cache segment covering
    ``ids[kv_start:]``, the parent covering ``ids[:kv_start]``, and a hazard head's carry.
    """

    problem: str
    steps: tuple[str, ...] = ()
    scores: tuple[float | None, ...] = ()
    cost: int | None = 0
    parent: "Prefix | None" = field(default=None, repr=False)
    ids: list[int] = field(default_factory=list, repr=False)
    kv: list[tuple[Any, Any]] | None = field(default=None, repr=False)
    kv_start: int = 0
    log_s: Any = field(default=None, repr=False)    # a hazard head: log S over the segment
    hidden: Any = field(default=None, repr=False)   # a surprisal head: its final hidden states


@runtime_checkable
class PrefixScorer(Protocol):
    """What search needs from a PRM (see the module docstring)."""

    tokens: int | None   # PRM tokens processed so far (None: the PRM cannot tell)

    def roots(self, problems: Sequence[str]) -> list[Prefix]:
        """The empty solution of each problem (no steps yet)."""
        ...

    def extend(self, items: Sequence[tuple[Prefix, str]]) -> list[Prefix]:
        """Each ``(prefix, step)`` grown by one step, scored; one result per item, in order."""
        ...

    def score_full(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[Prefix]:
        """Whole solutions, every step scored in one pass (best-of-N)."""
        ...


def prefix_scorer(prm: PRM, kv_reuse: bool = True) -> PrefixScorer:
    """The incremental scorer for an HF PRM that can reuse caches (when ``kv_reuse``), else
    the rescoring scorer. A scorer passed in is returned as it is."""
    if isinstance(prm, PrefixScorer):
        return prm
    if kv_reuse and sharing_of(prm).reuse is None:
        return IncrementalPRM(prm)
    return RescoringScorer(prm)


# ---------------------------------------------------------------------------------------------
# any PRM: re-score the whole solution


class RescoringScorer:
    """Any PRM: a grown solution is scored whole; the new prefix keeps its parent's scores and
    adds the last step's. ``tokens`` and every ``cost`` are None unless the PRM exposes its
    step format (``bound`` and ``max_length``)."""

    def __init__(self, prm: PRM):
        self.prm = prm
        self.counts = isinstance(prm, Encodes)
        self.tokens: int | None = 0 if self.counts else None

    def roots(self, problems: Sequence[str]) -> list[Prefix]:
        return [Prefix(p) for p in problems]

    def extend(self, items: Sequence[tuple[Prefix, str]]) -> list[Prefix]:
        if not items:
            return []
        problems = [p.problem for p, _ in items]
        steps = [list(p.steps) + [s] for p, s in items]
        scored = self.prm.score(problems, steps)
        return [Prefix(p.problem, tuple(st), p.scores + (sc[-1],), cost)
                for (p, _), st, sc, cost in zip(items, steps, scored, self._costs(problems, steps))]

    def score_full(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[Prefix]:
        if not problems:
            return []
        scored = self.prm.score(problems, steps)
        return [Prefix(p, tuple(st), tuple(sc), cost)
                for p, st, sc, cost in zip(problems, steps, scored, self._costs(problems, steps))]

    def _costs(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[int | None]:
        if not self.counts:
            return [None] * len(problems)
        costs = [len(self.prm.bound.encode(p, s, max_length=self.prm.max_length).input_ids)
                 for p, s in zip(problems, steps)]
        self.tokens = (self.tokens or 0) + sum(costs)
        return list(costs)


# ---------------------------------------------------------------------------------------------
# an HF PRM: reuse the key-value cache of the prefix


class IncrementalPRM:
    """An :class:`~prmkit.models.backends.hf.HFPRM` that scores a grown solution's new step only, on top
    of its prefix's key-value cache (see the module docstring)."""

    def __init__(self, prm: "HFPRM"):
        why = sharing_of(prm).reuse
        if why is not None:
            raise PrmkitError(f"this PRM cannot reuse its key-value cache: {why}; use the "
                              f"rescoring scorer")
        import torch

        self.torch = torch
        self.prm = prm
        self.reference = RescoringScorer(prm)   # whole solutions (best-of-N) are read in one pass
        self.tokens: int = 0        # real tokens fed through the model
        self.computed: int = 0      # including padding
        self.forwards: int = 0
        self.fallbacks: int = 0     # children whose parent's ids were not a prefix of theirs
        self.partial: int = 0       # ... of which reused the cache of the ids they share
        # Rows x (cached + new) tokens per forward: a quarter of the PRM's budget, because each
        # row carries its own copy of its prefix's cache (~23 KB a token for SmolLM2 in bf16).
        self.budget = max(1024, prm.config.token_budget // 4)

    # -- the contract -----------------------------------------------------------------------
    def roots(self, problems: Sequence[str]) -> list[Prefix]:
        """Read each problem's text (the ids before the first step) once, keeping its cache."""
        roots = [Prefix(p, ids=head_ids(self.prm.bound, p)) for p in problems]
        todo = [r for r in roots if r.ids and len(r.ids) <= self.prm.max_length]
        for batch in self.prm.batches([len(r.ids) for r in todo]):
            group = [todo[i] for i in batch]
            # read at each row's last token (the output is not needed, only the cache)
            res = self._forward([r.ids for r in group], [len(r.ids) - 1 for r in group],
                                [[] for _ in group], None)
            for b, r in enumerate(group):
                r.kv, r.kv_start, r.cost = _segment(res.cache, b, 0, len(r.ids)), 0, len(r.ids)
                _keep_carry(r, res, b, len(r.ids))
        return roots

    def extend(self, items: Sequence[tuple[Prefix, str]]) -> list[Prefix]:
        """Each item's child, scored on its parent's cache; an item repeating an earlier one
        (same parent and step) is read once and its copy costs 0 tokens."""
        out: list[Prefix | None] = [None] * len(items)
        members: list[_Member] = []
        seen: dict[tuple[int, str], int] = {}
        repeats: list[tuple[int, int]] = []
        for j, (parent, step) in enumerate(items):
            key = (id(parent), step)
            if key in seen:
                repeats.append((j, seen[key]))
                continue
            seen[key] = j
            steps = parent.steps + (step,)
            enc = self.prm.bound.encode(parent.problem, list(steps), max_length=self.prm.max_length)
            if enc.truncated:   # past the model's length: not scored, like HFPRM.score
                out[j] = Prefix(parent.problem, steps, parent.scores + (None,), 0, parent, enc.input_ids)
                continue
            child = Prefix(parent.problem, steps, parent.scores, 0, parent, list(enc.input_ids))
            read = enc.read_positions[-1]
            shared = min(common_prefix_length(parent.ids, child.ids), read)
            if parent.kv is not None and shared == len(parent.ids):
                members.append(_Member(j, child, child.ids[shared:], read - shared, parent, shared))
            elif not parent.ids and parent.kv is None:   # nothing before the first step
                child.parent = None
                members.append(_Member(j, child, child.ids, read, None))
            elif parent.kv is not None and shared > 0:   # reuse the ids both have
                self.fallbacks += 1
                self.partial += 1
                members.append(_Member(j, child, child.ids[shared:], read - shared, parent, shared))
            else:                                        # read from scratch
                self.fallbacks += 1
                child.parent = None
                members.append(_Member(j, child, child.ids, read, None))
        # longest cached prefix first, a parent's children together (parents in the order of
        # their first child: an order by id() would change from run to run, and so would the
        # batches and, in bfloat16, the last bits of the scores); batches within the budget
        first: dict[int, int] = {}
        for m in members:
            first.setdefault(id(m.base), m.j)
        members.sort(key=lambda m: (-m.past, first[id(m.base)], m.j))
        batch: list[_Member] = []
        for m in members:
            width = max([x.past for x in batch] + [m.past]) + max([len(x.ids) for x in batch] + [len(m.ids)])
            if batch and width * (len(batch) + 1) > self.budget:
                self._read(batch, out)
                batch = []
            batch.append(m)
        if batch:
            self._read(batch, out)
        for j, first in repeats:
            out[j] = replace(out[first], cost=0)  # type: ignore[type-var]
        return out  # type: ignore[return-value]

    def score_full(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[Prefix]:
        before = self.reference.tokens or 0
        out = self.reference.score_full(problems, steps)
        self.tokens += (self.reference.tokens or 0) - before
        return out

    # -- the forward passes -----------------------------------------------------------------
    def _read(self, batch: list["_Member"], out: list[Prefix | None]) -> None:
        """One forward pass: each member's new ids on top of its base's cache, left-padded to
        the longest cache; read the new step's score, keep each member's cache segment."""
        pasts: dict[tuple[int, int], list[tuple[Any, Any]]] = {}
        for m in batch:
            if m.base is not None and (id(m.base), m.past) not in pasts:
                pasts[(id(m.base), m.past)] = _path_cache(m.base, m.past)
        res = self._forward([m.ids for m in batch], [m.col for m in batch],
                            [pasts.get((id(m.base), m.past), []) for m in batch],
                            [_carried(m.base, m.past) for m in batch]
                            if self.prm.format.hazard else None)
        width = max(m.past for m in batch)
        for b, m in enumerate(batch):
            m.child.kv = _segment(res.cache, b, width, width + len(m.ids))
            m.child.kv_start = m.past
            m.child.scores = m.child.scores + (res.probs[b][0],)
            m.child.cost = len(m.ids)
            _keep_carry(m.child, res, b, len(m.ids))
            out[m.j] = m.child

    def _forward(self, seqs: list[list[int]], cols: list[int], pasts: list[list[tuple[Any, Any]]],
                 carry: list[tuple[float, Any]] | None) -> CachedPass:
        """One forward pass (:func:`cached_forward`), reading row ``b`` at ``cols[b]``; a
        hazard head continues from ``carry[b]`` (:func:`_carried`; None: no cached token)."""
        out = cached_forward(self.prm, seqs, [[c] for c in cols], pasts, carry)
        self.forwards += 1
        self.tokens += out.real
        self.computed += out.computed
        return out


@dataclass(eq=False)
class _Member:
    """One child to read: its place in the output, its new ids, where its score is read among
    them, and the prefix whose cache it continues (None: from scratch)."""

    j: int
    child: Prefix
    ids: list[int]
    col: int
    base: Prefix | None
    shared: int | None = None   # how many of the base's leading ids the child reuses (all)

    @property
    def past(self) -> int:
        if self.base is None:
            return 0
        return len(self.base.ids) if self.shared is None else self.shared


def release(prefix: Prefix) -> None:
    """Drop the cache segment of a prefix that will not be extended (a finished solution);
    extending it anyway reads it from scratch, so this is never wrong, only slower."""
    prefix.kv = prefix.log_s = prefix.hidden = None


def _keep_carry(prefix: Prefix, res: CachedPass, row: int, n: int) -> None:
    """Keep what a hazard head carries on from the first ``n`` new tokens of ``row``."""
    if res.log_s is not None:
        prefix.log_s = res.log_s[row, :n].clone()
    if res.hidden is not None:
        prefix.hidden = res.hidden[row, :n].clone()


def _carried(base: Prefix | None, past: int) -> tuple[float, Any]:
    """A hazard head's carry for a row on the first ``past`` ids of ``base``'s path: log S and
    the final hidden state at position past - 1, from the segment that holds it."""
    node = base
    while node is not None and past > 0:
        if node.kv_start <= past - 1:
            if node.log_s is None:
                raise PrmkitError("internal: a prefix on the path has no log S")
            j = past - 1 - node.kv_start
            return float(node.log_s[j]), node.hidden[j] if node.hidden is not None else None
        node = node.parent
    return 0.0, None


def head_ids(bound: Any, problem: str) -> list[int]:
    """The ids before the first step: ``encode(problem, [])`` (only the BOS token, if any,
    under the ``turns`` layout), its last token left out under a whole-text format."""
    ids = list(bound.encode(problem, []).input_ids)
    if getattr(bound.format, "tokenize", "pieces") == "whole" and len(ids) > len(bound.bos):
        ids = ids[:-1]
    return ids


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _segment(cache: Any, row: int, start: int, end: int) -> list[tuple[Any, Any]]:
    """Row ``row``'s keys and values at positions [start, end), copied out of the batch."""
    return [(layer.keys[row:row + 1, :, start:end].clone(), layer.values[row:row + 1, :, start:end].clone())
            for layer in cache.layers]


def _path_cache(prefix: Prefix, upto: int | None = None) -> list[tuple[Any, Any]]:
    """The cache of ``prefix``'s first ``upto`` ids (default all), put together from its
    segments and its ancestors' (a segment covers ``ids[kv_start:]`` of its own prefix; a child
    that reused only part of its parent's ids starts its segment there)."""
    import torch

    need = len(prefix.ids) if upto is None else upto
    segments = []
    node: Prefix | None = prefix
    while need > 0:
        if node is None or node.kv is None:
            raise PrmkitError("internal: a prefix on the path has no cache")
        if node.kv_start < need:
            seg = node.kv
            if need - node.kv_start < seg[0][0].shape[2]:
                seg = [(k[:, :, :need - node.kv_start], v[:, :, :need - node.kv_start]) for k, v in seg]
            segments.append(seg)
            need = node.kv_start
        node = node.parent
    segments.reverse()
    if len(segments) == 1:
        return segments[0]
    return [(torch.cat([s[layer][0] for s in segments], dim=2),
             torch.cat([s[layer][1] for s in segments], dim=2)) for layer in range(len(segments[0]))]
