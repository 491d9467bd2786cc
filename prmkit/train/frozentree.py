"""The frozen pass of last-k training read as one tree of token ids
(:class:`prmkit.train.frozen.FrozenLayers` calls :func:`tree_hidden` where the model's attention
takes a custom mask).

A training set's sequences share a prompt template, a problem's candidates its text and often
their first steps. Read one by one, every shared prefix is read again; here the distinct
sequences form one radix tree of their ids (:func:`prmkit.models.sharing.treepass.token_tree`), cut into
rows of tree attention (:mod:`prmkit.models.sharing.treepass`), and each sequence's states are gathered
from its path through its row. A surprisal head alone (``--last-k 0``) also gets its LM features
from the same pass (:func:`tree_features`). Both equal a plain forward's to float rounding.
"""

from __future__ import annotations

import sys
from typing import Any, Sequence

from prmkit.errors import PrmkitError


def tree_hidden(frozen: Any, seqs: Sequence[Any], budget: int, pad: int, device: Any,
                tolerance: float) -> bool:
    """The frozen layers' output of ``seqs`` (distinct training sequences) into
    ``frozen.hidden`` (a :class:`prmkit.train.frozen.FrozenLayers`; with its ``lm``, their LM
    features into ``frozen.feats``), read as one tree of their token ids: each distinct prefix
    once (seed 0's lab training set: 28,419 tokens in rows of 512 for its 303 distinct
    sequences' 45,772). The first sequence is checked against its plain forward (``tolerance``,
    relative, in float32). False (nothing done) where the model's attention takes no custom
    mask."""
    import torch

    from prmkit.models.sharing.policy import mask_blocker
    from prmkit.models.sharing.treepass import ROW_TOKENS, split_rows, token_tree, tree_inputs
    from prmkit.progress import progress

    if mask_blocker(frozen.model) is not None:
        return False
    ids = [list(e.input_ids) for e in seqs]
    segs, ends = token_tree(ids, [[len(x) - 1] for x in ids])
    cap = max(ROW_TOKENS, max(map(len, ids)))
    rows = split_rows(segs, cap)
    home = {}                                    # a segment -> (row, its index there)
    for r, (taken, _) in enumerate(rows):
        for local, k in enumerate(taken):
            home.setdefault(k, (r, local))
    width = max(sum(len(s.ids) for s in row) for _, row in rows)
    per = max(1, budget // width)
    done: dict[int, Any] = {}
    for start in progress(range(0, len(rows), per), desc="frozen layers (token tree)",
                          unit="pass"):
        part = [row for _, row in rows[start:start + per]]
        x, positions, mask, offsets = tree_inputs(part, pad)
        with torch.no_grad():
            out = frozen.base(input_ids=x.to(device), attention_mask=mask.to(device),
                              position_ids=positions.to(device),
                              output_hidden_states=bool(frozen.k))
        h = out.hidden_states[len(frozen.all) - frozen.k] if frozen.k else out.last_hidden_state
        feats = (tree_features(frozen.lm, part, x.to(device), h)
                 if frozen.lm is not None and not frozen.k else [None] * len(part))
        for b, row in enumerate(part):
            done[start + b] = (h[b].float(), row, offsets[b], feats[b])
    total = sum(sum(len(s.ids) for s in row) for _, row in rows)
    print(f"frozen layers: {len(seqs)} sequences ({sum(map(len, ids))} tokens) read as a "
          f"token tree: {total} tokens in {len(rows)} rows", file=sys.stderr)
    for e, x, end in zip(seqs, ids, ends):
        r, local = home[end[0]]
        h, row, at, feats = done[r]
        path = []
        while local is not None:
            path.append(local)
            local = row[local].parent
        index = [at[j] + t for j in reversed(path) for t in range(len(row[j].ids))]
        frozen.hidden[id(e)] = h[torch.tensor(index, device=h.device)]
        if feats is not None:
            frozen.feats[id(e)] = feats[torch.tensor(index, device=h.device)]
    plain = frozen.bottom_hidden(seqs[:1], pad, device)[0]
    gap = float((plain - frozen.hidden[id(seqs[0])]).abs().max())
    # relative: bfloat16 (autocast) rounds each pass its own way; a wrong mask or position
    # moves the states by their own size
    tolerance = 5e-2 if torch.is_autocast_enabled(device.type) else tolerance
    if not gap <= tolerance * max(1.0, float(plain.abs().max())):
        raise PrmkitError(f"--cache-frozen: {type(frozen.model).__name__}'s frozen layers read "
                          f"as a token tree differ from its plain forward by {gap:.3g}; "
                          f"train without --cache-frozen")
    return True


def tree_features(lm: Any, rows: Sequence[Any], ids: Any, hidden: Any) -> list[Any]:
    """Per row of a tree pass, every token's LM features (width x features, float32) under
    the distribution at the token before it on its own path (a segment's first token reads
    its ancestor's last state; a path's first token gets 0), as one-pass features are: the
    vocabulary projection runs once per token of the tree, not once per sequence."""
    import torch

    from prmkit.models.sharing.treepass import path_before

    out = []
    with torch.no_grad(), torch.autocast(hidden.device.type, enabled=False):
        for b, row in enumerate(rows):
            n = sum(len(s.ids) for s in row)
            prev = torch.arange(-1, n - 1, device=hidden.device)
            at = 0
            for seg, before in zip(row, path_before(row)):
                if seg.ids:
                    prev[at] = -1 if before is None else before
                at += len(seg.ids)
            h = hidden[b, :n].float()
            pairs = torch.stack([h[prev.clamp(min=0)], h], dim=1)        # n x 2 x width
            tokens = torch.stack([ids[b, :n], ids[b, :n]], dim=1)
            feats = lm.features(pairs, tokens)[:, 1]
            feats[prev < 0] = 0.0
            out.append(feats)
    return out
