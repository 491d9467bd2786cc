"""Reading a model's outputs at step positions: dtypes, the HF run config, padding,
token-budget batching and :class:`Reader`.

The one place both the scorers (:mod:`prmkit.models.backends.hf`, :mod:`prmkit.models.sharing.incremental`,
:mod:`prmkit.models.backends.implicit`) and the trainers (:mod:`prmkit.train`) get step logits from, so
the positions a trainer labels are the positions a scorer reads (ARCHITECTURE.md, "The step
format's contract").
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.models.architectures import final_logits, head_is_known
from prmkit.models.body import backbone as body_of
from prmkit.stepformat import BoundFormat, Encoded, StepFormat

log = logging.getLogger("prmkit")

DTYPES = ("auto", "float32", "bfloat16", "float16")
# the torch dtype of each name; ``auto`` is :func:`fast_dtype` of the device
TORCH_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
# what ``auto`` resolves to when set, whatever the machine
AUTO_DTYPE_ENV = "PRMKIT_AUTO_DTYPE"
AUTO_DTYPE_CHOICES = ("float32", "bfloat16")
# CPU flags of native bfloat16 arithmetic (x86: AVX512-BF16, AMX; Arm: the BF16 extension)
BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
# a trainer's compute dtype: float32 weights, optionally bfloat16 autocast
TRAIN_DTYPES = ("float32", "bfloat16")


@dataclass
class HFConfig:
    """How an HF PRM is loaded and run."""

    dtype: str = field(default="auto", metadata={
        "help": "auto = bfloat16 on a GPU and on a CPU with native bfloat16 (AVX512-BF16 or "
                "AMX), float32 on other CPUs; $PRMKIT_AUTO_DTYPE (float32 or bfloat16) "
                "overrides it. Use float32 to compare scores exactly: bfloat16 scores differ "
                "by up to about 3e-2."})
    device: str = field(default="cpu", metadata={"help": "cpu, cuda, cuda:1, ..."})
    token_budget: int = field(default=16384, metadata={
        "help": "maximum padded tokens in one forward pass (longest x batch size)"})
    max_length: int | None = field(default=None, metadata={
        "help": "cut solutions to this many tokens; default: the model's maximum"})
    trust_remote_code: bool = field(default=False, metadata={
        "help": "run the model repository's own Python code (needed by some public PRMs)"})
    batch_overhead: int | None = field(default=None, metadata={
        "help": "None: scoring batches are the greedy cut (longest first, each as full as the "
                "budget allows). N: cut where padding plus N tokens a pass is least "
                "(bucket_batches; 128 took the ProcessBench dev slice from 0.946 to 0.986 "
                "real/computed tokens, but in bfloat16 the scores move with the batches: "
                "one-pass against per-prefix on 8 GSM8K solutions, 0.006 greedy, 0.021 at 128)"})
    drop_padding_mask: bool | None = field(default=None, metadata={
        "help": "None = drop the attention mask for causal models (exact with right padding)"})

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise PrmkitError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.token_budget < 1:
            raise PrmkitError(f"token_budget must be positive, got {self.token_budget}")
        if self.batch_overhead is not None and self.batch_overhead < 0:
            raise PrmkitError(f"batch_overhead must be 0 or more, got {self.batch_overhead}")
        if self.max_length is not None and self.max_length < 2:
            raise PrmkitError(f"max_length must be at least 2, got {self.max_length}")


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether this CPU does bfloat16 arithmetic natively (read from ``/proc/cpuinfo``'s flags,
    or ``cpuinfo`` when given). Without it (AVX2 alone, or no ``/proc/cpuinfo``), torch emulates
    bfloat16 matmuls, several times slower than float32 (docs/benchmarks.md)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return False
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() not in ("flags", "features"):
            continue
        if set(value.split()) & set(BF16_CPU_FLAGS):
            return True
    return False


def fast_dtype(device: str = "cpu") -> str:
    """What ``auto`` means on ``device``: ``$PRMKIT_AUTO_DTYPE`` when set (float32 or
    bfloat16, for numbers that do not depend on the machine); else bfloat16 on a CPU with
    native bfloat16 and on a GPU that supports it (a CUDA GPU before Ampere does not), else
    float32."""
    forced = os.environ.get(AUTO_DTYPE_ENV, "").strip()
    if forced:
        if forced not in AUTO_DTYPE_CHOICES:
            raise PrmkitError(f"${AUTO_DTYPE_ENV} is {forced!r}: it must be one of "
                              f"{', '.join(AUTO_DTYPE_CHOICES)}")
        return forced
    device = str(device)
    if device.startswith("cuda"):
        import torch

        return "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() \
            else "float32"
    if not device.startswith("cpu"):
        return "bfloat16"
    return "bfloat16" if cpu_has_native_bf16() else "float32"


def torch_dtype(name: str, device: str = "cpu") -> Any:
    """The torch dtype of a dtype name (``auto``: :func:`fast_dtype` of ``device``)."""
    import torch

    return getattr(torch, fast_dtype(device) if name == "auto" else TORCH_DTYPES[name])


@dataclass
class ScoreStats:
    """What the scorer computed: for checking padding waste and throughput."""

    forwards: int = 0
    real_tokens: int = 0
    computed_tokens: int = 0     # batch size x longest sequence, summed over forwards
    truncated_solutions: int = 0

    def padding_efficiency(self) -> float:
        return self.real_tokens / self.computed_tokens if self.computed_tokens else 1.0


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


def bucket_batches(lengths: Sequence[int], budget: int, overhead: int) -> list[list[int]]:
    """Indices grouped into scoring batches that waste little padding: sorted longest first,
    then cut (an exact dynamic programme) where the padded tokens plus ``overhead`` tokens per
    batch are fewest, each batch's padded size within ``budget`` (a longer sequence goes
    alone). ``overhead`` 0 gives each length its own batch; a large one the fewest batches, as
    :func:`token_budget_batches`. Time: lengths x the largest batch."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    sizes = [max(1, lengths[i]) for i in order]
    best = [0.0] + [float("inf")] * len(order)      # best[i]: cost of the first i in order
    start = [0] * (len(order) + 1)
    for i in range(1, len(order) + 1):
        for j in range(i - 1, -1, -1):              # the batch order[j:i], longest sizes[j]
            if i - j > 1 and (i - j) * sizes[j] > budget:
                break
            cost = best[j] + (i - j) * sizes[j] + overhead
            if cost < best[i]:
                best[i], start[i] = cost, j
    batches: list[list[int]] = []
    i = len(order)
    while i:
        batches.append(order[start[i]:i])
        i = start[i]
    return batches[::-1]


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
    """Reads a model's outputs at step positions, for the scorers and the trainers alike.

    ``logits`` returns, per read position, two logits ``[positive, negative]`` for label-token
    models, the class logits for a classification head, or the one logit of a value head.
    """

    def __init__(self, model: Any, step_format: StepFormat, bound: BoundFormat):
        self.model, self.format = model, step_format
        self.pair = [bound.positive_id, bound.negative_id]
        self.backbone = self.lm_head = self.surprisal = None
        if step_format.surprisal:
            from prmkit.models.surprisal import Surprisal

            self.surprisal = Surprisal(model)
        if step_format.reading == "label-tokens":
            lm_head = model.get_output_embeddings()
            backbone = body_of(model)
            if lm_head is not None and backbone is not None and head_is_known(model):
                # only the read positions go through the vocabulary projection
                self.backbone, self.lm_head = backbone, lm_head

    def logits(self, ids: Any, attn: Any, rows: Any, cols: Any, via: Any = None,
               cache: Any = None, positions: Any = None, tokens: Any = None,
               features: Any = None) -> Any:
        """Logits at (rows, cols). ``via`` runs the forward through a wrapper of the model
        (DDP must see the forward call); it then takes the full forward path. ``cache`` is a
        transformers key-value cache of the tokens before ``ids`` (extended in place;
        :mod:`prmkit.models.sharing.incremental`): ``ids`` then continue those tokens, at
        ``positions`` (position ids) when the rows' caches are left-padded; without a cache,
        ``positions`` and a 4D ``attn`` read a packed tree (:mod:`prmkit.models.sharing.treepass`).
        ``ids`` may also be hidden states (a float tensor, batch x length x hidden) that enter
        the model as ``inputs_embeds`` (:mod:`prmkit.train.frozen`); a surprisal head then
        needs their token ids, ``tokens``, and may be given its stored LM ``features``."""
        model = via if via is not None else self.model
        given = {"inputs_embeds" if ids.is_floating_point() else "input_ids": ids}
        if self.format.reading == "label-tokens":
            if self.backbone is not None and via is None:
                hidden = self.backbone(**given, attention_mask=attn,
                                       **cache_kwargs(self.backbone, cache, positions)).last_hidden_state
                return final_logits(self.model, hidden[rows, cols])[:, self.pair]
            return model(**given, attention_mask=attn,
                         **cache_kwargs(model, cache, positions)).logits[rows, cols][:, self.pair]
        kwargs = dict(given, attention_mask=attn, **cache_kwargs(model, cache, positions))
        if not self.format.hazard:
            return head_logits(model(**kwargs))[rows, cols]
        if cache is not None:
            raise PrmkitError("a hazard head is read over the whole sequence: it cannot "
                              "continue a key-value cache")
        p = self.format.positive_class
        if self.surprisal is not None:
            if tokens is None and ids.is_floating_point():
                raise PrmkitError("a surprisal head read from hidden states needs their token ids")
            keep = self.surprisal.keep(model, kwargs, ids if tokens is None else tokens, p,
                                       features)
        else:
            out = head_logits(model(**kwargs)).float()
            keep = out[..., p] - out[..., 1 - p]
        return self.survival(keep, attn, rows, cols)

    def hazard_continued(self, ids: Any, attn: Any, cache: Any, positions: Any, before: Any,
                         previous: Sequence[Any]) -> tuple[Any, Any]:
        """A hazard head read on ``ids`` that continue cached tokens (prefix sharing,
        :mod:`prmkit.models.sharing.prefix`): every new token's log S (the sum of log P(no error) over
        the row's tokens up to it), given ``before[b]``, the sum over row b's cached tokens.
        A surprisal head reads the first new token against ``previous[b]``, the final hidden
        state of the last cached token (None: no cached token, so the first token's features
        are 0, as at a sequence's start). Returns (log S: rows x new, the new tokens' final
        hidden states, or None for a plain hazard head); ``attn`` covers cache and new ids."""
        import torch
        import torch.nn.functional as F

        p = self.format.positive_class
        kwargs = dict(input_ids=ids, attention_mask=attn, **cache_kwargs(self.model, cache, positions))
        hidden = None
        if self.surprisal is None:
            out = head_logits(self.model(**kwargs)).float()
            keep = out[..., p] - out[..., 1 - p]
        else:
            head, hidden = self.surprisal.forward(self.model, kwargs)
            first = torch.stack([h if h is not None else torch.zeros_like(hidden[b, 0])
                                 for b, h in enumerate(previous)])
            feats = self.surprisal.features(torch.cat([first[:, None], hidden], dim=1),
                                            torch.cat([ids[:, :1], ids], dim=1))[:, 1:]
            feats[[b for b, h in enumerate(previous) if h is None], 0] = 0.0
            from prmkit.models.surprisal import keep_logits

            keep = keep_logits(head, feats, p)
        new = attn[:, attn.shape[1] - ids.shape[1]:] if attn is not None else torch.ones_like(ids)
        log_keep = F.logsigmoid(keep.float()) * new.to(torch.float32)
        return torch.cumsum(log_keep, dim=1) + before.to(log_keep)[:, None], hidden

    def survival(self, keep_logits: Any, attn: Any, rows: Any, cols: Any) -> Any:
        """A hazard head's step logits from every token's keep logit (for a plain hazard head
        the two classes' difference, positive - negative): log P(no error at t) =
        logsigmoid(keep logit); the step read at (row, col) has log S = the sum of these over
        the row's tokens 0..col (masked padding adds nothing). Returned as the pair
        [log S, log(1 - S)] in the head's class order, so softmax gives S and the step
        cross-entropy, the probabilities and the margin work unchanged."""
        import torch
        import torch.nn.functional as F

        p = self.format.positive_class
        keep = F.logsigmoid(keep_logits.float())
        if attn is not None:
            keep = keep * attn.to(keep.dtype)
        log_s = torch.cumsum(keep, dim=1)[rows, cols].clamp(max=-1e-6)
        log_not = torch.log(-torch.expm1(log_s))
        pair = [log_s, log_not] if p == 0 else [log_not, log_s]
        return torch.stack(pair, dim=-1)

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


def head_logits(output: Any) -> Any:
    return output.logits if hasattr(output, "logits") else output[0]


def cache_kwargs(module: Any, cache: Any, positions: Any = None) -> dict[str, Any]:
    """Forward arguments that pass a key-value cache: ``cache`` (transformers 5.x) or
    ``past_key_values`` (before), whichever the module's forward takes, and the position ids
    when given (without a cache too: :mod:`prmkit.models.sharing.treepass`)."""
    if cache is None:
        return {} if positions is None else {"position_ids": positions}
    import inspect

    params = inspect.signature(module.forward).parameters
    kw = {"cache" if "cache" in params else "past_key_values": cache, "use_cache": True}
    if positions is not None:
        kw["position_ids"] = positions
    return kw
