"""Score steps with any Hugging Face PRM (transformers), on CPU or GPU.

Model types, chosen by the step format's reading rule:

* ``label-tokens``: a causal LM read at label tokens (Math-Shepherd, RLHFlow). Only the hidden
  states at the read positions go through the LM head, so the vocabulary projection costs one
  row per step, not one per token.
* ``classes``: a per-token classification head (``*ForTokenClassification``; TRL's PRMTrainer;
  Qwen2.5-Math-PRM's 2-class head, whose custom code needs ``trust_remote_code=True``).
* ``value``: a one-logit head, read through a sigmoid.

How it scores (ARCHITECTURE.md, "Contracts"):

* every step of a solution is read in one forward pass (:meth:`HFPRM.score`); the slow reference
  :meth:`HFPRM.score_per_prefix` encodes each prefix separately and reads only its last step;
* solutions are sorted by length and packed into batches under a token budget
  (longest x batch size <= ``token_budget``), so little compute goes to padding;
* padding goes on the right. For a causal model the attention mask can then be dropped: padding
  comes after every real token, so real positions are unchanged, and the attention kernel takes
  its fast path. Bidirectional models keep the mask;
* a solution longer than the model allows is cut; its steps past the cut come back as None,
  with a warning, never dropped or shifted.

Weights load from safetensors only, and ``trust_remote_code`` is off unless asked for.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

from prmkit.errors import PrmkitError
from prmkit.models.base import collect
from prmkit.models.folder import load_error, resolve_model_path
from prmkit.models.spec import ModelSpec, resolve_model
from prmkit.models.weights import architecture_of, is_delta, load_delta, load_model
from prmkit.models.architectures import BIDIRECTIONAL
from prmkit.models.reading import (DTYPES, TORCH_DTYPES, HFConfig, Reader,
                                   ScoreStats, bucket_batches, encode_or_warn, pad_right,
                                   prefix_encodings, token_budget_batches, torch_dtype)
from prmkit.stepformat import BoundFormat, Encoded, StepFormat

# re-exported: the names library users have imported from here
__all__ = ["BIDIRECTIONAL", "DTYPES", "HFConfig", "HFPRM", "Reader", "ScoreStats", "TORCH_DTYPES",
           "encode_or_warn", "load_hf_prm", "pad_right", "prefix_encodings", "resolve_model_path",
           "token_budget_batches"]


class HFPRM:
    """A transformers model plus its step format. ``score`` is the protocol method."""

    def __init__(self, model: Any, tokenizer: Any, step_format: StepFormat,
                 config: HFConfig | None = None):
        import torch

        self.torch = torch
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config or HFConfig()
        self.format = step_format
        self.bound: BoundFormat = step_format.bind(tokenizer)
        self.stats = ScoreStats()
        mc = model.config
        limit = getattr(mc, "max_position_embeddings", None) or getattr(tokenizer, "model_max_length", None)
        self.max_length = self.config.max_length or (int(limit) if limit and limit < 10**7 else 4096)
        self.pad_id = next((i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None), 0)
        drop = self.config.drop_padding_mask
        self.drop_mask = (getattr(mc, "model_type", "") not in BIDIRECTIONAL
                          and not getattr(mc, "is_encoder_decoder", False)) if drop is None else drop
        self.device = next(model.parameters()).device
        self.reader = Reader(model, step_format, self.bound)
        self._check_head()

    def _check_head(self) -> None:
        out_dim = None
        if self.format.reading in ("classes", "value"):
            out_dim = getattr(self.model.config, "num_labels", None)
            if self.format.reading == "value" and out_dim != 1:
                raise PrmkitError(f"format {self.format.name!r} reads a value head (1 output) but "
                                  f"the model has {out_dim} labels")
            if self.format.reading == "classes" and not (out_dim and self.format.positive_class < out_dim):
                raise PrmkitError(f"format {self.format.name!r} reads class "
                                  f"{self.format.positive_class} but the model has {out_dim} classes")

    # -- the protocol -----------------------------------------------------------------------
    def score(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        """One score per step; every solution read in one forward pass."""
        return collect(len(problems), self.score_iter(problems, steps))

    def score_iter(self, problems: Sequence[str], steps: Sequence[Sequence[str]],
                   ) -> Iterator[tuple[int, list[float | None]]]:
        """Yield ``(index, step_scores)`` as batches finish (longest solutions first)."""
        if len(problems) != len(steps):
            raise PrmkitError(f"{len(problems)} problems but {len(steps)} step lists")
        encs = [self.encode(p, s) for p, s in zip(problems, steps)]
        for batch in self.batches([len(e.input_ids) for e in encs]):
            read = self._forward_read([encs[i] for i in batch])
            for i, scores in zip(batch, read):
                yield i, scores + [None] * (encs[i].n_steps - len(scores))

    def score_per_prefix(self, problems: Sequence[str], steps: Sequence[Sequence[str]]) -> list[list[float | None]]:
        """The slow reference: encode every prefix on its own and read only its last step."""
        where, encs = prefix_encodings(self.bound, problems, steps, self.max_length)
        out: list[list[float | None]] = [[None] * len(s) for s in steps]
        for batch in self.batches([len(e.input_ids) for e in encs]):
            for j, scores in zip(batch, self._forward_read([encs[j] for j in batch])):
                i, k = where[j]
                out[i][k] = scores[0]
        return out

    # -- encoding and batching ----------------------------------------------------------------
    def encode(self, problem: str, steps: Sequence[str]) -> Encoded:
        return encode_or_warn(self.bound, problem, steps, self.max_length, self.stats)

    def batches(self, lengths: Sequence[int]) -> list[list[int]]:
        """Scoring batches within the token budget (:attr:`HFConfig.batch_overhead`)."""
        if self.config.batch_overhead is None:
            return token_budget_batches(lengths, self.config.token_budget)
        return bucket_batches(lengths, self.config.token_budget, self.config.batch_overhead)

    def _forward_read(self, encs: Sequence[Encoded]) -> list[list[float]]:
        """One forward pass over right-padded sequences; the scores at each read position."""
        torch = self.torch
        ids, mask = pad_right([e.input_ids for e in encs], self.pad_id)
        rows = [b for b, e in enumerate(encs) for _ in e.read_positions]
        cols = [p for e in encs for p in e.read_positions]
        self.stats.forwards += 1
        self.stats.real_tokens += int(mask.sum())
        self.stats.computed_tokens += ids.numel()
        ids = ids.to(self.device)
        attn = None if (self.drop_mask or bool(mask.all())) else mask.to(self.device)
        r = torch.tensor(rows, dtype=torch.long, device=self.device)
        c = torch.tensor(cols, dtype=torch.long, device=self.device)
        with torch.inference_mode():
            probs = self._read(ids, attn, r, c).float().cpu().tolist()
        out: list[list[float]] = []
        k = 0
        for e in encs:
            out.append(probs[k:k + len(e.read_positions)])
            k += len(e.read_positions)
        return out

    def _read(self, ids: Any, attn: Any, rows: Any, cols: Any) -> Any:
        """Scores in [0, 1] at (rows, cols), per the format's reading rule."""
        return self.reader.probabilities(self.reader.logits(ids, attn, rows, cols))


