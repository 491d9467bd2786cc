"""A companion head: a second model that is the same frozen body under another head, read in
the first model's forward pass (:func:`prmkit.models.sharing.treepass.tree_forward`).

Exact when the companion is a plain class head on the same body reading the same positions of
the same ids: its logits at a read are its head on the hidden state the PRM's body gave there.
:func:`companion_blocker` checks the models before a pass; a scorer checks every candidate's
ids and read positions.
"""

from __future__ import annotations

from typing import Any

from prmkit.models.body import backbone


def head_of(model: Any) -> Any:
    """A token-classification model's head module (``score``, ``classifier``), or None."""
    import torch

    for name in ("score", "classifier"):
        if isinstance(getattr(model, name, None), torch.nn.Module):
            return getattr(model, name)
    return None


def companion_blocker(prm: Any, other: Any) -> str | None:
    """Why ``other`` cannot be read in ``prm``'s pass, or None: both HF PRMs, ``other`` a plain
    class head (no hazard, no label tokens), on a body whose weights are ``prm``'s own."""
    import torch

    from prmkit.models.backends.hf import HFPRM

    if not all(isinstance(m, HFPRM) for m in (prm, other)):
        return "both must be Hugging Face PRMs"
    if other.format.reading != "classes" or other.format.hazard:
        return "the companion must read a class head at each step"
    if head_of(other.model) is None:
        return f"{type(other.model).__name__} has no score or classifier head"
    mine, theirs = backbone(prm.model), backbone(other.model)
    if mine is None or theirs is None:
        return "a model without a body (base_model_prefix)"
    a, b = dict(mine.named_parameters()), dict(theirs.named_parameters())
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape or not torch.equal(a[k], b[k])
                                   for k in a):
        return "the two bodies' weights differ"
    if other.max_length != prm.max_length:
        return "the two read different lengths"
    return None


def companion_probs(other: Any, hidden: Any) -> list[float]:
    """``other``'s P(step is correct) from the body's final hidden states at its reads
    (reads x hidden)."""
    head = head_of(other.model)
    logits = head(hidden.to(head.weight.dtype))
    return other.reader.probabilities(logits).float().cpu().tolist()
