"""Train a process reward model: cross-entropy on step labels, read at the end of each step.

Papers: Lightman et al. 2023, "Let's Verify Step by Step" (human step labels, PRM800K); Wang et
al. 2023, "Math-Shepherd" (Monte Carlo labels, soft labels, "+"/"-" label tokens); Zhang et al.
2025, "The Lessons of Developing Process Reward Models" (Qwen2.5-Math-PRM, a 2-class head).

Each (problem, steps) is encoded by the step format and read by
:class:`prmkit.models.reading.Reader`, as ``prmkit score`` reads it. Null labels are masked. A
solution longer than ``max_length`` is cut, and only steps whose read position fits are
trained.

Heads (``head``): ``class`` (a 2-class head on every token, read class 1), ``label-tokens``
(the LM head's "+" and "-" logits), ``hazard`` (the 2-class head as P(no error) at every token,
a step's score the product up to its read position; a discrete-time survival model, Singer &
Willett 1993) and ``surprisal`` (a hazard head that also reads the LM's surprise,
:mod:`prmkit.models.surprisal`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.formats.detect import read_records
from prmkit.records import Record, first_error_from_labels
from prmkit.stepformat import BoundFormat
from prmkit.train.common import (HEADS, TrainConfig, auc, check_frozen_cache, load_base,
                                 make_saver, pad_id, read_logits, score_with_progress,
                                 training_format)
from prmkit.train.loop import HEAD_MODULES, Example, Loop, set_trainable
from prmkit.models.base import PRM

FITNESS = ("auc", "f1", "f1-tuned")
__all__ = ["FITNESS", "HEADS", "PRMTrainConfig", "StepObjective", "auc", "cached_dev_scores",
           "dev_examples", "first_error_f1", "step_examples", "train_prm", "training_format",
           "validate"]


@dataclass(kw_only=True)
class PRMTrainConfig(TrainConfig):
    """``prmkit train prm``: what to train on, how the PRM reads steps, and the loop options."""

    data: str = field(metadata={"help": "training records (prmkit JSONL) with labels or first_error"})
    eval_data: str | None = field(default=None, metadata={
        "help": "dev records for validation; default: none (fitness from training loss)"})
    head: str = field(default="class", metadata={
        "help": "class (2-class head read at each step's tag), label-tokens (the LM head's + "
                "and - logits), hazard (the 2-class head at every token as P(no error "
                "here), a step's score their product up to its tag), or surprisal (hazard "
                "that also reads how surprised the LM is by each token; needs tied embeddings)"})
    calculator: bool = field(default=False, metadata={
        "help": "a calculator checks every equation of a step ('11 - 3 = 9') and writes the "
                "value after a wrong one ('= 9 [calculator: 8]') into the text the model reads, "
                "in training and wherever the model is used (stored in its step format; "
                "prmkit.calculator): for a base that cannot do arithmetic"})
    labels: str = field(default="hard", metadata={
        "help": "hard: labels >= 0.5 are 1, else 0; soft: train against [p, 1-p] as given"})
    until_first_error: bool = field(default=False, metadata={
        "help": "train only up to and including the first wrong step (Let's Verify)"})
    max_length: int = field(default=1024, metadata={
        "help": "cut sequences to this many tokens; steps past the cut are not trained"})
    cache_frozen: bool = field(default=False, metadata={
        "help": "with --train last-k: run the frozen layers once over the training set and "
                "train on their stored outputs (cheaper epochs from the second on; checked "
                "against the uncached forward on the first batch; memory: hidden size x 4 "
                "bytes per training token). --eval-data goes through the same pass, so "
                "validation runs only the trained top, in the training dtype"})
    frozen_store: str | None = field(default=None, metadata={
        "help": "with --cache-frozen: a folder that keeps the frozen layers' outputs on disk; a "
                "later run on the same base, --last-k and --dtype reads them (train orm "
                "takes the same option)"})
    fitness: str = field(default="auc", metadata={
        "help": "what picks best/: auc (step AUC on dev), f1 (first-error F1 on dev at 0.5) or "
                "f1-tuned (at the threshold that maximises it on dev, which is saved with the "
                "model in prmkit_threshold.json)"})
    dtype: str = field(default="float32", metadata={
        "help": "compute dtype: float32, or bfloat16 (autocast: bf16 matmuls, float32 weights "
                "and optimiser; faster only on a CPU or GPU with native bfloat16)"})

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise PrmkitError(f"--head {self.head!r} is not one of {', '.join(HEADS)}")
        if self.labels not in ("hard", "soft"):
            raise PrmkitError(f"--labels {self.labels!r} is not hard or soft")
        if self.fitness not in FITNESS:
            raise PrmkitError(f"--fitness {self.fitness!r} is not one of {', '.join(FITNESS)}")
        check_frozen_cache(self.cache_frozen, self.frozen_store, self.loop.train, False)
        self.check_common()


class StepObjective:
    """The PRM's loss: cross-entropy against each labelled step's target p in [0, 1] (hard
    labels are 0 or 1), read at the step's read position. The positive token or class gets p,
    the other 1 - p; a value head uses binary cross-entropy."""

    def __init__(self, reader: Any, pad: int, drop_mask: bool = True):
        self.reader, self.pad, self.drop_mask = reader, pad, drop_mask

    def __call__(self, exs: list[Example], device: Any, via: Any) -> Any:
        logits = read_logits(self.reader, exs, self.pad, self.drop_mask, device, via)
        return self.loss(logits, exs, device)

    def loss(self, logits: Any, exs: list[Example], device: Any) -> Any:
        """The loss of step logits read at the read positions of ``exs``, in order."""
        import torch

        targets = torch.tensor([t for e in exs for t in e.targets], dtype=torch.float32)
        return cross_entropy(self.reader.format.reading, self.reader.format.positive_class,
                             logits, targets.to(device))


def cross_entropy(reading: str, positive_class: int, logits: Any, targets: Any) -> Any:
    """Cross-entropy of step logits (:meth:`prmkit.models.reading.Reader.logits`) against soft
    targets."""
    import torch
    import torch.nn.functional as F

    logits = logits.float()
    if reading == "value":
        return F.binary_cross_entropy_with_logits(logits[:, 0], targets)
    logp = torch.log_softmax(logits, dim=-1)
    if reading == "label-tokens":
        pos, neg = logp[:, 0], logp[:, 1]
    else:
        if logits.shape[-1] != 2:
            raise PrmkitError(f"training a class head needs 2 classes, the model has {logits.shape[-1]}")
        pos, neg = logp[:, positive_class], logp[:, 1 - positive_class]
    return -(targets * pos + (1 - targets) * neg).mean()


def step_examples(records: Sequence[Record], bound: BoundFormat, max_length: int, soft: bool,
                  until_first_error: bool) -> tuple[list[Example], int]:
    """Encode labelled records. Returns (examples, records without a labelled step)."""
    out: list[Example] = []
    skipped = 0
    for r in records:
        labels = r.labels_or_first_error()
        if labels is None:
            skipped += 1
            continue
        steps = r.steps
        if until_first_error:
            fe = first_error_from_labels([x if x is not None else 1.0 for x in labels])
            if fe is not None and fe >= 0:
                steps, labels = steps[:fe + 1], labels[:fe + 1]
        enc = bound.encode(r.problem, steps, max_length=max_length)
        pos, tgt = [], []
        for k, p in enumerate(enc.read_positions):  # only the steps that fit, never shifted
            if labels[k] is not None:
                pos.append(p)
                tgt.append(float(labels[k]) if soft else float(labels[k] >= 0.5))
        if not pos:
            skipped += 1
            continue
        ids = enc.input_ids[:pos[-1] + 1]  # nothing after the last trained position matters
        out.append(Example(ids, pos, tgt))
    return out, skipped


def init_hazard_head(model: Any, examples: Sequence[Example], surprisal: bool = False) -> None:
    """Start a hazard head (``--head hazard``) where a step's score is about 1/2 at the mean
    read position L: every token's P(no error) at 2 ** (-1 / L) (the head's bias; class 1 is
    positive), the weights (and a surprisal head's gates) at 0 (docs/training.md)."""
    import math

    import torch

    from prmkit.models.surprisal import OUTPUTS, init_gates

    head = next((getattr(model, n) for n in HEAD_MODULES
                 if isinstance(getattr(model, n, None), torch.nn.Linear)), None)
    outputs = OUTPUTS if surprisal else 2
    if head is None or head.bias is None or head.out_features != outputs:
        raise PrmkitError(f"--head {'surprisal' if surprisal else 'hazard'} needs a linear head "
                          f"of {outputs} outputs with a bias; {type(model).__name__} has none")
    reads = [p + 1 for e in examples for p in e.read_positions]
    keep = 2.0 ** (-1.0 / max(1.0, sum(reads) / max(1, len(reads))))
    with torch.no_grad():
        head.weight.zero_()
        head.bias[:2].copy_(torch.tensor([0.0, math.log(keep / (1.0 - keep))]))
    if surprisal:
        init_gates(head)


# ---------------------------------------------------------------------------------------------
# validation metrics


def first_error_f1(records: Sequence[Record], scores: Sequence[Sequence[float | None]],
                   threshold: float = 0.5) -> float | None:
    """ProcessBench F1 (%) of records with a known first error, at ``threshold``."""
    from prmkit.evaluate.processbench import predicted_first_error, split_metrics

    pairs = []
    for r, s in zip(records, scores):
        gold = r.first_error if r.first_error is not None else first_error_from_labels(r.labels or [])
        if gold is not None:
            pairs.append((gold, predicted_first_error(s, threshold)))
    return split_metrics([g for g, _ in pairs], [p for _, p in pairs]).f1 if pairs else None


def validate(prm: PRM, records: Sequence[Record]) -> dict[str, float]:
    """Step AUC and first-error F1 of a scorer on labelled dev records."""
    return step_metrics(records, score_with_progress(prm, records))


def step_metrics(records: Sequence[Record], scores: Sequence[Sequence[float | None]]) -> dict[str, float]:
    """Step AUC and first-error F1 of per-step scores (None: not scored) of labelled records."""
    ys, ss = [], []
    for r, s in zip(records, scores):
        for y, x in zip(r.labels_or_first_error() or [], s):
            if y is not None and x is not None:
                ys.append(float(y >= 0.5))
                ss.append(x)
    out: dict[str, float] = {}
    a = auc(ys, ss)
    if a is not None:
        out["dev_auc"] = round(a, 6)
    f = first_error_f1(records, scores)
    if f is not None:
        out["dev_f1"] = round(f, 4)
    out.update(tuned_threshold(records, scores))
    return out


def tuned_threshold(records: Sequence[Record], scores: Sequence[Sequence[float | None]],
                    ) -> dict[str, float]:
    """``dev_threshold``, the threshold that maximises first-error F1 on the records with a
    known first error, and that F1 (``dev_f1_tuned``); {} unless some have an error and some
    none (:func:`prmkit.evaluate.threshold.calibrate_threshold`)."""
    from prmkit.evaluate.threshold import calibrate_threshold

    gold, rows = [], []
    for r, s in zip(records, scores):
        g = r.first_error if r.first_error is not None else first_error_from_labels(r.labels or [])
        if g is not None and (g == -1 or g < len(s)):
            gold.append(g)
            rows.append(s)
    if not (any(g == -1 for g in gold) and any(g >= 0 for g in gold)) or not any(
            x is not None for row in rows for x in row):
        return {}
    t, f1 = calibrate_threshold(gold, rows)
    return {"dev_threshold": round(t, 6), "dev_f1_tuned": round(f1 or 0.0, 4)}


def dev_examples(records: Sequence[Record], bound: BoundFormat, max_length: int) -> list[Example]:
    """Dev records encoded for validation on cached frozen layers: every step's read position
    that fits in ``max_length`` (the targets are unused)."""
    out = []
    for r in records:
        enc = bound.encode(r.problem, r.steps, max_length=max_length)
        pos = list(enc.read_positions)
        ids = enc.input_ids[:pos[-1] + 1] if pos else enc.input_ids[:1]
        out.append(Example(ids, pos, [0.0] * len(pos)))
    return out


def cached_scores(records: Sequence[Record], probs: list[list[float]]) -> list[list[float | None]]:
    """Per-step scores of ``records`` from the probabilities at their :func:`dev_examples`'
    read positions (steps past the cut are None)."""
    out: list[list[float | None]] = []
    for r, p in zip(records, probs):
        row: list[float | None] = list(p)
        out.append(row + [None] * (len(r.steps) - len(row)))
    return out


def cached_dev_scores(objective: Any, records: Sequence[Record], dev: Sequence[Example],
                      device: Any) -> list[list[float | None]]:
    """Per-step scores of dev ``records`` (encoded as ``dev``, :func:`dev_examples`) from
    their stored frozen states, through a :class:`prmkit.train.frozen.CachedSteps`
    objective's trained top; a record cut before its first step gets no scores."""
    probs = iter(objective.probabilities([e for e in dev if e.read_positions], device))
    return cached_scores(records, [next(probs) if e.read_positions else [] for e in dev])


# ---------------------------------------------------------------------------------------------
# training


def train_prm(cfg: PRMTrainConfig) -> list[dict[str, Any]]:
    """Train; returns the validation history (also in ``OUTPUT/metrics.jsonl``)."""
    from prmkit.models.load import wrap_model
    from prmkit.models.reading import HFConfig, Reader

    fmt = training_format(cfg.format, cfg.head, cfg.calculator)
    train_records = cfg.training_records()
    dev_records = [r for r in read_records(cfg.eval_data) if r.labels_or_first_error()] \
        if cfg.eval_data else []
    model, tokenizer = load_base(cfg, fmt)
    bound = fmt.bind(tokenizer)
    examples, skipped = step_examples(train_records, bound, cfg.max_length,
                                      cfg.labels == "soft", cfg.until_first_error)
    if skipped:
        print(f"train: {skipped} of {len(train_records)} records have no labelled step that "
              f"fits and are not used", file=sys.stderr)
    if fmt.hazard:
        init_hazard_head(model, examples, fmt.surprisal)
    model = set_trainable(model, cfg.loop)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"train: {len(examples)} sequences, {sum(len(e.targets) for e in examples)} labelled "
          f"steps; {n_trainable:,} trainable parameters ({cfg.loop.train})", file=sys.stderr)
    fitness = {"auc": "dev_auc", "f1": "dev_f1", "f1-tuned": "dev_f1_tuned"}[cfg.fitness] \
        if dev_records else "neg_train_loss"

    objective: Any = StepObjective(Reader(model, fmt, bound), pad_id(tokenizer))
    dev = dev_examples(dev_records, bound, cfg.max_length) if cfg.cache_frozen else []
    if cfg.cache_frozen:
        from prmkit.train.frozen import cached_steps

        objective = cached_steps(objective, model, cfg, examples, dev)

    def evaluate(m: Any) -> dict[str, float]:
        if not dev_records:
            return {}
        if cfg.cache_frozen and objective.checked:   # the dev set's frozen states are stored
            out = step_metrics(dev_records, cached_dev_scores(objective, dev_records, dev,
                                                              next(m.parameters()).device))
        else:
            prm = wrap_model(m, tokenizer, fmt, HFConfig(dtype="float32", max_length=cfg.max_length))
            out = validate(prm, dev_records)
        out.setdefault(fitness, float("-inf"))
        return out

    save = make_saver(cfg, fmt, tokenizer, "prm", model, len(examples), len(dev_records))
    loop = Loop(model, objective, examples, cfg.loop, cfg.output, fitness, evaluate, save,
                autocast_bf16=cfg.autocast_bf16)
    return loop.run()
