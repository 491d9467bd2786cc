"""Train an outcome reward model (ORM), the baseline a PRM must beat.

Papers: Cobbe et al. 2021, "Training Verifiers to Solve Math Word Problems" (outcome
verifiers); Lightman et al. 2023, "Let's Verify Step by Step" (ORM vs PRM at equal budget);
Ouyang et al. 2022 / Bradley & Terry 1952 (pairwise reward models).

Two objectives, both read through the same step format as the PRM, at the read position of the
solution's last step, so an ORM and a PRM trained with the same budget differ only in their
labels:

* ``outcome``: cross-entropy on ``is_correct`` (one label per solution);
* ``pairwise``: Bradley-Terry, -log sigmoid(r(chosen) - r(rejected)), on pairs of a correct and
  a wrong solution of the same problem (same ``group``); a pair's two sequences are always in the
  same batch, as reward-model training usually does. r is the logit margin of the head.

A solution too long for ``max_length`` cannot be read at its end and is left out (counted).
The trained folder records ``kind: orm``; ``prmkit score`` then writes ``meta.outcome_score``.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.formats.detect import read_records
from prmkit.records import Record
from prmkit.stepformat import BoundFormat
from prmkit.train.common import (HEADS, TrainConfig, auc, load_base, make_saver, pad_id,
                                 read_logits, score_with_progress, training_format)
from prmkit.train.loop import Example, Loop, set_trainable
from prmkit.train.prm import StepObjective, cached_dev_scores, dev_examples, init_hazard_head

OBJECTIVES = ("outcome", "pairwise")


@dataclass(kw_only=True)
class ORMTrainConfig(TrainConfig):
    """``prmkit train orm``: outcome classification or pairwise Bradley-Terry."""

    data: str = field(metadata={"help": "training records with is_correct (and group, for pairwise)"})
    eval_data: str | None = field(default=None, metadata={"help": "dev records with is_correct"})
    objective: str = field(default="outcome", metadata={"help": "outcome or pairwise"})
    head: str = field(default="class", metadata={
        "help": "class (2-class head), label-tokens, or a PRM's survival head read at the last "
                "step: hazard or surprisal (P(no error in the whole solution), trained on the "
                "outcome alone)"})
    calculator: bool = field(default=False, metadata={
        "help": "as train prm --calculator: a calculator's value written after every wrong "
                "equation of a step, in the text the model reads (stored in its step format)"})
    cache_frozen: bool = field(default=False, metadata={
        "help": "with --train last-k and --objective outcome: run the frozen layers once and "
                "train on their stored outputs, as train prm --cache-frozen does; --eval-data "
                "goes through the same pass, so validation runs only the trained top"})
    frozen_store: str | None = field(default=None, metadata={
        "help": "with --cache-frozen: a folder that keeps the frozen layers' outputs on disk, "
                "shared with train prm --frozen-store on the same base"})
    max_pairs_per_group: int = field(default=4, metadata={
        "help": "pairwise: at most this many (correct, wrong) pairs per problem"})

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise PrmkitError(f"--objective {self.objective!r} is not one of {', '.join(OBJECTIVES)}")
        if self.head not in HEADS:
            raise PrmkitError(f"--head {self.head!r} is not one of {', '.join(HEADS)}")
        self.check_common(min_length=False)
        if self.max_pairs_per_group < 1:
            raise PrmkitError("--max-pairs-per-group must be at least 1")
        if self.cache_frozen and (self.loop.train != "last-k" or self.objective != "outcome"):
            raise PrmkitError("--cache-frozen needs --train last-k and --objective outcome")
        if self.frozen_store and not self.cache_frozen:
            raise PrmkitError("--frozen-store needs --cache-frozen")


class PairObjective:
    """Bradley-Terry: -log sigmoid(r(chosen) - r(rejected)), r the head's logit margin at the
    solution's last step; a pair's two sequences go through the model in one batch."""

    def __init__(self, reader: Any, pad: int, drop_mask: bool = True):
        self.reader, self.pad, self.drop_mask = reader, pad, drop_mask

    def __call__(self, exs: list[Example], device: Any, via: Any) -> Any:
        import torch

        seqs = exs + [e.rejected for e in exs if e.rejected is not None]
        r = self.reader.margin(read_logits(self.reader, seqs, self.pad, self.drop_mask, device, via))
        return -torch.nn.functional.logsigmoid(r[:len(exs)] - r[len(exs):]).mean()


def _outcome_example(r: Record, bound: BoundFormat, max_length: int, target: float) -> Example | None:
    enc = bound.encode(r.problem, r.steps, max_length=max_length)
    if enc.truncated:
        return None
    last = enc.read_positions[-1]
    return Example(enc.input_ids[:last + 1], [last], [target])


def outcome_examples(records: Sequence[Record], bound: BoundFormat, max_length: int,
                     make: Any = None) -> tuple[list[Any], int]:
    """One example per record with ``is_correct``; returns (examples, left out).
    ``make(record, bound, max_length, target)`` builds one example (None: it does not fit);
    by default the ORM's, read at the last step (the implicit PRM passes its own)."""
    make = make or _outcome_example
    out, left = [], 0
    for r in records:
        ex = None if r.is_correct is None else make(r, bound, max_length, float(r.is_correct))
        if ex is None:
            left += 1
        else:
            out.append(ex)
    return out, left


