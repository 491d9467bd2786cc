"""Prompt prefix caching for the transformers policy: a prompt that begins with the ids of a
recent prompt prefills only the ids after them.

Monte Carlo labelling's prompts for one solution are the problem and its first 1, 2, ... steps.
:class:`PromptCache` keeps the key-value cache of the last ``entries`` prompts prefilled alone
(one prompt per batch); a new prompt finds the kept prompt sharing its longest run of leading
ids and prefills only the rest on that cache (its last id always goes through the model, for
its logits). A causal model's cache of the shared ids is the one a full prefill computes, so
logits agree to float rounding (float32: ~1e-6); in bfloat16 a sampled token can rarely move,
as with the make-up of a batch. Memory: 2 x layers x kv_heads x head_dim numbers per kept
token. ``entries=0`` turns it off.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Sequence

from prmkit.models.sharing.incremental import common_prefix_length


class PromptCache:
    """The key-value caches of the last ``entries`` prompts, found by their leading ids."""

    def __init__(self, entries: int = 16):
        self.entries = entries
        self.kept: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self.reused = 0      # prompt tokens whose keys and values came from a kept prompt
        self.prefilled = 0   # prompt tokens that went through the model

    def longest(self, ids: Sequence[int]) -> tuple[int, list[tuple[Any, Any]] | None]:
        """(n, cache) of the kept prompt sharing the most leading ids with ``ids``: its cache
        covers at least those ``n`` ids (one ``(keys, values)`` pair per layer, batch 1)."""
        best, found, key = 0, None, None
        for kept, kv in self.kept.items():
            n = common_prefix_length(kept, ids)
            if n > best:
                best, found, key = n, kv, kept
        if key is not None:
            self.kept.move_to_end(key)
        return best, found

    def put(self, ids: Sequence[int], kv: list[tuple[Any, Any]]) -> None:
        """Keep ``kv``, the cache of exactly ``ids``; the least recently used goes past
        ``entries``."""
        if self.entries < 1:
            return
        self.kept[tuple(ids)] = kv
        self.kept.move_to_end(tuple(ids))
        while len(self.kept) > self.entries:
            self.kept.popitem(last=False)
