"""Train an implicit PRM from outcome labels only (no step labels).

Paper: Yuan et al. 2024, "Free Process Rewards without Process Labels" (arXiv 2412.01981). The
reward r(y) = beta * sum_t log(pi(y_t)/pi_ref(y_t)) over the response tokens (pi trained,
pi_ref the frozen starting model) is trained as an outcome reward model, by:

* ``ce``: cross-entropy of sigmoid(r) on ``is_correct``; works with one solution per problem
  and unbalanced labels (the paper's most data-efficient choice);
* ``dpo``: pairs of a correct and a wrong solution of one ``group``, -log sigmoid(r(chosen) -
  r(rejected)) (DPO, Rafailov et al. 2023).

Solutions are encoded by the step format (default ``chat``, the policy's own chat prompt), so
the response tokens trained are the ones the scorer
(:class:`prmkit.models.backends.implicit.ImplicitPRM`) groups into steps. The reference's
log-probabilities are computed once before the first step; training runs only the policy. The
folder records ``kind: implicit-prm``, the base (the reference) and ``beta``; ``prmkit score``
and every evaluation load it as a PRM.
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.formats.detect import read_records
from prmkit.records import Record
from prmkit.stepformat import BoundFormat, StepFormat
from prmkit.models import folder as modeldir
from prmkit.train import orm
from prmkit.train.common import TrainConfig, auc, load_base, make_saver, pad_id, read_index
from prmkit.train.loop import Example, Loop, set_trainable
from prmkit.models.base import PRM

OBJECTIVES = ("ce", "dpo")


@dataclass(kw_only=True)
class ImplicitTrainConfig(TrainConfig):
    """``prmkit train implicit-prm``: outcome labels in, a PRM out."""

    base: str = field(metadata={"help": "base model, also the frozen reference: a default name "
                                        "(smollm2-135m) or a folder of a causal LM"})
    data: str = field(metadata={"help": "training records with is_correct (and group, for dpo)"})
    eval_data: str | None = field(default=None, metadata={
        "help": "dev records with is_correct (outcome AUC picks best/); with labels or "
                "first_error also step AUC and first-error F1"})
    objective: str = field(default="ce", metadata={
        "help": "ce (cross-entropy on is_correct) or dpo (correct vs wrong pairs per group)"})
    beta: float = field(default=0.05, metadata={
        "help": "reward scale: r = beta * log(pi/pi_ref) (0.05 in the paper and in PRIME)"})
    format: str = field(default="chat", metadata={
        "help": "text layout: chat (the policy's chat prompt, one step per line), lines (plain "
                "text for models without a chat template), or a step format preset / JSON"})
    score_form: str = field(default="probability", metadata={
        "help": "what the saved model's score() returns: probability (sigmoid of the "
                "cumulative reward), cumulative (q_k), or step (per-step reward r_k)"})
    max_pairs_per_group: int = field(default=4, metadata={
        "help": "dpo: at most this many (correct, wrong) pairs per problem"})
    calculator: bool = field(default=False, metadata={
        "help": "a calculator checks every equation of a step and writes the value after a "
                "wrong one ('= 9 [calculator: 8]') into the text the model reads, in training "
                "and in every later scoring (as train prm --calculator; prmkit.calculator)"})

    def __post_init__(self) -> None:
        from prmkit.models.backends.implicit import FORMS

        if self.objective not in OBJECTIVES:
            raise PrmkitError(f"--objective {self.objective!r} is not one of {', '.join(OBJECTIVES)}")
        if not self.beta > 0:
            raise PrmkitError(f"--beta must be positive, got {self.beta}")
        if self.score_form not in FORMS:
            raise PrmkitError(f"--score-form {self.score_form!r} is not one of {', '.join(FORMS)}")
        self.check_common()
        if self.max_pairs_per_group < 1:
            raise PrmkitError("--max-pairs-per-group must be at least 1")


@dataclass
class ResponseExample(Example):
    """One solution: its ids, the positions of its response tokens (``read_positions``), its
    outcome label and the reference's summed log-probability of those tokens."""

    label: float = 0.0
    ref_logp: float = 0.0


def response_example(r: Record, bound: BoundFormat, max_length: int, label: float) -> ResponseExample | None:
    """The solution as ids with its response positions; None if it does not fit."""
    enc = bound.encode(r.problem, r.steps, max_length=max_length)
    if enc.truncated or not enc.step_ends:
        return None
    start = max(len(bound.encode(r.problem, []).input_ids), 1)
    return ResponseExample(enc.input_ids, list(range(start, len(enc.input_ids))), [], label=label)


