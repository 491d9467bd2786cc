"""Cached frozen layers for ``--train last-k``: the layers below the trained ones run once.

With ``--cache-frozen`` the first L - k layers (frozen by ``prmkit.train.loop.set_trainable``)
run once over the training set, and each optimiser step runs only the top k layers and the head
on the stored hidden states (as ``inputs_embeds``, the layer list cut to the top k). With
``--last-k 0`` the stored states are the body's final output and a step runs the head alone.
The frozen outputs are read from a whole forward (``output_hidden_states``), as one tree of the
training sequences where attention takes a custom mask (:mod:`prmkit.train.frozentree`).

The cached forward is checked against the uncached one on the first ``CHECKED`` sequences in
float32: the step logits must agree within ``TOLERANCE``, or training stops with an error
naming the model class (a model that adds position embeddings to ``inputs_embeds``, as GPT-2,
fails here). Dev sequences go through the same pass (:meth:`CachedSteps.probabilities`). Hidden
states are float32: hidden size x 4 bytes a token. Under DDP the objective runs uncached.

A store (``--frozen-store DIR``) keeps the outputs on disk, one safetensors file per (frozen
weights, k, dtype), each sequence under the digest of its ids; a later run on the same base
reads what it finds there. A file whose weights, k or dtype differ is another file.
"""

from __future__ import annotations

import hashlib
import os
import sys
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

from prmkit.errors import PrmkitError
from prmkit.models.body import backbone, layers_from
from prmkit.train.common import read_index, read_logits
from prmkit.train.loop import Example, transformer_layers

TOLERANCE = 1e-4
# Sequences of the first batch the check reads: two forwards of a whole batch of 4,096 tokens
# cost SmolLM2-135M about 37 s at 220 tokens a second (a 2-core AVX2 CPU), per trainer; a model
# whose cached forward is wrong (GPT-2's position embeddings) is wrong on every sequence.
CHECKED = 2


