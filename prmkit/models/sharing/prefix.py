"""Prefix sharing: a group of candidates scored at the cost of its distinct tokens.

The candidates of one group (records with the same ``group`` and problem; in the server, the
solutions of one micro-batch with the same problem) are read as a tree of their shared prefixes
(docs/scoring.md, "Prefix sharing"):

* where attention takes a custom mask (``sdpa``, ``eager``), the radix tree of the candidates'
  token ids, in tree-attention passes (``tokentrees`` over ``treepass``), many groups a pass;
* otherwise the tree of shared *steps* (:func:`group_prefix`), a depth at a time, each node on
  its parent's key-value cache (``cachedpass``).

Every candidate is read on its own ids, as one-pass scoring reads it (float32: ~1e-6); under a
whole-text tokenisation a candidate whose ids do not begin with its node's is a counted
fallback. Only architectures on :data:`prmkit.models.architectures.TREE_EXACT` share, and under
local attention only groups that fit the span; the rest is read plain and :attr:`ShareStats.off`
says why. :class:`ShareStats`: ``plain`` is what one-pass scoring feeds, ``computed`` what this
feeds, in real tokens. A pass holds rows x tokens within a quarter of the token budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Hashable, Sequence

from prmkit.errors import PrmkitError
from prmkit.models.sharing.cachedpass import cached_forward
from prmkit.models.architectures import model_type
from prmkit.models.base import PRM, Counted
from prmkit.models.reading import ScoreStats
from prmkit.models.sharing.incremental import common_prefix_length, head_ids
from prmkit.models.sharing.policy import sharing_of
from prmkit.models.sharing.stats import ShareStats
from prmkit.models.sharing.tokentrees import groups_of, read_token_trees, token_rows
from prmkit.models.sharing.treepass import ROW_TOKENS
from prmkit.stepformat import Encoded

if TYPE_CHECKING:
    from prmkit.models.backends.hf import HFPRM

__all__ = ["ExtraHead", "SharedPrefixScorer", "ShareStats", "can_share", "group_prefix", "has_groups",
           "score_by_problem", "score_shared"]


def can_share(prm: PRM) -> bool:
    """True when ``prm`` is an HF PRM whose architecture prefix sharing reads exactly."""
    return sharing_of(prm).can_share


def sharing_blocker(prm: PRM) -> str | None:
    """Why prefix sharing does not apply to ``prm``, or None (a model with local attention
    shares the groups that fit its span: :meth:`SharedPrefixScorer.score`)."""
    return sharing_of(prm).share


def has_groups(records: Sequence[Any]) -> bool:
    """True when two of ``records`` (with ``problem`` and ``group``) have the same group and
    problem, so that sharing has something to share."""
    keys = [(r.group, r.problem) for r in records if r.group is not None]
    return len(set(keys)) < len(keys)


def score_shared(prm: PRM, problems: Sequence[str], steps: Sequence[Sequence[str]],
                 groups: Sequence[Hashable | None], stats: ShareStats | None = None,
                 ) -> list[list[float | None]]:
    """One score list per solution, as ``prm.score(problems, steps)`` gives, with the solutions
    of one group (``groups[i]``, None: none) scored on their shared prefix's cache. Any PRM
    works; one that cannot share is scored plainly. ``stats`` (when given) is added to."""
    if not (len(problems) == len(steps) == len(groups)):
        raise PrmkitError(f"{len(problems)} problems, {len(steps)} step lists and "
                          f"{len(groups)} groups")
    stats = stats if stats is not None else ShareStats()
    why = sharing_blocker(prm)
    if why is not None:
        stats.off = stats.off or why
        return _plain(prm, list(range(len(problems))), problems, steps, stats,
                      [None] * len(problems), count_plain=True)
    return SharedPrefixScorer(prm, stats).score(problems, steps, groups)


def score_by_problem(prm: PRM, problems: Sequence[str], steps: Sequence[Sequence[str]],
                     stats: ShareStats | None = None) -> list[list[float | None]]:
    """:func:`score_shared` with the solutions of one problem as one group: what the server
    does with a micro-batch (its requests name no group; completions of one prompt, sent close
    together, share the problem's text)."""
    return score_shared(prm, problems, steps, list(problems), stats)


@dataclass(eq=False)
class _Node:
    """A prefix in a group's tree: its ids, the node whose cache covers ``ids[:past]`` (None:
    read from the start), the positions read in its own part, and its cache once read."""

    ids: list[int]
    parent: "_Node | None" = None
    past: int = 0
    depth: int = 0
    reads: set[int] = field(default_factory=set)
    kv: list[tuple[Any, Any]] | None = None
    probs: dict[int, float] = field(default_factory=dict)
    log_s: Any = None     # a hazard head: log S at each position of its own part
    hidden: Any = None    # a surprisal head: the final hidden state there


@dataclass(frozen=True)
class ExtraHead:
    """Another head on the body of the PRM a :class:`SharedPrefixScorer` scores with: ``read``
    takes the final hidden states at the reads of a tree pass (reads x hidden) and returns one
    probability per read; ``prm`` is the same body with this head, for the solutions read alone.
    The caller vouches that ``prm`` reads the same ids at the same positions (for example
    :mod:`prmkit.lab.verifiers.sharedpair`)."""

    prm: PRM
    read: Callable[[Any], list[float]]


@dataclass(eq=False)
class _Leaf:
    """A solution, read after the first ``past`` of its ids on ``node``'s cache."""

    i: int
    node: _Node
    past: int


@dataclass(eq=False)
class _Tree:
    root: _Node
    nodes: list[_Node]
    leaves: list[_Leaf]


class SharedPrefixScorer:
    """Scores groups of solutions on their shared prefixes (see the module docstring)."""

    def __init__(self, prm: "HFPRM", stats: ShareStats | None = None,
                 heads: Sequence[ExtraHead] = ()):
        sharing = sharing_of(prm)
        if sharing.share is not None:
            raise PrmkitError(f"prefix sharing does not apply to this PRM: {sharing.share}")
        self.hazard = bool(prm.format.hazard)
        self.prm = prm
        self.stats = stats if stats is not None else ShareStats()
        self.budget = max(1024, prm.config.token_budget // 4)
        self.packed = sharing.pack is None   # a tree in one pass, else a depth at a time
        self.span = sharing.span             # a window or chunk a group must fit in
        self.row_tokens = ROW_TOKENS
        # extra heads on the same body, read on the same passes' hidden states; after
        # score(), head_scores[j] holds heads[j]'s step scores
        self.heads = tuple(heads)
        self.head_scores: list[list[list[float | None]]] = [[] for _ in self.heads]
        if self.heads and not self.packed:
            raise PrmkitError("extra heads are read only in tree passes (one tree a pass); "
                              f"this PRM reads a depth at a time: {sharing.pack}")

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
              groups: Sequence[Hashable | None]) -> list[list[float | None]]:
        prm, stats = self.prm, self.stats
        encs = [prm.encode(p, s) for p, s in zip(problems, steps)]
        stats.plain += sum(len(e.input_ids) for e in encs)
        out: list[list[float | None] | None] = [None] * len(problems)
        if self.packed:
            members, alone = self.within_span(*groups_of(problems, groups, encs), encs)
            theirs: list[list[list[float | None] | None]] = [[None] * len(problems)
                                                            for _ in self.heads]
            if alone:
                _plain(prm, alone, problems, steps, stats, out, count_plain=False)
                for head, rows in zip(self.heads, theirs):
                    _plain(head.prm, alone, problems, steps, ShareStats(), rows, False)
            stats.groups += len(members)
            read_token_trees(self, members, encs, out, theirs)
            self.head_scores = [[row if row is not None else [] for row in rows] for rows in theirs]
            return [row if row is not None else [] for row in out]
        if self.span is not None:   # the depth-wise caches would drop the window: read plain
            stats.off = stats.off or (f"{model_type(prm.model)} attends over a window and its "
                                      f"attention takes no tree mask")
            return _plain(prm, list(range(len(problems))), problems, steps, stats, out, False)
        trees, alone = self._trees(problems, steps, groups, encs)
        if alone:
            _plain(prm, alone, problems, steps, stats, out, count_plain=False)
        for batch in prm.batches([len(t.root.ids) for t in trees]):
            part = [trees[i] for i in batch]
            stats.groups += len(part)
            nodes = [n for t in part for n in t.nodes]
            for depth in range(max(n.depth for n in nodes) + 1):   # a parent before its children
                self._read_nodes([n for n in nodes if n.depth == depth])
            leaves = sorted((leaf for t in part for leaf in t.leaves), key=lambda x: -x.past)
            self._read_leaves(leaves, encs, out)
            for n in nodes:   # this batch's caches go before the next batch is read
                n.kv = n.log_s = n.hidden = None
        return [row if row is not None else [] for row in out]

    def within_span(self, members: list[list[int]], alone: list[int], encs: Sequence[Encoded],
                    ) -> tuple[list[list[int]], list[int]]:
        """The groups a tree mask reads exactly: under local attention (a sliding window, a
        chunk), those whose every solution fits the span, where the model's own mask would
        hide nothing; the others join the solutions read plain, with the reason kept."""
        if self.span is None:
            return members, alone
        fits = [g for g in members if max(len(encs[i].input_ids) for i in g) <= self.span]
        if len(fits) < len(members):
            longest = max(len(encs[i].input_ids) for g in members for i in g)
            self.stats.off = self.stats.off or (
                f"{model_type(self.prm.model)} attends over a window of {self.span} tokens and "
                f"a solution has {longest}: groups longer than the window are read plain")
        rest = [i for g in members if g not in fits for i in g]
        return fits, sorted(alone + rest)

    def plan(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
             groups: Sequence[Hashable | None]) -> ShareStats:
        """What :meth:`score` would feed (``plain``, ``computed``, the groups, fallbacks), from
        the encodings alone: no forward pass (``padded`` and ``forwards`` stay 0)."""
        encs = [self.prm.encode(p, s) for p, s in zip(problems, steps)]
        if self.packed:
            members, alone = self.within_span(*groups_of(problems, groups, encs), encs)
            plan = ShareStats(groups=len(members), candidates=sum(map(len, members)))
            plan.computed = sum(len(s.ids) for _, row, _ in
                                token_rows(members, encs, self.row_tokens)[0] for s in row)
        else:
            kept, self.stats = self.stats, ShareStats()
            try:
                trees, alone = self._trees(problems, steps, groups, encs)
                plan = self.stats
            finally:
                self.stats = kept
            plan.groups, plan.candidates = len(trees), sum(len(t.leaves) for t in trees)
            plan.computed = sum(len(n.ids) - n.past for t in trees for n in t.nodes) + sum(
                len(encs[x.i].input_ids) - x.past for t in trees for x in t.leaves)
        plan.plain = sum(len(e.input_ids) for e in encs)
        plan.alone = len(alone)
        plan.computed += sum(len(encs[i].input_ids) for i in alone)
        return plan

    # -- the trees: a group's prefix, and below it the steps some of its solutions share --------
    def _trees(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
               groups: Sequence[Hashable | None], encs: Sequence[Encoded],
               ) -> tuple[list[_Tree], list[int]]:
        """The trees of the groups of two or more solutions (same group, same problem), and the
        solutions read whole."""
        members, alone = groups_of(problems, groups, encs)
        trees = []
        for group in members:
            problem = problems[group[0]]
            ids = group_prefix(self.prm.bound, problem, [steps[i] for i in group],
                               [encs[i].input_ids for i in group])
            tree = _Tree(_Node(ids[:self.prm.max_length]), [], [])
            tree.nodes.append(tree.root)
            self._grow(tree, tree.root, group, common_steps([steps[i] for i in group]),
                       problem, steps, encs, alone)
            if tree.leaves:
                trees.append(tree)
        return trees, sorted(alone)

    def _grow(self, tree: _Tree, node: _Node, members: list[int], k: int, problem: str,
              steps: Sequence[Sequence[str]], encs: Sequence[Encoded], alone: list[int]) -> None:
        """Below ``node`` (whose members all begin with the same ``k`` steps): the members that
        share step k and more with another get a child node; the rest are its leaves."""
        by_next: dict[str, list[int]] = {}
        for i in members:
            if len(steps[i]) > k:
                by_next.setdefault(steps[i][k], []).append(i)
            else:
                self._attach(tree, node, i, encs, alone)
        for sub in by_next.values():
            more = common_steps([steps[i] for i in sub], k) if len(sub) > 1 else k
            ids = list(self.prm.bound.encode(problem, list(steps[sub[0]][:more])).input_ids)
            ids = ids[:self.prm.max_length]
            if more == k or len(ids) <= len(node.ids):   # alone below, or nothing to add
                for i in sub:
                    self._attach(tree, node, i, encs, alone)
                continue
            past = common_prefix_length(node.ids, ids)
            if past < len(node.ids):   # the node's ids are not a prefix of the child's
                self.stats.fallbacks += 1
                self.stats.partial += past > 0
            child = _Node(ids, node if past else None, past, node.depth + 1)
            tree.nodes.append(child)
            self._grow(tree, child, sub, more, problem, steps, encs, alone)

    def _attach(self, tree: _Tree, node: _Node, i: int, encs: Sequence[Encoded],
                alone: list[int]) -> None:
        """Solution ``i`` continues ``node``: checked, its reads inside the shared ids asked of
        the node (or the ancestor) that reads them."""
        n = common_prefix_length(node.ids, encs[i].input_ids)
        if n < len(node.ids):
            self.stats.fallbacks += 1
            self.stats.partial += n > 0
        if n == 0:
            alone.append(i)
            return
        tree.leaves.append(_Leaf(i, node, n))
        for p in encs[i].read_positions:
            if p < n:
                _covering(node, p).reads.add(p)

    # -- the forward passes ---------------------------------------------------------------------
    def _finish(self, leaf: _Leaf, enc: Encoded, after: list[float],
                out: list[list[float | None] | None]) -> None:
        """Solution ``leaf.i``'s scores: those read inside its nodes, then ``after``."""
        inside = [_covering(leaf.node, p).probs[p] for p in enc.read_positions if p < leaf.past]
        scores: list[float | None] = inside + after
        out[leaf.i] = scores + [None] * (enc.n_steps - len(scores))
        self.stats.candidates += 1

    def batch_rows(self, rows: list[Any], past: Any, new: Any) -> list[list[Any]]:
        """Rows in batches of at most ``budget`` rows x (longest past + longest new ids)."""
        batches: list[list[Any]] = [[]]
        wide_past = wide_new = 0
        for row in rows:
            p, n = max(wide_past, past(row)), max(wide_new, new(row))
            if batches[-1] and (p + n) * (len(batches[-1]) + 1) > self.budget:
                batches.append([])
                p, n = past(row), new(row)
            batches[-1].append(row)
            wide_past, wide_new = p, n
        return [b for b in batches if b]

    def _read_nodes(self, level: list[_Node]) -> None:
        """The nodes of one depth: each one's ids after its parent's on the parent's cache;
        keep each one's whole cache and read what its leaves need inside it."""
        for batch in self.batch_rows(level, lambda n: n.past, lambda n: len(n.ids) - n.past):
            reads = [sorted(n.reads) for n in batch]
            res = cached_forward(self.prm, [n.ids[n.past:] for n in batch],
                                 [[p - n.past for p in r] for n, r in zip(batch, reads)],
                                 [_cut(n.parent.kv, n.past) if n.parent else [] for n in batch],
                                 self._carry([(n.parent, n.past) for n in batch]))
            self.count(res.real, res.computed)
            width = max(n.past for n in batch)
            for b, (n, r) in enumerate(zip(batch, reads)):
                a, z = width - n.past, width + len(n.ids) - n.past
                n.kv = [(layer.keys[b:b + 1, :, a:z].clone(), layer.values[b:b + 1, :, a:z].clone())
                        for layer in res.cache.layers]
                n.probs = dict(zip(r, res.probs[b]))
                if res.log_s is not None:
                    n.log_s = res.log_s[b, :len(n.ids) - n.past].clone()
                if res.hidden is not None:
                    n.hidden = res.hidden[b, :len(n.ids) - n.past].clone()

    def _carry(self, where: list[tuple[_Node | None, int]]) -> list[tuple[float, Any]] | None:
        """A hazard head's carry for rows that continue ``node``'s chain after ``past`` ids:
        log S and the final hidden state at position past - 1 (:func:`cached_forward`)."""
        if not self.hazard:
            return None
        out: list[tuple[float, Any]] = []
        for node, past in where:
            if node is None or past == 0:
                out.append((0.0, None))
                continue
            holder = _covering(node, past - 1)
            j = past - 1 - holder.past
            out.append((float(holder.log_s[j]),
                        holder.hidden[j] if holder.hidden is not None else None))
        return out

    def _read_leaves(self, leaves: list[_Leaf], encs: Sequence[Encoded],
                     out: list[list[float | None] | None]) -> None:
        """Each solution's ids after what it shares with its node, on the node's cache."""
        for batch in self.batch_rows(leaves, lambda x: x.past,
                                   lambda x: len(encs[x.i].input_ids) - x.past):
            todo = [x for x in batch if len(encs[x.i].input_ids) > x.past]
            after: dict[int, list[float]] = {}
            if todo:
                res = cached_forward(self.prm, [encs[x.i].input_ids[x.past:] for x in todo],
                                     [[p - x.past for p in encs[x.i].read_positions if p >= x.past]
                                      for x in todo], [_cut(x.node.kv, x.past) for x in todo],
                                     self._carry([(x.node, x.past) for x in todo]))
                self.count(res.real, res.computed)
                after = {x.i: row for x, row in zip(todo, res.probs)}
            for x in batch:
                self._finish(x, encs[x.i], after.get(x.i, []), out)

    def count(self, real: int, computed: int) -> None:
        stats, prm = self.stats, self.prm
        stats.forwards += 1
        stats.computed += real
        stats.padded += computed
        prm.stats.forwards += 1
        prm.stats.real_tokens += real
        prm.stats.computed_tokens += computed


def common_steps(steps: Sequence[Sequence[str]], start: int = 0) -> int:
    """How many leading steps every solution in ``steps`` has alike (at least ``start``, which
    they are known to share)."""
    common, shortest = start, min(len(s) for s in steps)
    while common < shortest and all(s[common] == steps[0][common] for s in steps):
        common += 1
    return common


def _covering(node: _Node, p: int) -> _Node:
    """The node on ``node``'s path that reads position ``p`` (its own part holds it)."""
    while p < node.past and node.parent is not None:
        node = node.parent
    return node


def _cut(kv: list[tuple[Any, Any]] | None, n: int) -> list[tuple[Any, Any]]:
    if kv is None:
        raise PrmkitError("internal: a prefix's cache is missing")
    return [(k[:, :, :n], v[:, :, :n]) for k, v in kv]


def group_prefix(bound: Any, problem: str, steps: Sequence[Sequence[str]],
                 ids: Sequence[Sequence[int]]) -> list[int]:
    """The step format's ids of a group's prefix: the problem and the steps every solution
    begins with (the ids up to the last common step's read position), or the ids before the
    first step when none is common. A format that puts nothing before the first step (the
    ``turns`` layout: the problem is in the first step's turn) takes the ids that all the
    solutions' own ids (``ids``) begin with instead."""
    common = common_steps(steps)
    if common:
        return list(bound.encode(problem, list(steps[0][:common])).input_ids)
    head = head_ids(bound, problem)
    if len(head) > len(bound.bos) or not ids:
        return head
    n = min(len(x) for x in ids)
    for other in ids[1:]:
        n = min(n, common_prefix_length(ids[0], other))
    return list(ids[0][:n])


def _plain(prm: PRM, todo: Sequence[int], problems: Sequence[str], steps: Sequence[Sequence[str]],
           stats: ShareStats, out: list[Any], count_plain: bool) -> list[Any]:
    """Score ``todo`` plainly (one pass each) into ``out``; count what was fed (and, when
    ``count_plain``, add it to what one-pass scoring feeds: nobody counted it before)."""
    if not todo:
        return out
    counted = isinstance(prm, Counted) and isinstance(prm.stats, ScoreStats)
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

