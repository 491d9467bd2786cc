"""Score steps with any Hugging Face PRM (transformers), on CPU or GPU.

Model types, chosen by the step format's reading rule:

* ``label-tokens``: a causal LM read at label tokens (Math-Shepherd, RLHFlow). Only the hidden
  states at the read positions go through the LM head, so the vocabulary projection costs one
  row per step, not one per token.
* ``classes``: a per-token classification head (``*ForTokenClassification``; TRL's PRMTrainer;
  Qwen2.5-Math-PRM's 2-class head, whose custom code needs ``trust_remote_code=True``).
* ``value``: a one-logit head, read through a sigmoid.

How it scores (DESIGN.md, "Contracts"):

* every step of a solution is read in one forward pass (:meth:`HFPRM.score`); the slow reference
  :meth:`HFPRM.score_per_prefix` encodes each prefix separately and reads only its last step;
* solutions are sorted by length and packed into batches under a token budget
  (longest x batch size <= ``token_budget``), so little compute goes to padding;
* padding goes on the right. For a causal model the attention mask can then be dropped: padding
  comes after every real token, so real positions are unchanged, and the attention kernel takes
  its fast path (about 25% faster on CPU). Bidirectional models keep the mask;
* a solution longer than the model allows is cut; its steps past the cut come back as None,
  with a warning, never dropped or shifted.

Weights load from safetensors only, and ``trust_remote_code`` is off unless asked for.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

from prmkit.errors import PrmkitError
from prmkit.models.base import collect
from prmkit.stepformat import FORMAT_FILE, BoundFormat, Encoded, StepFormat, get_format

log = logging.getLogger("prmkit")

DTYPES = ("auto", "float32", "bfloat16", "float16")
# Encoder models attend both ways, so padding must stay masked for them.
BIDIRECTIONAL = {"bert", "roberta", "deberta", "deberta-v2", "electra", "distilbert",
                 "xlm-roberta", "modernbert", "albert", "mpnet"}


@dataclass
class HFConfig:
    """How an HF PRM is loaded and run."""

    dtype: str = field(default="auto", metadata={
        "help": "auto = bfloat16 on CPU (about 4x faster there than float32) and on GPU. Use "
                "float32 to compare scores exactly: bf16 scores differ by up to ~3e-2."})
    device: str = field(default="cpu", metadata={"help": "cpu, cuda, cuda:1, ..."})
    token_budget: int = field(default=16384, metadata={
        "help": "maximum padded tokens in one forward pass (longest x batch size)"})
    max_length: int | None = field(default=None, metadata={
        "help": "cut solutions to this many tokens; default: the model's maximum"})
    trust_remote_code: bool = field(default=False, metadata={
        "help": "run the model repository's own Python code (needed by some public PRMs)"})
    drop_padding_mask: bool | None = field(default=None, metadata={
        "help": "None = drop the attention mask for causal models (exact with right padding)"})

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise PrmkitError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.token_budget < 1:
            raise PrmkitError(f"token_budget must be positive, got {self.token_budget}")
        if self.max_length is not None and self.max_length < 2:
            raise PrmkitError(f"max_length must be at least 2, got {self.max_length}")


@dataclass
class ScoreStats:
    """What the scorer computed: for checking padding waste and throughput."""

    forwards: int = 0
    real_tokens: int = 0
    computed_tokens: int = 0     # batch size x longest sequence, summed over forwards
    truncated_solutions: int = 0

    def padding_efficiency(self) -> float:
        return self.real_tokens / self.computed_tokens if self.computed_tokens else 1.0


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
        return token_budget_batches(lengths, self.config.token_budget)

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


def encode_or_warn(bound: BoundFormat, problem: str, steps: Sequence[str], max_length: int,
                   stats: ScoreStats) -> Encoded:
    """Encode one solution; a cut solution is counted and warned about (its last steps null)."""
    enc = bound.encode(problem, steps, max_length=max_length)
    if enc.truncated:
        stats.truncated_solutions += 1
        log.warning("a solution of %d steps is longer than %d tokens: %d of its steps are "
                    "not scored (null)", enc.n_steps, max_length,
                    enc.n_steps - len(enc.read_positions))
    return enc


def prefix_encodings(bound: BoundFormat, problems: Sequence[str], steps: Sequence[Sequence[str]],
                     max_length: int) -> tuple[list[tuple[int, int]], list[Encoded]]:
    """For per-prefix scoring: every prefix (problem i, steps 0..k) encoded on its own, reading
    only step k. Returns ``(where, encodings)`` with ``where[j] = (i, k)``; prefixes whose last
    read position does not fit in ``max_length`` are left out (their score stays null)."""
    if len(problems) != len(steps):
        raise PrmkitError(f"{len(problems)} problems but {len(steps)} step lists")
    where: list[tuple[int, int]] = []
    encs: list[Encoded] = []
    for i, (p, s) in enumerate(zip(problems, steps)):
        for k in range(len(s)):
            enc = bound.encode(p, s[:k + 1], max_length=max_length)
            if len(enc.read_positions) == k + 1:
                encs.append(Encoded(enc.input_ids, enc.read_positions[-1:], enc.step_ends[-1:], 1))
                where.append((i, k))
    return where, encs


def token_budget_batches(lengths: Sequence[int], budget: int) -> list[list[int]]:
    """Indices grouped into batches: sorted longest first, each batch's padded size
    (batch size x its longest member) within ``budget`` (a longer sequence goes alone)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and longest * (len(current) + 1) > budget:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def pad_right(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[Any, Any]:
    """(ids, mask) tensors, right-padded: real tokens first in every row."""
    import torch

    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, :len(s)] = torch.tensor(list(s), dtype=torch.long)
        mask[b, :len(s)] = 1
    return ids, mask


