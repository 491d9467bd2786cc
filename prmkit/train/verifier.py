"""Train a generative verifier from step labels (ThinkPRM's recipe: Khalifa et al. 2025, "Process
Reward Models That Think", arXiv:2504.16828).

Each step-labelled record becomes one verification chain (:mod:`prmkit.verify.chains`: from the
labels alone, from the lab world's exact values, or from a teacher model, filtered by
agreement with the labels); the base model is fine-tuned on the chains after its template's
prompt, the loss on the chain's tokens only (the prompt is context), by the same loop as
``prmkit train prm`` (:mod:`prmkit.train.loop`: last-k, LoRA or full). The saved folder holds the
whole model, its tokenizer and ``prmkit_verifier.json`` (the template and its sampling
settings), so ``prmkit score --backend generative --model DIR`` needs no ``--format``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.records import Record
from prmkit.train.common import TrainConfig, check_frozen_cache, pad_id
from prmkit.train.loop import Example, Loop, LoopConfig, NoExamples, set_trainable
from prmkit.verify import chains as C
from prmkit.verify import templates as T

# The loop's defaults for a verifier on a CPU: the last 4 layers (with --cache-frozen the 26
# below run once), 3 epochs at lr 1e-3, batches of 8,192 tokens.
VERIFIER_LOOP = {"last_k": 4, "epochs": 3, "lr": 1e-3, "batch_tokens": 8192}
VERDICT_WEIGHT = 10.0


@dataclass(kw_only=True)
class VerifierTrainConfig(TrainConfig):
    """``prmkit train verifier``: verification chains from step labels, then fine-tuning."""

    base: str = field(metadata={"help": "the instruct model to fine-tune: a default name "
                                        "(smollm2-135m), a folder or a hub id"})
    data: str = field(metadata={"help": "step-labelled records (labels or first_error; any "
                                        "layout prmkit reads)"})
    output: str = field(metadata={
        "help": "output folder: the verifier itself (its best checkpoint, what score "
                "--backend generative --model takes), with last/ to resume and metrics.jsonl"})
    eval_data: str | None = field(default=None, metadata={
        "help": "step-labelled dev records: their chains' token loss picks the best checkpoint "
                "(with --chains teacher, the dev chains are the labels' own: no teacher runs "
                "on them)"})
    format: str = field(default="thinkprm", metadata={
        "choices": list(C.TEMPLATES),
        "help": "the verifier's template (its prompt and verdict words), saved with it"})
    chains: str = field(default="lab", metadata={
        "choices": list(C.SOURCES),
        "help": "where the verification chains come from: labels (the verdicts alone, the "
                "baseline), lab (each step copied, then set against what its problem calls "
                "for, from the lab world's exact values; lab problems only), teacher (written "
                "by --teacher, kept where every verdict agrees with the labels)"})
    calculator: bool = field(default=True, metadata={
        "help": "the verifier reads each step with the calculator's note after a wrong "
                "equation (prmkit/calculator.py, as the step format calculator writes it; a "
                "tool's output, as GenPRM's verifier reads its code's), in training and in "
                "scoring (saved with it); --no-calculator: the steps as written, ThinkPRM's "
                "prompt"})
    teacher: str | None = field(default=None, metadata={
        "help": "--chains teacher: the model that writes the chains: a default name, folder or "
                "hub id (transformers here), or an OpenAI-compatible server's /v1 URL"})
    teacher_model: str | None = field(default=None, metadata={
        "help": "--teacher URL: the model name the server knows (default: --base)"})
    teacher_samples: int = field(default=4, metadata={
        "help": "--chains teacher: chains sampled per record; the first that agrees is kept"})
    teacher_max_new_tokens: int = field(default=512, metadata={
        "help": "--chains teacher: the most tokens of one chain"})
    verdict_weight: float = field(default=VERDICT_WEIGHT, metadata={
        "help": "the weight of each verdict's token in the token loss (a step's correct or "
                "incorrect, the closing Yes or No), the chain's other tokens weighing 1: the "
                "verdicts are a few tokens among the reviews they follow; 1: plain SFT, "
                "ThinkPRM's loss"})
    max_length: int = field(default=1024, metadata={
        "help": "a prompt and chain longer than this (tokens) are left out"})
    cache_frozen: bool = field(default=True, metadata={
        "help": "with --train last-k: run the frozen layers once over the chains and train on "
                "their stored outputs, as train prm --cache-frozen does (cheaper epochs from "
                "the second on; checked against the uncached forward on the first batch; "
                "memory: hidden size x 4 bytes per token); --eval-data goes through the same "
                "pass"})
    loop: LoopConfig = field(default_factory=lambda: LoopConfig(**VERIFIER_LOOP), metadata={
        "group": "optimisation (shared by the trainers; a verifier's defaults differ)"})
    frozen_store: str | None = field(default=None, metadata={
        "help": "with --cache-frozen: a folder that keeps the frozen layers' outputs on disk"})

    def __post_init__(self) -> None:
        self.check_common()
        if self.chains == "teacher" and not self.teacher:
            raise PrmkitError("--chains teacher needs --teacher (a model or a server URL)")
        if self.chains != "teacher" and self.teacher:
            raise PrmkitError(f"--teacher is read only with --chains teacher, not --chains "
                              f"{self.chains}")
        if self.teacher_model and not str(self.teacher).startswith(("http://", "https://")):
            raise PrmkitError("--teacher-model names the model a --teacher server knows; "
                              "--teacher is not a URL")
        check_frozen_cache(self.cache_frozen, self.frozen_store, self.loop.train, True)
        if self.loop.head_lr is not None:
            raise PrmkitError("--head-lr: a verifier has no classification head (it writes its "
                              "verdicts through the LM head); use --lr")
        if self.verdict_weight <= 0:
            raise PrmkitError(f"--verdict-weight must be positive, got {self.verdict_weight}")
        if self.teacher_samples < 1 or self.teacher_max_new_tokens < 1:
            raise PrmkitError("--teacher-samples and --teacher-max-new-tokens must be positive")


def reviews_of(cfg: VerifierTrainConfig, record: Record, labels: list[bool]) -> list[tuple[str, bool]]:
    """A record's reviews from the ``labels`` or ``lab`` source."""
    if cfg.chains == "labels":
        return C.label_reviews(labels)
    from prmkit.world.chains import lab_reviews

    try:
        shown = [T.step_line(s) for s in T.shown(record.steps, cfg.calculator)]
        return lab_reviews(record.problem, record.steps, [float(x) for x in labels], shown)
    except PrmkitError as e:
        raise PrmkitError(f"{cfg.data}: record {record.id!r}: --chains lab reads lab problems "
                          f"only ({e})") from None


