"""Tree attention: a group's tree of shared prefixes read in one forward pass.

A tree (:mod:`prmkit.models.sharing.prefix`) is one row of one pass. Its **segments** (a node's
ids after those it shares with its parent, a candidate's after those it shares with its node)
are laid end to end; each token gets the position id it has in its own solution and an attention
mask that lets it see its own path only. This is the tree attention of speculative decoding's
token trees (SpecInfer, Medusa), used to read solutions rather than draft them. Each token
attends to exactly the ids before it in its own solution, at the same positions, so scores equal
one-pass scores to float rounding (float32: ~1e-7). The trees of many groups are rows of one
pass, padded on the right; a padding token sees only itself.

A row holds at most ``ROW_TOKENS`` tokens (attention costs its length squared), or one path
where that is longer; a larger tree is split into rows (:func:`split_rows`), ancestors repeated
and counted as computed. A hazard head sums its log keep probabilities along each token's own
path (:func:`tree_survival`).

Needs (:func:`pack_blocker`) attention that takes an additive 4D mask and position ids
(transformers' ``sdpa`` and ``eager``); otherwise :mod:`prmkit.models.sharing.prefix` reads the
tree a depth at a time on caches. Why one pass: docs/scoring.md, "Design notes".
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING, Any, Callable, Sequence

from prmkit.errors import PrmkitError
# re-exported: where a PRM can share is decided in prmkit.models.sharing.policy
from prmkit.models.sharing.policy import MASKED_ATTENTION, mask_blocker, pack_blocker  # noqa: F401

if TYPE_CHECKING:
    from prmkit.models.backends.hf import HFPRM

ROW_TOKENS = 512        # the longest row, unless one solution is longer


@dataclass(eq=False)
class Segment:
    """A run of one path's ids: ``ids`` at the path's positions ``start``, ``start + 1``, ...;
    the path's positions before ``start`` are those of segment ``parent`` (an index into the same
    list, earlier; None: the path begins here, so ``start`` is 0) and of its ancestors. ``reads``
    are the path positions (inside this segment) whose score is wanted."""

    ids: Sequence[int]
    start: int
    parent: int | None
    reads: Sequence[int]


@dataclass
class TreePass:
    probs: list[list[list[float]]]   # [row][segment] one probability per read, in order
    real: int                        # tokens fed, padding excluded
    computed: int                    # rows x width
    extra: list[list[list[list[float]]]] = field(default_factory=list)   # each extra head's, the same way


def token_tree(seqs: Sequence[Sequence[int]], reads: Sequence[Sequence[int]],
               ) -> tuple[list[Segment], list[list[int]]]:
    """The radix tree of one group's id lists ``seqs`` (none empty), as segments, parents
    first: a segment for each run of ids that the same solutions share, cut at the token where
    two of them part, so that every distinct prefix is read once. Each segment reads the
    positions of ``reads`` (per solution, its read positions) that fall inside it; per
    solution, the segment that holds each of its reads, in order."""
    segments: list[Segment] = []
    paths: list[list[int]] = [[] for _ in seqs]    # per solution, its segments, root first
    todo: list[tuple[list[int], int, int | None]] = [(list(range(len(seqs))), 0, None)]
    while todo:
        members, depth, parent = todo.pop()
        first, end = seqs[members[0]], depth
        while all(len(seqs[i]) > end and seqs[i][end] == first[end] for i in members):
            end += 1
        here = parent
        if end > depth:                 # only a root can be empty (its members part at once)
            segments.append(Segment(list(first[depth:end]), depth, parent, []))
            here = len(segments) - 1
            for i in members:
                paths[i].append(here)
        parts: dict[int, list[int]] = {}
        for i in members:
            if len(seqs[i]) > end:
                parts.setdefault(seqs[i][end], []).append(i)
        todo += [(part, end, here) for part in parts.values()]
    wanted: list[set[int]] = [set() for _ in segments]
    holders: list[list[int]] = []
    for path, positions in zip(paths, reads):
        held = [next(k for k in reversed(path) if segments[k].start <= p) for p in positions]
        for k, p in zip(held, positions):
            wanted[k].add(p)
        holders.append(held)
    return [Segment(s.ids, s.start, s.parent, sorted(w)) for s, w in zip(segments, wanted)], holders


def split_rows(segments: Sequence[Segment], cap: int) -> list[tuple[list[int], list[Segment]]]:
    """The segments of one tree (parents before children) in rows of at most ``cap`` tokens, a
    row at least one path: each row the leaves it holds (segments that no other continues) with
    all their ancestors, in the tree's order. Per row: the indices it took, and its segments
    with their parents renumbered within the row."""
    parents = {s.parent for s in segments if s.parent is not None}
    rows: list[list[int]] = []
    row: set[int] = set()
    size = 0
    for i in range(len(segments)):
        if i in parents:
            continue
        path = _missing(segments, i, row)
        add = sum(len(segments[j].ids) for j in path)
        if row and size + add > cap:
            rows.append(sorted(row))
            row, size = set(), 0
            path = _missing(segments, i, row)
            add = sum(len(segments[j].ids) for j in path)
        row.update(path)
        size += add
    if row:
        rows.append(sorted(row))
    out = []
    for taken in rows:
        at = {j: k for k, j in enumerate(taken)}
        out.append((taken, [Segment(segments[j].ids, segments[j].start,
                                    None if segments[j].parent is None else at[segments[j].parent],
                                    segments[j].reads) for j in taken]))
    return out


def share_rows(rows: Sequence[Sequence[Segment]], cap: int) -> list[list[int]]:
    """Rows laid end to end in shared rows of at most ``cap`` tokens (or one row, when longer),
    first fit, longest first: the indices of the rows each shared row holds. Their segments
    begin their own paths, so the mask keeps the trees apart, and a pass pads less."""
    size = [sum(len(s.ids) for s in row) for row in rows]
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(rows)), key=lambda i: -size[i]):
        k = next((k for k, r in enumerate(room) if size[i] <= r), None)
        if k is None:
            bins.append([])
            room.append(max(cap, size[i]))
            k = len(bins) - 1
        bins[k].append(i)
        room[k] -= size[i]
    return bins


def joined(rows: Sequence[Sequence[Segment]]) -> list[Segment]:
    """The segments of ``rows`` as one row, their parents renumbered."""
    out: list[Segment] = []
    for row in rows:
        base = len(out)
        out += [Segment(s.ids, s.start, None if s.parent is None else base + s.parent, s.reads)
                for s in row]
    return out


def _missing(segments: Sequence[Segment], i: int, row: set[int]) -> list[int]:
    """Segment ``i`` and those of its ancestors not in ``row`` yet."""
    path: list[int] = []
    j: int | None = i
    while j is not None and j not in row:
        path.append(j)
        j = segments[j].parent
    return path


def visible(row: Sequence[Segment], k: int) -> list[tuple[int, int, int]]:
    """What segment ``k`` of ``row`` sees of its ancestors: ``(segment, first, end)``, offsets
    into each ancestor's ids, covering the path's positions ``0 .. start`` exactly once."""
    out, limit, j = [], row[k].start, row[k].parent
    while j is not None:
        seg = row[j]
        end = min(limit, seg.start + len(seg.ids))
        if end < limit:
            raise PrmkitError("internal: a tree segment starts past its parent's ids")
        if end > seg.start:
            out.append((j, 0, end - seg.start))
        limit, j = min(limit, seg.start), seg.parent
    if limit:
        raise PrmkitError("internal: a tree segment's path does not begin at position 0")
    return out


def tree_inputs(rows: Sequence[Sequence[Segment]], pad_id: int) -> tuple[Any, Any, Any, list[list[int]]]:
    """The tensors of a pass over ``rows`` (each the segments of a tree laid end to end): ids
    (padded on the right with ``pad_id``), position ids (each token's position on its own
    path), the additive attention mask (rows x 1 x width x width, float32: 0 where a token sees
    another, the dtype's minimum elsewhere; a padding token sees only itself) and, per row, the
    offset of each segment."""
    import torch

    lengths = [sum(len(s.ids) for s in row) for row in rows]
    width = max(1, max(lengths, default=1))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    seen = torch.zeros((len(rows), width, width), dtype=torch.bool)
    offsets = []
    for b, row in enumerate(rows):
        offsets.append([0, *accumulate(len(s.ids) for s in row)])
        at = offsets[-1]
        for k, seg in enumerate(row):
            a, n = at[k], len(seg.ids)
            if not n:
                continue
            ids[b, a:a + n] = torch.tensor(list(seg.ids), dtype=torch.long)
            positions[b, a:a + n] = torch.arange(seg.start, seg.start + n)
            seen[b, a:a + n, a:a + n] = torch.ones((n, n), dtype=torch.bool).tril()
            for j, lo, hi in visible(row, k):
                seen[b, a:a + n, at[j] + lo:at[j] + hi] = True
        pad = torch.arange(lengths[b], width)
        seen[b, pad, pad] = True
    mask = torch.zeros(seen.shape, dtype=torch.float32).masked_fill_(~seen, torch.finfo(torch.float32).min)
    return ids, positions, mask.unsqueeze(1), offsets


def tree_forward(prm: "HFPRM", rows: Sequence[Sequence[Segment]],
                 heads: Sequence[Callable[[Any], list[float]]] = ()) -> TreePass:
    """One forward pass of ``prm`` (an HFPRM, :func:`pack_blocker` None) over ``rows``, each the
    segments of a tree laid end to end under the tree's attention mask (module docstring).
    ``heads``: extra heads on the same body, each given this pass's final hidden states at the
    reads (reads x hidden) and returning one probability per read."""
    import torch

    from prmkit.models.body import backbone, caught_hidden

    ids, positions, mask, offsets = tree_inputs(rows, prm.pad_id)
    r: list[int] = []
    c: list[int] = []
    for b, row in enumerate(rows):
        for k, seg in enumerate(row):
            if seg.ids:
                r += [b] * len(seg.reads)
                c += [offsets[b][k] + p - seg.start for p in seg.reads]
    dtype = prm.model.get_input_embeddings().weight.dtype
    if dtype != torch.float32:
        mask = mask.clamp(min=torch.finfo(dtype).min).to(dtype)
    device = prm.device
    rr = torch.tensor(r, dtype=torch.long, device=device)
    cc = torch.tensor(c, dtype=torch.long, device=device)
    catch = caught_hidden(backbone(prm.model)) if heads else nullcontext([])
    with torch.inference_mode(), catch as hidden:
        if prm.format.hazard:
            log_s = tree_survival(prm, rows, ids.to(device), mask.to(device), positions.to(device))
            flat = log_s[rr, cc].clamp(max=-1e-6).exp().cpu().tolist() if c else []
        else:
            logits = prm.reader.logits(ids.to(device), mask.to(device), rr, cc,
                                       positions=positions.to(device))
            flat = prm.reader.probabilities(logits).float().cpu().tolist() if c else []
        more = [head(hidden[-1][rr, cc]) if c else [] for head in heads]
    return TreePass(by_segment(rows, flat), sum(o[-1] for o in offsets), len(rows) * ids.shape[1],
                    [by_segment(rows, m) for m in more])


def by_segment(rows: Sequence[Sequence[Segment]], flat: Sequence[float]) -> list[list[list[float]]]:
    """Values in read order (row by row, segment by segment) as [row][segment][read]."""
    out, at = [], 0
    for row in rows:
        out.append([])
        for seg in row:
            out[-1].append(list(flat[at:at + len(seg.reads)]))
            at += len(seg.reads)
    return out


def path_before(row: Sequence[Segment]) -> list[int | None]:
    """Per segment of ``row``, the row offset of the token just before its first one on its
    own path (in the nearest ancestor that holds it), or None where the path begins."""
    offsets = [0, *accumulate(len(seg.ids) for seg in row)]
    out: list[int | None] = []
    for k, seg in enumerate(row):
        seen = visible(row, k)          # nearest ancestor first, ending at position start
        out.append(offsets[seen[0][0]] + seen[0][2] - 1 if seen else None)
    return out


def tree_survival(prm: "HFPRM", rows: Sequence[Sequence[Segment]], ids: Any, mask: Any,
                  positions: Any) -> Any:
    """A hazard head over packed trees: every token's log S along its own path (rows x
    width). Each token's keep logit comes from its own state and, for a surprisal head, the LM
    features of its id under the distribution at the token before it *on its path* (for a
    segment's first token, the ancestor's token at the cut); log S is the sum of the
    log-sigmoid keep logits of the path's tokens, a segment's sum starting from its ancestor's
    log S at that token. The same sums as one-pass scoring (:meth:`Reader.survival`)."""
    import torch
    import torch.nn.functional as F

    reader, p = prm.reader, prm.format.positive_class
    kwargs = dict(input_ids=ids, attention_mask=mask, position_ids=positions)
    prev = torch.arange(-1, ids.shape[1] - 1, device=ids.device).repeat(ids.shape[0], 1)
    starts, lengths = [], []
    for b, row in enumerate(rows):
        at = 0
        for seg, before in zip(row, path_before(row)):
            if seg.ids:
                prev[b, at] = -1 if before is None else before
                starts.append((b, at, len(seg.ids), before))
            at += len(seg.ids)
        lengths.append(at)
    if reader.surprisal is None:
        from prmkit.models.reading import head_logits

        out = head_logits(prm.model(**kwargs)).float()
        keep = out[..., p] - out[..., 1 - p]
    else:
        from prmkit.models.surprisal import FEATURES, keep_logits

        head, hidden = reader.surprisal.forward(prm.model, kwargs)
        rows_ix = torch.arange(ids.shape[0], device=ids.device)[:, None]
        previous = hidden[rows_ix, prev.clamp(min=0)]        # the path's previous state
        # the vocabulary projection on real tokens only: padding's keep logits are never read
        real = torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
        for b, n in enumerate(lengths):
            real[b, :n] = True
        pairs = torch.stack([previous[real], hidden[real]], dim=1)
        tokens = torch.stack([ids[real], ids[real]], dim=1)
        feats = torch.zeros((*ids.shape, len(FEATURES)), device=ids.device)
        feats[real] = reader.surprisal.features(pairs, tokens)[:, 1]
        feats[prev < 0] = 0.0                                 # nothing predicts a path's first
        keep = keep_logits(head, feats, p)
    log_keep = F.logsigmoid(keep.float())
    log_s = torch.zeros_like(log_keep)
    for b, at, n, before in starts:                         # parents come first in a row
        carry = log_s[b, before] if before is not None else 0.0
        log_s[b, at:at + n] = carry + torch.cumsum(log_keep[b, at:at + n], dim=0)
    return log_s
