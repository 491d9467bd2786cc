"""``prmkit lab active-learning``: label the convincing wrong answers, and count what it saves.

Lightman et al. 2023, "Let's Verify Step by Step", section 4: step labels on the solutions the
current PRM scores highly but that reach a wrong answer are about 2.6 times as data-efficient
as uniformly chosen ones. In the lab: a pool of ``--pool-n`` samples per training problem; a
selector PRM trained on ``--selector-labels`` uniform picks per problem; for a budget of k
labelled solutions per problem, three arms choose which k get exact step labels:

* ``uniform``: k at random;
* ``active``: ``--active-share`` of k from the wrong-answer solutions the selector rates
  highest (:func:`prmkit.train.active.convincing_wrong`), the rest the highest rated others;
* ``random-wrong``: as many wrong-answer solutions, and the rest, at random.

Each arm's PRM is a head alone on frozen SmolLM2-135M states, at budgets ``--budgets`` and
``--seeds`` seeds, measured by best-of-``--test-n`` accuracy (``prm-prod``) and step AUC
against gold, without the calculator by default. The claim ``active_learning_efficiency`` is in
:mod:`prmkit.lab.activelearning.stats`.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.world.config import WorldConfig
from prmkit.lab.activelearning import report as activereport
from prmkit.lab.activelearning import stats as activestats
from prmkit.lab.activelearning.stats import ARMS
from prmkit.lab.stages import begin, stage, stage_json
from prmkit.records import Record

STAGES_VERSION = 2


@dataclass
class ActiveLearningConfig:
    """Sizes of ``prmkit lab active-learning``."""

    output: str = field(default="active_learning_out", metadata={"help": "folder for every file it writes"})
    world: WorldConfig = field(default_factory=lambda: WorldConfig(slip=0.05, confuse=0.3))
    train_problems: int = field(default=50, metadata={"help": "lab problems whose samples are labelled"})
    pool_n: int = field(default=64, metadata={"help": "samples per training problem to choose from"})
    test_problems: int = field(default=150, metadata={"help": "lab problems for best-of-N"})
    test_n: int = field(default=16, metadata={"help": "candidates per test problem (best-of-N's N)"})
    budgets: str = field(default="4,8,16", metadata={
        "help": "labelled solutions per training problem, comma-separated (the curve's points); "
                "a budget k where round(active_share * k) == k is dropped (the active arm would "
                "label wrong answers only)"})
    seeds: int = field(default=3, metadata={"help": "seeds per arm and budget"})
    selector_labels: int = field(default=1, metadata={
        "help": "uniformly chosen labelled solutions per training problem the selector PRM "
                "trains on (its seed set)"})
    active_share: float = field(default=0.8, metadata={
        "help": "share of a problem's labels that go to its most convincing wrong answers"})
    calculator: bool = field(default=False, metadata={
        "help": "the PRMs read the calculator's notes (off by default: with them one label "
                "per problem nearly saturates the curves)"})
    base: str = field(default="smollm2-135m", metadata={"help": "base model of every PRM"})
    head: str = field(default="surprisal", metadata={"help": "the PRMs' head on the frozen body"})
    epochs: int = field(default=16, metadata={"help": "each PRM's passes over its labels"})
    lr: float = field(default=1e-3, metadata={"help": "each PRM's peak learning rate"})
    batch_tokens: int = field(default=4096, metadata={"help": "training batch, in tokens"})

    def __post_init__(self) -> None:
        try:
            ks = self.budget_list
        except ValueError:
            raise PrmkitError(f"--budgets {self.budgets!r}: write whole numbers separated by "
                              f"commas, such as 1,2,4,8") from None
        if len(ks) < 2 or min(ks) < 1 or max(ks) > self.pool_n or len(set(ks)) < len(ks):
            raise PrmkitError(f"--budgets {self.budgets!r}: two or more different budgets, each "
                              f"between 1 and --pool-n ({self.pool_n}), once the budgets where "
                              f"round(--active-share * k) == k are dropped")
        if min(self.train_problems, self.test_problems, self.test_n, self.seeds, self.epochs,
               self.selector_labels) < 1 or self.selector_labels > self.pool_n:
            raise PrmkitError("--train-problems, --test-problems, --test-n, --seeds, --epochs and "
                              "--selector-labels must be at least 1 (and --selector-labels at "
                              "most --pool-n)")
        if not 0.0 <= self.active_share <= 1.0:
            raise PrmkitError(f"--active-share must be in [0, 1], got {self.active_share}")

    @property
    def budget_list(self) -> list[int]:
        """The budgets measured: those where the active arm's share leaves a mixture."""
        return [k for k in self.all_budgets if round(self.active_share * k) != k]

    @property
    def dropped_budgets(self) -> list[int]:
        """The budgets dropped by rule: round(active_share * k) == k."""
        return [k for k in self.all_budgets if round(self.active_share * k) == k]

    @property
    def all_budgets(self) -> list[int]:
        return sorted(int(x) for x in self.budgets.split(","))

    @property
    def policy(self) -> str:
        return self.world.policy


