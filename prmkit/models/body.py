"""The body of a Hugging Face model with a task head: finding it, and catching its final
hidden states on their way to the head.

A task model (``LlamaForTokenClassification``, ``...ForCausalLM``) keeps its transformer under
the attribute its class names in ``base_model_prefix`` (``model``, ``transformer``, ...). The
surprisal head (:mod:`prmkit.models.surprisal`), companion heads (:mod:`prmkit.lab.verifiers.companion`),
label-token reading, the implicit PRM and the trainers' frozen layers all need that body.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator


def backbone(model: Any, default: Any = None) -> Any:
    """The model's body, the module its task head sits on (``default`` when it has none)."""
    return getattr(model, getattr(model, "base_model_prefix", "model"), default)


@contextmanager
def layers_from(body: Any, start: int) -> Iterator[None]:
    """Inside the block the body's layer list is its layers from ``start`` on (none when
    ``start`` is their number): a forward given the input of layer ``start`` as
    ``inputs_embeds`` runs only those."""
    import torch

    layers = body.layers
    body.layers = torch.nn.ModuleList(layers[start:])
    try:
        yield
    finally:
        body.layers = layers


@contextmanager
def caught_hidden(body: Any) -> Iterator[list[Any]]:
    """The final hidden states ``body`` gives in the forwards inside the block (a list, filled
    in order), caught by a forward hook so that the forward may run through a wrapper."""
    caught: list[Any] = []
    hook = body.register_forward_hook(
        lambda _m, _i, out: caught.append(out.last_hidden_state if hasattr(out, "last_hidden_state")
                                          else out[0]))
    try:
        yield caught
    finally:
        hook.remove()
