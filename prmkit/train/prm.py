"""Train a process reward model: cross-entropy on step labels, read at the end of each step.

Papers: Lightman et al. 2023, "Let's Verify Step by Step" (human step labels, PRM800K; training
only up to the first error); Wang et al. 2023, "Math-Shepherd" (Monte Carlo labels; soft labels
trained against [p, 1-p]; the " ки" tag read as "+"/"-" label tokens); Zhang et al. 2025,
"The Lessons of Developing Process Reward Models" (Qwen2.5-Math-PRM, a 2-class head).

Everything goes through the step format (:mod:`prmkit.stepformat`): the trainer encodes each
(problem, steps) with it and computes the loss with :class:`prmkit.models.hf.Reader` at the read
positions it returns, the same reader that ``prmkit score`` uses. Unlabelled (null) steps are
masked. A solution longer than ``max_length`` is cut, and only the steps whose read position
still fits are trained: step k's target is always at step k's position, whatever the cut.

Heads (``head``):
  ``class``         a new 2-class head on every token (Qwen2.5-Math-PRM style); read class 1;
  ``label-tokens``  the LM head's "+" and "-" logits (Math-Shepherd / OpenRLHF style).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.records import Record, first_error_from_labels, read_records
from prmkit.stepformat import BoundFormat, StepFormat, get_format
from prmkit.train import modeldir
from prmkit.train.loop import Example, Loop, LoopConfig, set_trainable, trainable_names

HEADS = ("class", "label-tokens")
FITNESS = ("auc", "f1")


@dataclass
class PRMTrainConfig:
    """``prmkit train prm``: what to train on, how the PRM reads steps, and the loop options."""

    base: str = field(metadata={"help": "base model: a default name (smollm2-135m), a folder"})
    data: str = field(metadata={"help": "training records (prmkit JSONL) with labels or first_error"})
    output: str = field(metadata={"help": "output folder: best/, last/, metrics.jsonl"})
    eval_data: str | None = field(default=None, metadata={
        "help": "dev records for validation; default: none (fitness from training loss)"})
    format: str = field(default="prmkit", metadata={"help": "step format preset or JSON"})
    head: str = field(default="class", metadata={"help": "class (2-class head) or label-tokens"})
    labels: str = field(default="hard", metadata={
        "help": "hard: labels >= 0.5 are 1, else 0; soft: train against [p, 1-p] as given"})
    until_first_error: bool = field(default=False, metadata={
        "help": "train only up to and including the first wrong step (Let's Verify)"})
    max_length: int = field(default=1024, metadata={
        "help": "cut sequences to this many tokens; steps past the cut are not trained"})
    fitness: str = field(default="auc", metadata={
        "help": "what picks best/: auc (step AUC on dev) or f1 (first-error F1 on dev)"})
    dtype: str = field(default="float32", metadata={
        "help": "compute dtype: float32, or bfloat16 (autocast: bf16 matmuls, float32 weights "
                "and optimiser, about 2x faster on CPU)"})
    loop: LoopConfig = field(default_factory=LoopConfig)
    command: str = ""

    def __post_init__(self) -> None:
        if self.head not in HEADS:
            raise PrmkitError(f"--head {self.head!r} is not one of {', '.join(HEADS)}")
        if self.labels not in ("hard", "soft"):
            raise PrmkitError(f"--labels {self.labels!r} is not hard or soft")
        if self.fitness not in FITNESS:
            raise PrmkitError(f"--fitness {self.fitness!r} is not one of {', '.join(FITNESS)}")
        if self.dtype not in ("float32", "bfloat16"):
            raise PrmkitError(f"--dtype {self.dtype!r} is not float32 or bfloat16")
        if self.max_length < 8:
            raise PrmkitError("--max-length must be at least 8")


def training_format(name: str, head: str) -> StepFormat:
    """The preset with its reading set by ``head``: what the trained model will store."""
    fmt = get_format(name)
    if head == "class":
        return dataclasses.replace(fmt, reading="classes", positive_class=1)
    return dataclasses.replace(fmt, reading="label-tokens", positive=fmt.positive or "+",
                               negative=fmt.negative or "-")


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


# ---------------------------------------------------------------------------------------------
# validation metrics


def auc(labels: Sequence[float], scores: Sequence[float]) -> float | None:
    """Step AUC (labels >= 0.5 are positive); None with one class only."""
    from prmkit.evaluate.stepwise import auc as step_auc

    return step_auc(scores, [y >= 0.5 for y in labels])


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


def validate(prm: Any, records: Sequence[Record]) -> dict[str, float]:
    """Step AUC and first-error F1 of a scorer on labelled dev records."""
    scores = prm.score([r.problem for r in records], [r.steps for r in records])
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
    return out


# ---------------------------------------------------------------------------------------------
# training


def _load_base(cfg: Any, fmt: StepFormat) -> tuple[Any, Any]:
    import torch
    from transformers import AutoTokenizer

    from prmkit.models.hf import resolve_model_path

    path = resolve_model_path(cfg.base)
    torch.manual_seed(cfg.loop.seed)  # the new head's initialisation
    model, _ = modeldir.load_model(path, modeldir.architecture_of(fmt.reading),
                                   2 if fmt.reading == "classes" else None,
                                   torch.float32)  # bfloat16 runs as autocast
    tokenizer = AutoTokenizer.from_pretrained(path)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    return model, tokenizer


def make_saver(cfg: Any, fmt: StepFormat, tokenizer: Any, kind: str, base_model: Any,
               n_train: int, n_dev: int) -> Any:
    """``save(model, folder, metrics)``: a folder that ``prmkit score --model`` can use alone."""
    def save(model: Any, folder: str, metrics: dict[str, Any]) -> None:
        import copy

        tokenizer.save_pretrained(folder)
        fmt.save(folder)
        arch = modeldir.architecture_of(fmt.reading)
        if cfg.loop.train == "last-k":
            modeldir.save_delta(folder, model, trainable_names(model), cfg.base, arch)
        elif cfg.loop.train == "lora":
            copy.deepcopy(model).merge_and_unload().save_pretrained(folder, safe_serialization=True)
        else:
            model.save_pretrained(folder, safe_serialization=True)
        config = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "command"}
        with open(os.path.join(folder, modeldir.TRAIN_FILE), "w", encoding="utf-8") as f:
            json.dump({"kind": kind, "config": config, "metrics": metrics}, f, indent=2)
        metric_lines = [f"| {k} | {v} |" for k, v in metrics.items()]
        modeldir.write_card(folder, f"prmkit {kind.upper()} trained from {cfg.base}", [
            f"A {'process' if kind == 'prm' else 'outcome'} reward model trained with prmkit.", "",
            f"- base model: `{cfg.base}`; trained: `{cfg.loop.train}`"
            + (f" (last {cfg.loop.last_k} layers + head)" if cfg.loop.train == "last-k" else ""),
            f"- step format: `{fmt.name}`, reading `{fmt.reading}`",
            f"- training data: `{cfg.data}` ({n_train} sequences); dev data: "
            f"`{cfg.eval_data}` ({n_dev} records)",
            f"- command: `{cfg.command or '(library call)'}`",
            f"- training compute dtype: {cfg.dtype} (weights float32); validation scores "
            f"computed in float32", "",
            "## Measured at this checkpoint", "", "| metric | value |", "|---|---|",
            *metric_lines])
    return save


def train_prm(cfg: PRMTrainConfig) -> list[dict[str, Any]]:
    """Train; returns the validation history (also in ``OUTPUT/metrics.jsonl``)."""
    from prmkit.models.hf import HFConfig, HFPRM

    fmt = training_format(cfg.format, cfg.head)
    train_records = read_records(cfg.data)
    dev_records = [r for r in read_records(cfg.eval_data) if r.labels_or_first_error()] \
        if cfg.eval_data else []
    model, tokenizer = _load_base(cfg, fmt)
    bound = fmt.bind(tokenizer)
    examples, skipped = step_examples(train_records, bound, cfg.max_length,
                                      cfg.labels == "soft", cfg.until_first_error)
    if skipped:
        print(f"train: {skipped} of {len(train_records)} records have no labelled step that "
              f"fits and are not used", file=sys.stderr)
    model = set_trainable(model, cfg.loop)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"train: {len(examples)} sequences, {sum(len(e.targets) for e in examples)} labelled "
          f"steps; {n_trainable:,} trainable parameters ({cfg.loop.train})", file=sys.stderr)
    fitness = {"auc": "dev_auc", "f1": "dev_f1"}[cfg.fitness] if dev_records else "neg_train_loss"

    def evaluate(m: Any) -> dict[str, float]:
        if not dev_records:
            return {}
        prm = HFPRM(m, tokenizer, fmt, HFConfig(dtype="float32", max_length=cfg.max_length))
        out = validate(prm, dev_records)
        out.setdefault(fitness, float("-inf"))
        return out

    from prmkit.models.hf import Reader

    reader = Reader(model, fmt, bound)
    save = make_saver(cfg, fmt, tokenizer, "prm", model, len(examples), len(dev_records))
    loop = Loop(model, reader, examples, cfg.loop, cfg.output, _pad_id(tokenizer), fitness,
                evaluate, save, autocast_bf16=cfg.dtype == "bfloat16")
    return loop.run()


def _pad_id(tokenizer: Any) -> int:
    return next((i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None), 0)
