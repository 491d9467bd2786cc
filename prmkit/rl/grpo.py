"""RL with process rewards on TRL's GRPO trainer: the recipe behind ``prmkit rl``.

GRPO (Shao et al. 2024, "DeepSeekMath"): for each prompt, sample a group of completions, score
each, and push up the completions that beat their group's mean. Rewards (``--reward``):

``outcome``            1 if the final answer is right (RLVR, DeepSeek-R1's choice);
``prm``                the PRM's step scores aggregated into one number (``--aggregate``);
``outcome+prm``        outcome + ``--prm-weight`` x the aggregate;
``prm-steps``          per-step PRM rewards on step-end tokens only;
``outcome+prm-steps``  outcome (as GRPO) + ``--prm-weight`` x per-step PRM rewards.

TRL's reward functions return one scalar per completion, so the ``*-steps`` modes add a process
advantage per token in a subclass (:func:`prmkit.rl.steptrainer.process_trainer`, overriding
TRL's private ``_generate_and_score_completions``, tested against trl 1.13, the range
``prmkit[rl]`` pins): step scores shaped by ``--shaping`` (:mod:`prmkit.rl.shaping`), placed on
each step's last token, summed into undiscounted returns-to-go and centred by the group's mean
return; token t gets ``A_outcome + prm_weight * (G_t - mean G_0)``. ``--shaping process``
(DeepSeekMath) and ``step-local`` are group advantages spread over their step's tokens
(:mod:`prmkit.rl.advantage`). PRIME and PURE combine outcome and process advantages this way.

Every batch is scored for the outcome and by the PRM (also in ``outcome`` mode), logged to
``rl_log.jsonl`` with reward-hacking flags at the end; greedy held-out accuracy before and after
goes to ``result.json``. With ``--save-every N`` TRL checkpoints to ``OUTPUT/trl/`` and the same
command resumes after a kill, with the log and result of an unbroken run; a checkpoint made with
other settings is refused.

Problems: ``--data`` (records with ``problem`` and ``reference``) or the lab world (default).
Prompts are the policy's own chat prompt, the same for training and evaluation. On GPUs:
``accelerate launch -m prmkit.cli rl ...``.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.rl.steptrainer import process_trainer

__all__ = ["REWARDS", "RLConfig", "process_trainer", "run_rl", "save_policy"]

REWARDS = ("outcome", "prm", "outcome+prm", "prm-steps", "outcome+prm-steps")


@dataclass
class RLConfig:
    """``prmkit rl``: GRPO on a small policy with prmkit rewards."""

    output: str = field(metadata={"help": "output folder: result.json, rl_log.jsonl, policy/"})
    policy: str = field(default="smollm2-135m", metadata={
        "help": "the policy to train: a default model name or a causal LM folder"})
    reward: str = field(default="outcome", metadata={
        "help": "outcome, prm, outcome+prm, prm-steps or outcome+prm-steps (see above)"})
    prm: str | None = field(default=None, metadata={
        "help": "the PRM: a model folder, a default name, the URL of prmkit serve, or "
                "lab-gold (the lab world's exact step labels). Without it, diagnostics have no "
                "PRM reward"})
    aggregate: str = field(default="min", metadata={
        "help": "prm / outcome+prm: how step scores become one reward (min, prod, mean, last)"})
    shaping: str = field(default="delta", metadata={
        "help": "*-steps: raw, delta or min (returns-to-go, prmkit.rl.shaping), process "
                "(DeepSeekMath's group-normalised step rewards summed to go) or step-local "
                "(the change in the PRM score on each step; prmkit.rl.advantage)"})
    prm_weight: float = field(default=0.5, metadata={"help": "weight of the PRM term"})
    data: str | None = field(default=None, metadata={
        "help": "training problems (records with problem and reference); default: lab problems"})
    lab_problems: int = field(default=64, metadata={"help": "lab problems to train on"})
    lab_min_steps: int = field(default=1, metadata={"help": "fewest operations of a lab problem"})
    lab_max_steps: int = field(default=2, metadata={"help": "most operations of a lab problem"})
    eval_problems: int = field(default=32, metadata={
        "help": "held-out problems (lab, or the last ones of --data) for accuracy before/after"})
    max_steps: int = field(default=20, metadata={"help": "GRPO optimiser steps"})
    num_generations: int = field(default=4, metadata={"help": "completions per prompt (group)"})
    prompts_per_step: int = field(default=2, metadata={"help": "prompts per optimiser step"})
    max_completion_length: int = field(default=96, metadata={"help": "tokens per completion"})
    temperature: float = field(default=0.8, metadata={"help": "sampling temperature"})
    lr: float = field(default=1e-5, metadata={"help": "learning rate (AdamW)"})
    kl_beta: float = field(default=0.0, metadata={
        "help": "KL penalty to the starting policy (TRL's beta; 0 = none, no reference copy)"})
    train: str = field(default="last-k", metadata={"help": "what trains: last-k, lora, full"})
    last_k: int = field(default=4, metadata={"help": "layers trained by --train last-k"})
    step_rule: str = field(default="lines", metadata={"help": "how completions split into steps"})
    seed: int = field(default=0, metadata={"help": "seed of data order, sampling, lab problems"})
    save: bool = field(default=True, metadata={"help": "save the trained policy to OUTPUT/policy"})
    save_every: int = field(default=0, metadata={
        "help": "write a resumable checkpoint (policy, optimiser, RNG) to OUTPUT/trl every N "
                "GRPO steps; 0 = none"})
    resume: bool = field(default=True, metadata={
        "help": "continue from the last checkpoint in OUTPUT/trl, if any (--no-resume: start "
                "again)"})

    def __post_init__(self) -> None:
        from prmkit.rl.advantage import GROUP_FORMS
        from prmkit.rl.shaping import SHAPINGS
        from prmkit.train.loop import TRAIN_MODES

        if self.reward not in REWARDS:
            raise PrmkitError(f"--reward {self.reward!r} is not one of {', '.join(REWARDS)}")
        if "prm" in self.reward and not self.prm:
            raise PrmkitError(f"--reward {self.reward} needs --prm")
        if self.shaping not in SHAPINGS + GROUP_FORMS:
            raise PrmkitError(f"--shaping {self.shaping!r} is not one of "
                              f"{', '.join(SHAPINGS + GROUP_FORMS)}")
        if self.train not in TRAIN_MODES:
            raise PrmkitError(f"--train {self.train!r} is not one of {', '.join(TRAIN_MODES)}")
        for name in ("max_steps", "num_generations", "prompts_per_step", "max_completion_length",
                     "eval_problems", "lab_problems", "last_k"):
            if getattr(self, name) < 1:
                raise PrmkitError(f"--{name.replace('_', '-')} must be at least 1")
        if self.save_every < 0:
            raise PrmkitError("--save-every must be 0 (no checkpoints) or positive")
        if self.num_generations < 2:
            raise PrmkitError("--num-generations must be at least 2 (GRPO compares a group)")


# ---------------------------------------------------------------------------------------------
# problems, prompts, evaluation


def load_problems(cfg: RLConfig) -> tuple[list[Any], list[Any]]:
    """(training problems, held-out problems) as records with ``problem`` and ``reference``."""
    if cfg.data:
        from prmkit.formats.detect import read_records

        records = [r for r in read_records(cfg.data) if r.reference is not None]
        if len(records) <= cfg.eval_problems:
            raise PrmkitError(f"{cfg.data}: {len(records)} records with a reference; need more "
                              f"than --eval-problems {cfg.eval_problems}")
        return records[:-cfg.eval_problems], records[-cfg.eval_problems:]
    from prmkit.world import LabConfig, make_problems

    def lab(n: int, seed: int) -> list[Any]:
        return make_problems(LabConfig(n=n, min_steps=cfg.lab_min_steps,
                                       max_steps=cfg.lab_max_steps, seed=seed))

    return lab(cfg.lab_problems, 10_000 + cfg.seed), lab(cfg.eval_problems, 20_000 + cfg.seed)


def evaluate_policy(model: Any, tokenizer: Any, prompter: Any, problems: Sequence[Any],
                    reward: Any, max_tokens: int) -> dict[str, Any]:
    """Greedy solutions of ``problems``: accuracy, mean PRM score, length (tokens), steps, and
    ``correct``, each problem's 0/1 (None without a reference) in the order given."""
    from prmkit.generate.hf import HFGenConfig, HFGenerator
    from prmkit.generate.stepwise import solve
    from prmkit.rl.rewards import batch_metrics

    gen = HFGenerator(model, tokenizer, HFGenConfig(dtype="float32", batch_size=16))
    was_training = model.training
    sols = solve(gen, prompter, [p.problem for p in problems], n=1, max_tokens=max_tokens,
                 temperature=0.0, seed=0)
    model.train(was_training)
    texts = [row[0].text for row in sols]
    scored = reward.score([p.problem for p in problems], texts, [p.reference for p in problems])
    out = batch_metrics(scored)
    out["length_tokens"] = sum(row[0].completion.n_tokens for row in sols) / len(sols)
    out.pop("reward", None)
    correct = [None if s.correct is None else int(s.correct) for s in scored]
    return {**{k: round(v, 4) for k, v in out.items()}, "correct": correct}


