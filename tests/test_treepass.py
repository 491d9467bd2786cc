"""Tree attention's rows (prmkit/models/sharing/treepass.py), without a model: what each segment sees of
its ancestors, how a tree is cut into rows, and which models cannot take a tree's mask. The
scores of a tree pass against one-pass scoring are in tests/test_shared_prefix.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from prmkit.errors import PrmkitError
from prmkit.models.sharing.treepass import (Segment, joined, pack_blocker, share_rows, split_rows,
                                     token_tree, visible)

# a root (positions 0-3), a node below it that shares only 3 of its ids (a fallback: 3-5),
# leaves: one on the root (4-5), two on the node (6-7, 6), one on the node sharing 4 ids (4-6)
TREE = [
    Segment([1, 2, 3, 4], 0, None, [3]),
    Segment([9, 9, 9], 3, 0, [5]),
    Segment([5, 6], 4, 0, [5]),
    Segment([7, 8], 6, 1, [7]),
    Segment([7], 6, 1, [6]),
    Segment([6, 6, 6], 4, 1, [6]),
]


def test_a_segment_sees_exactly_the_positions_before_it_on_its_path():
    assert visible(TREE, 0) == []
    assert visible(TREE, 1) == [(0, 0, 3)]             # the root's first 3 ids only
    assert visible(TREE, 2) == [(0, 0, 4)]
    assert visible(TREE, 3) == [(1, 0, 3), (0, 0, 3)]  # the node's 3 own ids, the root's first 3
    assert visible(TREE, 5) == [(1, 0, 1), (0, 0, 3)]  # positions 0-2 from the root, 3 from the node
    broken = [Segment([1, 2], 0, None, []), Segment([3], 5, 0, [])]
    with pytest.raises(PrmkitError, match="internal"):
        visible(broken, 1)


def test_rows_take_leaves_with_all_their_ancestors():
    ((taken, row),) = split_rows(TREE, 100)
    assert taken == list(range(len(TREE))) and [s.parent for s in row] == [None, 0, 0, 1, 1, 1]
    rows = split_rows(TREE, 10)
    assert [t for t, _ in rows] == [[0, 2], [0, 1, 3, 4], [0, 1, 5]]
    for taken, row in rows:
        assert sum(len(s.ids) for s in row) <= 10
        for k, s in enumerate(row):   # parents renumbered within the row
            assert (None if s.parent is None else taken[s.parent]) == TREE[taken[k]].parent
            assert s.ids is TREE[taken[k]].ids
    # a row is at least one whole path, whatever the cap
    assert [t for t, _ in split_rows(TREE, 1)] == [[0, 2], [0, 1, 3], [0, 1, 4], [0, 1, 5]]


def test_rows_of_several_trees_share_a_row_and_keep_their_paths_apart():
    rows = [row for _, row in split_rows(TREE, 1)]            # sizes 6, 9, 8, 10
    assert share_rows(rows, 16) == [[3, 0], [1], [2]]          # longest first, first fit
    assert share_rows(rows, 1) == [[3], [1], [2], [0]]         # a row alone may pass the cap
    one = joined([rows[3], rows[0]])
    assert [s.parent for s in one] == [None, 0, 1, None, 3]
    assert visible(one, 4) == [(3, 0, 4)]                      # the second tree sees only itself
    assert visible(one, 2) == [(1, 0, 1), (0, 0, 3)]


@pytest.mark.parametrize("seqs", [
    [[1, 2, 3, 4, 5], [1, 2, 3, 9], [1, 2, 3, 4, 5], [1, 2, 3, 4], [1, 2, 7, 7, 7, 7]],
    [[5, 1], [6, 1, 2], [6, 1, 3]],             # no common first id: two roots
    [[4, 4, 4]] * 3,                            # all the same: one segment
], ids=["branches", "two-roots", "identical"])
def test_a_token_tree_reads_each_distinct_prefix_once_and_rebuilds_every_path(seqs):
    reads = [list(range(0, len(s), 2)) + [len(s) - 1] for s in seqs]
    segs, holders = token_tree(seqs, reads)
    distinct = {tuple(s[:k]) for s in seqs for k in range(1, len(s) + 1)}
    assert sum(len(seg.ids) for seg in segs) == len(distinct)
    for k, seg in enumerate(segs):
        assert seg.parent is None or seg.parent < k                 # parents first
        assert seg.start == (0 if seg.parent is None else segs[seg.parent].start + len(segs[seg.parent].ids))
        for j in range(k):                                          # siblings part at once
            if segs[j].parent == seg.parent and seg.ids and segs[j].ids:
                assert segs[j].ids[0] != seg.ids[0]
    for s, wanted, held in zip(seqs, reads, holders):
        for p, k in zip(wanted, held):
            path, j = [], k                                         # the ids up to the read
            while j is not None:
                path.append(j)
                j = segs[j].parent
            ids = [x for j in reversed(path) for x in segs[j].ids]
            assert ids[:p + 1] == s[:p + 1] and segs[k].start <= p < segs[k].start + len(segs[k].ids)
            assert p in segs[k].reads


def test_models_whose_attention_takes_no_mask_are_read_a_depth_at_a_time():
    def prm(impl, forward=lambda input_ids, attention_mask, position_ids: None, hazard=False):
        return SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(_attn_implementation=impl),
                                                     forward=forward),
                               format=SimpleNamespace(hazard=hazard))

    assert pack_blocker(prm("sdpa")) is None and pack_blocker(prm("eager")) is None
    assert "flash_attention_2" in pack_blocker(prm("flash_attention_2"))
    assert pack_blocker(prm("sdpa", hazard=True)) is None   # its sums follow each path
    assert "position ids" in pack_blocker(prm("sdpa", lambda input_ids, attention_mask: None))
