"""``prmkit lab rl``: do step rewards make RL learn from fewer samples, and does a PRM alone
get hacked?

Tests Math-Shepherd's (Wang et al. 2024) PPO on per-step PRM rewards and DeepSeek-R1's
(DeepSeek-AI 2025) warning that a learned PRM invites reward hacking, with GRPO-style policy
gradient on :mod:`prmkit.lab.rl.policy` through :class:`prmkit.rl.rewards.ProcessReward`,
:mod:`prmkit.rl.advantage` and :func:`prmkit.rl.diagnostics.hacking_flags`. The arms, protocol
and claims (:mod:`prmkit.lab.rl.stats`) are in :data:`DESCRIPTION` and docs/lab-rl.md.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from prmkit.errors import PrmkitError

ARMS = ("outcome", "gold", "trained", "orm", "prm-only")
# Not run by default: outcome plus the gold PRM's step rewards in the other forms of prmkit.rl,
# to compare what each does to credit (docs/lab-rl.md).
EXTRA_ARMS = ("gold-raw", "gold-delta", "gold-min", "gold-process")
DESCRIPTION = """\
Do step rewards make RL learn from fewer samples, and does a PRM alone get hacked? A policy
that can learn (a softmax over the lab world's sentence kinds and operators, and whether to
show each calculation) is trained by GRPO-style policy gradient on lab problems of 4 to 8
operations, through prmkit's own reward, advantage and diagnostic code, in five arms:

  outcome   GRPO's outcome advantage on every step
  gold      outcome plus step-local step rewards from the gold PRM, which checks stated
            values (a hidden step whose result is wrong is the wrong step)
  trained   the same with a PRM trained on the world's text labels (blind to hidden work)
  orm       GRPO's advantage on a learned ORM's score (no answers)
  prm-only  DeepSeekMath's process advantage from the trained PRM alone (no answers)