def outcome_examples(records: Sequence[Record], bound: BoundFormat,
                     max_length: int) -> tuple[list[ResponseExample], int]:
    """One example per record with ``is_correct``; returns (examples, left out)."""
    return orm.outcome_examples(records, bound, max_length, make=response_example)


def pair_examples(records: Sequence[Record], bound: BoundFormat, max_length: int,
                  max_pairs: int, seed: int) -> tuple[list[ResponseExample], int]:
    """(chosen, rejected) pairs within each group: chosen correct, rejected wrong."""
    return orm.pair_examples(records, bound, max_length, max_pairs, seed, make=response_example)


class ImplicitObjective:
    """The loss of one batch (the objective handed to ``Loop``) and the reference log-probabilities."""

    def __init__(self, model: Any, beta: float, pad_id: int, pairs: bool):
        self.model, self.beta, self.pad_id, self.pairs = model, beta, pad_id, pairs

    def sequence_logps(self, seqs: Sequence[ResponseExample], device: Any, via: Any = None) -> Any:
        """Sum of log pi over each sequence's response tokens (with gradients if enabled)."""
        import torch

        from prmkit.models.reading import pad_right
        from prmkit.models.backends.implicit import token_logps

        ids, _ = pad_right([e.input_ids for e in seqs], self.pad_id)
        rows, cols = read_index(seqs, device)
        logp = token_logps(self.model, ids.to(device), None, rows, cols, via=via)
        return torch.zeros(len(seqs), device=device).index_add(0, rows, logp)

    def set_reference(self, examples: Sequence[ResponseExample], budget: int, autocast: bool) -> None:
        """Before the first step the policy is the reference: store its log-probabilities."""
        import torch
        from prmkit.progress import progress

        from prmkit.models.reading import token_budget_batches

        seqs = [s for e in examples for s in ([e, e.rejected] if e.rejected else [e])]
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()
        batches = token_budget_batches([len(s.input_ids) for s in seqs], budget)
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            for batch in progress(batches, desc="reference", unit="batch"):
                sums = self.sequence_logps([seqs[i] for i in batch], device).tolist()
                for i, v in zip(batch, sums):
                    seqs[i].ref_logp = v
        self.model.train(was_training)

    def __call__(self, exs: list[Example], device: Any, via: Any) -> Any:
        import torch
        import torch.nn.functional as F

        seqs: list[ResponseExample] = list(exs) + ([e.rejected for e in exs] if self.pairs else [])  # type: ignore[misc]
        ref = torch.tensor([s.ref_logp for s in seqs], device=device)
        r = self.beta * (self.sequence_logps(seqs, device, via) - ref)
        if self.pairs:
            return -F.logsigmoid(r[:len(exs)] - r[len(exs):]).mean()
        labels = torch.tensor([s.label for s in seqs], device=device)
        return F.binary_cross_entropy_with_logits(r, labels)


def validate_implicit(prm: PRM, records: Sequence[Record]) -> dict[str, float]:
    """Outcome AUC (the reward against is_correct), and step AUC / first-error F1 of the
    probability form on the records with step labels."""
    from prmkit.train.prm import validate

    out: dict[str, float] = {}
    judged = [r for r in records if r.is_correct is not None]
    rewards = prm.rewards([r.problem for r in judged], [r.steps for r in judged])
    pairs = [(float(bool(r.is_correct)), rw.outcome) for r, rw in zip(judged, rewards)
             if rw.outcome is not None]
    a = auc([y for y, _ in pairs], [x for _, x in pairs]) if pairs else None
    if a is not None:
        out["dev_outcome_auc"] = round(a, 6)
    labelled = [r for r in records if r.labels_or_first_error()]
    if labelled:
        out.update(validate(prm, labelled))
    return out


