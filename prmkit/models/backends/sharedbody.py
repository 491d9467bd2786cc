"""An implicit PRM's policy and reference in one pass through the layers they share.

A last-k implicit PRM (``prmkit train implicit-prm --train last-k``) is a policy whose
embeddings and bottom layers are its reference's own tensors
(:func:`prmkit.models.backends.implicit.share_frozen`): only its top k layers and final norm were
trained. Its step rewards need both models' log-probabilities of the same tokens, and reading
each model whole runs the shared layers twice. Here the reference's pass gives its own final
states and, on the way, the input of the first layer it does not share with the policy
(``output_hidden_states``); the policy then runs only its own top layers and norm on that input.
Exact in exact arithmetic (the policy's bottom is the same tensors on the same ids), and
checked: :class:`prmkit.models.backends.implicit.ImplicitPRM` compares its first batch with the two
whole passes and keeps to those when they differ (a model whose layers depend on their index,
such as Gemma 3's alternating attention windows).
"""

from __future__ import annotations

from typing import Any

from prmkit.models.architectures import final_logits, head_is_known
from prmkit.models.body import backbone, layers_from

HEAD_CHUNK = 512  # positions per slice of the vocabulary projection


def head_logps(model: Any, hidden: Any, targets: Any) -> Any:
    """log p(targets[i]) under ``model``'s logits from final hidden states ``hidden[i]``
    (:func:`prmkit.models.architectures.final_logits`), as float32, ``HEAD_CHUNK`` positions at a
    time; under autograd each chunk is recomputed in the backward pass instead of keeping its
    logits."""
    import torch

    def chunk(h: Any, t: Any) -> Any:
        logits = final_logits(model, h).float()
        return logits.gather(-1, t[:, None])[:, 0] - torch.logsumexp(logits, dim=-1)

    out = []
    for s in range(0, hidden.shape[0], HEAD_CHUNK):
        h, t = hidden[s:s + HEAD_CHUNK], targets[s:s + HEAD_CHUNK]
        if torch.is_grad_enabled() and h.requires_grad:
            from torch.utils.checkpoint import checkpoint

            out.append(checkpoint(chunk, h, t, use_reentrant=False))
        else:
            out.append(chunk(h, t))
    return torch.cat(out) if out else torch.zeros(0, device=hidden.device)


def shared_bottom(policy: Any, reference: Any) -> int:
    """How many bottom layers ``policy`` shares with ``reference`` (the very same parameter
    tensors, its embeddings too), when at least one of its layers is its own; 0 otherwise."""
    mine, theirs = backbone(policy), backbone(reference)
    if mine is None or theirs is None or not hasattr(mine, "layers") \
            or not hasattr(theirs, "layers") or len(mine.layers) != len(theirs.layers):
        return 0
    if mine.get_input_embeddings().weight is not theirs.get_input_embeddings().weight:
        return 0
    n = 0
    for a, b in zip(mine.layers, theirs.layers):
        pa, pb = list(a.parameters()), list(b.parameters())
        if len(pa) != len(pb) or any(x is not y for x, y in zip(pa, pb)):
            break
        n += 1
    return n if 0 < n < len(mine.layers) else 0


def shared_logps(policy: Any, reference: Any, ids: Any, rows: Any, cols: Any,
                 ) -> tuple[Any, Any] | None:
    """(log pi, log pi_ref) of ``ids[rows, cols]`` given the ids before each, the shared bottom
    layers run once; None when the two share no bottom (:func:`shared_bottom`) or a model
    is not one whose head prmkit knows (:func:`prmkit.models.architectures.head_is_known`)."""
    n = shared_bottom(policy, reference)
    if not n or not (head_is_known(policy) and head_is_known(reference)):
        return None
    heads = policy.get_output_embeddings(), reference.get_output_embeddings()
    if heads[0] is None or heads[1] is None:
        return None
    mine, theirs = backbone(policy), backbone(reference)
    out = theirs(input_ids=ids, output_hidden_states=True)
    middle = out.hidden_states[n]          # entry n is the input of layer n
    with layers_from(mine, n):
        top = mine(inputs_embeds=middle).last_hidden_state
    targets = ids[rows, cols]
    return (head_logps(policy, top[rows, cols - 1], targets),
            head_logps(reference, out.last_hidden_state[rows, cols - 1], targets))
