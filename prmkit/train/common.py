"""What the trainers share: the base config, the base model, the saver and the reading of step
logits. Each trainer (:mod:`prmkit.train.prm`, :mod:`prmkit.train.orm`,
:mod:`prmkit.train.implicit`) owns its objective and hands it to :class:`prmkit.train.loop.Loop`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from prmkit.errors import PrmkitError
from prmkit.models.reading import TRAIN_DTYPES
from prmkit.stepformat import StepFormat, get_format
from prmkit.models import folder as modeldir
from prmkit.models.folder import resolve_model_path
from prmkit.train.loop import Example, LoopConfig, trainable_names
from prmkit.models.base import PRM

HEADS = ("class", "label-tokens", "hazard", "surprisal")

# objective(examples, device, via) -> the loss of one batch; ``via`` is the wrapped model under
# DDP (the forward must go through it), else None. Loop calls it under autocast.
Objective = Callable[[list[Example], Any, Any], Any]


@dataclass(kw_only=True)
class TrainConfig:
    """The fields every trainer has; each trainer's config adds its own (and may reword a
    field's help by declaring it again)."""

    base: str = field(metadata={"help": "base model: a default name (smollm2-135m), a folder"})
    data: str = field(metadata={"help": "training records (prmkit JSONL)"})
    output: str = field(metadata={
        "help": "output folder: best/, last/, metrics.jsonl, untrained.json (the baselines)"})
    eval_data: str | None = field(default=None, metadata={"help": "dev records for validation"})
    limit: int | None = field(default=None, metadata={
        "help": "train on the first N records of --data only (to try a run on a few hundred)"})
    format: str = field(default="prmkit", metadata={"help": "step format preset or JSON"})
    max_length: int = field(default=1024, metadata={"help": "longer solutions are left out"})
    dtype: str = field(default="float32", metadata={
        "help": "compute dtype: float32, or bfloat16 (autocast; float32 weights)"})
    loop: LoopConfig = field(default_factory=LoopConfig, metadata={
        "group": "optimisation (shared by the trainers)"})
    command: str = field(default="", metadata={"cli": False})

    def check_common(self, min_length: bool = True) -> None:
        """The checks every trainer makes (``min_length``: --max-length at least 8)."""
        if self.dtype not in TRAIN_DTYPES:
            raise PrmkitError(f"--dtype {self.dtype!r} is not float32 or bfloat16")
        if min_length and self.max_length < 8:
            raise PrmkitError("--max-length must be at least 8")
        if self.limit is not None and self.limit < 1:
            raise PrmkitError(f"--limit must be at least 1, got {self.limit}")

    def training_records(self) -> list[Any]:
        """The records of ``data``, the first ``limit`` of them when a limit is set."""
        from prmkit.formats.detect import read_records

        records = read_records(self.data)
        return records if self.limit is None else records[:self.limit]

    @property
    def autocast_bf16(self) -> bool:
        return self.dtype == "bfloat16"


def check_frozen_cache(cache_frozen: bool, frozen_store: str | None, train: str,
                       on_by_default: bool) -> None:
    """``--cache-frozen`` and ``--frozen-store`` against ``--train`` (one check for every
    trainer that takes them; ``on_by_default``: the message says how to turn the cache off)."""
    if cache_frozen and train != "last-k":
        raise PrmkitError(f"--train {train} trains the layers --cache-frozen would store: add "
                          f"--no-cache-frozen" if on_by_default else
                          f"--cache-frozen needs --train last-k (got {train})")
    if frozen_store and not cache_frozen:
        raise PrmkitError("--frozen-store needs --cache-frozen")


def training_format(name: str, head: str, calculator: bool = False) -> StepFormat:
    """The preset with its reading set by ``head`` (and the calculator's notes when asked):
    what the trained model will store."""
    fmt = get_format(name)
    if calculator:
        fmt = dataclasses.replace(fmt, calculator=True)
    if head in ("class", "hazard", "surprisal"):
        return dataclasses.replace(fmt, reading="classes", positive_class=1,
                                   hazard=head != "class", surprisal=head == "surprisal")
    return dataclasses.replace(fmt, reading="label-tokens", positive=fmt.positive or "+",
                               negative=fmt.negative or "-")


def auc(labels: Sequence[float], scores: Sequence[float]) -> float | None:
    """Step AUC (labels >= 0.5 are positive); None with one class only."""
    from prmkit.evaluate.stepwise import auc as step_auc

    return step_auc(scores, [y >= 0.5 for y in labels])