def make_chains(cfg: VerifierTrainConfig, records: Sequence[Record]) -> tuple[list[C.Chain], dict[str, int]]:
    """The chains of ``records`` and the counts: records, without labels, kept (teacher)."""
    counts = {"records": len(records), "unlabelled": 0, "teacher_tried": 0, "teacher_kept": 0}
    labelled = []
    for r in records:
        labels = C.known_labels(r)
        if labels is None or not r.steps:
            counts["unlabelled"] += 1
        else:
            labelled.append((r, labels))
    if cfg.chains != "teacher":
        return [C.Chain(r, C.chain_text(reviews_of(cfg, r, labels))) for r, labels in labelled], counts
    from prmkit.verify.load import open_teacher

    teacher = open_teacher(cfg.teacher, cfg.teacher_model or cfg.base, cfg.format,
                           cfg.teacher_samples, cfg.teacher_max_new_tokens, cfg.loop.seed,
                           cfg.calculator)
    out = []
    for r, labels in labelled:
        counts["teacher_tried"] += 1
        kept = next((t for t in teacher.verifications(r.problem, r.steps)
                     if C.agrees(t, labels, len(r.steps))), None)
        if kept is not None:
            counts["teacher_kept"] += 1
            out.append(C.Chain(r, kept))
    return out, counts


@dataclass
class ChainExample(Example):
    """A chain's training sequence, with the weight of each target in the token loss."""

    weights: list[float] = field(default_factory=list)


def verdict_offsets(text: str) -> list[int]:
    """Where each verdict word of a chain starts: after each ``\\boxed{``, and the closing
    ``Yes`` or ``No`` (its space included, as it is tokenised)."""
    out = [m.end() for m in re.finditer(r"\\boxed\{", text)]
    tail = re.search(r"\s(Yes|No)\s*$", text)
    return out + ([tail.start()] if tail else [])