Each arm's learning rate is tuned on seeds of its own, then every arm runs on the same fresh
seeds. The held-out accuracy after each update is exact, not sampled; the ceiling (the best
accuracy the policy family can reach) is computed exactly. Claims, with paired bootstrap 95%
intervals over seeds: step_rewards_learn_faster (primary: the gold arm's mean held-out
accuracy over updates 1..U minus outcome-only's, above 0), step_rewards_fewer_samples
(secondary: outcome-only's samples to halfway from the start to the ceiling over the gold
arm's, above 1) and prm_only_reward_hacking (the PRM-only arm's PRM score rises while its
accuracy falls, and the reward-hacking diagnostic flags it). Writes OUTPUT/summary.json and
OUTPUT/report.html; a rerun with the same settings reuses every finished run.
"""
STAGES_VERSION = 2


@dataclass
class LabRLConfig:
    """Sizes of ``prmkit lab rl``."""

    output: str = field(default="lab_rl_out", metadata={"help": "folder for every file it writes"})
    seed: int = field(default=0, metadata={"help": "seed of the problems and of every run's seeds"})
    seeds: int = field(default=30, metadata={"help": "paired evaluation seeds per arm"})
    tune_seeds: int = field(default=5, metadata={"help": "seeds per learning rate for tuning (not reused)"})
    lrs: str = field(default="1,3,10,30,100", metadata={
        "help": "learning rates tried per arm, comma-separated"})
    updates: int = field(default=40, metadata={"help": "policy-gradient updates per run"})
    problems_per_update: int = field(default=2, metadata={"help": "problems per update"})
    group: int = field(default=8, metadata={"help": "samples per problem (a GRPO group)"})
    margin: float = field(default=0.0, metadata={
        "help": "the primary claim holds when its 95%% interval's lower end is above -MARGIN "
                "points"})
    target_share: float = field(default=0.5, metadata={
        "help": "the secondary claim's target: this share of the way from the start accuracy "
                "to the ceiling"})
    step_weight: float = field(default=1.0, metadata={
        "help": "weight w of the step-local term of the gold and trained arms"})
    min_ops: int = field(default=4, metadata={"help": "fewest operations per problem"})
    max_ops: int = field(default=8, metadata={"help": "most operations per problem"})
    train_problems: int = field(default=400, metadata={"help": "problems the updates draw from"})
    eval_problems: int = field(default=200, metadata={"help": "held-out problems (exact accuracy)"})
    prm_problems: int = field(default=300, metadata={
        "help": "problems whose base-policy samples train the trained PRM and the ORM"})
    prm_samples: int = field(default=4, metadata={"help": "samples per PRM training problem"})
    bootstrap: int = field(default=2000, metadata={"help": "bootstrap resamples of the seeds"})
    arms: str = field(default=",".join(ARMS), metadata={
        "help": "arms to run, comma-separated (outcome must be one: the others compare to "
                "it); besides the default ones: gold-raw, gold-delta, gold-min, gold-process "
                "(outcome plus the gold PRM's step rewards in those forms)"})

    def __post_init__(self) -> None:
        for name in ("seeds", "tune_seeds", "updates", "problems_per_update", "train_problems",
                     "eval_problems", "prm_problems", "prm_samples", "bootstrap"):
            if getattr(self, name) < 1:
                raise PrmkitError(f"--{name.replace('_', '-')} must be at least 1")
        if self.group < 2:
            raise PrmkitError("--group must be at least 2 (GRPO compares a group)")
        if not 1 <= self.min_ops <= self.max_ops:
            raise PrmkitError("need 1 <= --min-ops <= --max-ops")
        if not 0 < self.target_share < 1:
            raise PrmkitError("--target-share must be between 0 and 1")
        try:
            lrs = self.lr_list
        except ValueError:
            raise PrmkitError(f"--lrs {self.lrs!r}: write numbers separated by commas") from None
        if not lrs or min(lrs) <= 0:
            raise PrmkitError("--lrs: give one or more positive learning rates")
        unknown = [a for a in self.arm_list if a not in ARMS + EXTRA_ARMS]
        if unknown or "outcome" not in self.arm_list:
            raise PrmkitError(f"--arms: choose from {', '.join(ARMS + EXTRA_ARMS)}, outcome "
                              f"among them")

    @property
    def lr_list(self) -> list[float]:
        return [float(x) for x in self.lrs.split(",") if x.strip()]

    @property
    def arm_list(self) -> list[str]:
        return [a.strip() for a in self.arms.split(",") if a.strip()]


@dataclass
class World:
    """The problems of a run: parsed lab problems, their text and kind counts."""

    train: list[Any]
    train_text: list[str]
    eval_counts: np.ndarray      # eval problems x kinds: how many operations of each kind


def make_world(cfg: LabRLConfig) -> World:
    from prmkit.lab.rl.policy import KINDS, kind_of
    from prmkit.world.problems import LabConfig, load_problem, make_problems

    def problems(n: int, seed: int) -> list[Any]:
        return make_problems(LabConfig(n=n, min_steps=cfg.min_ops, max_steps=cfg.max_ops,
                                       seed=seed))

    train = problems(cfg.train_problems, 10_000 + cfg.seed)
    held = [load_problem(r.problem) for r in problems(cfg.eval_problems, 20_000 + cfg.seed)]
    counts = np.zeros((len(held), len(KINDS)))
    for i, p in enumerate(held):
        for k in range(len(p.ops)):
            counts[i, kind_of(p, k)] += 1
    return World([load_problem(r.problem) for r in train], [r.problem for r in train], counts)


def exact_accuracy(policy: Any, counts: np.ndarray) -> float:
    """The mean over held-out problems of the exact chance of a fully right solution."""
    return float(np.mean(np.exp(counts @ np.log(right_per_kind(policy)))))


def right_per_kind(policy: Any) -> np.ndarray:
    """Per kind, the chance that a line of that kind is right (operator and no slip)."""
    from prmkit.lab.rl.policy import KINDS, OPERATORS, true_op

    p_op, p_show = policy.op_probs(), policy.show_probs()
    right = np.array([p_op[c, OPERATORS.index(true_op(c))] for c in range(len(KINDS))])
    return right * (p_show * (1 - policy.slip_shown) + (1 - p_show) * (1 - policy.slip_hidden))


def ceiling_accuracy(policy: Any, counts: np.ndarray) -> float:
    """The best :func:`exact_accuracy` the policy family can reach, exactly: a line is right
    with chance p(right operator) * (p(show) (1 - slip_shown) + (1 - p(show)) (1 - slip_hidden)),
    at most max(1 - slip_shown, 1 - slip_hidden), and the lines' chances are set apart (one
    operator and one show probability per kind, independent draws), so the mean of products is
    highest with every line at that bound: the mean over problems of best ** operations. A
    supremum: the softmax and sigmoid reach it only in the limit."""
    best = max(1.0 - policy.slip_shown, 1.0 - policy.slip_hidden)
    return float(np.mean(best ** counts.sum(axis=1)))


def base_samples(cfg: LabRLConfig) -> list[tuple[Any, Any]]:
    """(problem, sample) pairs: the base policy's ``prm_samples`` samples of each of
    ``prm_problems`` problems of their own, the training data of the trained PRM and the ORM."""
    from prmkit.lab.rl.policy import StepPolicy
    from prmkit.world.problems import LabConfig, load_problem, make_problems

    records = make_problems(LabConfig(n=cfg.prm_problems, min_steps=cfg.min_ops,
                                      max_steps=cfg.max_ops, seed=30_000 + cfg.seed))
    policy, rng = StepPolicy(), random.Random(f"prm-{cfg.seed}")
    out = []
    for r in records:
        problem = load_problem(r.problem)
        out += [(problem, policy.sample(problem, rng)) for _ in range(cfg.prm_samples)]
    return out


def train_prm(cfg: LabRLConfig) -> dict[str, Any]:
    """Fit the trained PRM on the world's text labels (:func:`prmkit.world.problems.gold_labels`,
    which do not check stated values) of the base policy's samples."""
    from prmkit.lab.verifiers import featureprm

    rows = [featureprm.hazard_rows(p, s.steps, s.labels) for p, s in base_samples(cfg)]
    x, y = np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows])
    prm = featureprm.FeaturePRM(featureprm.fit(x, y))
    return {**prm.to_dict(), "rows": int(len(y)), "first_errors": int(y.sum())}


