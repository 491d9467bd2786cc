"""Prompt prefix caching for the transformers policy: a prompt that begins with the ids of a
recent prompt prefills only the ids after them.

Monte Carlo labeling (:mod:`prmkit.label.mc`) rolls out K samples from every probed prefix of a
solution: the prompts of one solution's probes are the problem and its first 1, 2, ... steps,
each the one before it plus a step. The K samples of one prompt already share its prefill (one
forward pass, its cache repeated K times: :mod:`prmkit.generate.hf`); here the prompts share
too. :class:`PromptCache` keeps the key-value cache of the last ``entries`` prompts prefilled
alone (one prompt per batch: K at least the generator's batch size, MC labeling's default of 8
and 8); a new prompt looks up the kept prompt with which it shares the longest run of leading
ids, and only its ids after those go through the model, on that cache. The chunks of one prompt
(K above the batch size) find the whole prompt kept and prefill only its last token again
(its logits are needed).

Exactness: a causal model's keys and values at a position depend only on the ids up to it, so
the kept cache of the shared ids is the one a full prefill would compute; the logits agree to
float rounding (float32: ~1e-6). In bfloat16 the sums run in another order, which can move the
last bits of a logit and so, rarely, a sampled token, as the make-up of a batch already does.

Memory: 2 x layers x kv_heads x head_dim numbers per kept token (SmolLM2-135M in bfloat16:
23 KB), so 16 prompts of 300 tokens hold about 110 MB. ``entries=0`` turns it off.
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
