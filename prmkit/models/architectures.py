"""What prmkit knows of an architecture, by its ``model_type``: an allowlist, not a blocklist.

* **Tree attention** (prefix sharing, :mod:`prmkit.models.sharing`) replaces the model's own
  mask with a 4D mask over position ids. That is exact only where the architecture's attention
  is causal attention over positions and nothing else: :data:`TREE_EXACT` lists the model
  types that ``tests/test_architectures.py`` proves equal to one record per pass (float32,
  1e-5). Every other type is scored plain, with the reason said (:func:`tree_blocker`).
* **Local attention** (a sliding window, attention chunks) is something a custom mask would
  drop; it is exact only when every sequence fits inside the span (:func:`local_span`).
* **Logits**: label-token reading puts only the read positions through the vocabulary
  projection, then applies what the architecture applies after its head
  (:func:`final_logits`). A type not in :data:`HEAD_KNOWN` is read through its own forward.
"""

from __future__ import annotations

from typing import Any

# causal attention over position ids: a tree mask reads them exactly (the matrix test)
TREE_EXACT = frozenset({"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text",
                        "granite", "cohere", "gpt2"})
# what the ones read plain do that a tree mask cannot express, where it is known
TREE_REASONS = {
    "gpt_neo": "uses local attention",
    "llama4_text": "uses chunked attention",
    "falcon": "builds ALiBi biases or rotary positions from its own 2D mask",
    "bloom": "uses ALiBi position biases",
    "mpt": "uses ALiBi position biases",
}
# the logits are the output embedding of the last hidden state, then final_logits' transforms
# (checked against the model's own forward by the matrix test)
HEAD_KNOWN = TREE_EXACT | {"gpt_neo", "llama4_text", "falcon"}
BIDIRECTIONAL = frozenset({"bert", "roberta", "deberta", "deberta-v2", "electra", "distilbert",
                           "xlm-roberta", "modernbert", "albert", "mpnet"})


def model_type(model: Any) -> str:
    return str(getattr(model.config, "model_type", "") or type(model).__name__)


def tree_blocker(model: Any) -> str | None:
    """Why a tree mask would not read ``model`` (a transformers model) exactly, or None."""
    kind = model_type(model)
    if kind in BIDIRECTIONAL or getattr(model.config, "is_encoder_decoder", False):
        return f"{kind} attends in both directions"
    if kind in TREE_EXACT:
        return None
    why = TREE_REASONS.get(kind, "is not among the architectures proven exact under a tree "
                                 "mask (docs/scoring.md)")
    return f"{kind} {why}"


def local_span(config: Any) -> int | None:
    """The fewest tokens a layer of this model attends over (a sliding window or an attention
    chunk), or None when every layer attends to the whole sequence."""
    spans = []
    window = getattr(config, "sliding_window", None)
    layers = getattr(config, "layer_types", None)
    if window and getattr(config, "use_sliding_window", True) is not False:
        if layers is None or any("sliding" in str(t) for t in layers):
            spans.append(int(window))
    chunk = getattr(config, "attention_chunk_size", None)
    if chunk:
        spans.append(int(chunk))
    return min(spans) if spans else None


def head_is_known(model: Any) -> bool:
    """Whether :func:`final_logits` on the final hidden states gives the model's own logits."""
    return model_type(model) in HEAD_KNOWN


def final_logits(model: Any, hidden: Any) -> Any:
    """The logits ``model`` computes from final hidden states ``hidden``: its output embedding,
    then Granite's ``logits_scaling`` (divides), Cohere's ``logit_scale`` (multiplies) and
    Gemma's final softcapping (``cap * tanh(logits / cap)``), as their forwards apply them."""
    import torch

    config = model.config
    logits = model.get_output_embeddings()(hidden)
    if getattr(config, "logits_scaling", None):
        logits = logits / config.logits_scaling
    if getattr(config, "logit_scale", None):
        logits = logits * config.logit_scale
    cap = getattr(config, "final_logit_softcapping", None)
    if cap:
        logits = torch.tanh(logits / cap) * cap
    return logits