def train_orm(cfg: LabRLConfig) -> dict[str, Any]:
    """Fit the ORM on the same samples' outcomes (the final answer right, as the outcome
    reward reads it)."""
    from prmkit.answers import extract_answer, is_equivalent
    from prmkit.lab.verifiers import featureprm

    pairs = base_samples(cfg)
    x = np.stack([featureprm.orm_row(p, s.steps) for p, s in pairs])
    y = np.array([float(is_equivalent(extract_answer("\n".join(s.steps)), str(p.answer)))
                  for p, s in pairs])
    orm = featureprm.FeatureORM(featureprm.fit(x, y))
    return {**orm.to_dict(), "rows": int(len(y)), "right": int(y.sum())}


def reward_model(arm: str) -> str:
    """Which model an arm's reward reads: ``gold``, ``orm`` or ``trained`` (outcome-only logs
    the trained PRM's score for the diagnostic)."""
    return "gold" if arm.startswith("gold") else "orm" if arm == "orm" else "trained"


def make_reward(arm: str, models: dict[str, Any]) -> Any:
    """The arm's :class:`ProcessReward`: outcome and the arm's model (``models`` by
    :func:`reward_model`'s names)."""
    from prmkit.rl.rewards import ProcessReward, RewardConfig

    return ProcessReward(models[reward_model(arm)], RewardConfig(mode="outcome+prm",
                                                                 aggregate="last"))


def advantages(arm: str, scored: Sequence[Any], step_weight: float) -> list[list[float]]:
    """Per-step advantages of one group of scored solutions, by the arm's rule."""
    from prmkit.rl.advantage import (group_advantages, outcome_advantages, process_supervision,
                                     returns_advantages)

    outcomes = [float(bool(s.correct)) for s in scored]
    scores = [[0.0 if x is None else float(x) for x in s.step_scores or []] for s in scored]
    base = outcome_advantages(outcomes)
    if arm in ("outcome", "orm"):
        if arm == "orm":
            base = outcome_advantages([float(s.prm) for s in scored])
        return [[a] * len(row) for a, row in zip(base, scores)]
    if arm == "prm-only":
        return group_advantages("process", outcomes, scores)
    if arm in ("gold", "trained"):
        return group_advantages("step-local", outcomes, scores, step_weight)
    form = arm.split("-", 1)[1]
    extra = process_supervision(scores) if form == "process" else returns_advantages(scores, form)
    return [[a + step_weight * x for x in row] for a, row in zip(base, extra)]


def score_group(reward: Any, cache: dict[Any, Any], problem: str, answer: str,
                texts: Sequence[str]) -> list[Any]:
    """``reward.score`` of a group, each distinct text scored once per ``cache``."""
    todo = sorted({t for t in texts if (problem, t) not in cache})
    if todo:
        for t, s in zip(todo, reward.score([problem] * len(todo), todo, [answer] * len(todo))):
            cache[problem, t] = s
    return [cache[problem, t] for t in texts]