def run(config: ActiveLearningConfig) -> int:
    out = config.output
    say = begin("lab active-learning", config, STAGES_VERSION,
                f"seed {config.world.seed}, policy {config.policy}")
    pool, test = world_stage(config, out, say)
    results = []
    for s in range(config.seeds):
        seed = config.world.seed + s
        chosen = stage_json(out, f"selector_{s}.json", lambda: selector_stage(config, pool, test,
                                                                              seed))
        for arm in ARMS:
            for k in config.budget_list:
                picked = choose(arm, pool, k, seed, config.active_share, chosen["pool_scores"])
                fig = stage_json(out, f"prm_{arm}_{k}_{s}.json", lambda: quality_stage(
                    config, picked, test, f"{arm}-{k}-{s}", seed))
                results.append({"arm": arm, "budget": k, "seed": s, **fig})
        say.stage(2 + s, f"seed {seed}: the selector and {len(ARMS) * len(config.budget_list)} "
                         f"PRMs trained and scored")
    doc = activestats.figures(config, results)
    activereport.finish(config, doc, out, say, say.elapsed)
    return 0


def world_stage(config: ActiveLearningConfig, out: str, say: Any) -> tuple[list, list]:
    """1. the training pool and the test candidates, with their gold labels."""
    from prmkit.lab import gold_record
    from prmkit.lab.candidates import split_of

    split = split_of(config.world, config.train_problems, config.test_problems)
    pool = stage(out, "pool.jsonl", lambda: [gold_record(r) for r in split.train(config.pool_n)])
    test = stage(out, "test_candidates.jsonl",
                 lambda: [gold_record(r) for r in split.test(config.test_n)])
    right = sum(bool(r.is_correct) for r in pool + test) / len(pool + test)
    say.stage(1, f"{len(pool)} pool samples ({config.train_problems} problems x "
                 f"{config.pool_n}), {len(test)} test candidates; policy {config.policy}: "
                 f"{100 * right:.1f}% right answers")
    return pool, test


def spec_of(config: ActiveLearningConfig, seed: int) -> Any:
    from prmkit.lab.verifiers.heads import HeadSpec

    return HeadSpec(base=config.base, head=config.head, calculator=config.calculator,
                    epochs=config.epochs, lr=config.lr, batch_tokens=config.batch_tokens,
                    seed=seed)


def selector_stage(config: ActiveLearningConfig, pool: list, test: list, seed: int) -> dict:
    """2. the selector PRM of one seed: trained on a uniform seed set, scoring the pool."""
    from prmkit.lab.verifiers.heads import train_and_score

    seed_set = uniform(pool, config.selector_labels, seed + 7919)
    path = os.path.join(config.output, "heads", f"selector-{seed}")
    scores = train_and_score(seed_set, pool, path, spec_of(config, seed),
                             os.path.join(config.output, "frozen"))
    return {"seed_set": [r.id for r in seed_set],
            "pool_scores": {r.id: s for r, s in zip(pool, scores)}}


def quality_stage(config: ActiveLearningConfig, picked: list, test: list, name: str,
                  seed: int) -> dict:
    """3. one arm's PRM at one budget and seed: trained on its picks' gold labels, its
    best-of-N accuracy per test problem and its step AUC."""
    from prmkit.evaluate.paired import per_problem_accuracy
    from prmkit.lab.verifiers.heads import train_and_score
    from prmkit.evaluate.stepwise import step_auc

    path = os.path.join(config.output, "heads", name)
    scores = train_and_score(picked, test, path, spec_of(config, seed),
                             os.path.join(config.output, "frozen"))
    scored = [Record(**{**r.to_dict(), "step_scores": s}) for r, s in zip(test, scores)]
    acc = per_problem_accuracy(scored, "prm-prod", config.test_n, seed=config.world.seed)
    wrong = sum(not r.is_correct for r in picked)
    return {"accuracy": acc, "step_auc": step_auc(scored), "labels": len(picked),
            "wrong_answers": wrong}


# --------------------------------------------------------------------------------- the arms


def by_problem(pool: Sequence[Record]) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for r in pool:
        groups.setdefault(r.group or r.id, []).append(r)
    return groups


def uniform(pool: Sequence[Record], k: int, seed: int) -> list[Record]:
    """``k`` samples of each problem, at random."""
    return [r for g, rs in sorted(by_problem(pool).items())
            for r in random.Random(f"{seed}-{g}").sample(rs, min(k, len(rs)))]


def choose(arm: str, pool: Sequence[Record], k: int, seed: int, share: float,
           selector: dict[str, list]) -> list[Record]:
    """The ``k`` samples per problem that ``arm`` sends to the labeller."""
    if arm == "uniform":
        return uniform(pool, k, seed)
    from prmkit.aggregate import aggregate
    from prmkit.train.active import convincing_wrong, is_wrong

    out = []
    for g, rs in sorted(by_problem(pool).items()):
        want = min(round(share * k), sum(bool(is_wrong(r)) for r in rs))
        if arm == "active":
            scored = [Record(**{**r.to_dict(), "step_scores": selector[r.id]}) for r in rs]
            wrong = convincing_wrong(scored, want, "prod") if want else []
            taken = {r.id for r in wrong}
            rest = sorted((r for r in scored if r.id not in taken),
                          key=lambda r: -aggregate(r.step_scores, "prod"))
        elif arm == "random-wrong":
            rng = random.Random(f"{seed}-{g}-wrong")
            wrong = rng.sample([r for r in rs if is_wrong(r)], want)
            taken = {r.id for r in wrong}
            rest = rng.sample([r for r in rs if r.id not in taken], len(rs) - len(taken))
        else:
            raise PrmkitError(f"unknown arm {arm!r} (known: {', '.join(ARMS)})")
        out += [Record(**{**r.to_dict(), "step_scores": None}) for r in wrong + rest[:k - want]]
    return out