class FrozenLayers:
    """The frozen bottom of a last-k model and a store of its outputs per training sequence."""

    def __init__(self, model: Any, last_k: int, store: str | None = None):
        self.model, self.store = model, store
        self.kept: dict[str, Any] = {}   # the store's entries: "h:" + digest (states), "f:" ...
        self.dirty = False
        self.files: dict[bool, str] = {}
        self.base = backbone(model, model)
        layers, _ = transformer_layers(model)
        if not hasattr(self.base, "layers"):
            raise PrmkitError(f"--cache-frozen: {type(model).__name__} keeps its layers "
                              f"elsewhere than .layers; train without --cache-frozen")
        self.all = layers
        self.k = last_k
        self.hidden: dict[int, Any] = {}
        # a surprisal head alone (k = 0): its LM (prmkit.models.surprisal.Surprisal), and each
        # sequence's LM features where the tree pass computed them (CachedSteps.fill)
        self.lm: Any = None
        self.feats: dict[int, Any] = {}
        if last_k == 0 and not hasattr(self.base, "norm"):
            raise PrmkitError(f"--cache-frozen with --last-k 0: {type(model).__name__} keeps its "
                              f"final norm elsewhere than .norm; train without --cache-frozen")

    @contextmanager
    def top(self) -> Iterator[None]:
        """The model's layer list cut to its trained top k layers. With k = 0 the stored states
        are the body's final output, so the final norm is left out too: the forward is then the
        head alone."""
        import torch

        norm = getattr(self.base, "norm", None)
        if self.k == 0:
            self.base.norm = torch.nn.Identity()
        try:
            with layers_from(self.base, len(self.all) - self.k):
                yield
        finally:
            if self.k == 0:
                self.base.norm = norm

    def bottom_hidden(self, seqs: Sequence[Example], pad: int, device: Any) -> list[Any]:
        """The frozen layers' output of each sequence (float32, its own length)."""
        import torch

        from prmkit.models.reading import pad_right

        ids, _ = pad_right([e.input_ids for e in seqs], pad)
        with torch.no_grad():
            # entry i of the hidden states is the input of layer i (the last entry alone may
            # come after the final norm), so entry L - k is what the top k layers take in
            out = self.base(input_ids=ids.to(device), output_hidden_states=True)
        h = out.hidden_states[len(self.all) - self.k] if self.k else out.last_hidden_state
        return [h[b, :len(e.input_ids)].float() for b, e in enumerate(seqs)]

    def build(self, examples: Sequence[Example], budget: int, pad: int, device: Any,
              autocast: bool) -> None:
        """Run the frozen layers once over every training sequence; sequences with the same ids
        share their states."""
        import torch

        from prmkit.models.reading import token_budget_batches
        from prmkit.progress import progress
        from prmkit.train.frozentree import tree_hidden

        was = self.model.training
        self.model.eval()
        self.kept = self.load(autocast, device)
        first: dict[str, Example] = {}   # store key -> the first sequence with those ids
        twins = []                       # (a sequence, the earlier one with its ids)
        for e in examples:
            key = "h:" + digest(e.input_ids)
            if key in self.kept:
                self.hidden[id(e)] = self.kept[key]
            elif key in first:
                twins.append((e, first[key]))
            else:
                first[key] = e
        todo = list(first.values())
        if self.store:
            print(f"frozen layers: {len(examples) - len(todo) - len(twins)} of {len(examples)} "
                  f"sequences read from {self.store_file(autocast)}, {len(twins)} repeat "
                  f"another's ids", file=sys.stderr)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            if len(todo) < 2 or not tree_hidden(self, todo, budget, pad, device, TOLERANCE):
                batches = token_budget_batches([len(e.input_ids) for e in todo], budget)
                for batch in progress(batches, desc="frozen layers", unit="batch"):
                    seqs = [todo[i] for i in batch]
                    for e, h in zip(seqs, self.bottom_hidden(seqs, pad, device)):
                        self.hidden[id(e)] = h
        self.model.train(was)
        for key, e in first.items():
            self.kept[key] = self.hidden[id(e)]
        for e, twin in twins:
            self.hidden[id(e)] = self.hidden[id(twin)]
            if id(twin) in self.feats:
                self.feats[id(e)] = self.feats[id(twin)]
        self.dirty = bool(todo)

    def store_file(self, autocast: bool) -> str:
        """The store's file for these frozen weights, this k and this dtype (the weights'
        sums are hashed once per dtype)."""
        if autocast not in self.files:
            self.files[autocast] = self._store_file(autocast)
        return self.files[autocast]

    def _store_file(self, autocast: bool) -> str:
        import torch

        layers = list(self.all[:len(self.all) - self.k])
        h = hashlib.sha256(f"{len(self.all)}/{self.k}/{autocast}".encode())
        with torch.no_grad():
            for module in [getattr(self.base, "embed_tokens", None), *layers,
                           getattr(self.base, "norm", None) if not self.k else None]:
                for p in (module.parameters() if module is not None else ()):
                    h.update(repr(float(p.double().sum())).encode())
        return os.path.join(self.store or "", f"frozen-{h.hexdigest()[:20]}.safetensors")

    def load(self, autocast: bool, device: Any) -> dict[str, Any]:
        """The stored outputs in the store's file (empty: no store or no file yet)."""
        if not self.store or not os.path.isfile(self.store_file(autocast)):
            return {}
        from safetensors.torch import load_file

        return load_file(self.store_file(autocast), device=str(device))

    def flush(self, autocast: bool) -> None:
        """Write the store's file whole when it gained entries (a temporary file renamed: a
        kill leaves the old one)."""
        if not (self.store and self.dirty):
            return
        from safetensors.torch import save_file

        path = self.store_file(autocast)
        os.makedirs(self.store, exist_ok=True)
        save_file({k: v.detach().contiguous().cpu() for k, v in self.kept.items()}, path + ".tmp")
        os.replace(path + ".tmp", path)
        self.dirty = False

    def embeds(self, seqs: Sequence[Example], device: Any) -> Any:
        """The stored hidden states of ``seqs``, padded on the right with zeros."""
        import torch

        width = max(len(e.input_ids) for e in seqs)
        first = self.hidden[id(seqs[0])]
        x = torch.zeros(len(seqs), width, first.shape[-1], device=device)
        for b, e in enumerate(seqs):
            x[b, :len(e.input_ids)] = self.hidden[id(e)]
        return x