def run_seed(cfg: LabRLConfig, world: World, arm: str, lr: float, seed: str,
             models: dict[str, Any], cache: dict[Any, Any] | None = None) -> dict[str, Any]:
    """One training run: the exact held-out accuracy after every update, and the log.
    ``cache`` holds scored solutions across runs with the same reward model."""
    from prmkit.lab.rl.policy import KINDS, OPERATORS, StepPolicy
    from prmkit.rl.diagnostics import RewardLog

    policy, reward, log = StepPolicy(), make_reward(arm, models), RewardLog()
    order, draws = random.Random(f"order-{seed}"), random.Random(f"samples-{seed}")
    curve, seen = [exact_accuracy(policy, world.eval_counts)], []
    for u in range(cfg.updates):
        batch = order.sample(range(len(world.train)), cfg.problems_per_update)
        g_op, g_show = np.zeros((len(KINDS), len(OPERATORS))), np.zeros(len(KINDS))
        rows = []
        for i in batch:
            samples = [policy.sample(world.train[i], draws) for _ in range(cfg.group)]
            scored = score_group(reward, {} if cache is None else cache, world.train_text[i],
                                 str(world.train[i].answer), ["\n".join(s.steps) for s in samples])
            for s, a in zip(samples, advantages(arm, scored, cfg.step_weight)):
                policy.grad_log_prob(s, a, g_op, g_show)
            rows += scored
            seen += [float(x.prm if arm in ("prm-only", "orm") else bool(x.correct))
                     for x in scored]
        log.add(u, rows)
        n = cfg.problems_per_update * cfg.group
        policy.update(g_op / n, g_show / n, lr)
        curve.append(exact_accuracy(policy, world.eval_counts))
    return {"arm": arm, "lr": lr, "seed": seed, "curve": [round(x, 6) for x in curve],
            "seen": round(float(np.mean(seen)), 6), "log": [asdict(r) for r in log.rows],
            "show": [round(float(x), 4) for x in policy.show_probs()]}


def tune(cfg: LabRLConfig, world: World, arm: str, models: dict[str, Any],
         cache: dict[Any, Any], out: str) -> dict[str, Any]:
    """The arm's learning rate: the one of ``--lrs`` whose tuning runs saw the most of the
    reward the arm can see (its outcomes, or its model's score for orm and prm-only); each run
    is a stage file of its own."""
    from prmkit.lab.stages import stage_json

    seen: dict[str, float] = {}
    for lr in cfg.lr_list:
        runs = [stage_json(out, os.path.join("tune", f"{arm}_lr{lr:g}_{j}.json"),
                           lambda: run_seed(cfg, world, arm, lr, f"{cfg.seed}-tune-{j}", models,
                                            cache))
                for j in range(cfg.tune_seeds)]
        seen[f"{lr:g}"] = round(float(np.mean([r["seen"] for r in runs])), 6)
    best = max(seen, key=lambda k: seen[k])
    return {"arm": arm, "lr": float(best), "seen_by_lr": seen}


def run(cfg: LabRLConfig) -> int:
    """The whole experiment: trained PRM and ORM, tuning, paired runs, summary.json and
    report.html."""
    from prmkit.lab.verifiers import featureprm
    from prmkit.lab.rl import stats as rlstats
    from prmkit.lab.stages import begin, stage_json
    from prmkit.lab.rl.policy import StatedGoldPRM, StepPolicy

    out = cfg.output
    say = begin("lab rl", cfg, STAGES_VERSION, f"seed {cfg.seed}, arms {', '.join(cfg.arm_list)}")
    for sub in ("tune", "runs"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    world = make_world(cfg)
    info = {"prm": stage_json(out, "prm.json", lambda: train_prm(cfg)),
            "orm": stage_json(out, "orm.json", lambda: train_orm(cfg))}
    models = {"gold": StatedGoldPRM(), "trained": featureprm.FeaturePRM(info["prm"]["weights"]),
              "orm": featureprm.FeatureORM(info["orm"]["weights"])}
    say.stage(1, "trained PRM and ORM on base-policy samples: " + "; ".join(
        f"{name} " + ", ".join(f"{k} {v:+.2f}" for k, v in zip(m["features"], m["weights"]))
        for name, m in info.items()))
    caches: dict[str, dict[Any, Any]] = {"gold": {}, "trained": {}, "orm": {}}
    tuned = {arm: tune(cfg, world, arm, models, caches[reward_model(arm)], out)
             for arm in cfg.arm_list}
    say.stage(2, "learning rates on " + f"{cfg.tune_seeds} tuning seeds: " + "; ".join(
        f"{a} {t['lr']:g}" for a, t in tuned.items()))
    runs = {arm: [stage_json(out, os.path.join("runs", f"{arm}_{j}.json"),
                             lambda: run_seed(cfg, world, arm, tuned[arm]["lr"],
                                              f"{cfg.seed}-eval-{j}", models,
                                              caches[reward_model(arm)]))
                  for j in range(cfg.seeds)] for arm in cfg.arm_list}
    say.stage(3, f"{cfg.seeds} paired seeds per arm, {cfg.updates} updates of "
                 f"{cfg.problems_per_update * cfg.group} samples")
    ceiling = ceiling_accuracy(StepPolicy(), world.eval_counts)
    result = rlstats.summarise(cfg, runs, tuned, info, ceiling)
    result["seconds"] = round(say.elapsed, 1)
    rlstats.write(out, result, runs)
    say.stage(4, f"summary in {out}/summary.json, report in {out}/report.html")
    for line in rlstats.lines(result):
        say(line)
    return 0
