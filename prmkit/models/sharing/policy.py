"""Whether a PRM can share prefixes, decided in one place.

Three fast paths read a PRM on shared prefixes, and each needs something of it:

* **prefix sharing** (:mod:`prmkit.models.sharing.prefix`): a group of candidates read as the
  tree of its shared prefixes. It needs a transformers PRM read in this process, an
  architecture on :data:`prmkit.models.architectures.TREE_EXACT` (a tree mask reads it
  exactly), and a reading at one position per step (a hazard head too: the scorer carries each
  prefix's log S). Under local attention only the groups that fit the span share.
* **key-value reuse** (:mod:`prmkit.models.sharing.incremental`, search): a grown solution read
  on its prefix's cache. It needs what prefix sharing needs, and attention over the whole
  sequence (a window would drop what the cache holds).
* **one tree pass** (:mod:`prmkit.models.sharing.treepass`): a whole tree in one forward pass
  under a 4D mask. It needs attention that takes a custom mask, and a forward that takes
  position ids.

:func:`sharing_of` computes all of it once for a PRM (:class:`Sharing`); the scorers and the
commands read that, and the functions below are its parts. The architecture facts themselves
(which types a tree mask reads exactly, a model's local span) are
:mod:`prmkit.models.architectures`'.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prmkit.models.architectures import local_span, model_type, tree_blocker
from prmkit.models.base import PRM

if TYPE_CHECKING:
    from prmkit.models.backends.hf import HFPRM

# attention implementations that take an additive 4D mask (flash attention takes none)
MASKED_ATTENTION = ("sdpa", "eager")
READ_AT_ONE_POSITION = ("label-tokens", "classes", "value")


@dataclass(frozen=True)
class Sharing:
    """What a PRM can share: why each fast path does not apply (None where it does), and the
    span of its local attention (None where every layer attends to the whole sequence)."""

    share: str | None     # prefix sharing
    reuse: str | None     # key-value reuse (search)
    pack: str | None      # one tree pass under a 4D mask
    span: int | None

    @property
    def can_share(self) -> bool:
        return self.share is None


def sharing_of(prm: PRM) -> Sharing:
    """What ``prm`` can share (see the module docstring): only a transformers PRM read in this
    process (:class:`prmkit.models.backends.hf.HFPRM`) can."""
    from prmkit.models.backends.hf import HFPRM

    if not isinstance(prm, HFPRM):
        why = f"{type(prm).__name__} is not a transformers model read in this process"
        return Sharing(why, why, why, None)
    share = share_blocker(prm, carries_hazard=True)
    span = local_span(prm.model.config)
    return Sharing(share, _with_window(prm, share, span), pack_blocker(prm), span)


def share_blocker(prm: "HFPRM", carries_hazard: bool = False) -> str | None:
    """Why prefix sharing does not apply to the HF PRM ``prm``, or None. A hazard head sums
    over every token, so it shares only when the caller carries each prefix's log S
    (``carries_hazard``)."""
    why = tree_blocker(prm.model)
    if why is not None:
        return why
    if prm.format.hazard and not carries_hazard:
        return "a hazard head sums over every token of the solution, not one position per step"
    if prm.format.reading not in READ_AT_ONE_POSITION:
        return f"reading {prm.format.reading!r} is not read at one position per step"
    return None


def reuse_blocker(prm: "HFPRM", carries_hazard: bool = False) -> str | None:
    """Why the HF PRM ``prm`` cannot reuse caches, or None: what :func:`share_blocker` says,
    or local attention."""
    return _with_window(prm, share_blocker(prm, carries_hazard), local_span(prm.model.config))


def _with_window(prm: "HFPRM", share: str | None, span: int | None) -> str | None:
    """Why caches cannot be reused: ``share`` (why sharing does not apply), or a window."""
    if share is None and span is not None:
        return f"{model_type(prm.model)} attends over a window of {span} tokens"
    return share


def pack_blocker(prm: "HFPRM") -> str | None:
    """Why the HF PRM ``prm`` (one that can reuse caches) cannot read a tree in one pass."""
    return mask_blocker(prm.model)


def mask_blocker(model: Any) -> str | None:
    """Why ``model`` (a transformers model) cannot read a tree in one pass, or None."""
    impl = getattr(model.config, "_attn_implementation", None) or "eager"
    if impl not in MASKED_ATTENTION:
        return f"attention {impl!r} takes no custom mask"
    if "position_ids" not in inspect.signature(model.forward).parameters:
        return "the model's forward takes no position ids"
    return None