def pair_examples(records: Sequence[Record], bound: BoundFormat, max_length: int,
                  max_pairs: int, seed: int, make: Any = None) -> tuple[list[Any], int]:
    """(chosen, rejected) pairs within each group: chosen correct, rejected wrong; ``make``
    as for :func:`outcome_examples`."""
    make = make or _outcome_example
    groups: dict[str, list[Record]] = {}
    for r in records:
        if r.is_correct is not None:
            groups.setdefault(r.group or r.id, []).append(r)
    rng = random.Random(seed)
    out: list[Example] = []
    left = 0
    for members in groups.values():
        good = [r for r in members if r.is_correct]
        bad = [r for r in members if not r.is_correct]
        pairs = [(g, b) for g in good for b in bad]
        rng.shuffle(pairs)
        for g, b in pairs[:max_pairs]:
            chosen = make(g, bound, max_length, 1.0)
            rejected = make(b, bound, max_length, 0.0)
            if chosen is None or rejected is None:
                left += 1
                continue
            chosen.rejected = rejected
            out.append(chosen)
    return out, left


def examples_for(cfg: Any, records: Sequence[Record], bound: BoundFormat, pairs: bool,
                 make: Any = None) -> tuple[list[Any], int]:
    """The training examples of an outcome-labelled trainer: one per record, or (chosen,
    rejected) pairs when ``pairs``; ``make`` as for :func:`outcome_examples`."""
    if pairs:
        return pair_examples(records, bound, cfg.max_length, cfg.max_pairs_per_group,
                             cfg.loop.seed, make=make)
    return outcome_examples(records, bound, cfg.max_length, make=make)


def train_orm(cfg: ORMTrainConfig) -> list[dict[str, Any]]:
    from prmkit.models.load import wrap_model
    from prmkit.models.reading import HFConfig, Reader

    fmt = training_format(cfg.format, cfg.head, cfg.calculator)
    train_records = cfg.training_records()
    dev = [r for r in read_records(cfg.eval_data) if r.is_correct is not None] \
        if cfg.eval_data else []
    model, tokenizer = load_base(cfg, fmt)
    bound = fmt.bind(tokenizer)
    examples, left = examples_for(cfg, train_records, bound, cfg.objective == "pairwise")
    if left:
        print(f"train orm: {left} {'records' if cfg.objective == 'outcome' else 'pairs'} left "
              f"out (no is_correct, or longer than --max-length)", file=sys.stderr)
    if fmt.hazard:   # S at the last step starts near 1/2, as a PRM's does at its mean step
        init_hazard_head(model, examples, fmt.surprisal)
    model = set_trainable(model, cfg.loop)
    fitness = "dev_auc" if dev else "neg_train_loss"

    # with --cache-frozen the dev set goes through the frozen pass too, and validation runs
    # only the trained top on its stored states, as train prm's does
    dev_seqs = dev_examples(dev, bound, cfg.max_length) if cfg.cache_frozen else []

    def evaluate(m: Any) -> dict[str, float]:
        if not dev:
            return {}
        if cfg.cache_frozen and objective.checked:
            scores = cached_dev_scores(objective, dev, dev_seqs, next(m.parameters()).device)
        else:
            prm = wrap_model(m, tokenizer, fmt, HFConfig(dtype="float32", max_length=cfg.max_length))
            scores = score_with_progress(prm, dev)
        a = auc([float(bool(r.is_correct)) for r in dev], [s[-1] if s[-1] is not None else 0.0
                                                           for s in scores])
        return {"dev_auc": round(a, 6) if a is not None else float("-inf")}

    save = make_saver(cfg, fmt, tokenizer, "orm", model, len(examples), len(dev))
    objective = (StepObjective if cfg.objective == "outcome" else PairObjective)(
        Reader(model, fmt, bound), pad_id(tokenizer))
    if cfg.cache_frozen:
        from prmkit.train.frozen import cached_steps

        objective = cached_steps(objective, model, cfg, examples, dev_seqs)
    loop = Loop(model, objective, examples, cfg.loop, cfg.output, fitness, evaluate, save,
                autocast_bf16=cfg.autocast_bf16)
    return loop.run()