def examples_of(chains: Sequence[C.Chain], tokenizer: Any, template: T.Template,
                max_length: int, calculator: bool,
                verdict_weight: float = 1.0) -> tuple[list[ChainExample], int]:
    """One training example per chain: the prompt's ids (the steps with the calculator's
    notes where ``calculator``), then the chain's and the end token; read at every position
    that predicts a chain token, the token where a verdict word starts weighing
    ``verdict_weight`` and the others 1. And how many were too long."""
    chat = T.chat_of(tokenizer, template, "--base")
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    out, long = [], 0
    for c in chains:
        text = T.whole_prompt(template, chat, c.record.problem,
                              T.shown(c.record.steps, calculator))
        prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
        enc = tokenizer(c.text, add_special_tokens=False, return_offsets_mapping=True)
        ids = prompt + list(enc["input_ids"]) + eos
        if len(ids) > max_length:
            long += 1
            continue
        reads = list(range(len(prompt) - 1, len(ids) - 1))
        weights = [1.0] * len(reads)
        for at in verdict_offsets(c.text):   # the chain token holding the word's first char
            j = next((k for k, (s, e) in enumerate(enc["offset_mapping"]) if s <= at < e), None)
            if j is not None:
                weights[j] = verdict_weight
        out.append(ChainExample(ids, reads, [float(ids[p + 1]) for p in reads], weights=weights))
    return out, long


class TokenReader:
    """A causal LM's next-token logits at read positions, the body's states projected by the LM
    head there alone (the whole vocabulary at every position would cost more than the body).
    ``ids`` are token ids, or the stored states of a cut body (``--cache-frozen``)."""

    surprisal = None   # what :class:`prmkit.train.frozen.CachedSteps` asks of a reader

    def __init__(self, model: Any):
        self.model = model

    def logits(self, ids: Any, attn: Any, rows: Any, cols: Any, via: Any = None,
               tokens: Any = None, features: Any = None) -> Any:
        from prmkit.models.body import backbone

        if via is not None:   # DDP must see the whole forward
            return via(input_ids=ids, attention_mask=attn).logits[rows, cols]
        body = backbone(self.model, self.model)
        given = {"inputs_embeds" if ids.is_floating_point() else "input_ids": ids}
        hidden = body(**given, attention_mask=attn).last_hidden_state
        return self.model.get_output_embeddings()(hidden[rows, cols])


class TokenObjective:
    """The cross-entropy of the chain tokens of a batch, their weighted mean (each
    :class:`ChainExample`'s ``weights``; 1 each without) (the loop's ``objective``)."""

    def __init__(self, model: Any, pad: int):
        self.reader, self.pad = TokenReader(model), pad

    def loss(self, logits: Any, seqs: Sequence[Example], device: Any) -> Any:
        import torch

        target = torch.tensor([int(t) for e in seqs for t in e.targets], device=device)
        weight = torch.tensor([w for e in seqs for w in weights_of(e)], device=device)
        each = torch.nn.functional.cross_entropy(logits.float(), target, reduction="none")
        return (each * weight).sum() / weight.sum()

    def __call__(self, seqs: list[Example], device: Any, via: Any) -> Any:
        from prmkit.train.common import read_logits

        # right padding on a causal model: the mask can be dropped (exact)
        return self.loss(read_logits(self.reader, seqs, self.pad, True, device, via), seqs, device)


def weights_of(e: Example) -> list[float]:
    """A sequence's weight of each target: its own where it has them, else 1 each."""
    return e.weights if isinstance(e, ChainExample) and e.weights else [1.0] * len(e.targets)


def dev_loss(objective: Any, model: Any, examples: Sequence[Example]) -> float:
    """The mean chain-token loss of ``examples``, one at a time, no gradient (through the
    cached frozen layers where training uses them)."""
    import torch

    if not examples:
        return float("nan")
    device = next(model.parameters()).device
    was = model.training
    model.eval()
    try:
        with torch.inference_mode():
            total = sum(float(objective([e], device, None)) * sum(weights_of(e))
                        for e in examples)
    finally:
        model.train(was)
    return total / sum(sum(weights_of(e)) for e in examples)


def sampling_of(examples: Sequence[Example], chains: str) -> dict[str, Any]:
    """The sampling a trained verifier is saved with: one greedy verification, its token cap
    twice the longest chain it was trained on (a chain is as long as the solution it reviews);
    the step copies written for it where its ``chains`` begin each review with one
    (:data:`prmkit.verify.chains.COPYING`; :mod:`prmkit.verify.copies`)."""
    longest = max(len(e.targets) for e in examples)
    return {"samples": 1, "temperature": 0.0, "max_new_tokens": 2 * longest,
            "copy_steps": chains in C.COPYING}


