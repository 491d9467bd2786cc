"""Prefix sharing in one pass: each group of solutions read as the tree of its token ids.

:mod:`prmkit.models.sharing.prefix` takes the groups (same group, same problem) of a scoring call;
where the model's attention takes a custom mask, each group is read here. Its solutions' own
ids form a radix tree (:func:`prmkit.models.sharing.treepass.token_tree`): every distinct prefix is one
token of the tree, cut where two solutions part, so steps that differ only in a result's digits
share their words. The trees are cut into rows of at most ``row_tokens`` tokens, each row a leaf
set with all its ancestors (:func:`prmkit.models.sharing.treepass.split_rows`), rows of several groups
share a row of the pass (:func:`prmkit.models.sharing.treepass.share_rows`), and each pass is a
tree-attention forward (:func:`prmkit.models.sharing.treepass.tree_forward`). A solution's score at a read
is the segment's that holds the read; a segment repeated in several rows is taken from the first.

Why it is exact: each token is read at its position in its own solution, attending to exactly
the ids before it there, so its output is one-pass scoring's (float32: ~1e-6). Nothing falls
back: there is no prefix encoded apart from the solutions.
"""

from __future__ import annotations

from typing import Any, Hashable, Sequence

from prmkit.models.sharing.treepass import Segment, joined, share_rows, split_rows, token_tree, tree_forward
from prmkit.stepformat import Encoded

Rows = list[tuple[list[tuple[int, int]], list[Segment], int]]


def groups_of(problems: Sequence[str], groups: Sequence[Hashable | None],
              encs: Sequence[Encoded]) -> tuple[list[list[int]], list[int]]:
    """The groups of two or more solutions with ids (same group, same problem), and the
    solutions read whole."""
    by_key: dict[tuple[Hashable, str], list[int]] = {}
    alone: list[int] = []
    for i, (p, g) in enumerate(zip(problems, groups)):
        if g is None or not encs[i].input_ids:
            alone.append(i)
        else:
            by_key.setdefault((g, p), []).append(i)
    members = [m for m in by_key.values() if len(m) > 1]
    alone += [i for m in by_key.values() if len(m) == 1 for i in m]
    return members, sorted(alone)


def token_rows(members: list[list[int]], encs: Sequence[Encoded], row_tokens: int,
               ) -> tuple[Rows, list[list[list[int]]]]:
    """Each group's token tree in rows of at most ``row_tokens`` tokens (a group's longest
    solution, when longer), laid end to end in shared rows: per shared row, the (group,
    segment) of each of its segments, the segments and its size; per group, the segment
    holding each read of each solution."""
    rows: list[tuple[list[tuple[int, int]], list[Segment]]] = []
    holders = []
    for t, group in enumerate(members):
        segs, held = token_tree([encs[i].input_ids for i in group],
                                [encs[i].read_positions for i in group])
        holders.append(held)
        cap = max(row_tokens, max(len(encs[i].input_ids) for i in group))
        rows += [([(t, k) for k in taken], row) for taken, row in split_rows(segs, cap)]
    out = []
    for b in share_rows([row for _, row in rows], row_tokens):
        row = joined([rows[k][1] for k in b])
        out.append(([o for k in b for o in rows[k][0]], row, sum(len(s.ids) for s in row)))
    return out, holders


def read_token_trees(scorer: Any, members: list[list[int]], encs: Sequence[Encoded],
                     out: list[list[float | None] | None],
                     theirs: Sequence[list[list[float | None] | None]]) -> None:
    """Every group's token tree in rows of tree-attention passes of ``scorer``'s PRM (a
    :class:`prmkit.models.sharing.prefix.SharedPrefixScorer`: its ``row_tokens``, its batches and its
    accounting); each solution's scores into ``out``, and those of each of its extra heads
    (``scorer.heads``, read in the same passes) into that head's row of ``theirs``."""
    rows, holders = token_rows(members, encs, scorer.row_tokens)
    read: dict[tuple[int, int], dict[int, float]] = {}
    extra: list[dict[tuple[int, int], dict[int, float]]] = [{} for _ in scorer.heads]
    for batch in scorer.batch_rows(rows, lambda r: 0, lambda r: r[2]):
        res = tree_forward(scorer.prm, [row for _, row, _ in batch],
                           [h.read for h in scorer.heads])
        scorer.count(res.real, res.computed)
        for b, (owned, row, _) in enumerate(batch):
            for k, (owner, seg) in enumerate(zip(owned, row)):   # the first row's, if repeated
                read.setdefault(owner, dict(zip(seg.reads, res.probs[b][k])))
                for got, head in zip(extra, res.extra):
                    got.setdefault(owner, dict(zip(seg.reads, head[b][k])))
    for t, group in enumerate(members):
        for i, held in zip(group, holders[t]):
            pad: list[float | None] = [None] * (encs[i].n_steps - len(held))
            where = list(zip(held, encs[i].read_positions))
            out[i] = [read[(t, k)][p] for k, p in where] + pad
            for got, rows_of in zip(extra, theirs):
                rows_of[i] = [got[(t, k)][p] for k, p in where] + pad
            scorer.stats.candidates += 1