class Reader:
    """Reads a model's outputs at step positions: the one place both the scorer and the trainer
    get step logits from, so the positions the trainer labels are the positions the scorer reads.

    ``logits`` returns, per read position, two logits ``[positive, negative]`` for label-token
    models, the class logits for a classification head, or the one logit of a value head.
    """

    def __init__(self, model: Any, step_format: StepFormat, bound: BoundFormat):
        self.model, self.format = model, step_format
        self.pair = [bound.positive_id, bound.negative_id]
        self.backbone = self.lm_head = None
        if step_format.reading == "label-tokens":
            mc = model.config
            lm_head = model.get_output_embeddings()
            backbone = getattr(model, getattr(model, "base_model_prefix", "model"), None)
            modifies_logits = any(getattr(mc, a, None) for a in ("final_logit_softcapping", "logit_scale"))
            if lm_head is not None and backbone is not None and not modifies_logits:
                # only the read positions go through the vocabulary projection
                self.backbone, self.lm_head = backbone, lm_head

    def logits(self, ids: Any, attn: Any, rows: Any, cols: Any, via: Any = None,
               cache: Any = None, positions: Any = None) -> Any:
        """Logits at (rows, cols). ``via`` runs the forward through a wrapper of the model
        (DDP must see the forward call); it then takes the full forward path. ``cache`` is a
        transformers key-value cache of the tokens before ``ids`` (extended in place;
        :mod:`prmkit.models.incremental`): ``ids`` then continue those tokens, at
        ``positions`` (position ids) when the rows' caches are left-padded."""
        model = via if via is not None else self.model
        if self.format.reading == "label-tokens":
            if self.backbone is not None and via is None:
                hidden = self.backbone(input_ids=ids, attention_mask=attn,
                                       **_cache_kwargs(self.backbone, cache, positions)).last_hidden_state
                return self.lm_head(hidden[rows, cols])[:, self.pair]
            return model(input_ids=ids, attention_mask=attn,
                         **_cache_kwargs(model, cache, positions)).logits[rows, cols][:, self.pair]
        return _logits(model(input_ids=ids, attention_mask=attn,
                             **_cache_kwargs(model, cache, positions)))[rows, cols]

    def probabilities(self, logits: Any) -> Any:
        """P(step is correct) from :meth:`logits`."""
        import torch

        logits = logits.float()
        if self.format.reading == "label-tokens":
            return torch.softmax(logits, dim=-1)[:, 0]
        if self.format.reading == "value":
            return torch.sigmoid(logits[:, 0])
        return torch.softmax(logits, dim=-1)[:, self.format.positive_class]

    def margin(self, logits: Any) -> Any:
        """The reward as one real number per position: logit(P(correct)) for two-way readings,
        the raw logit of a value head (used by pairwise Bradley-Terry training)."""
        logits = logits.float()
        if self.format.reading == "value":
            return logits[:, 0]
        if self.format.reading == "label-tokens":
            return logits[:, 0] - logits[:, 1]
        return logits[:, self.format.positive_class] - logits[:, 1 - self.format.positive_class]


