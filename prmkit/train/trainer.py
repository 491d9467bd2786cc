"""``PRMTrainer``: TRL 1.13's PRM trainer, a ``transformers.Trainer`` as TRL's own was.

A TRL script changes one line, ``from trl.experimental.prm import PRMConfig, PRMTrainer`` ->
``from prmkit import PRMConfig, PRMTrainer``, and runs. The objective is TRL's (Uesato et al.
2022; Lightman et al. 2023): cross-entropy of a 2-class token-classification head at the last
token of the separator after each step, computed by ``Trainer.compute_loss`` on the labels (-100
where no step is read), so ``label_smoothing_factor`` and ``compute_loss_func`` apply as in
transformers. The ids are TRL's ``tokenize_row`` ids (:mod:`prmkit.train.stepwise`).

Everything else is ``transformers.Trainer``'s, so every ``TrainingArguments`` field means what
transformers documents. prmkit enters only through the Trainer's hooks:

* the sampler (``train_sampling_strategy="group_by_length"``, PRMConfig's default): batches of
  like length from a seeded shuffle per epoch (:class:`LikeLengthSampler`), replayed exactly by a
  resumed run;
* ``_save``: every saved folder also holds its step format and a model card, so
  ``prmkit score --model DIR`` needs no ``--format``; ``save_model`` merges LoRA;
* ``_save_checkpoint`` and ``train``: a checkpoint is committed by a mark written last, and only a
  committed one is resumed from (:mod:`prmkit.train.trlcheckpoint`).
"""

from __future__ import annotations

import copy
import os
import random
import sys
from typing import Any, Callable, Iterator, Sequence

from transformers import Trainer

from prmkit.errors import PrmkitError
from prmkit.models import folder as modeldir
from prmkit.models.folder import resolve_model_path
from prmkit.models.reading import pad_right
from prmkit.train import trlcheckpoint
from prmkit.train.common import auc, pad_id
from prmkit.train.loop import Example, LoopConfig, set_trainable
from prmkit.train.stepwise import Cuts, examples_of, trl_format
from prmkit.train.trlconfig import PRMConfig


# rows sorted by length together, in batches: transformers' LengthGroupedSampler's megabatch
MEGABATCH = 50


def sized_batches(lengths: Sequence[int], size: int, seed: int) -> list[list[int]]:
    """Batches of ``size`` sequences (only the last may be smaller) of like length: a seeded
    shuffle cut into chunks of ``MEGABATCH`` batches, each chunk sorted by length and cut into
    batches, then the full batches in a seeded order; ceil(n / size) batches, as a data loader
    has."""
    order = list(range(len(lengths)))
    rng = random.Random(seed)
    rng.shuffle(order)
    chunk = size * MEGABATCH
    out: list[list[int]] = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start:start + chunk], key=lambda i: lengths[i])
        out += [part[j:j + size] for j in range(0, len(part), size)]
    full = [b for b in out if len(b) == size]
    rng.shuffle(full)
    return full + [b for b in out if len(b) < size]


class LikeLengthSampler:
    """Indices in batches of like length (:func:`sized_batches`), drawn anew each epoch from
    ``(seed, epoch)`` alone: the data loader cuts them into batches of ``size``, and a resumed
    run, told the epoch by ``set_epoch``, sees the batches an unbroken run saw."""

    def __init__(self, lengths: Sequence[int], size: int, seed: int):
        self.lengths, self.size, self.seed, self.epoch = list(lengths), size, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        for batch in sized_batches(self.lengths, self.size, self.seed * 1000003 + self.epoch):
            yield from batch

    def __len__(self) -> int:
        return len(self.lengths)


class StepRows:
    """Tokenised rows as the Trainer's dataset: ``input_ids`` and ``labels`` (-100 where no
    step is read), as TRL's tokenised dataset holds them."""

    def __init__(self, examples: Sequence[Example]):
        self.examples = list(examples)

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> dict[str, list[int]]:
        e = self.examples[i]
        labels = [-100] * len(e.input_ids)
        for p, t in zip(e.read_positions, e.targets):
            labels[p] = int(t)
        return {"input_ids": list(e.input_ids), "labels": labels}


