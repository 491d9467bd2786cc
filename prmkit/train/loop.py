"""The training loop that the trainers share.

* what trains: ``full``, ``lora`` (``peft``, Hu et al. 2021, plus the new head) or ``last-k``
  (the last k layers, the final norm and the head; the practical choice on a CPU);
* batches: a seeded shuffle cut into chunks of ``BUCKET``, each sorted by length and packed
  under a token budget (:func:`training_batches`), their order shuffled per epoch from the seed,
  so a resumed run sees the batches an unbroken run would;
* the loss: the trainer's ``objective(examples, device, via)``, under autocast;
* validation every ``eval_every`` steps and after the last; ``DIR/metrics.jsonl``, ``DIR/last/``
  and ``DIR/best/``; resume after a kill at any moment (:mod:`prmkit.train.checkpoint`);
* ``accelerate launch`` runs it unchanged (DDP, DeepSpeed ZeRO); the main process validates.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

from prmkit.errors import PrmkitError
from prmkit.models.body import backbone
from prmkit.train import checkpoint as ckpt

TRAIN_MODES = ("last-k", "lora", "full")
BUCKET = 32  # examples sorted by length together when batches are made


class NoExamples(PrmkitError):
    """The trainer made no training example from its data (the CLI names the file)."""


@dataclass
class LoopConfig:
    """Optimisation options shared by ``train prm`` and ``train orm``."""

    train: str = field(default="last-k", metadata={
        "help": "what trains: last-k (last k layers + final norm + head), lora, or full"})
    last_k: int = field(default=2, metadata={
        "help": "layers trained by --train last-k, with the final norm and the head (0: the head "
                "alone, the whole body frozen)"})
    lora_r: int = field(default=8, metadata={"help": "LoRA rank"})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA alpha (scale = alpha / r)"})
    epochs: int = field(default=1, metadata={"help": "passes over the training data"})
    max_steps: int | None = field(default=None, metadata={
        "help": "stop after this many optimiser steps (overrides --epochs)"})
    lr: float = field(default=2e-4, metadata={"help": "peak learning rate (AdamW)"})
    head_lr: float | None = field(default=None, metadata={
        "help": "peak learning rate of a classification head (score, classifier), which starts "
                "from random where the body is pretrained; default: --lr"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    warmup: float = field(default=0.05, metadata={
        "help": "fraction of steps with a linear warm-up; then linear decay to 0"})
    batch_tokens: int = field(default=4096, metadata={
        "help": "token budget of one batch (longest sequence x batch size)"})
    grad_accum: int = field(default=1, metadata={"help": "batches per optimiser step"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    eval_every: int | None = field(default=None, metadata={
        "help": "validate (and save last/) every N optimiser steps; default: at each epoch's "
                "end. Always after the last step"})
    seed: int = field(default=0, metadata={"help": "seed for the head, batch order, dropout"})
    resume: bool = field(default=True, metadata={"help": "continue from DIR/last/ if present"})

    def __post_init__(self) -> None:
        if self.train not in TRAIN_MODES:
            raise PrmkitError(f"--train {self.train!r} is not one of {', '.join(TRAIN_MODES)}")
        for name in ("lora_r", "epochs", "batch_tokens", "grad_accum"):
            if getattr(self, name) < 1:
                raise PrmkitError(f"--{name.replace('_', '-')} must be at least 1")
        if self.last_k < 0:
            raise PrmkitError("--last-k must be 0 (the head alone) or more")
        if self.max_steps is not None and self.max_steps < 1:
            raise PrmkitError("--max-steps must be at least 1")
        if self.eval_every is not None and self.eval_every < 1:
            raise PrmkitError("--eval-every must be at least 1")
        if self.head_lr is not None and not self.head_lr > 0:
            raise PrmkitError("--head-lr must be positive")
        if not (self.lr > 0 and 0 <= self.warmup < 1):
            raise PrmkitError("--lr must be positive and --warmup in [0, 1)")


@dataclass
class Example:
    """One training sequence: ids, where to read, and the target at each read position. With
    ``rejected`` set, a Bradley-Terry pair (this one chosen) that shares a batch."""

    input_ids: list[int]
    read_positions: list[int]
    targets: list[float]
    rejected: "Example | None" = None

    def __len__(self) -> int:
        return max(len(self.input_ids), len(self.rejected.input_ids) if self.rejected else 0)


# ---------------------------------------------------------------------------------------------
# trainable parameters


def transformer_layers(model: Any) -> tuple[Any, Any]:
    """(the list of transformer blocks, the final norm) of a decoder model."""
    base = backbone(model, model)
    for layers_attr, norm_attr in (("layers", "norm"), ("h", "ln_f"), ("blocks", "norm_f")):
        layers = getattr(base, layers_attr, None)
        if layers is not None:
            return layers, getattr(base, norm_attr, None)
    raise PrmkitError(f"cannot find the transformer layers of {type(model).__name__}; "
                      f"use --train full or lora")


# the attribute names transformers gives a classification head (score: decoder models'
# *ForTokenClassification; classifier: encoder models')
HEAD_MODULES = ("score", "classifier")


def head_names(model: Any) -> list[str]:
    """Parameter names of a classification head (empty for a causal LM)."""
    return [n for n, _ in model.named_parameters() if n.split(".")[0] in HEAD_MODULES]


def param_groups(model: Any, cfg: LoopConfig) -> list[dict[str, Any]]:
    """The optimiser's parameter groups: the head at ``head_lr`` when set, the rest at ``lr``
    (a LoRA model's head copy is found by its module name, as its names are prefixed)."""
    body, head = [], []
    for n, p in model.named_parameters():
        if p.requires_grad:
            is_head = cfg.head_lr is not None and any(
                part in HEAD_MODULES for part in n.split("."))
            (head if is_head else body).append(p)
    if not body and not head:
        raise PrmkitError("nothing to train: no parameter requires a gradient")
    return [g for g in ({"params": body, "lr": cfg.lr},
                        {"params": head, "lr": cfg.head_lr or cfg.lr}) if g["params"]]


def set_trainable(model: Any, cfg: LoopConfig) -> Any:
    """Freeze what must not train; returns the model to train (a peft model for LoRA). With
    ``last-k`` an LM head stays frozen: tied to the input embeddings, it would change them."""
    if cfg.train == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    if cfg.train == "lora":
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            raise PrmkitError("--train lora needs peft: pip install 'prmkit[peft]'") from None
        heads = sorted({n.split(".")[0] for n in head_names(model)})
        lora = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=0.0,
                          target_modules="all-linear", modules_to_save=heads or None)
        return get_peft_model(model, lora)
    layers, norm = transformer_layers(model)
    if cfg.last_k > len(layers):
        raise PrmkitError(f"--last-k {cfg.last_k}: the model has only {len(layers)} layers")
    for p in model.parameters():
        p.requires_grad_(False)
    top = list(layers[len(layers) - cfg.last_k:]) if cfg.last_k else []
    for module in top + ([norm] if norm is not None and top else []):
        for p in module.parameters():
            p.requires_grad_(True)
    heads = set(head_names(model))
    for n, p in model.named_parameters():
        if n in heads:
            p.requires_grad_(True)
    if not any(p.requires_grad for p in model.parameters()):
        raise PrmkitError("--last-k 0 trains the classification head alone, and this model has "
                          "none (label tokens are read through the LM head, which stays frozen)")
    return model


