"""Verifier heads on one frozen body: trained on any labels, scored from the same stored states.

Each verifier is a head alone on SmolLM2-135M's frozen body (``prmkit train prm --last-k 0
--cache-frozen``, :mod:`prmkit.train.frozen`): the body runs once over every training and test
sequence and every head reads the same stored states. :func:`train_and_score` is
``train_prm``'s recipe with the records in memory; its checkpoints go to ``output`` so a killed
run resumes there.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Sequence

from prmkit.records import Record


@dataclass
class HeadSpec:
    """How every head of an experiment is trained: the same base, head and budget for all."""

    base: str = "smollm2-135m"
    head: str = "surprisal"
    calculator: bool = False
    epochs: int = 16
    lr: float = 1e-3
    batch_tokens: int = 4096
    seed: int = 0


def outcome_labelled(records: Sequence[Record]) -> list[Record]:
    """Uesato et al.'s ORM targets: every step labelled with the solution's outcome."""
    return [Record(**{**r.to_dict(), "labels": [float(bool(r.is_correct))] * len(r.steps),
                      "first_error": None}) for r in records]


def train_and_score(train: Sequence[Record], test: Sequence[Record], output: str,
                    spec: HeadSpec, store: str) -> list[list[float | None]]:
    """Train a head on ``train``'s labels (every labelled step) and return ``test``'s step
    scores, both read from the frozen body's stored states (``store``: the shared folder)."""
    from prmkit.models.reading import Reader, fast_dtype
    from prmkit.train.common import load_base, make_saver, pad_id, training_format
    from prmkit.train.frozen import cached_steps
    from prmkit.train.loop import Loop, LoopConfig, set_trainable
    from prmkit.train.prm import (PRMTrainConfig, StepObjective, cached_dev_scores,
                                  dev_examples, init_hazard_head, step_examples)

    loop = LoopConfig(last_k=0, lr=spec.lr, epochs=spec.epochs, batch_tokens=spec.batch_tokens,
                      seed=spec.seed, resume=True)
    cfg = PRMTrainConfig(base=spec.base, data="(in memory)", output=output, head=spec.head,
                         calculator=spec.calculator, loop=loop, cache_frozen=True,
                         frozen_store=store, dtype=fast_dtype(), command="prmkit lab")
    fmt = training_format(cfg.format, cfg.head, cfg.calculator)
    model, tokenizer = load_base(cfg, fmt)
    bound = fmt.bind(tokenizer)
    examples, _ = step_examples(train, bound, cfg.max_length, False, False)
    if fmt.hazard:
        init_hazard_head(model, examples, fmt.surprisal)
    model = set_trainable(model, cfg.loop)
    dev = dev_examples(test, bound, cfg.max_length)
    objective: Any = cached_steps(StepObjective(Reader(model, fmt, bound), pad_id(tokenizer)),
                                  model, cfg, examples, dev)
    save = make_saver(cfg, fmt, tokenizer, "prm", model, len(examples), 0)
    print(f"lab head: {len(examples)} training sequences -> {output}", file=sys.stderr)
    trainer = Loop(model, objective, examples, cfg.loop, output, "neg_train_loss",
                   lambda m: {}, save, autocast_bf16=cfg.autocast_bf16)
    trainer.run()
    device = next(model.parameters()).device
    if not objective.checked:          # resumed a finished run: the states are not read yet
        objective.prepare(examples[:2], device)
    return cached_dev_scores(objective, test, dev, device)