def means(metrics: dict[str, Any]) -> dict[str, Any]:
    """:func:`evaluate_policy`'s figures without the per-problem list, for printing."""
    return {k: v for k, v in metrics.items() if k != "correct"}


# ---------------------------------------------------------------------------------------------
# the recipe


def run_rl(cfg: RLConfig) -> dict[str, Any]:
    """Train; returns (and writes to ``OUTPUT/result.json``) accuracy before/after and the
    diagnostics."""
    try:
        import trl
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        raise PrmkitError("prmkit rl needs TRL and datasets: pip install 'prmkit[rl]'") from None
    import torch

    from prmkit.rl.diagnostics import RewardLog, table
    from prmkit.rl.rewards import ProcessReward, RewardConfig, RewardPart, open_prm

    t0 = time.time()
    os.makedirs(cfg.output, exist_ok=True)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    model, tokenizer, prompter = _load_policy(cfg)
    prm = open_prm(cfg.prm) if cfg.prm else None
    checkpoint = _resume_point(cfg)
    log_path = os.path.join(cfg.output, "rl_log.jsonl")
    log = RewardLog(log_path, tokenizer)
    log.restart(checkpoint[1] if checkpoint else 0)
    scorer = ProcessReward(prm, RewardConfig(mode="outcome+prm" if prm else "outcome",
                                             aggregate=cfg.aggregate, step_rule=cfg.step_rule),
                           on_score=lambda scored, kw: log.add(
                               int(getattr(kw.get("trainer_state"), "global_step", 0)), scored))
    train_p, eval_p = load_problems(cfg)
    before_path = os.path.join(cfg.output, "before.json")
    if checkpoint and os.path.isfile(before_path):
        with open(before_path, encoding="utf-8") as f:
            before = json.load(f)
        print(f"resuming from {checkpoint[0]} (step {checkpoint[1]}); before: {means(before)}",
              flush=True)
    else:
        before = evaluate_policy(model, tokenizer, prompter, eval_p, scorer,
                                 cfg.max_completion_length)
        with open(before_path, "w", encoding="utf-8") as f:
            json.dump(before, f)
        print(f"before: {means(before)}", flush=True)

    outcome_w = 1.0 if cfg.reward.startswith("outcome") else 0.0
    prm_w = cfg.prm_weight if cfg.reward in ("prm", "outcome+prm") else 0.0
    funcs: list[Any] = [RewardPart(scorer, "outcome")]
    weights = [outcome_w]
    if prm is not None:
        funcs.append(RewardPart(scorer, "prm"))
        weights.append(prm_w)
    dataset = Dataset.from_list([{"prompt": prompter.prompt(p.problem), "problem": p.problem,
                                  "reference": p.reference} for p in train_p])
    args = _grpo_config(GRPOConfig, cfg, weights, use_cpu=not torch.cuda.is_available())
    kwargs: dict[str, Any] = dict(model=model, reward_funcs=funcs, args=args,
                                  train_dataset=dataset, processing_class=tokenizer)
    if cfg.reward.endswith("prm-steps"):
        trainer = process_trainer(GRPOTrainer)(
            step_reward=scorer, shaping=cfg.shaping, step_weight=cfg.prm_weight,
            step_rule=cfg.step_rule, **kwargs)
    else:
        trainer = GRPOTrainer(**kwargs)
    t_train = time.time()
    trainer.train(resume_from_checkpoint=checkpoint[0] if checkpoint else None)
    train_seconds = time.time() - t_train
    model = trainer.model
    after = evaluate_policy(model, tokenizer, prompter, eval_p, scorer, cfg.max_completion_length)
    print(f"after: {means(after)}", flush=True)
    flags = log.flags(window=max(2, cfg.max_steps // 5))
    if cfg.save:
        save_policy(model, tokenizer, cfg, os.path.join(cfg.output, "policy"))
    result = {"config": asdict(cfg), "before": before, "after": after,
              "log": [asdict(r) for r in log.rows], "flags": [asdict(f) for f in flags],
              "train_seconds": round(train_seconds, 1), "seconds": round(time.time() - t0, 1),
              "trl": trl.__version__, "train_problems": len(train_p), "eval_problems": len(eval_p)}
    with open(os.path.join(cfg.output, "result.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    print(table(log.rows))
    for flag in flags:
        print(f"warning: {flag}")
    return result


def _load_policy(cfg: RLConfig) -> tuple[Any, Any, Any]:
    """(model with its trainable parameters set, tokenizer padding on the left, prompter)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prmkit.generate.prompts import make_prompter, tokenizer_specials
    from prmkit.models.folder import resolve_model_path
    from prmkit.train.loop import LoopConfig, set_trainable

    path = resolve_model_path(cfg.policy)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model = set_trainable(model, LoopConfig(train=cfg.train, last_k=cfg.last_k))
    prompter = make_prompter(cfg.policy, getattr(tokenizer, "chat_template", None),
                             tokenizer_specials(tokenizer))
    return model, tokenizer, prompter


def _grpo_config(grpo_config: Any, cfg: RLConfig, weights: list[float], use_cpu: bool) -> Any:
    """TRL's GRPOConfig for this run."""
    return grpo_config(
        output_dir=os.path.join(cfg.output, "trl"), max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.prompts_per_step * cfg.num_generations,
        num_generations=cfg.num_generations, max_completion_length=cfg.max_completion_length,
        temperature=cfg.temperature, learning_rate=cfg.lr, beta=cfg.kl_beta,
        reward_weights=weights, seed=cfg.seed, logging_steps=1,
        save_strategy="steps" if cfg.save_every else "no", save_steps=cfg.save_every or 500,
        report_to="none", bf16=False, use_cpu=use_cpu,
        gradient_checkpointing=False, disable_dropout=True, log_completions=False)


# settings that must match for a checkpoint to be continued (the rest may change on a rerun)
_RUN_SETTINGS = ("policy", "reward", "prm", "aggregate", "shaping", "prm_weight", "data",
                 "lab_problems", "lab_min_steps", "lab_max_steps", "eval_problems", "max_steps",
                 "num_generations", "prompts_per_step", "max_completion_length", "temperature",
                 "lr", "kl_beta", "train", "last_k", "step_rule", "seed")


def _resume_point(cfg: RLConfig) -> tuple[str, int] | None:
    """(the checkpoint folder to continue from, its step), or None to start afresh; writes
    ``OUTPUT/settings.json`` and refuses a checkpoint made with other settings."""
    import shutil

    from transformers.trainer_utils import get_last_checkpoint

    settings = {k: getattr(cfg, k) for k in _RUN_SETTINGS}
    path = os.path.join(cfg.output, "settings.json")
    trl_dir = os.path.join(cfg.output, "trl")
    last = get_last_checkpoint(trl_dir) if os.path.isdir(trl_dir) else None
    if last and cfg.resume:
        try:
            with open(path, encoding="utf-8") as f:
                old = json.load(f)
        except (OSError, ValueError):
            old = None
        if old != settings:
            changed = sorted(k for k in settings if old is None or old.get(k) != settings[k])
            raise PrmkitError(f"{last} was trained with other settings ({', '.join(changed[:3])}"
                              f"{' ...' if len(changed) > 3 else ''}); use another --output or "
                              f"--no-resume")
    else:
        if last:  # --no-resume: the old checkpoints must not be mixed with this run's
            shutil.rmtree(trl_dir)
        last = None
    with open(path, "w", encoding="utf-8") as f:
        json.dump(settings, f, indent=2)
    if last is None:
        return None
    return last, int(os.path.basename(last).rsplit("-", 1)[-1])


def save_policy(model: Any, tokenizer: Any, cfg: RLConfig, folder: str) -> None:
    """The trained policy: a delta of the trained layers on the base (last-k), else full."""
    from prmkit.models import folder as modeldir
    from prmkit.train.loop import trainable_names

    os.makedirs(folder, exist_ok=True)
    tokenizer.save_pretrained(folder)
    if cfg.train == "last-k":
        modeldir.save_delta(folder, model, trainable_names(model), cfg.policy, "causal-lm")
    elif cfg.train == "lora":
        model.merge_and_unload().save_pretrained(folder, safe_serialization=True)
    else:
        model.save_pretrained(folder, safe_serialization=True)
