"""``PRMTrainer``: TRL 1.13's PRM trainer API on prmkit's own training loop.

A TRL script changes one line, ``from trl.experimental.prm import PRMConfig, PRMTrainer`` ->
``from prmkit import PRMConfig, PRMTrainer``, and runs: ``PRMTrainer(model=..., args=PRMConfig(...),
train_dataset=..., eval_dataset=..., processing_class=tokenizer, peft_config=...,
callbacks=...)``, then ``train()``, ``evaluate()``, ``save_model()``, ``state.log_history``.

The objective is TRL's (Uesato et al. 2022; Lightman et al. 2023): cross-entropy of a 2-class
token-classification head at the last token of the separator after each step, the mean over the
batch's labelled steps. The ids are TRL's (:mod:`prmkit.train.stepwise`). Underneath,
:class:`prmkit.train.loop.Loop` runs the steps: batches of ``per_device_train_batch_size``
sequences of like length (a seeded shuffle, then sorted within chunks, so little padding),
validation and checkpoints (``OUTPUT/last``, ``OUTPUT/best``) at the same steps, resume after a
kill, a progress bar. The saved folder is a plain ``AutoModelForTokenClassification`` folder
that also holds its step format, so ``prmkit score --model DIR`` needs no ``--format``.
"""

from __future__ import annotations

import copy
import math
import os
import random
import sys
import time
from typing import Any, Callable, Sequence

from prmkit.errors import PrmkitError
from prmkit.models import folder as modeldir
from prmkit.models.folder import resolve_model_path
from prmkit.models.reading import Reader
from prmkit.train.common import auc, pad_id, read_logits
from prmkit.train.loop import BUCKET, Example, Loop, LoopConfig, LoopHooks, set_trainable
from prmkit.train.prm import StepObjective, cross_entropy
from prmkit.train.stepwise import Cuts, examples_of, trl_format
from prmkit.train.trlconfig import PRMConfig, value_of



def sized_batches(lengths: Sequence[int], size: int, seed: int) -> list[list[int]]:
    """Batches of ``size`` sequences (the last of a chunk may be smaller): a seeded shuffle cut
    into chunks of a multiple of ``size``, each sorted by length, so a batch holds sequences of
    like length and there are ceil(n / size) batches, as a TRL data loader has."""
    order = list(range(len(lengths)))
    random.Random(seed).shuffle(order)
    chunk = size * max(1, BUCKET // size)
    out: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start:start + chunk], key=lambda i: lengths[i])
        out += [part[j:j + size] for j in range(0, len(part), size)]
    return out


def interval(value: float, total: int) -> int:
    """A TrainingArguments step count: a float in [0, 1) is a share of ``total`` steps."""
    return max(1, math.ceil(value * total)) if 0 < value < 1 else max(1, int(value))


