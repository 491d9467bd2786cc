"""One forward pass on top of key-value caches: the machinery search and prefix sharing share.

:func:`cached_forward` runs new ids through an :class:`~prmkit.models.backends.hf.HFPRM` after each
row's own cached tokens and reads the step scores at given columns of the new ids. Search
(:mod:`prmkit.models.sharing.incremental`) feeds one new step per row on its prefix's cache; offline
prefix sharing (:mod:`prmkit.models.sharing.prefix`) feeds a node's or a solution's part after its
parent's. A hazard head (:meth:`prmkit.models.reading.Reader.survival`) sums over every token, so a row also
carries the log S of its cached tokens and, for a surprisal head, the last one's final hidden
state; the pass returns both at every new token, to be carried on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from prmkit.models.backends.hf import HFPRM


@dataclass
class CachedPass:
    """What :func:`cached_forward` returns: the extended cache (rows left-padded to the
    longest past), each row's scores at its read columns, and the tokens fed (real: padding
    excluded; computed: rows x width of the new ids)."""

    cache: Any
    probs: list[list[float]]
    real: int
    computed: int
    log_s: Any = None    # a hazard head: every new token's log S (rows x new ids)
    hidden: Any = None   # a surprisal head: the new tokens' final hidden states


def cached_forward(prm: "HFPRM", seqs: Sequence[Sequence[int]], reads: Sequence[Sequence[int]],
                   pasts: Sequence[Sequence[tuple[Any, Any]]],
                   carry: Sequence[tuple[float, Any]] | None = None) -> CachedPass:
    """One forward pass of right-padded ``seqs`` through ``prm`` (an HFPRM), row ``b`` after
    its cached tokens ``pasts[b]`` (one (keys, values) pair per layer, batch 1; empty: none),
    read at the columns ``reads[b]`` of its new ids. Shorter caches are left-padded and masked,
    and each row's positions continue its own cache; with no cache at all a causal model drops
    the mask as one-pass scoring does (right padding). A hazard head needs ``carry[b]``: the
    log S of row b's cached tokens and (a surprisal head) the last one's final hidden state
    (:meth:`prmkit.models.reading.Reader.hazard_continued`; default: no cached token)."""
    import torch
    from transformers import DynamicCache

    from prmkit.models.reading import pad_right

    ids, mask = pad_right(seqs, prm.pad_id)
    lengths = [p[0][0].shape[2] if p else 0 for p in pasts]
    width = max(lengths)
    cache = DynamicCache(config=prm.model.config)
    attn = positions = None
    if width:
        n_layers = max(len(p) for p in pasts)
        for layer in range(n_layers):
            k0, v0 = next(p[layer] for p in pasts if p)
            keys = k0.new_zeros((len(seqs), k0.shape[1], width, k0.shape[3]))
            values = v0.new_zeros((len(seqs), v0.shape[1], width, v0.shape[3]))
            for b, p in enumerate(pasts):
                if p:
                    keys[b, :, width - lengths[b]:] = p[layer][0][0]
                    values[b, :, width - lengths[b]:] = p[layer][1][0]
            cache.update(keys, values, layer)
        if min(lengths) < width:   # left padding in the cache: mask it, shift positions
            left = torch.tensor([[0] * (width - n) + [1] * n for n in lengths], dtype=torch.long)
            attn = torch.cat([left, mask], dim=1).to(prm.device)
            positions = (torch.tensor(lengths).unsqueeze(1) + torch.arange(ids.shape[1])).to(prm.device)
    elif not prm.drop_mask and not bool(mask.all()):
        attn = mask.to(prm.device)
    device = prm.device
    rows = [b for b, cols in enumerate(reads) for _ in cols]
    flat = [c for cols in reads for c in cols]
    log_s = hidden = None
    with torch.inference_mode():
        r = torch.tensor(rows, dtype=torch.long, device=device)
        c = torch.tensor(flat, dtype=torch.long, device=device)
        if prm.format.hazard:
            carry = carry or [(0.0, None)] * len(seqs)
            log_s, hidden = prm.reader.hazard_continued(
                ids.to(device), attn if attn is None else attn.to(device), cache, positions,
                torch.tensor([b for b, _ in carry], device=device), [h for _, h in carry])
            probs = log_s[r, c].clamp(max=-1e-6).exp().cpu().tolist() if flat else []
        else:
            logits = prm.reader.logits(ids.to(device), attn, r, c, cache=cache, positions=positions)
            probs = prm.reader.probabilities(logits).float().cpu().tolist() if flat else []
    out, k = [], 0
    for cols in reads:
        out.append(probs[k:k + len(cols)])
        k += len(cols)
    return CachedPass(cache, out, int(mask.sum()), ids.numel(), log_s, hidden)