def train_implicit(cfg: ImplicitTrainConfig) -> list[dict[str, Any]]:
    """Train; returns the validation history (also in ``OUTPUT/metrics.jsonl``)."""
    from prmkit.models.reading import HFConfig
    from prmkit.models.backends.implicit import ImplicitPRM, implicit_format, make_reference

    fmt: StepFormat = implicit_format(cfg.format)
    if cfg.calculator:
        fmt = dataclasses.replace(fmt, calculator=True)
    train_records = cfg.training_records()
    dev = [r for r in read_records(cfg.eval_data)
           if r.is_correct is not None or r.labels_or_first_error()] if cfg.eval_data else []
    model, tokenizer = load_base(cfg, fmt)
    if fmt.layout != "text" and not getattr(tokenizer, "chat_template", None):
        raise PrmkitError(f"{cfg.base} has no chat template: use --format lines")
    bound = fmt.bind(tokenizer)
    examples, left = orm.examples_for(cfg, train_records, bound, cfg.objective == "dpo",
                                      make=response_example)
    if left:
        print(f"train implicit-prm: {left} {'records' if cfg.objective == 'ce' else 'pairs'} "
              f"left out (no is_correct, or longer than --max-length)", file=sys.stderr)
    if not examples:
        raise PrmkitError(f"{cfg.data}: no usable training solutions (records need is_correct"
                          + (", and dpo needs a correct and a wrong one in a group)"
                             if cfg.objective == "dpo" else ")"))
    model = set_trainable(model, cfg.loop)
    reference = make_reference(model, cfg.loop.train)
    objective = ImplicitObjective(model, cfg.beta, pad_id(tokenizer), cfg.objective == "dpo")
    objective.set_reference(examples, cfg.loop.batch_tokens, cfg.dtype == "bfloat16")
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"train implicit-prm: {len(examples)} {'solutions' if cfg.objective == 'ce' else 'pairs'}"
          f"; {n_trainable:,} trainable parameters ({cfg.loop.train}); beta {cfg.beta}",
          file=sys.stderr)
    fitness = "dev_outcome_auc" if any(r.is_correct is not None for r in dev) else (
        "dev_auc" if dev else "neg_train_loss")

    def evaluate(m: Any) -> dict[str, float]:
        if not dev:
            return {}
        prm = ImplicitPRM(m, reference, tokenizer, fmt, cfg.beta,
                          HFConfig(dtype="float32", max_length=cfg.max_length))
        out = validate_implicit(prm, dev)
        out.setdefault(fitness, float("-inf"))
        return out

    saver = make_saver(cfg, fmt, tokenizer, "implicit-prm", model, len(examples), len(dev))

    def save(m: Any, folder: str, metrics: dict[str, Any]) -> None:
        saver(m, folder, metrics)
        write_card(cfg, fmt, folder, metrics, len(examples), len(dev))

    loop = Loop(model, objective, examples, cfg.loop, cfg.output, fitness, evaluate, save,
                autocast_bf16=cfg.autocast_bf16)
    return loop.run()


def write_card(cfg: ImplicitTrainConfig, fmt: StepFormat, folder: str, metrics: dict[str, Any],
               n_train: int, n_dev: int) -> None:
    trained = {"last-k": f"last {cfg.loop.last_k} layers + final norm (a delta on the base)",
               "lora": "LoRA, merged into full weights", "full": "every weight"}[cfg.loop.train]
    modeldir.write_card(folder, f"prmkit implicit PRM trained from {cfg.base}", [
        "An implicit process reward model (Yuan et al. 2024, \"Free Process Rewards without "
        "Process Labels\"): an outcome model whose reward is beta * log(pi/pi_ref) summed over "
        "the response, trained on outcome labels only. Step k's reward is the sum of the token "
        "log ratios inside step k; see prmkit/models/backends/implicit.py.", "",
        f"- policy: `{cfg.base}`, trained: {trained}",
        f"- reference (frozen): `{cfg.base}`; beta = {cfg.beta}",
        f"- objective: `{cfg.objective}`; text layout: `{fmt.name}`"
        f"{'; the calculator notes wrong equations' if fmt.calculator else ''}",
        f"- score() returns: `{cfg.score_form}` (probability = sigmoid of the cumulative reward)",
        f"- training data: `{cfg.data}` ({n_train} {'solutions' if cfg.objective == 'ce' else 'pairs'});"
        f" dev data: `{cfg.eval_data}` ({n_dev} records)",
        f"- command: `{cfg.command or '(library call)'}`",
        f"- training compute dtype: {cfg.dtype} (weights float32); validation in float32", "",
        "## Measured at this checkpoint", "", "| metric | value |", "|---|---|",
        *[f"| {k} | {v} |" for k, v in metrics.items()]])