def trainable_names(model: Any) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]


def training_batches(lengths: Sequence[int], budget: int, seed: int,
                     bucket: int = BUCKET) -> list[list[int]]:
    """Indices in batches of mixed examples: a seeded shuffle cut into chunks of ``bucket``,
    each chunk sorted by length and packed under ``budget`` tokens (batch size x longest, as
    :func:`prmkit.models.reading.token_budget_batches` counts; a longer sequence goes alone).

    Neighbours in the input (a problem's candidates) land in different batches; within a
    chunk, sequences of like length share a batch, so padding stays small."""
    from prmkit.models.reading import token_budget_batches

    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    batches: list[list[int]] = []
    for start in range(0, len(order), bucket):
        chunk = order[start:start + bucket]
        batches += [[chunk[j] for j in b]
                    for b in token_budget_batches([lengths[i] for i in chunk], budget)]
    return batches


# ---------------------------------------------------------------------------------------------
# the loop


class Loop:
    """Runs optimiser steps over ``examples`` with validation, checkpoints and resume.

    ``objective(examples, device, via)`` is the loss of one batch (the trainer's);
    ``evaluate(model) -> dict`` returns validation metrics including ``cfg_fitness`` (higher is
    better); ``save(model, folder, metrics)`` writes a usable model folder.
    """

    def __init__(self, model: Any, objective: Callable[[list[Example], Any, Any], Any],
                 examples: Sequence[Example], cfg: LoopConfig, output: str, fitness: str,
                 evaluate: Callable[[Any], dict[str, float]],
                 save: Callable[[Any, str, dict[str, Any]], None], autocast_bf16: bool = False):
        import torch
        from accelerate import Accelerator

        if not examples:
            raise NoExamples("no training examples")
        self.torch, self.cfg, self.output = torch, cfg, output
        self.objective, self.examples = objective, examples
        self.fitness, self.evaluate, self.save = fitness, evaluate, save
        self.autocast_bf16 = autocast_bf16
        self.acc = Accelerator(cpu=not torch.cuda.is_available())
        # a pair counts twice against the budget: both of its sequences are in the batch
        self.batches = training_batches(
            [len(e) * (2 if e.rejected else 1) for e in examples], cfg.batch_tokens, cfg.seed)
        # one optimiser step takes grad_accum batches on each process
        self.per_step = cfg.grad_accum * self.acc.num_processes
        self.steps_per_epoch = max(1, math.ceil(len(self.batches) / self.per_step))
        self.total_steps = cfg.max_steps or cfg.epochs * self.steps_per_epoch
        opt = torch.optim.AdamW(param_groups(model, cfg), lr=cfg.lr,
                                weight_decay=cfg.weight_decay)
        warm = max(1, int(cfg.warmup * self.total_steps))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / warm, max(
            0.0, (self.total_steps - s) / max(1, self.total_steps - warm))))
        self.model, self.opt = self.acc.prepare(model, opt)
        self.sched = sched
        self.step, self.best, self.best_step, self.running = 0, None, None, None
        self.history: list[dict[str, Any]] = []  # every validation line of the run
        self.last_dir, self.best_dir = os.path.join(output, "last"), os.path.join(output, "best")
        self.metrics_path = os.path.join(output, "metrics.jsonl")
        os.makedirs(output, exist_ok=True)

    # -- state ------------------------------------------------------------------------------
    def _state_path(self) -> str:
        return os.path.join(self.last_dir, "trainer_state.json")

    def try_resume(self) -> bool:
        if self.acc.is_main_process:  # undo what a kill cut short (the checkpoint module's doc)
            ckpt.recover(self.output, self.cfg.resume)
        self.acc.wait_for_everyone()
        if not (self.cfg.resume and os.path.isfile(self._state_path())):
            return False
        from safetensors.torch import load_file

        with open(self._state_path(), encoding="utf-8") as f:
            state = json.load(f)
        if state.get("total_steps") != self.total_steps:
            raise PrmkitError(f"{self.last_dir}: was trained for {state.get('total_steps')} steps, "
                              f"this run asks for {self.total_steps}; use a new --output or "
                              f"--no-resume")
        weights = load_file(os.path.join(self.last_dir, "trainable.safetensors"))
        model = self.acc.unwrap_model(self.model)
        missing = set(trainable_names(model)) - set(weights)
        if missing:
            raise PrmkitError(f"{self.last_dir}: checkpoint lacks {sorted(missing)[0]!r}")
        model.load_state_dict(weights, strict=False)
        opt_state = self.torch.load(os.path.join(self.last_dir, "optimizer.pt"), weights_only=True)
        self.opt.load_state_dict(opt_state["optimizer"])
        self.sched.load_state_dict(opt_state["scheduler"])
        self.step, self.best = state["step"], state["best"]
        self.best_step, self.running = state.get("best_step"), state.get("running_loss")
        self.history = list(state["history"]) if "history" in state else self._old_lines()
        return True

    def _old_lines(self) -> list[dict[str, Any]]:
        """The validation lines of a checkpoint from before they were kept in its state: those
        of metrics.jsonl up to its step."""
        if not os.path.isfile(self.metrics_path):
            return []
        with open(self.metrics_path, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return [r for r in rows if isinstance(r, dict) and r.get("step", 0) <= self.step]

    def _checkpoint(self, metrics: dict[str, Any]) -> None:
        """Write last/ (usable model + what resuming needs, with every validation line so far),
        best/ if this step is the best, and metrics.jsonl, in the order of
        :mod:`prmkit.train.checkpoint`: a kill at any moment leaves a recoverable state."""
        from safetensors.torch import save_file

        model = self.acc.unwrap_model(self.model)
        tmp = self.last_dir + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        self.save(model, tmp, metrics)
        ckpt.write_step("saved the model into last.tmp")
        state = model.state_dict()
        save_file({n: state[n].detach().contiguous().cpu() for n in trainable_names(model)},
                  os.path.join(tmp, "trainable.safetensors"))
        self.torch.save({"optimizer": self.opt.state_dict(), "scheduler": self.sched.state_dict()},
                        os.path.join(tmp, "optimizer.pt"))
        ckpt.write_mark(tmp, self.step)
        ckpt.write_step("wrote what resuming needs into last.tmp")
        improved = self.best is None or metrics[self.fitness] > self.best
        if improved:
            self.best, self.best_step = metrics[self.fitness], self.step
        self.history.append(metrics)
        ckpt.write_json(os.path.join(tmp, ckpt.STATE), {
            "step": self.step, "total_steps": self.total_steps, "best": self.best,
            "best_step": self.best_step, "running_loss": self.running, "fitness": self.fitness,
            "config": asdict(self.cfg), "history": self.history})
        ckpt.write_step("last.tmp complete")
        ckpt.swap_in(tmp, self.last_dir)
        if improved:
            ckpt.copy_best(self.last_dir, self.best_dir, self.step)
        ckpt.write_metrics(self.metrics_path, self.history)
        ckpt.write_step("metrics.jsonl written")

    # -- one optimiser step -------------------------------------------------------------------
    def _loss(self, batch: list[int]) -> Any:
        torch = self.torch
        exs = [self.examples[i] for i in batch]
        via = self.model if self.acc.num_processes > 1 else None  # DDP must see the forward
        with torch.autocast(self.acc.device.type, dtype=torch.bfloat16,
                            enabled=self.autocast_bf16):
            return self.objective(exs, self.acc.device, via)

    def _untrained(self) -> None:
        """The baselines a learning curve starts from, in ``DIR/untrained.json`` and one printed
        line: the best constant predictor's training loss (the targets' entropy) and the dev
        metrics of the model before its first step."""
        import math

        targets = [t for e in self.examples if e.rejected is None for t in e.targets]
        out: dict[str, Any] = {}
        if targets and all(0.0 <= t <= 1.0 for t in targets):
            p = min(max(sum(targets) / len(targets), 1e-12), 1 - 1e-12)
            out["constant_loss"] = round(-(p * math.log(p) + (1 - p) * math.log(1 - p)), 6)
        self.model.eval()
        out.update(self.evaluate(self.acc.unwrap_model(self.model)))
        self.model.train()
        out = {k: v for k, v in out.items() if not (isinstance(v, float) and math.isinf(v))}
        if out:
            os.makedirs(self.output, exist_ok=True)
            ckpt.write_json(os.path.join(self.output, "untrained.json"), out)
            print("untrained: " + "  ".join(f"{k}={v}" for k, v in out.items()), file=sys.stderr)

    def _optimiser_step(self, rank: int, world: int) -> float:
        """One optimiser step; returns its loss."""
        torch, cfg = self.torch, self.cfg
        epoch, k = divmod(self.step, self.steps_per_epoch)
        order = list(range(len(self.batches)))
        random.Random(cfg.seed * 1000003 + epoch).shuffle(order)
        start = k * self.per_step + rank * cfg.grad_accum
        # the last step of an epoch wraps around, so every process has batches to run
        micro = [order[(start + j) % len(order)] for j in range(cfg.grad_accum)
                 if start + j < len(order) or world > 1] or [order[start % len(order)]]
        total = 0.0
        for b in micro:
            # dropout draws depend only on (seed, batch, epoch): a resumed run, or the same
            # batches spread over several processes, replays them exactly
            torch.manual_seed((cfg.seed * 1000003 + epoch) * 1000003 + b)
            loss = self._loss(self.batches[b]) / len(micro)
            self.acc.backward(loss)
            total += float(loss.detach())
        if world > 1:  # the loss shown is the mean over processes
            total = float(self.acc.reduce(torch.tensor(total, device=self.acc.device), "mean"))
        self.acc.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        self.step += 1
        return total

    def run(self) -> list[dict[str, Any]]:
        from prmkit.progress import progress as tqdm

        torch, cfg = self.torch, self.cfg
        resumed = self.try_resume()
        if not resumed and self.acc.is_main_process and os.path.exists(self.metrics_path):
            os.unlink(self.metrics_path)
        if resumed and self.step >= self.total_steps and self.acc.is_main_process:
            print(f"training is already done: {self.last_dir} holds step {self.step} of "
                  f"{self.total_steps} (--no-resume trains again)", file=sys.stderr)
        self.model.train()
        rank, world = self.acc.process_index, self.acc.num_processes
        t0 = time.time()
        prepare = getattr(self.objective, "prepare", None)   # e.g. the cached frozen pass
        if prepare is not None and world == 1 and self.step < self.total_steps:
            # before the bar starts, so that its rate (and time left) is the steps' own
            prepare([self.examples[i] for i in self.batches[0]], self.acc.device)
        if self.step == 0:
            if self.acc.is_main_process:
                self._untrained()
            self.acc.wait_for_everyone()
        bar = tqdm(total=self.total_steps, initial=self.step, desc="train", unit="step",
                   disable=None if self.acc.is_main_process else True)
        while self.step < self.total_steps:
            epoch = self.step // self.steps_per_epoch
            total = self._optimiser_step(rank, world)
            self.running = total if self.running is None else 0.9 * self.running + 0.1 * total
            bar.update(1)
            bar.set_postfix(loss=f"{self.running:.4f}", epoch=epoch + 1)
            every = cfg.eval_every or self.steps_per_epoch  # default: each epoch's end
            if self.step % every == 0 or self.step == self.total_steps:
                self.acc.wait_for_everyone()
                if self.acc.is_main_process:
                    self.model.eval()
                    m = dict(step=self.step, epoch=epoch + 1, train_loss=round(self.running, 6),
                             **self.evaluate(self.acc.unwrap_model(self.model)),
                             seconds=round(time.time() - t0, 1))
                    if self.fitness == "neg_train_loss":  # no dev data
                        m[self.fitness] = -m["train_loss"]
                    self.model.train()
                    self._checkpoint(m)
                    bar.write("  ".join(f"{k}={v}" for k, v in m.items() if k[:4] != "neg_"))
                self.acc.wait_for_everyone()
        bar.close()
        # tear the process group down here: left to interpreter exit, gloo's threads can abort
        # a process ("terminate called without an active exception", 1 run in 8 measured)
        self.acc.end_training()
        return list(self.history)