def digest(ids: Sequence[int]) -> str:
    """A sequence's key in a store: the SHA-256 of its ids."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()


class CachedSteps:
    """Wraps the PRM's step objective: the same loss, computed from the cached hidden states.

    ``objective`` is a :class:`prmkit.train.prm.StepObjective`; its reader reads the logits and
    ``loss(logits, exs, device)`` gives the loss (the parts of the objective after the forward).
    """

    def __init__(self, objective: Any, frozen: FrozenLayers, examples: Sequence[Example],
                 budget: int, autocast: bool, dev: Sequence[Example] = ()):
        self.objective, self.frozen, self.checked = objective, frozen, False
        self.stored: dict[int, Any] = {}   # id(example) -> its LM features (see features)
        self.budget, self.autocast = budget, autocast
        # the dev sequences go through the same frozen pass: validation then runs the top alone
        self.examples = list(examples) + list(dev)

    def __call__(self, exs: list[Example], device: Any, via: Any) -> Any:
        if via is not None:   # DDP must see the whole forward: no cache
            return self.objective(exs, device, via)
        self.prepare(exs, device)
        return self.objective.loss(self.stored_logits(exs, device), exs, device)

    def stored_logits(self, exs: Sequence[Example], device: Any) -> Any:
        """The step logits of ``exs`` read from their stored states through the model's top
        (the trained layers and the head): the cached forward of training, of the first
        batch's check and of validation."""
        rows, cols = read_index(exs, device)
        with self.frozen.top():
            return self.objective.reader.logits(self.frozen.embeds(exs, device), None, rows, cols,
                                                tokens=self.tokens(exs, device),
                                                features=self.features(exs, device))

    def prepare(self, exs: list[Example], device: Any) -> None:
        """Once, where the model is on its device: the cached forward checked on ``exs``,
        then the frozen pass over every training sequence (and the LM features). The loop
        calls it before its first step; the first call of the objective does otherwise."""
        if self.checked:
            return
        self.check(exs[:CHECKED], device)
        if not self.frozen.k:
            self.frozen.lm = self.objective.reader.surprisal
        self.frozen.build(self.examples, self.budget, self.objective.pad, device, self.autocast)
        self.stored.clear()   # made from the check's states; the built ones replace them
        self.fill(device)

    def features(self, exs: list[Example], device: Any) -> Any:
        """A surprisal head on a frozen body (``--last-k 0``): each token's LM features are
        the same at every epoch, so they are computed once per sequence, in float32, from its
        stored final states, and padded like them; None otherwise (the head computes them)."""
        import torch

        surprisal = self.objective.reader.surprisal
        if surprisal is None or self.frozen.k:
            return None
        missing = list({id(e): e for e in exs if id(e) not in self.stored}.values())
        if missing:     # in one batch, right-padded: a token's features read only what precedes it
            with torch.no_grad(), torch.autocast(device.type, enabled=False):
                feats = surprisal.features(self.frozen.embeds(missing, device),
                                           self.tokens(missing, device))
            for b, e in enumerate(missing):
                self.stored[id(e)] = feats[b, :len(e.input_ids)].clone()
        width = max(len(e.input_ids) for e in exs)
        out = torch.zeros(len(exs), width, self.stored[id(exs[0])].shape[-1], device=device)
        for b, e in enumerate(exs):
            out[b, :len(e.input_ids)] = self.stored[id(e)]
        return out

    def fill(self, device: Any) -> None:
        """Every sequence's LM features now (a surprisal head alone; from the store where it
        has them), then the store written (:meth:`FrozenLayers.flush`). The sequences the store
        lacks go through the vocabulary projection in batches of the token budget, each
        distinct one once."""
        if self.objective.reader.surprisal is not None and not self.frozen.k:
            from prmkit.models.reading import token_budget_batches
            from prmkit.progress import progress

            kept = self.frozen.kept
            keys = ["f:" + digest(e.input_ids) for e in self.examples]
            for e, key in zip(self.examples, keys):     # computed in the tree pass
                if key not in kept and id(e) in self.frozen.feats:
                    kept[key], self.frozen.dirty = self.frozen.feats[id(e)], True
            todo = list({k: e for e, k in zip(self.examples, keys) if k not in kept}.items())
            batches = token_budget_batches([len(e.input_ids) for _, e in todo], self.budget)
            # one vocabulary projection per token, in float32: minutes for a large set
            for batch in progress(batches, desc="LM features", unit="batch",
                                  disable=True if not todo else None):
                exs = [todo[i][1] for i in batch]
                self.features(exs, device)               # stored per sequence
                for i in batch:
                    kept[todo[i][0]] = self.stored[id(todo[i][1])]
                self.frozen.dirty = True
            for e, key in zip(self.examples, keys):
                self.stored[id(e)] = kept[key]
        self.frozen.flush(self.autocast)

    def probabilities(self, exs: Sequence[Example], device: Any) -> list[list[float]]:
        """Each dev sequence's step probabilities at its read positions, from its stored states
        through the model's top (trained layers and head; eval mode, no gradient), in batches
        of the token budget: validation at the cost of the top alone."""
        import torch

        from prmkit.models.reading import token_budget_batches

        model = self.frozen.model
        out: list[list[float]] = [[] for _ in exs]
        was = model.training
        model.eval()
        try:
            with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16,
                                                 enabled=self.autocast):
                for batch in token_budget_batches([len(e.input_ids) for e in exs], self.budget):
                    seqs = [exs[i] for i in batch]
                    logits = self.stored_logits(seqs, device)
                    probs = iter(self.objective.reader.probabilities(logits).float().tolist())
                    for i, e in zip(batch, seqs):
                        out[i] = [next(probs) for _ in e.read_positions]
        finally:
            model.train(was)
        return out

    def tokens(self, exs: list[Example], device: Any) -> Any:
        """The token ids of ``exs``, right-padded as their stored hidden states are (a
        surprisal head reads them)."""
        from prmkit.models.reading import pad_right

        return pad_right([e.input_ids for e in exs], self.objective.pad)[0].to(device)

    def check(self, exs: list[Example], device: Any) -> None:
        """The cached forward against the uncached one, on this batch, in float32."""
        import torch


        reader, model = self.objective.reader, self.frozen.model
        was = model.training
        model.eval()   # no dropout: both forwards must be the same function
        with torch.no_grad(), torch.autocast(device.type, enabled=False):
            full = read_logits(reader, exs, self.objective.pad, True, device, None).float()
            hidden = self.frozen.bottom_hidden(exs, self.objective.pad, device)
            self.frozen.hidden.update({id(e): h for e, h in zip(exs, hidden)})
            cached = self.stored_logits(exs, device).float()
        model.train(was)
        gap = float((full - cached).abs().max())
        if not gap <= TOLERANCE:
            raise PrmkitError(f"--cache-frozen: the cached forward of {type(self.frozen.model).__name__} "
                              f"differs from the uncached one by {gap:.3g} on the first batch "
                              f"(more than {TOLERANCE}); train without --cache-frozen")
        self.checked = True


def cached_steps(objective: Any, model: Any, cfg: Any, examples: Sequence[Example],
                 dev: Sequence[Example] = ()) -> CachedSteps:
    """``objective`` on cached frozen layers, as a trainer's ``--cache-frozen`` and
    ``--frozen-store`` ask (``cfg``: a PRM or ORM training config); ``dev``: the dev sequences
    (:func:`prmkit.train.prm.dev_examples`) that validation reads through
    :meth:`CachedSteps.probabilities`; one cut before its first step has nothing to read and
    is left out of the pass."""
    frozen = FrozenLayers(model, cfg.loop.last_k, cfg.frozen_store)
    return CachedSteps(objective, frozen, examples, cfg.loop.batch_tokens, cfg.autocast_bf16,
                       [e for e in dev if e.read_positions])