class PRMTrainer:
    """Train a PRM on TRL's stepwise-supervision data (the module docstring)."""

    def __init__(self, model: Any = None, args: PRMConfig | None = None, data_collator: Any = None,
                 train_dataset: Any = None, eval_dataset: Any = None, processing_class: Any = None,
                 model_init: Callable[[], Any] | None = None,
                 compute_metrics: Callable[[Any], dict] | None = None,
                 callbacks: list[Any] | None = None, optimizers: tuple[Any, Any] = (None, None),
                 preprocess_logits_for_metrics: Any = None, peft_config: Any = None):
        from transformers import TrainerControl, TrainerState

        self.args = args if args is not None else PRMConfig(output_dir="trainer_output")
        if not isinstance(self.args, PRMConfig):
            raise PrmkitError(f"PRMTrainer(args=...): expected prmkit's PRMConfig, got "
                              f"{type(self.args).__name__}")
        if train_dataset is None:
            raise PrmkitError("PRMTrainer: train_dataset is required")
        if any(o is not None for o in optimizers) or preprocess_logits_for_metrics is not None:
            raise PrmkitError("PRMTrainer: optimizers and preprocess_logits_for_metrics are not "
                              "supported; prmkit trains with AdamW and the scheduler "
                              "PRMConfig names")
        if data_collator is not None and type(data_collator).__name__ != \
                "DataCollatorForTokenClassification":
            print("PRMTrainer: data_collator is not used; prmkit pads its own batches",
                  file=sys.stderr)
        self.model, self.processing_class = self._model(model if model is not None else
                                                        (model_init() if model_init else None),
                                                        processing_class)
        self.model = self._prepare(self.model, peft_config)
        self.format = trl_format(self.args.step_separator)
        self.bound = self.format.bind(self.processing_class)
        a = self.args
        self.cuts = Cuts(a.max_length, a.max_completion_length, a.max_prompt_length,
                         a.train_on_last_step_only)
        self.train_examples, dropped = examples_of(train_dataset, self.bound, self.cuts, False,
                                                   "train_dataset")
        if dropped:
            print(f"PRMTrainer: {dropped} rows of train_dataset have no labelled step within "
                  f"max_length and are not trained on", file=sys.stderr)
        self.eval_dataset = eval_dataset
        self.eval_examples = self._eval_sets(eval_dataset) if eval_dataset is not None else {}
        self.compute_metrics = compute_metrics
        self.state, self.control = TrainerState(), TrainerControl()
        self.callbacks = [c() if isinstance(c, type) else c for c in callbacks or []]
        self._losses: list[float] = []
        self._window: list[float] = []
        self._sequences = 0
        self._tell("on_init_end")

    # -- the model ----------------------------------------------------------------------------
    def _model(self, model: Any, tokenizer: Any) -> tuple[Any, Any]:
        """(model, tokenizer): a model object as given, or one loaded from a name or folder
        with a new 2-class head; the head is checked."""
        if model is None:
            raise PrmkitError("PRMTrainer: model is required (a model or a name)")
        if isinstance(model, str):
            import torch
            from transformers import AutoTokenizer

            path = resolve_model_path(model)
            model, _ = modeldir.load_model(path, "token-classification", 2, torch.float32)
            tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
        if tokenizer is None:
            raise PrmkitError("PRMTrainer: processing_class (the tokenizer) is required")
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        name = type(base).__name__
        labels = getattr(getattr(base, "config", None), "num_labels", None)
        if not name.endswith("ForTokenClassification") or labels != 2:
            raise PrmkitError(f"PRMTrainer needs a token-classification model with 2 labels, "
                              f"got {name} with {labels}: load it with "
                              f"AutoModelForTokenClassification.from_pretrained(..., num_labels=2)")
        return model, tokenizer

    def _prepare(self, model: Any, peft_config: Any) -> Any:
        """LoRA, dropout, gradient checkpointing and the trained layers, as the config says."""
        a = self.args
        if peft_config is not None:
            try:
                from peft import get_peft_model
            except ImportError:
                raise PrmkitError("PRMTrainer(peft_config=...) needs peft: pip install "
                                  "'prmkit[peft]'") from None
            model = get_peft_model(model, peft_config)
        if a.train_last_layers is not None:
            model = set_trainable(model, LoopConfig(train="last-k", last_k=a.train_last_layers))
        if a.disable_dropout:
            import torch

            for m in model.modules():
                if isinstance(m, torch.nn.Dropout):
                    m.p = 0.0
        if a.gradient_checkpointing and hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs=a.gradient_checkpointing_kwargs or {"use_reentrant": False})
            if getattr(getattr(model, "config", None), "use_cache", None):
                model.config.use_cache = False
        return model

    def _eval_sets(self, dataset: Any) -> dict[str, list[Example]]:
        sets = dataset if isinstance(dataset, dict) else {"": dataset}
        return {name: examples_of(ds, self.bound, self.cuts, True,
                                  f"eval_dataset[{name!r}]" if name else "eval_dataset")[0]
                for name, ds in sets.items()}

    # -- training -----------------------------------------------------------------------------
    def _loop(self, resume: bool) -> Loop:
        a = self.args
        size = a.per_device_train_batch_size
        batches = sized_batches([len(e) for e in self.train_examples], size, a.seed)
        per_epoch = math.ceil(len(batches) / a.gradient_accumulation_steps)
        total = a.max_steps if a.max_steps > 0 else max(1, math.ceil(a.num_train_epochs * per_epoch))
        evaluating = value_of(a.eval_strategy) != "no" and bool(self.eval_examples)
        every = self._cadence(a.eval_strategy, a.eval_steps or a.logging_steps, per_epoch, total) \
            if evaluating else self._cadence(a.save_strategy, a.save_steps, per_epoch, total)
        cfg = LoopConfig(train="full", max_steps=total, lr=a.learning_rate, warmup=0.0,
                         weight_decay=a.weight_decay, grad_accum=a.gradient_accumulation_steps,
                         max_grad_norm=a.max_grad_norm if a.max_grad_norm else float("inf"),
                         eval_every=every, seed=a.seed, resume=resume)
        objective = self._objective(self.model)
        hooks = LoopHooks(batches=batches, scheduler=self._scheduler,
                          adam={"betas": (a.adam_beta1, a.adam_beta2), "eps": a.adam_epsilon,
                                "fused": value_of(a.optim) == "adamw_torch_fused"},
                          on_step=self._on_step, checkpoints=value_of(a.save_strategy) != "no")
        fitness = "neg_eval_loss" if evaluating else "neg_train_loss"
        return Loop(self.model, objective, self.train_examples, cfg, a.output_dir, fitness,
                    self._loop_evaluate if evaluating else (lambda m: {}),
                    lambda m, folder, metrics: self._save_folder(folder),
                    autocast_bf16=bool(a.bf16), hooks=hooks)

    def _objective(self, model: Any) -> StepObjective:
        """TRL's loss on ``model``: cross-entropy at the read positions, the padding masked."""
        return StepObjective(Reader(model, self.format, self.bound),
                             pad_id(self.processing_class), drop_mask=False)

    @staticmethod
    def _cadence(strategy: Any, steps: float | None, per_epoch: int, total: int) -> int:
        kind = value_of(strategy)
        if kind == "epoch":
            return per_epoch
        if kind in ("steps", "best"):
            return interval(steps or total, total)
        return total

    def _scheduler(self, optimizer: Any, total: int) -> Any:
        from transformers import get_scheduler

        a = self.args
        kwargs = a.lr_scheduler_kwargs if isinstance(a.lr_scheduler_kwargs, dict) else None
        return get_scheduler(value_of(a.lr_scheduler_type), optimizer,
                             num_warmup_steps=a.get_warmup_steps(total),
                             num_training_steps=total, scheduler_specific_kwargs=kwargs)

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any) -> Any:
        """Train; returns ``TrainOutput(global_step, training_loss, metrics)``. With
        ``resume_from_checkpoint`` (True, or ``OUTPUT_DIR/last``) a killed run goes on from its
        last checkpoint."""
        from transformers.trainer_utils import TrainOutput

        if kwargs:
            raise PrmkitError(f"PRMTrainer.train: unknown argument {sorted(kwargs)[0]!r}")
        last = os.path.join(self.args.output_dir, "last")
        if isinstance(resume_from_checkpoint, str) and \
                os.path.abspath(resume_from_checkpoint) != os.path.abspath(last):
            raise PrmkitError(f"PRMTrainer.train(resume_from_checkpoint={resume_from_checkpoint!r})"
                              f": prmkit resumes from {last}")
        loop = self._loop(bool(resume_from_checkpoint))
        self.state.max_steps = loop.total_steps
        self.state.is_world_process_zero = loop.acc.is_main_process
        self._losses, self._window, self._sequences = [], [], 0
        self._tell("on_train_begin")
        t0 = time.time()
        loop.run()
        runtime = time.time() - t0
        self.state.best_metric = loop.best
        if loop.hooks.checkpoints and os.path.isdir(os.path.join(self.args.output_dir, "best")):
            self.state.best_model_checkpoint = os.path.join(self.args.output_dir, "best")
        steps = max(1, len(self._losses))
        train_loss = sum(self._losses) / steps
        runtime = max(runtime, 1e-9)
        metrics = {"train_runtime": round(runtime, 4),
                   "train_samples_per_second": round(self._sequences / runtime, 3),
                   "train_steps_per_second": round(len(self._losses) / runtime, 3),
                   "train_loss": train_loss, "epoch": self.state.epoch}
        self.state.log_history.append({**metrics, "step": self.state.global_step})
        self._tell("on_train_end")
        if self.args.push_to_hub:
            self.push_to_hub()
        return TrainOutput(self.state.global_step, train_loss, metrics)

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                     num_items_in_batch: Any = None) -> Any:
        """The loss of a batch as TRL's data collator makes it (``input_ids``,
        ``attention_mask``, ``labels`` with -100 where no step is read), through prmkit's
        objective: the mean cross-entropy over the labelled tokens."""
        ids, labels = inputs["input_ids"], inputs["labels"]
        mask = inputs.get("attention_mask")
        exs = []
        for b in range(ids.shape[0]):
            keep = mask[b].bool() if mask is not None else slice(None)   # either padding side
            row, ys = ids[b][keep].tolist(), labels[b][keep].tolist()
            reads = [p for p, y in enumerate(ys) if y != -100]
            exs.append(Example(row, reads, [float(ys[p]) for p in reads]))
        loss = self._objective(model)(exs, ids.device, None)
        return (loss, None) if return_outputs else loss

    def _on_step(self, info: dict[str, Any]) -> bool:
        """After each optimiser step: the state, TRL's log lines and the callbacks."""
        a, st = self.args, self.state
        before = int(st.epoch or 0)
        st.global_step, st.epoch = info["step"], info["epoch"]
        self._sequences += info["sequences"]
        self._losses.append(info["loss"])
        self._window.append(info["loss"])
        self._tell("on_step_end")
        every = interval(a.logging_steps, st.max_steps)
        if value_of(a.logging_strategy) == "steps" and (
                st.global_step % every == 0 or (a.logging_first_step and st.global_step == 1)):
            self.log({"loss": round(sum(self._window) / len(self._window), 4),
                      "grad_norm": info["grad_norm"], "learning_rate": info["learning_rate"]})
            self._window = []
        if int(st.epoch) > before:
            self._tell("on_epoch_end")
        return bool(self.control.should_training_stop)

    def log(self, logs: dict[str, float]) -> None:
        """Add a line to ``state.log_history`` (with the epoch and step) and tell the callbacks."""
        logs = {**logs, "epoch": round(self.state.epoch or 0.0, 4)}
        self.state.log_history.append({**logs, "step": self.state.global_step})
        self._tell("on_log", logs=logs)

    # -- evaluation ---------------------------------------------------------------------------
    def _loop_evaluate(self, model: Any) -> dict[str, float]:
        if self.state.global_step == 0:   # the loop's untrained baseline: no log line
            m = self._metrics(self.eval_examples)
        else:
            m = self.evaluate()
        return {**m, "neg_eval_loss": -m["eval_loss"]}

    def evaluate(self, eval_dataset: Any = None, ignore_keys: Any = None,
                 metric_key_prefix: str = "eval") -> dict[str, float]:
        """Loss, step accuracy (TRL's ``compute_accuracy``) and step AUC on the eval set(s)."""
        sets = self._eval_sets(eval_dataset) if eval_dataset is not None else self.eval_examples
        if not sets:
            raise PrmkitError("PRMTrainer.evaluate: no eval_dataset (give one to PRMTrainer or "
                              "to evaluate)")
        metrics = self._metrics(sets, metric_key_prefix)
        self.log(metrics)
        self._tell("on_evaluate", metrics=metrics)
        return metrics

    def _metrics(self, sets: dict[str, list[Example]], prefix: str = "eval") -> dict[str, float]:
        out: dict[str, float] = {}
        for name, examples in sets.items():
            p = f"{prefix}_{name}" if name else prefix
            t0 = time.time()
            logits = self._eval_logits(examples)
            out.update(self._step_metrics(examples, logits, p))
            runtime = time.time() - t0
            out.update({f"{p}_runtime": round(runtime, 4),
                        f"{p}_samples_per_second": round(len(examples) / runtime, 3)})
        return out

    def _eval_logits(self, examples: list[Example]) -> Any:
        """The step logits of ``examples`` in order, in batches of like length."""
        import torch

        a, model = self.args, self.model
        reader = Reader(model, self.format, self.bound)
        order = sorted(range(len(examples)), key=lambda i: len(examples[i]))
        size = a.per_device_eval_batch_size
        parts: dict[int, Any] = {}
        was_training = model.training
        model.eval()
        device = next(model.parameters()).device
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16,
                                             enabled=bool(a.bf16)):
            for s in range(0, len(order), size):
                idx = order[s:s + size]
                logits = read_logits(reader, [examples[i] for i in idx],
                                     pad_id(self.processing_class), False, device, None).float()
                counts = [len(examples[i].read_positions) for i in idx]
                for i, part in zip(idx, torch.split(logits, counts)):
                    parts[i] = part
        model.train(was_training)
        return torch.cat([parts[i] for i in range(len(examples))])

    def _step_metrics(self, examples: list[Example], logits: Any, p: str) -> dict[str, float]:
        import torch

        targets = torch.tensor([t for e in examples for t in e.targets])
        loss = float(cross_entropy(self.format.reading, 1, logits, targets))
        probs = torch.softmax(logits, -1)[:, 1]
        out = {f"{p}_loss": loss,
               f"{p}_accuracy": float(((probs > 0.5).float() == targets).float().mean())}
        step_auc = auc(targets.tolist(), probs.tolist())
        if step_auc is not None:
            out[f"{p}_step_auc"] = step_auc
        if self.compute_metrics is not None:
            out.update({f"{p}_{k}": v for k, v in
                        self.compute_metrics(_prediction(examples, logits)).items()})
        return out

    # -- saving -------------------------------------------------------------------------------
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """A plain transformers folder (LoRA merged) with the tokenizer, the step format and a
        model card: ``AutoModelForTokenClassification`` and ``prmkit score --model`` read it."""
        self._save_folder(output_dir or self.args.output_dir)

    def _save_folder(self, folder: str) -> None:
        os.makedirs(folder, exist_ok=True)
        model = self.model
        if hasattr(model, "merge_and_unload"):
            model = copy.deepcopy(model).merge_and_unload()
        model.save_pretrained(folder, safe_serialization=True)
        self.processing_class.save_pretrained(folder)
        self.format.save(folder)
        n = len(self.train_examples)
        modeldir.write_card(folder, "prmkit PRM trained with PRMTrainer", [
            "A process reward model trained with prmkit's PRMTrainer (TRL's PRMTrainer API).", "",
            f"- step format: `trl` with the separator {self.args.step_separator!r} after each step, "
            f"read at its last token (class 1 of a 2-class head)",
            f"- training data: {n} sequences", "",
            "Score with `prmkit score --model THIS_FOLDER --input records.jsonl`."])

    def push_to_hub(self, commit_message: str = "End of training", **kwargs: Any) -> None:
        """Save into ``output_dir``, then upload it to ``hub_model_id`` (or the folder's name);
        where the hub cannot be reached, one line says so and where the model is."""
        folder = self.args.output_dir
        self.save_model(folder)
        repo = self.args.hub_model_id or os.path.basename(os.path.abspath(folder))
        try:
            from huggingface_hub import HfApi

            api = HfApi(token=self.args.hub_token)
            api.create_repo(repo, exist_ok=True, private=bool(self.args.hub_private_repo))
            api.upload_folder(repo_id=repo, folder_path=folder, commit_message=commit_message)
        except Exception as e:  # no network, no token, a refused repo: one line, not a traceback
            first = (str(e).strip().splitlines() or [""])[0]
            raise PrmkitError(f"push_to_hub: cannot upload to {repo!r} ({type(e).__name__}: "
                              f"{first}); the model is saved in {folder}: upload it where the "
                              f"hub is reachable with `hf upload {repo} {folder}`") from None

    def add_callback(self, callback: Any) -> None:
        self.callbacks.append(callback() if isinstance(callback, type) else callback)

    def _tell(self, event: str, **kw: Any) -> None:
        """Call ``event`` on every callback, as transformers' Trainer does; a callback may return
        the control (``should_training_stop``)."""
        for cb in self.callbacks:
            out = getattr(cb, event)(self.args, self.state, self.control, model=self.model,
                                     processing_class=self.processing_class, **kw)
            if out is not None:
                self.control = out


def _prediction(examples: list[Example], logits: Any) -> Any:
    """An ``EvalPrediction`` as TRL's ``compute_metrics`` reads it: logits and labels per token
    (-100 where no step is read; logits 0 there)."""
    import numpy as np
    from transformers import EvalPrediction

    width = max(len(e.input_ids) for e in examples)
    preds = np.zeros((len(examples), width, logits.shape[-1]), dtype=np.float32)
    labels = np.full((len(examples), width), -100, dtype=np.int64)
    k = 0
    for b, e in enumerate(examples):
        for p, t in zip(e.read_positions, e.targets):
            preds[b, p] = logits[k].numpy()
            labels[b, p] = int(t)
            k += 1
    return EvalPrediction(predictions=preds, label_ids=labels)
