"""``PRMConfig``: the configuration of :class:`prmkit.train.trainer.PRMTrainer`, with the fields of
TRL 1.13's ``PRMConfig`` (``trl.experimental.prm``; TRL removed it in 1.14).

Like TRL's, it is a ``transformers.TrainingArguments`` and the trainer is a
``transformers.Trainer``, so every field means what transformers documents, and
``HfArgumentParser`` makes its command line. TRL's own defaults are kept (``learning_rate`` 1e-5,
``logging_steps`` 10, ``disable_dropout`` on, ``max_length`` 1024, ``step_separator`` "\\n"), and
three differ: ``bf16`` unset is bfloat16 where the machine computes it natively (prmkit's
``auto``), else float32, where TRL asks for bfloat16 everywhere and refuses a CPU without
``use_cpu``; ``activation_checkpointing`` (``gradient_checkpointing``) unset is on with a GPU,
off on a CPU; ``train_sampling_strategy`` is ``group_by_length`` (batches of like length, so
little padding). An unknown field is named with the closest known one. docs/migrating-from-trl.md
lists what differs.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields

from transformers import TrainingArguments

from prmkit.errors import PrmkitError


class PRMConfigError(PrmkitError, TypeError):
    """A PRMConfig field that does not exist or cannot be honoured (a TypeError as well, as an
    unknown keyword is in Python)."""


@dataclass
class PRMConfig(TrainingArguments):
    """TRL 1.13's ``PRMConfig`` fields on ``TrainingArguments``, and two of prmkit's own."""

    learning_rate: float = field(default=1e-5, metadata={
        "help": "The initial learning rate for AdamW."})
    logging_steps: float = field(default=10, metadata={
        "help": "Log every X update steps (a float in [0, 1) is a share of the total steps)."})
    activation_checkpointing: bool | None = field(default=None, metadata={
        "help": "Recompute activations in the backward pass to save memory (transformers' new "
                "name of gradient_checkpointing). Unset: on with a GPU, as TRL; off on a CPU, "
                "where memory is rarely the limit and it costs a third more compute."})
    dataloader_pin_memory: bool | None = field(default=None, metadata={
        "help": "Pin the batches' memory for a faster copy to the GPU. Unset: on with a GPU "
                "(transformers' default), off without one, where it does nothing but warn."})
    train_sampling_strategy: str = field(default="group_by_length", metadata={
        "help": "Sampler for training: 'group_by_length' (prmkit's default: batches of like "
                "length from a seeded shuffle per epoch), 'random', 'sequential' or "
                "'batch_rebalance' (transformers' own).",
        "choices": ["random", "sequential", "group_by_length", "batch_rebalance"]})
    bf16: bool | None = field(default=None, metadata={
        "help": "bfloat16 autocast. Unset: where the machine has native bfloat16 (prmkit's "
                "auto), else float32."})
    lr_scheduler_kwargs: dict | str | None = field(default=None, metadata={
        "help": "More arguments of the LR scheduler."})
    max_length: int | None = field(default=1024, metadata={
        "help": "Maximum length of the sequences (prompt + completion); longer ones are cut."})
    max_prompt_length: int | None = field(default=None, metadata={
        "help": "prmkit (as TRL before 1.13): keep the prompt's last N tokens, BOS included."})
    max_completion_length: int | None = field(default=None, metadata={
        "help": "Maximum length of the completion (the steps joined) in tokens."})
    disable_dropout: bool = field(default=True, metadata={
        "help": "Whether to disable dropout in the model."})
    step_separator: str = field(default="\n", metadata={
        "help": "Separator put after each step; each step is read at its last token."})
    train_on_last_step_only: bool = field(default=False, metadata={
        "help": "Whether to train only on the last step."})
    dataset_num_proc: int | None = field(default=None, metadata={
        "help": "Processes that tokenise the datasets (unset: one)."})
    train_last_layers: int | None = field(default=None, metadata={
        "help": "prmkit: train only the last N transformer layers, the final norm and the "
                "head (0: the head alone); unset: every parameter that requires a gradient, "
                "as TRL."})

    def __post_init__(self) -> None:
        if self.bf16 is None:
            from prmkit.models.reading import fast_dtype

            self.bf16 = not self.fp16 and fast_dtype("cuda" if _cuda() else "cpu") == "bfloat16"
        if self.bf16 and not _cuda():
            self.use_cpu = True   # transformers refuses bf16 on a CPU otherwise
        if self.dataloader_pin_memory is None:
            self.dataloader_pin_memory = _cuda()
        if self.activation_checkpointing is None and self.gradient_checkpointing is None:
            self.activation_checkpointing = _cuda() and not self.use_cpu
        super().__post_init__()
        self.check_supported()

    def check_supported(self) -> None:
        """Refuse, in one line, values that have no meaning for a PRM."""
        for name in ("max_length", "max_prompt_length", "max_completion_length"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise PRMConfigError(f"PRMConfig({name}={value}): must be at least 1 or None")
        if self.train_last_layers is not None and self.train_last_layers < 0:
            raise PRMConfigError("PRMConfig(train_last_layers=...): must be 0 or more")
        if self.dataset_num_proc is not None and self.dataset_num_proc < 1:
            raise PRMConfigError("PRMConfig(dataset_num_proc=...): at least 1, or None")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


_FIELDS = {f.name for f in fields(PRMConfig) if f.init}
_init = PRMConfig.__init__


def _checked_init(self: PRMConfig, *args: object, **kwargs: object) -> None:
    unknown = sorted(set(kwargs) - _FIELDS)
    if unknown:
        close = difflib.get_close_matches(unknown[0], sorted(_FIELDS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise PRMConfigError(f"PRMConfig has no field {unknown[0]!r}{hint}")
    _init(self, *args, **kwargs)


PRMConfig.__init__ = _checked_init  # type: ignore[method-assign]