# ---------------------------------------------------------------------------------------------
# loading


def load_hf_prm(model: str, step_format: str | StepFormat | None = None,
                config: HFConfig | None = None) -> HFPRM:
    """Load an HF PRM (or ORM): weights from safetensors, the step format from the model folder
    (``prmkit_format.json``) unless one is given. Trained prmkit folders (full or delta, see
    :mod:`prmkit.models.folder`) load the same way. Any kind of folder, the implicit PRM's
    included, loads with :func:`prmkit.models.load.load_prm`."""
    config = config or HFConfig()
    spec = resolve_model(model, "hf", step_format, trust_remote_code=config.trust_remote_code)
    return open_hf(spec, config)


def open_hf(spec: ModelSpec, config: HFConfig | None = None) -> HFPRM:
    """The HF PRM of a resolved spec (:func:`prmkit.models.spec.resolve_model`: its path, kind
    and step format, checked against its head, are decided there)."""
    config = config or HFConfig()
    if spec.kind == "implicit-prm":
        raise PrmkitError(f"model {spec.name!r} is an implicit PRM: load it with "
                          f"prmkit.models.load.load_prm")
    assert spec.step_format is not None, "resolve_model chooses the format of an HF PRM"
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # prmkit shows its own progress
    dtype = torch_dtype(config.dtype, config.device)
    try:
        tokenizer = AutoTokenizer.from_pretrained(spec.path,
                                                  trust_remote_code=config.trust_remote_code)
        net = delta_or_model(spec, dtype, config.trust_remote_code)
    except PrmkitError:
        raise
    except Exception as e:  # noqa: BLE001 - any loader failure is the folder's, said plainly
        raise PrmkitError(load_error(spec.name, spec.path, e)) from None
    return HFPRM(net.to(config.device), tokenizer, spec.step_format, config)


def delta_or_model(spec: ModelSpec, dtype: Any, trust_remote_code: bool) -> Any:
    """The network of a delta folder (on its base) or of a full model folder, with the head
    the spec's format reads; a classification head that the folder does not hold is an
    error."""
    from transformers import AutoModel

    path, fmt = spec.path, spec.step_format
    assert fmt is not None
    if is_delta(path):
        assert spec.delta_base is not None, "resolve_model resolves a delta folder's base"
        return load_delta(path, dtype, spec.delta_base)
    architecture = architecture_of(fmt.reading)
    try:
        net, info = load_model(path, architecture, None, dtype, trust_remote_code)
    except ValueError:  # a custom architecture (e.g. Qwen2.5-Math-PRM) with its own head
        if architecture == "causal-lm" or not trust_remote_code:
            raise
        net = AutoModel.from_pretrained(path, dtype=dtype, use_safetensors=True,
                                        trust_remote_code=True)
        info = {}
    head_missing = [k for k in info.get("missing_keys", []) if "score" in k or "classifier" in k]
    if head_missing:
        raise PrmkitError(f"model {spec.name!r} has no trained classification head "
                          f"({head_missing[0]} is missing), but format {fmt.name!r} reads "
                          f"one. Train a PRM first, or use a label-token format such as "
                          f"math-shepherd")
    return net