def load_base(cfg: Any, fmt: StepFormat) -> tuple[Any, Any]:
    """(model, tokenizer) of ``cfg.base`` in float32 with the head ``fmt`` reads (a new 2-class
    head, or a surprisal head's classes and gates, seeded from ``cfg.loop.seed``)."""
    import torch
    from transformers import AutoTokenizer

    from prmkit.models.surprisal import OUTPUTS

    path = resolve_model_path(cfg.base)
    torch.manual_seed(cfg.loop.seed)  # the new head's initialisation
    labels = (OUTPUTS if fmt.surprisal else 2) if fmt.reading == "classes" else None
    model, _ = modeldir.load_model(path, modeldir.architecture_of(fmt.reading), labels,
                                   torch.float32)  # bfloat16 runs as autocast
    tokenizer = AutoTokenizer.from_pretrained(path)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id or tokenizer.eos_token_id
    return model, tokenizer


def pad_id(tokenizer: Any) -> int:
    """The id padding uses: the tokenizer's pad token, else its end of sequence, else 0."""
    return next((i for i in (tokenizer.pad_token_id, tokenizer.eos_token_id) if i is not None), 0)


def read_logits(reader: Any, seqs: Sequence[Example], pad: int, drop_mask: bool, device: Any,
                via: Any) -> Any:
    """The reader's logits at every read position of ``seqs``, padded on the right in one batch
    (the mask dropped when ``drop_mask``: exact for a causal model with right padding)."""
    from prmkit.models.reading import pad_right

    ids, mask = pad_right([e.input_ids for e in seqs], pad)
    rows, cols = read_index(seqs, device)
    attn = None if (drop_mask or bool(mask.all())) else mask.to(device)
    return reader.logits(ids.to(device), attn, rows, cols, via=via)


def read_index(seqs: Sequence[Example], device: Any) -> tuple[Any, Any]:
    """(rows, cols) of every read position of ``seqs`` in a batch of them, in order."""
    import torch

    rows = torch.tensor([b for b, e in enumerate(seqs) for _ in e.read_positions], device=device)
    cols = torch.tensor([p for e in seqs for p in e.read_positions], device=device)
    return rows, cols


def make_saver(cfg: Any, fmt: StepFormat, tokenizer: Any, kind: str, base_model: Any,
               n_train: int, n_dev: int) -> Any:
    """``save(model, folder, metrics)``: a folder that ``prmkit score --model`` can use alone."""
    def save(model: Any, folder: str, metrics: dict[str, Any]) -> None:
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
        if metrics.get("dev_threshold") is not None:   # tuned on the dev records
            with open(os.path.join(folder, modeldir.THRESHOLD_FILE), "w", encoding="utf-8") as f:
                json.dump({"threshold": metrics["dev_threshold"],
                           "tuned_on": f"{os.path.basename(str(cfg.eval_data))}, the dev records "
                                       f"of its training (first-error F1 there "
                                       f"{metrics['dev_f1_tuned']})"}, f, indent=2)
        modeldir.write_card(folder, f"prmkit {kind.upper()} trained from {cfg.base}",
                            _card_lines(cfg, fmt, kind, metrics, n_train, n_dev))
    return save


def _card_lines(cfg: Any, fmt: StepFormat, kind: str, metrics: dict[str, Any], n_train: int,
                n_dev: int) -> list[str]:
    metric_lines = [f"| {k} | {v} |" for k, v in metrics.items()]
    return [
        f"A {'process' if kind == 'prm' else 'outcome'} reward model trained with prmkit.", "",
        f"- base model: `{cfg.base}`; trained: `{cfg.loop.train}`"
        + ((f" (last {cfg.loop.last_k} layers + head)" if cfg.loop.last_k else " (the head alone)")
           if cfg.loop.train == "last-k" else ""),
        f"- step format: `{fmt.name}`, reading `{fmt.reading}`"
        + (", with a calculator's notes on wrong equations (prmkit.calculator)"
           if fmt.calculator else ""),
        f"- training data: `{cfg.data}` ({n_train} sequences); dev data: "
        f"`{cfg.eval_data}` ({n_dev} records)",
        f"- command: `{cfg.command or '(library call)'}`",
        f"- training compute dtype: {cfg.dtype} (weights float32); validation scores "
        f"computed in float32", "",
        "## Measured at this checkpoint", "", "| metric | value |", "|---|---|",
        *metric_lines]


def score_with_progress(prm: PRM, records: Sequence[Any], desc: str = "validate",
                        ) -> list[list[float | None]]:
    """``prm``'s step scores of ``records`` (an in-memory HF scorer), with a progress bar: a
    validation pass over a dev set takes a while on a CPU."""
    from prmkit.progress import progress

    out: list[list[float | None]] = [[] for _ in records]
    with progress(total=len(records), desc=desc, unit="rec") as bar:
        for i, scores in prm.score_iter([r.problem for r in records], [r.steps for r in records]):
            out[i] = scores
            bar.update(1)
    return out