class StepCollator:
    """Pads a batch on the right: ``input_ids`` with the pad id, ``labels`` with -100, and the
    attention mask (TRL's ``DataCollatorForTokenClassification``, without needing a pad token)."""

    def __init__(self, pad: int):
        self.pad = pad

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        ids, mask = pad_right([f["input_ids"] for f in features], self.pad)
        labels, _ = pad_right([f["labels"] for f in features], -100)
        return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def step_metrics(prediction: Any) -> dict[str, float]:
    """TRL's ``compute_accuracy`` (the argmax against the label at every labelled token), and
    the step AUC of P(class 1)."""
    import numpy as np

    logits, labels = prediction.predictions, prediction.label_ids
    if isinstance(logits, tuple):
        logits = logits[0]
    keep = labels != -100
    picked, ys = np.asarray(logits, dtype=np.float64)[keep], labels[keep]
    z = picked - picked.max(-1, keepdims=True)
    probs = np.exp(z[:, 1]) / np.exp(z).sum(-1)
    out = {"accuracy": float((picked.argmax(-1) == ys).mean())}
    step_auc = auc([float(y) for y in ys], probs.tolist())
    if step_auc is not None:
        out["step_auc"] = step_auc
    return out


def is_peft(model: Any) -> bool:
    """Whether ``model`` is a peft model (peft is optional)."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def token_classifier(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    """(model, tokenizer): a model object as given, or one loaded from a name or folder with a
    new 2-class head; then the head is checked: a token-classification model with 2 labels."""
    if model is None:
        raise PrmkitError("PRMTrainer: model is required (a model, a name, or model_init)")
    if isinstance(model, str):
        import torch
        from transformers import AutoTokenizer

        path = resolve_model_path(model)
        model, _ = modeldir.load_model(path, "token-classification", 2, torch.float32)
        tokenizer = tokenizer or AutoTokenizer.from_pretrained(path)
    if tokenizer is None:
        raise PrmkitError("PRMTrainer: processing_class (the tokenizer) is required")
    base = model.get_base_model() if is_peft(model) else model
    name = type(base).__name__
    labels = getattr(getattr(base, "config", None), "num_labels", None)
    if not name.endswith("ForTokenClassification") or labels != 2:
        raise PrmkitError(f"PRMTrainer needs a token-classification model with 2 labels, "
                          f"got {name} with {labels}: load it with "
                          f"AutoModelForTokenClassification.from_pretrained(..., num_labels=2)")
    return model, tokenizer


class PRMTrainer(Trainer):
    """Train a PRM on TRL's stepwise-supervision data (the module docstring)."""

    _tag_names = ["trl", "prm", "prmkit"]

    def __init__(self, model: Any = None, args: PRMConfig | None = None, data_collator: Any = None,
                 train_dataset: Any = None, eval_dataset: Any = None, processing_class: Any = None,
                 model_init: Callable[[], Any] | None = None,
                 compute_metrics: Callable[[Any], dict] | None = None,
                 callbacks: list[Any] | None = None, optimizers: tuple[Any, Any] = (None, None),
                 preprocess_logits_for_metrics: Any = None, peft_config: Any = None):
        args = args if args is not None else PRMConfig(output_dir="trainer_output")
        if not isinstance(args, PRMConfig):
            raise PrmkitError(f"PRMTrainer(args=...): expected prmkit's PRMConfig, got "
                              f"{type(args).__name__}")
        if train_dataset is None:
            raise PrmkitError("PRMTrainer: train_dataset is required")
        self.peft_config = peft_config
        if model_init is not None:   # transformers calls it (again at each train())
            if model is not None:
                raise PrmkitError("PRMTrainer: give model or model_init, not both")
            if processing_class is None:
                raise PrmkitError("PRMTrainer(model_init=...) needs processing_class")
            made = model_init
            model_init = lambda: self._prepare(token_classifier(made(), processing_class)[0],
                                               args)  # noqa: E731
        else:
            model, processing_class = token_classifier(model, processing_class)
            model = self._prepare(model, args)
        self.format = trl_format(args.step_separator)
        self.bound = self.format.bind(processing_class)
        self.cuts = Cuts(args.max_length, args.max_completion_length, args.max_prompt_length,
                         args.train_on_last_step_only)
        self.train_examples, dropped = examples_of(train_dataset, self.bound, self.cuts, False,
                                                   "train_dataset", args.dataset_num_proc)
        if dropped:
            print(f"PRMTrainer: {dropped} rows of train_dataset have no labelled step within "
                  f"max_length and are not trained on", file=sys.stderr)
        evals = self._eval_rows(eval_dataset, args) if eval_dataset is not None else None
        super().__init__(model=model, args=args,
                         data_collator=data_collator or StepCollator(pad_id(processing_class)),
                         train_dataset=StepRows(self.train_examples), eval_dataset=evals,
                         processing_class=processing_class, model_init=model_init,
                         compute_metrics=compute_metrics or step_metrics, callbacks=callbacks,
                         optimizers=optimizers,
                         preprocess_logits_for_metrics=preprocess_logits_for_metrics)

    # -- the model ----------------------------------------------------------------------------
    def _prepare(self, model: Any, a: PRMConfig) -> Any:
        """LoRA (``peft_config``), the trained layers and dropout, as TRL and the config say."""
        if self.peft_config is not None:
            try:
                from peft import get_peft_model
            except ImportError:
                raise PrmkitError("PRMTrainer(peft_config=...) needs peft: pip install "
                                  "'prmkit[peft]'") from None
            model = get_peft_model(model, self.peft_config)
        if a.train_last_layers is not None:
            model = set_trainable(model, LoopConfig(train="last-k", last_k=a.train_last_layers))
        if a.disable_dropout:
            import torch

            for m in model.modules():
                if isinstance(m, torch.nn.Dropout):
                    m.p = 0.0
        return model

    def _eval_rows(self, dataset: Any, args: PRMConfig) -> Any:
        def rows(ds: Any, what: str) -> StepRows:
            return StepRows(examples_of(ds, self.bound, self.cuts, True, what,
                                        args.dataset_num_proc)[0])

        if isinstance(dataset, dict):
            return {name: rows(ds, f"eval_dataset[{name!r}]") for name, ds in dataset.items()}
        return rows(dataset, "eval_dataset")

    # -- the hooks ----------------------------------------------------------------------------
    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        """``group_by_length``: batches of like length, seeded by ``data_seed`` (else ``seed``)
        and the epoch; every other strategy is transformers' own."""
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy != "group_by_length" or \
                not isinstance(dataset, StepRows):
            return super()._get_train_sampler(train_dataset)
        seed = self.args.data_seed if self.args.data_seed is not None else self.args.seed
        return LikeLengthSampler([len(e) for e in dataset.examples],
                                 self.args.per_device_train_batch_size, seed)

    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        """transformers' folder, with the step format and a model card beside it."""
        super()._save(output_dir, state_dict)
        if self.args.should_save:
            self._describe(output_dir or self.args.output_dir)

    def _describe(self, folder: str) -> None:
        self.format.save(folder)
        modeldir.write_card(folder, "prmkit PRM trained with PRMTrainer", [
            "A process reward model trained with prmkit's PRMTrainer (TRL's PRMTrainer API).", "",
            f"- step format: `trl` with the separator {self.args.step_separator!r} after each "
            f"step, read at its last token (class 1 of a 2-class head)",
            f"- training data: {len(self.train_examples)} sequences", "",
            "Score with `prmkit score --model THIS_FOLDER --input records.jsonl`."])

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """transformers' ``save_model``; a LoRA model is saved merged (a plain
        ``AutoModelForTokenClassification`` folder) when the user saves it. Checkpoints keep the
        adapter, which is what resuming loads."""
        if _internal_call:
            super().save_model(output_dir, _internal_call)
            return
        self._save_final(output_dir or self.args.output_dir)
        if self.args.push_to_hub:
            self.push_to_hub(commit_message="Model save")

    def _save_final(self, folder: str) -> None:
        """The model a user keeps: LoRA merged, with the tokenizer and the step format."""
        unwrapped = self.accelerator.unwrap_model(self.model)
        if not is_peft(unwrapped):
            super().save_model(folder, _internal_call=True)
        elif self.args.should_save:
            os.makedirs(folder, exist_ok=True)
            merged = copy.deepcopy(unwrapped).merge_and_unload()
            merged.save_pretrained(folder, safe_serialization=True)
            self.processing_class.save_pretrained(folder)
            self._describe(folder)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """transformers' checkpoint, then its commit mark, then the rotation
        (:mod:`prmkit.train.trlcheckpoint`)."""
        limit = self.args.save_total_limit
        self.args.save_total_limit = None   # rotated below, once the new one is committed
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        if self.args.should_save:
            run_dir = self._get_output_dir(trial=trial)
            step = self.state.global_step
            trlcheckpoint.commit(os.path.join(run_dir, f"checkpoint-{step}"), step)
            trlcheckpoint.rotate(run_dir, limit, self.state.best_model_checkpoint)

    def train(self, resume_from_checkpoint: str | bool | None = None, trial: Any = None,
              ignore_keys_for_eval: list[str] | None = None, **kwargs: Any) -> Any:
        """transformers' ``train``; ``resume_from_checkpoint=True`` takes the newest committed
        ``checkpoint-N`` of ``output_dir``, and a named folder must be a whole checkpoint."""
        if resume_from_checkpoint is True:
            last = trlcheckpoint.last_committed(self.args.output_dir)
            if last is None:
                raise PrmkitError(f"resume_from_checkpoint=True: {self.args.output_dir} holds no "
                                  f"whole checkpoint to resume from")
            resume_from_checkpoint = last
        elif isinstance(resume_from_checkpoint, str):
            trlcheckpoint.check_resumable(resume_from_checkpoint)
        if isinstance(resume_from_checkpoint, str):
            done = self._finished(resume_from_checkpoint)
            if done is not None:
                return done
        return super().train(resume_from_checkpoint, trial, ignore_keys_for_eval, **kwargs)

    def _finished(self, checkpoint: str) -> Any:
        """A checkpoint that already holds every step of this run: its model (the best one with
        ``load_best_model_at_end``) and state, and a line that says so, where transformers would
        train one step more than asked. None when steps are left."""
        from transformers import TrainerState
        from transformers.trainer_utils import TrainOutput

        state = TrainerState.load_from_json(os.path.join(checkpoint, trlcheckpoint.STATE))
        planned = self.set_initial_training_values(self.args, self.get_train_dataloader())[-1]
        if state.global_step < planned:
            return None
        best = state.best_model_checkpoint
        keep = best if self.args.load_best_model_at_end and best and os.path.isdir(best) \
            else checkpoint
        self._load_from_checkpoint(keep)
        self.state = state
        print(f"PRMTrainer: training is already done: {checkpoint} holds step "
              f"{state.global_step} of {planned}", file=sys.stderr)
        seen = [h["loss"] for h in state.log_history if "loss" in h]
        return TrainOutput(state.global_step, sum(seen) / len(seen) if seen else float("nan"), {})

    def push_to_hub(self, commit_message: str | None = "End of training", blocking: bool = True,
                    **kwargs: Any) -> Any:
        """transformers' ``push_to_hub``; where the hub cannot be reached, one line says so and
        where the model is."""
        try:
            return super().push_to_hub(commit_message=commit_message, blocking=blocking, **kwargs)
        except Exception as e:  # no network, no token, a refused repo: one line, not a traceback
            first = (str(e).strip().splitlines() or [""])[0]
            folder = self.args.output_dir
            self._save_final(folder)
            repo = self.args.hub_model_id or os.path.basename(os.path.abspath(folder))
            raise PrmkitError(f"push_to_hub: cannot upload to {repo!r} ({type(e).__name__}: "
                              f"{first}); the model is saved in {folder}: upload it where the "
                              f"hub is reachable with `hf upload {repo} {folder}`") from None
