"""The surprisal head (``train prm --head surprisal``): a hazard head that also reads how
surprised the language model is by each token.

The hazard head (a discrete-time survival model of the first error, Singer & Willett 1993)
gives every token a probability of "no error here" from its hidden state h_t; a step's score is
their product up to its read position. The LM's surprise at a token (a result the calculation
does not give) lives in its next-token distribution at t - 1, out of reach of a linear read of
h_t, so this head is given four features of that distribution at every token (scaled by
:data:`SCALE`):

    z(t) = [log p(x_t), log p(x_t) - max log p, entropy, 1 if x_t is the most likely token]

weighed by the token's own state:

    keep logit(t) = (c_pos - c_neg)(h_t) + sum_f g_f(h_t) z_f(t)
    log P(no error at t) = logsigmoid(keep logit(t))

c and g are one linear head with 2 + len(FEATURES) outputs (gates start at 0, the plain hazard
head: :func:`init_gates`), so a trained model is a plain ``AutoModelForTokenClassification``.
The LM's distribution is the final hidden state times the input embeddings, so the base must tie
them (:func:`check_tied`); a final logit soft-cap (Gemma 2) is applied as the LM applies it. The
vocabulary projection runs in chunks of tokens.
"""

from __future__ import annotations

from typing import Any

from prmkit.errors import PrmkitError
from prmkit.models.body import backbone, caught_hidden

FEATURES = ("logprob", "margin", "entropy", "argmax")
SCALE = (4.0, 4.0, 4.0, 1.0)     # log-probabilities and entropies are a few units
OUTPUTS = 2 + len(FEATURES)      # the head's outputs: two classes, one gate per feature
CHUNK = 1024                     # tokens per vocabulary projection (x vocabulary floats)


def text_config(model: Any) -> Any:
    """The config of the model's language part (a multimodal config holds it inside)."""
    return model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config


def check_tied(model: Any) -> None:
    """Refuse a model whose LM head is not its input embedding matrix."""
    config = text_config(model)
    if not getattr(config, "tie_word_embeddings", False):
        raise PrmkitError(f"--head surprisal reads the LM's next-token distribution through the "
                          f"input embedding matrix, so it needs a base with tied embeddings "
                          f"(tie_word_embeddings); {type(model).__name__} "
                          f"({getattr(config, 'model_type', '?')}) has an untied LM head")
    if getattr(config, "logit_scale", None):
        raise PrmkitError(f"--head surprisal: {getattr(config, 'model_type', '?')} scales its "
                          f"logits (logit_scale), which this head does not reproduce")


def lm_features(hidden: Any, tokens: Any, embeddings: Any, softcap: float | None = None) -> Any:
    """The scaled features z (batch x length x len(FEATURES)) of every token under the LM's
    distribution at the position before it; the first token (nothing predicts it) gets 0.
    The vocabulary projection runs on :data:`CHUNK` tokens at a time; each chunk's logits are
    read in few passes (maximum and index, log-normaliser, then log p and the entropy)."""
    import torch
    import torch.nn.functional as F

    batch, length, width = hidden.shape
    flat = hidden[:, :-1].reshape(-1, width)
    nxt = tokens[:, 1:].reshape(-1, 1)
    scale = torch.tensor(SCALE, device=hidden.device)
    parts = []
    for start in range(0, flat.shape[0], CHUNK):
        logits = F.linear(flat[start:start + CHUNK], embeddings).float()   # autocast's dtype
        if softcap:
            logits = softcap * torch.tanh(logits / softcap)
        x = nxt[start:start + CHUNK]
        top, best = logits.max(dim=-1)
        lse = torch.logsumexp(logits, dim=-1)
        own = logits.gather(-1, x)[:, 0]
        if logits.requires_grad:                          # training through the body
            logp = logits - lse[:, None]
            entropy = -(logp.exp() * logp).sum(-1)
        else:                                             # in place: logits are not used again
            logp = logits.sub_(lse[:, None])
            entropy = -(logp.exp().mul_(logp)).sum(-1)
        argmax = (best == x[:, 0]).float()
        parts.append(torch.stack([own - lse, own - top, entropy, argmax], dim=-1) / scale)
    feats = torch.cat(parts) if parts else flat.new_zeros(0, len(FEATURES), dtype=torch.float32)
    first = feats.new_zeros(batch, 1, len(FEATURES))
    return torch.cat([first, feats.view(batch, length - 1, len(FEATURES))], dim=1)


def keep_logits(head: Any, feats: Any, positive_class: int) -> Any:
    """Every token's keep logit from the head's outputs (batch x length x OUTPUTS)."""
    head = head.float()
    p = positive_class
    return head[..., p] - head[..., 1 - p] + (head[..., 2:] * feats).sum(-1)


def init_gates(head: Any) -> None:
    """Start the gates at 0: the head then scores as the plain hazard head does."""
    import torch

    if head.out_features != OUTPUTS:
        raise PrmkitError(f"--head surprisal needs a head of {OUTPUTS} outputs, "
                          f"got {head.out_features}")
    with torch.no_grad():
        head.weight[2:].zero_()
        if head.bias is not None:
            head.bias[2:].zero_()


class Surprisal:
    """The forward of a surprisal head: the model's head outputs and the LM features of the
    same tokens, from the backbone's final hidden state (caught on its way to the head, so the
    forward can run through a wrapper such as DDP)."""

    def __init__(self, model: Any):
        check_tied(model)
        self.model = model
        self.backbone = backbone(model)
        if self.backbone is None:
            raise PrmkitError(f"--head surprisal: {type(model).__name__} has no base model")
        config = text_config(model)
        self.softcap = getattr(config, "final_logit_softcapping", None)

    def features(self, hidden: Any, tokens: Any) -> Any:
        """:func:`lm_features` of final hidden states under this model's LM head."""
        return lm_features(hidden, tokens, self.model.get_input_embeddings().weight, self.softcap)

    def keep(self, model: Any, kwargs: dict[str, Any], tokens: Any, positive_class: int,
             features: Any = None) -> Any:
        """Keep logits (batch x length) of the forward ``model(**kwargs)`` over ``tokens``;
        ``features``, when given, are this forward's :meth:`features`, stored (a frozen body
        gives the same ones at every epoch: :mod:`prmkit.train.frozen`)."""
        head, hidden = self.forward(model, kwargs)
        feats = self.features(hidden, tokens) if features is None else features
        return keep_logits(head, feats, positive_class)

    def forward(self, model: Any, kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """(the head's outputs, the backbone's final hidden states) of ``model(**kwargs)``."""
        with caught_hidden(self.backbone) as caught:
            out = model(**kwargs)
        head = out.logits if hasattr(out, "logits") else out[0]
        if head.shape[-1] != OUTPUTS:
            raise PrmkitError(f"a surprisal head has {OUTPUTS} outputs, the model gives "
                              f"{head.shape[-1]}")
        return head, caught[-1]