def save_verifier(cfg: VerifierTrainConfig, tokenizer: Any, counts: dict[str, int],
                  sampling: dict[str, Any], model: Any, folder: str,
                  metrics: dict[str, Any]) -> None:
    """A folder ``score --backend generative --model`` opens alone: the whole model (LoRA
    merged), its tokenizer, the template and its sampling settings, and the run's record."""
    os.makedirs(folder, exist_ok=True)
    whole = copy.deepcopy(model).merge_and_unload() if cfg.loop.train == "lora" else model
    whole.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    with open(os.path.join(folder, T.VERIFIER_FILE), "w", encoding="utf-8") as f:
        json.dump({"template": cfg.format, "calculator": cfg.calculator, "chains": cfg.chains,
                   "base": cfg.base, "sampling": sampling}, f, indent=2)
    with open(os.path.join(folder, "prmkit_train.json"), "w", encoding="utf-8") as f:
        json.dump({"kind": "verifier", "config": {k: v for k, v in dataclasses.asdict(cfg).items()
                                                  if k != "command"},
                   "chains": counts, "metrics": metrics}, f, indent=2)


def train_verifier(cfg: VerifierTrainConfig) -> list[dict[str, Any]]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prmkit.formats.detect import read_records
    from prmkit.models.folder import resolve_model_path

    template = T.get_template(cfg.format)
    path = resolve_model_path(cfg.base)
    tokenizer = AutoTokenizer.from_pretrained(path)
    train, counts = make_chains(cfg, cfg.training_records())
    dev, _ = make_chains(dataclasses.replace(cfg, chains="labels" if cfg.chains == "teacher"
                                             else cfg.chains, teacher=None, teacher_model=None),
                         read_records(cfg.eval_data)) if cfg.eval_data else ([], {})
    examples, long = examples_of(train, tokenizer, template, cfg.max_length, cfg.calculator,
                                 cfg.verdict_weight)
    dev_examples, _ = examples_of(dev, tokenizer, template, cfg.max_length, cfg.calculator,
                                  cfg.verdict_weight)
    print(f"train verifier: {len(examples)} chains from {counts['records']} records "
          f"({counts['unlabelled']} without step labels, {long} longer than --max-length"
          + (f"; the teacher's chains agreed with the labels on {counts['teacher_kept']} of "
             f"{counts['teacher_tried']}" if cfg.chains == "teacher" else "") + ")",
          file=sys.stderr)
    if not examples:
        raise NoExamples("no chain")
    torch.manual_seed(cfg.loop.seed)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, use_safetensors=True)
    model = set_trainable(model, cfg.loop)
    pad, sampling = pad_id(tokenizer), sampling_of(examples, cfg.chains)

    objective: Any = TokenObjective(model, pad)
    if cfg.cache_frozen:
        from prmkit.train.frozen import cached_steps

        objective = cached_steps(objective, model, cfg, examples, dev_examples)

    def evaluate(m: Any) -> dict[str, float]:
        if not dev_examples:
            return {}
        return {"dev_neg_loss": round(-dev_loss(objective, m, dev_examples), 6)}

    def save(m: Any, folder: str, metrics: dict[str, Any]) -> None:
        save_verifier(cfg, tokenizer, counts, sampling, m, folder, metrics)

    loop = Loop(model, objective, examples, cfg.loop, cfg.output,
                "dev_neg_loss" if dev_examples else "neg_train_loss", evaluate, save,
                autocast_bf16=cfg.autocast_bf16)
    history = loop.run()
    publish(os.path.join(cfg.output, "best"), cfg.output)
    return history


def publish(best: str, output: str) -> None:
    """The best checkpoint's files at the top of ``output`` too (hard links where the file
    system allows), so the output folder itself is the verifier a user passes to ``--model``."""
    import shutil

    if not os.path.isdir(best):
        return
    for name in sorted(os.listdir(best)):
        src, dst = os.path.join(best, name), os.path.join(output, name)
        if not os.path.isfile(src) or name == "checkpoint.json":
            continue
        tmp = dst + ".tmp"
        if os.path.exists(tmp):
            os.unlink(tmp)
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copy2(src, tmp)
        os.replace(tmp, dst)
