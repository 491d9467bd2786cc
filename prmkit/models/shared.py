"""Prefix sharing: a group of candidates scored at the cost of one prompt.

Best-of-N, Monte Carlo labeling and RL score many solutions that begin with the same tokens:
the N candidates of one problem share its prompt, and often their first steps. One-pass scoring
(:meth:`prmkit.models.hf.HFPRM.score`) reads each candidate whole, so the shared text is read N
times. Here the candidates of one group (records with the same ``group`` and problem; in the
server, the solutions of one micro-batch with the same problem) are scored in two stages:

1. **the prefix, once per group**: the step format's ids of the problem and of the steps that
   every candidate of the group begins with (:func:`group_prefix`): ``encode(problem, common)``,
   or, with no common step, the ids before the first step (:func:`prmkit.models.incremental.head_ids`,
   which leaves out the head's last token under a whole-text format). One forward pass over the
   prefixes of many groups keeps each prefix's key-value cache and reads the scores of the
   common steps (they are the same for every candidate);
2. **each candidate's suffix on the prefix's cache**: the candidate's own ids after the prefix,
   fed with the prefix's cache as ``past_key_values`` (:func:`prmkit.models.incremental.cached_forward`,
   the machinery search uses), reading the rest of its steps.

Why it is exact. A causal model's output at a position depends only on the ids up to it, and
every candidate is read on *its own* ids (``encode(problem, steps)``, as one-pass scoring
reads it): the prefix's cache is used only for the leading ids the two share. Under the
``pieces`` tokenisation the prefix's ids are a prefix of every candidate's by construction;
under ``whole`` (Math-Shepherd, Qwen, RLHFlow: :mod:`prmkit.wholetext`) a tokenizer may merge
across the boundary, so each candidate is checked. A candidate whose ids do not begin with the
prefix's is a **fallback**, counted: it reuses the cache of the ids both share (``partial``) or,
sharing none, is read whole. Reads that fall inside the shared ids are taken from the prefix's
pass at the same positions. Scores equal one-pass scoring to ~1e-6 in float32 (the order of the
sums in attention differs); in bfloat16 they move by the batch make-up, as one-pass scores do.

What cannot share falls back to plain one-pass scoring: a PRM that is not an HF model or cannot
reuse a cache (:func:`prmkit.models.incremental.reuse_blocker`: bidirectional models, sliding
windows, the implicit PRM), records without a group, and groups of one.

Accounting (:class:`ShareStats`): ``plain`` is what one-pass scoring feeds (every candidate's
ids), ``computed`` what this feeds (each prefix once, each suffix, the candidates read whole);
``saved = plain - computed``. Both count real tokens, padding excluded; ``padded`` counts the
padded size of every pass.

Memory. Prefixes are read a token budget at a time (:meth:`HFPRM.batches`); their suffixes are
read before the next prefix batch, so at most one batch of prefix caches is held. A suffix
batch holds rows x (cached + new) tokens within a quarter of the token budget (each row carries
its own copy of its prefix's cache, as in search).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Hashable, Sequence

from prmkit.errors import PrmkitError
from prmkit.models.incremental import cached_forward, head_ids, reuse_blocker
from prmkit.stepformat import Encoded


@dataclass
class ShareStats:
    """What prefix sharing computed and saved (real tokens; see the module docstring)."""

    groups: int = 0           # groups whose prefix was computed once
    candidates: int = 0       # candidates scored on a prefix's cache (fallbacks included)
    alone: int = 0            # candidates read whole: no group, a group of one, no reuse
    fallbacks: int = 0        # candidates whose ids do not begin with their prefix's ids
    partial: int = 0          # ... of which reused the cache of the ids both share
    plain: int = 0            # tokens one-pass scoring feeds: every candidate whole
    computed: int = 0         # tokens fed here: prefixes once, suffixes, candidates alone
    padded: int = 0           # rows x width of every pass
    forwards: int = 0

    @property
    def saved(self) -> int:
        return self.plain - self.computed

    def summary(self) -> str:
        share = self.computed / self.plain if self.plain else 1.0
        return (f"prefix sharing: computed {self.computed} of {self.plain} tokens ({share:.1%}), "
                f"saved {self.saved}; {self.groups} groups, {self.candidates} candidates on a "
                f"shared prefix, {self.alone} read whole, {self.fallbacks} fallbacks "
                f"({self.partial} partial)")

    def add(self, other: "ShareStats") -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


def can_share(prm: Any) -> bool:
    """True when ``prm`` is an HF PRM that can reuse a key-value cache."""
    from prmkit.models.hf import HFPRM

    return isinstance(prm, HFPRM) and reuse_blocker(prm) is None


def has_groups(records: Sequence[Any]) -> bool:
    """True when two of ``records`` (with ``problem`` and ``group``) have the same group and
    problem, so that sharing has something to share."""
    seen = set()
    for r in records:
        if r.group is not None:
            if (r.group, r.problem) in seen:
                return True
            seen.add((r.group, r.problem))
    return False


def score_shared(prm: Any, problems: Sequence[str], steps: Sequence[Sequence[str]],
                 groups: Sequence[Hashable | None], stats: ShareStats | None = None,
                 ) -> list[list[float | None]]:
    """One score list per solution, as ``prm.score(problems, steps)`` gives, with the solutions
    of one group (``groups[i]``, None: none) scored on their shared prefix's cache. Any PRM
    works; one that cannot share is scored plainly. ``stats`` (when given) is added to."""
    if not (len(problems) == len(steps) == len(groups)):
        raise PrmkitError(f"{len(problems)} problems, {len(steps)} step lists and "
                          f"{len(groups)} groups")
    stats = stats if stats is not None else ShareStats()
    if not can_share(prm):
        return _plain(prm, list(range(len(problems))), problems, steps, stats,
                      [None] * len(problems), count_plain=True)
    return SharedPrefixScorer(prm, stats).score(problems, steps, groups)


def score_by_problem(prm: Any, problems: Sequence[str], steps: Sequence[Sequence[str]],
                     stats: ShareStats | None = None) -> list[list[float | None]]:
    """:func:`score_shared` with the solutions of one problem as one group: what the server
    does with a micro-batch (its requests name no group; completions of one prompt, sent close
    together, share the problem's text)."""
    return score_shared(prm, problems, steps, list(problems), stats)


@dataclass(eq=False)
class _Group:
    """A group's prefix (its ids, the reads inside it that its members need) and members."""

    ids: list[int]
    members: list[int]
    reads: list[int]
    kv: list[tuple[Any, Any]] | None = None
    probs: dict[int, float] | None = None


class SharedPrefixScorer:
    """Scores groups of solutions on their shared prefixes (see the module docstring)."""

    def __init__(self, prm: Any, stats: ShareStats | None = None):
        why = reuse_blocker(prm)
        if why is not None:
            raise PrmkitError(f"this PRM cannot share a prefix's key-value cache: {why}")
        self.prm = prm
        self.stats = stats if stats is not None else ShareStats()
        self.budget = max(1024, prm.config.token_budget // 4)

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
              groups: Sequence[Hashable | None]) -> list[list[float | None]]:
        prm, stats = self.prm, self.stats
        encs = [prm.encode(p, s) for p, s in zip(problems, steps)]
        stats.plain += sum(len(e.input_ids) for e in encs)
        out: list[list[float | None] | None] = [None] * len(problems)
        shared, alone = self._groups(problems, steps, groups, encs)
        if alone:
            _plain(prm, alone, problems, steps, stats, out, count_plain=False)
        prefixes = [g for g in shared if g.ids]
        for batch in prm.batches([len(g.ids) for g in prefixes]):
            part = [prefixes[i] for i in batch]
            self._read_prefixes(part)
            self._read_suffixes(part, encs, out)
            for g in part:
                g.kv = None   # this batch's caches go before the next batch is read
        return [row if row is not None else [] for row in out]

    # -- finding the groups -------------------------------------------------------------------
    def _groups(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
                groups: Sequence[Hashable | None], encs: Sequence[Encoded],
                ) -> tuple[list[_Group], list[int]]:
        """The groups of two or more solutions (same group, same problem) with their prefixes,
        and the solutions read whole."""
        by_key: dict[tuple[Hashable, str], list[int]] = {}
        alone = []
        for i, (p, g) in enumerate(zip(problems, groups)):
            if g is None or not encs[i].input_ids:
                alone.append(i)
            else:
                by_key.setdefault((g, p), []).append(i)
        out = []
        for (_, problem), members in by_key.items():
            if len(members) < 2:
                alone.extend(members)
                continue
            ids = group_prefix(self.prm.bound, problem, [steps[i] for i in members],
                               [encs[i].input_ids for i in members])
            ids = ids[:self.prm.max_length]
            group = _Group(ids, [], [])
            for i in members:
                cand = encs[i].input_ids
                n = _shared(ids, cand)
                if n < len(ids):
                    self.stats.fallbacks += 1
                    self.stats.partial += n > 0
                if n == 0:
                    alone.append(i)
                    continue
                group.members.append(i)
                group.reads.extend(p for p in encs[i].read_positions if p < n)
            if not group.members:
                continue
            if len(group.members) < 2 and not group.reads:   # nothing left to share
                alone.extend(group.members)
                continue
            group.reads = sorted(set(group.reads))
            out.append(group)
        return out, sorted(alone)

    # -- the forward passes ---------------------------------------------------------------------
    def _read_prefixes(self, part: list[_Group]) -> None:
        """One pass over the prefixes of ``part``: each one's cache and the reads inside it."""
        res = cached_forward(self.prm, [g.ids for g in part], [g.reads for g in part],
                             [[] for _ in part])
        self._count(res.real, res.computed)
        self.stats.groups += len(part)
        for b, g in enumerate(part):
            g.kv = [(layer.keys[b:b + 1, :, :len(g.ids)].clone(),
                     layer.values[b:b + 1, :, :len(g.ids)].clone()) for layer in res.cache.layers]
            g.probs = dict(zip(g.reads, res.probs[b]))

    def _read_suffixes(self, part: list[_Group], encs: Sequence[Encoded],
                       out: list[list[float | None] | None]) -> None:
        """Each member's ids after what it shares with its prefix, on the prefix's cache, in
        batches within the budget (members of one group together: one cache length, no mask)."""
        rows = []   # (past, group, member)
        for g in part:
            for i in g.members:
                rows.append((min(_shared(g.ids, encs[i].input_ids), len(encs[i].input_ids)), g, i))
        batch: list[tuple[int, _Group, int]] = []
        for row in rows:
            past, _, i = row
            new = len(encs[i].input_ids) - past
            wide = max([r[0] for r in batch] + [past]) + max(
                [len(encs[r[2]].input_ids) - r[0] for r in batch] + [new])
            if batch and wide * (len(batch) + 1) > self.budget:
                self._suffix_pass(batch, encs, out)
                batch = []
            batch.append(row)
        if batch:
            self._suffix_pass(batch, encs, out)

    def _suffix_pass(self, batch: list[tuple[int, _Group, int]], encs: Sequence[Encoded],
                     out: list[list[float | None] | None]) -> None:
        todo = [(past, g, i) for past, g, i in batch if len(encs[i].input_ids) > past]
        probs: list[list[float]] = []
        if todo:
            pasts = {}
            for past, g, _ in todo:
                if (id(g), past) not in pasts:
                    pasts[(id(g), past)] = [(k[:, :, :past], v[:, :, :past]) for k, v in g.kv]
            res = cached_forward(self.prm, [encs[i].input_ids[past:] for past, _, i in todo],
                                 [[p - past for p in encs[i].read_positions if p >= past]
                                  for past, _, i in todo],
                                 [pasts[(id(g), past)] for past, g, _ in todo])
            self._count(res.real, res.computed)
            probs = res.probs
        after = {i: row for (_, _, i), row in zip(todo, probs)}
        for past, g, i in batch:
            enc = encs[i]
            inside = [g.probs[p] for p in enc.read_positions if p < past]  # type: ignore[index]
            scores: list[float | None] = inside + after.get(i, [])
            out[i] = scores + [None] * (enc.n_steps - len(scores))
            self.stats.candidates += 1

    def _count(self, real: int, computed: int) -> None:
        stats, prm = self.stats, self.prm
        stats.forwards += 1
        stats.computed += real
        stats.padded += computed
        prm.stats.forwards += 1
        prm.stats.real_tokens += real
        prm.stats.computed_tokens += computed


def group_prefix(bound: Any, problem: str, steps: Sequence[Sequence[str]],
                 ids: Sequence[Sequence[int]]) -> list[int]:
    """The step format's ids of a group's prefix: the problem and the steps every solution
    begins with (the ids up to the last common step's read position), or the ids before the
    first step when none is common. A format that puts nothing before the first step (the
    ``turns`` layout: the problem is in the first step's turn) takes the ids that all the
    solutions' own ids (``ids``) begin with instead."""
    common = 0
    shortest = min(len(s) for s in steps)
    while common < shortest and all(s[common] == steps[0][common] for s in steps):
        common += 1
    if common:
        return list(bound.encode(problem, list(steps[0][:common])).input_ids)
    head = head_ids(bound, problem)
    if len(head) > len(bound.bos) or not ids:
        return head
    n = min(len(x) for x in ids)
    for other in ids[1:]:
        n = min(n, _shared(ids[0], other))
    return list(ids[0][:n])


def _plain(prm: Any, todo: Sequence[int], problems: Sequence[str], steps: Sequence[Sequence[str]],
           stats: ShareStats, out: list[Any], count_plain: bool) -> list[Any]:
    """Score ``todo`` plainly (one pass each) into ``out``; count what was fed (and, when
    ``count_plain``, add it to what one-pass scoring feeds: nobody counted it before)."""
    if not todo:
        return out
    counted = hasattr(prm, "stats") and hasattr(prm.stats, "real_tokens")
    before = (prm.stats.real_tokens, prm.stats.computed_tokens, prm.stats.forwards) if counted else None
    scores = prm.score([problems[i] for i in todo], [steps[i] for i in todo])
    for i, row in zip(todo, scores):
        out[i] = row
    stats.alone += len(todo)
    if before is not None:
        real = prm.stats.real_tokens - before[0]
        stats.computed += real
        stats.padded += prm.stats.computed_tokens - before[1]
        stats.forwards += prm.stats.forwards - before[2]
        if count_plain:
            stats.plain += real
    return out


def _shared(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n
