"""Prefix sharing: a group of candidates scored at the cost of one prompt.

Best-of-N, Monte Carlo labeling and RL score many solutions that begin with the same tokens:
the N candidates of one problem share its prompt, and often their first steps. One-pass scoring
(:meth:`prmkit.models.hf.HFPRM.score`) reads each candidate whole, so the shared text is read N
times. Here the candidates of one group (records with the same ``group`` and problem; in the
server, the solutions of one micro-batch with the same problem) are read as a tree of prefixes:

1. **the group's prefix, once**: the step format's ids of the problem and of the steps that
   every candidate of the group begins with (:func:`group_prefix`): ``encode(problem, common)``,
   or, with no common step, the ids before the first step (:func:`prmkit.models.incremental.head_ids`,
   which leaves out the head's last token under a whole-text format; a format that puts nothing
   before the first step, RLHFlow's turns, takes the ids all the candidates begin with);
2. **a node for every run of steps that some of them share**: below a prefix, the candidates
   are split by their next step; two or more with the same next step get a child prefix,
   ``encode(problem, run)`` for the longest run of steps they all begin with, read once after
   its parent (lab candidates: right solutions are mostly word for word the same, so most
   share long runs with some others, not with all);
3. **each candidate's suffix**: its own ids after its deepest node, read after that node.

A node reads the scores of its own steps (the same for every candidate below it). **How the
tree is read**: where the model's attention takes a custom mask (``sdpa``, ``eager``), the
group is read as the finer tree of its token ids instead (:func:`prmkit.models.treepass.token_tree`:
every distinct prefix of the candidates' own ids once, cut at the token where two part, so
steps that differ only in a result's digits share their words), each tree a row of one pass
under a tree-attention mask, many groups a pass (:mod:`prmkit.models.tokentrees` over
:mod:`prmkit.models.treepass`; on a CPU every pass costs the reading of all the weights).
Otherwise the tree of steps above is read a depth at a time, each node on its parent's
key-value cache, then the suffixes on their nodes' caches
(:func:`prmkit.models.cachedpass.cached_forward`, the machinery search uses).

Why it is exact. A causal model's output at a position depends only on the ids up to it, and
every candidate is read on *its own* ids (``encode(problem, steps)``, as one-pass scoring
reads it): the prefix's cache is used only for the leading ids the two share. Under the
``pieces`` tokenisation the prefix's ids are a prefix of every candidate's by construction;
under ``whole`` (Math-Shepherd, Qwen, RLHFlow: :mod:`prmkit.wholetext`) a tokenizer may merge
across the boundary, so each candidate is checked. A candidate whose ids do not begin with the
prefix's (or a node whose ids do not begin with its parent's) is a **fallback**, counted: it
reuses the ids both share (``partial``) or, sharing none, is read whole. Reads inside the
shared ids are taken from the prefix's part at the same positions. Scores equal one-pass
scoring to ~1e-6 in float32 (the order of the sums in attention differs); in bfloat16 they
move by the batch make-up, as one-pass scores do.

A hazard head sums along each token's path: in one pass from the ancestor's log S at the cut
(:func:`prmkit.models.treepass.tree_survival`); a depth at a time, a node keeps its log S (and
final hidden states) at each position, and a row after ``past`` ids starts from ``past - 1``.

What cannot share falls back to plain one-pass scoring: a PRM that is not an HF model or cannot
reuse a cache (:func:`prmkit.models.incremental.reuse_blocker`: bidirectional models, sliding
windows, the implicit PRM), records without a group, and groups of one.

Accounting (:class:`ShareStats`): ``plain`` is what one-pass scoring feeds (every candidate's
ids), ``computed`` what this feeds (each node or token-tree segment once, or once per tree row
that needs it, each suffix, the candidates read whole); ``saved = plain - computed``. The token
tree reads each candidate on its own ids, so it has no fallbacks. Both count real tokens,
padding excluded; ``padded`` counts the padded size of every pass.

Memory. Groups are taken a token budget of their prefixes at a time (:meth:`HFPRM.batches`)
and read before the next groups. A pass holds rows x (cached + new) tokens within a quarter of
the token budget (a row carries its own copy of its prefix's cache, as in search; a tree row
its own mask, rows x width x width).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable, Sequence

from prmkit.errors import PrmkitError
from prmkit.models.cachedpass import cached_forward
from prmkit.models.incremental import common_prefix_length, head_ids, reuse_blocker
from prmkit.models.sharestats import ShareStats
from prmkit.models.tokentrees import groups_of, read_token_trees, token_rows
from prmkit.models.treepass import ROW_TOKENS, pack_blocker
from prmkit.stepformat import Encoded

__all__ = ["SharedPrefixScorer", "ShareStats", "can_share", "group_prefix", "has_groups",
           "score_by_problem", "score_shared"]


def can_share(prm: Any) -> bool:
    """True when ``prm`` is an HF PRM that can reuse a key-value cache."""
    from prmkit.models.hf import HFPRM

    return isinstance(prm, HFPRM) and reuse_blocker(prm, carries_hazard=True) is None


def has_groups(records: Sequence[Any]) -> bool:
    """True when two of ``records`` (with ``problem`` and ``group``) have the same group and
    problem, so that sharing has something to share."""
    keys = [(r.group, r.problem) for r in records if r.group is not None]
    return len(set(keys)) < len(keys)


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

    def __init__(self, prm: Any, stats: ShareStats | None = None, also: Any = None):
        why = reuse_blocker(prm, carries_hazard=True)
        if why is not None:
            raise PrmkitError(f"this PRM cannot share a prefix's key-value cache: {why}")
        self.hazard = bool(prm.format.hazard)
        self.prm = prm
        self.stats = stats if stats is not None else ShareStats()
        self.budget = max(1024, prm.config.token_budget // 4)
        self.packed = pack_blocker(prm) is None   # a tree in one pass, else a depth at a time
        self.row_tokens = ROW_TOKENS
        # a companion read in the same passes (score_shared_pair checks it may be), its scores
        self.also, self.also_scores = also, []
        if also is not None and not self.packed:
            raise PrmkitError("a companion head is read in tree passes only")

    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
              groups: Sequence[Hashable | None]) -> list[list[float | None]]:
        prm, stats = self.prm, self.stats
        encs = [prm.encode(p, s) for p, s in zip(problems, steps)]
        stats.plain += sum(len(e.input_ids) for e in encs)
        out: list[list[float | None] | None] = [None] * len(problems)
        if self.packed:
            members, alone = groups_of(problems, groups, encs)
            theirs: list[list[float | None] | None] = [None] * len(problems)
            if alone:
                _plain(prm, alone, problems, steps, stats, out, count_plain=False)
                if self.also is not None:
                    _plain(self.also, alone, problems, steps, ShareStats(), theirs, False)
            stats.groups += len(members)
            read_token_trees(self, members, encs, out, theirs)
            self.also_scores = [row if row is not None else [] for row in theirs]
            return [row if row is not None else [] for row in out]
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

    def plan(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
             groups: Sequence[Hashable | None]) -> ShareStats:
        """What :meth:`score` would feed (``plain``, ``computed``, the groups, fallbacks), from
        the encodings alone: no forward pass (``padded`` and ``forwards`` stay 0)."""
        encs = [self.prm.encode(p, s) for p, s in zip(problems, steps)]
        if self.packed:
            members, alone = groups_of(problems, groups, encs)
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