def _logits(output: Any) -> Any:
    return output.logits if hasattr(output, "logits") else output[0]


def _cache_kwargs(module: Any, cache: Any, positions: Any = None) -> dict[str, Any]:
    """Forward arguments that pass a key-value cache: ``cache`` (transformers 5.x) or
    ``past_key_values`` (before), whichever the module's forward takes, and the position ids
    when given; none without a cache."""
    if cache is None:
        return {}
    import inspect

    params = inspect.signature(module.forward).parameters
    kw = {"cache" if "cache" in params else "past_key_values": cache, "use_cache": True}
    if positions is not None:
        kw["position_ids"] = positions
    return kw


# ---------------------------------------------------------------------------------------------
# loading


def resolve_model_path(name_or_path: str) -> str:
    """A default model name (see prmkit.models.pypi), a local folder, or a hub id."""
    from prmkit.models.pypi import DEFAULT_MODELS, resolve

    if name_or_path in DEFAULT_MODELS:
        return resolve(name_or_path)
    if os.path.isdir(name_or_path):
        from prmkit.train.modeldir import is_delta

        if not (os.path.isfile(os.path.join(name_or_path, "config.json")) or is_delta(name_or_path)):
            raise PrmkitError(f"{name_or_path}: not a model folder (no config.json)")
        return name_or_path
    looks_like_hub_id = name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/", "~"))
    if looks_like_hub_id and not os.path.exists(name_or_path):
        return name_or_path
    raise PrmkitError(f"model {name_or_path!r}: no such folder (default models: "
                      f"{', '.join(DEFAULT_MODELS)})")


TORCH_DTYPES = {"auto": "bfloat16", "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def load_hf_prm(model: str, step_format: str | StepFormat | None = None,
                config: HFConfig | None = None) -> HFPRM:
    """Load a PRM: weights from safetensors, the step format from the model folder
    (``prmkit_format.json``) unless one is given. Trained prmkit folders (full or delta, see
    :mod:`prmkit.train.modeldir`) load the same way."""
    config = config or HFConfig()
    path = resolve_model_path(model)  # a missing model is reported before the heavy imports
    from prmkit.train.modeldir import read_train_info

    if os.path.isdir(path) and read_train_info(path).get("kind") == "implicit-prm":
        from prmkit.models.implicit import load_implicit_prm  # a policy + reference pair

        return load_implicit_prm(path, config, step_format)  # type: ignore[return-value]

    import torch
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from prmkit.train import modeldir

    hf_logging.disable_progress_bar()  # prmkit shows its own progress

    if step_format is None:
        saved = os.path.join(path, FORMAT_FILE)
        if not os.path.isfile(saved):
            raise PrmkitError(f"model {model!r} has no {FORMAT_FILE}: say which step format it "
                              f"reads with --format (math-shepherd, qwen-prm, trl, rlhflow, prmkit)")
        step_format = saved
    fmt = get_format(step_format) if isinstance(step_format, str) else step_format
    dtype = getattr(torch, TORCH_DTYPES[config.dtype])
    architecture = modeldir.architecture_of(fmt.reading)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=config.trust_remote_code)
        if modeldir.is_delta(path):
            net = modeldir.load_delta(path, dtype)
        else:
            try:
                net, info = modeldir.load_model(path, architecture, None, dtype,
                                                config.trust_remote_code)
            except ValueError:  # a custom architecture (e.g. Qwen2.5-Math-PRM) with its own head
                if architecture == "causal-lm" or not config.trust_remote_code:
                    raise
                net = AutoModel.from_pretrained(path, dtype=dtype, use_safetensors=True,
                                                trust_remote_code=True)
                info = {}
            head_missing = [k for k in info.get("missing_keys", []) if "score" in k or "classifier" in k]
            if head_missing:
                raise PrmkitError(f"model {model!r} has no trained classification head "
                                  f"({head_missing[0]} is missing), but format {fmt.name!r} reads "
                                  f"one. Train a PRM first, or use a label-token format such as "
                                  f"math-shepherd")
    except PrmkitError:
        raise
    except (OSError, ValueError, json.JSONDecodeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise PrmkitError(f"model {model!r}: cannot load: {first}") from None
    return HFPRM(net.to(config.device), tokenizer, fmt, config)
