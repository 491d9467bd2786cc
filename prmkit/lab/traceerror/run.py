"""``prmkit lab trace-error``: process against outcome supervision, measured by trace errors.

Uesato et al. 2022, "Solving math word problems with process- and outcome-based feedback":
outcome supervision reaches a final-answer error close to process supervision's, but only
process supervision cuts the trace error, the share of right-answer solutions that hold a
wrong step. The lab policy writes such solutions when it recovers from a slip
(``lab:SLIP:CONFUSE:RECOVER``). Three verifiers, heads alone on the same frozen SmolLM2-135M
states with the same budget, differ only in their labels:

* ``orm``: the outcome on every step, picking by its last step's score;
* ``prm-mc``: Monte Carlo step labels (Math-Shepherd, hard, K rollouts per step);
* ``prm-exact``: the exact step labels.

Each runs with the calculator's notes and without; the claims are read without them (with the
notes every slip is written in the text), the calculator setting reported beside. Majority
voting is the baseline, as Uesato et al.'s previous best. Claims at N = ``--claim-n``, each
problem's pick drawn ``--draws`` times from its ``--n`` candidates, paired over the test
problems (docs/lab-trace-error.md):
``trace_error_prm_below_majority`` (majority voting's trace error minus the exact-label PRM's,
95% interval above 0), ``final_error_similar`` (exact-label PRM final error minus the ORM's,
90% interval within ``--margin`` points of 0) and ``exact_labels_beat_mc`` (exact-label PRM's
best-of-N accuracy minus the MC-label PRM's, 95% interval above 0). The ORM's and the MC-label
PRM's trace errors minus the exact-label PRM's are reported as contrasts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from prmkit.errors import PrmkitError
from prmkit.lab.candidates import SplitConfig
from prmkit.world.config import WorldConfig
from prmkit.lab.traceerror import report as tracereport
from prmkit.lab.stages import begin, stage, stage_json
from prmkit.lab.traceerror.report import SETTINGS, VERIFIERS

STAGES_VERSION = 2
SELECT = ("prm-prod", "prm-min", "prm-last")


@dataclass
class TraceErrorConfig:
    """Sizes of ``prmkit lab trace-error``."""

    output: str = field(default="trace_error_out", metadata={"help": "folder for every file it writes"})
    world: WorldConfig = field(default_factory=WorldConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    claim_n: int = field(default=4, metadata={
        "help": "N at which the claims are read, each problem's pick drawn --draws times from "
                "its --n candidates"})
    recover: float = field(default=0.35, metadata={
        "help": "the lab policy's chance of carrying on from the true value after a slip (a "
                "right answer with a wrong step)"})
    rollouts: int = field(default=4, metadata={"help": "Monte Carlo rollouts per labelled step (K)"})
    base: str = field(default="smollm2-135m", metadata={"help": "base model of every verifier"})
    head: str = field(default="surprisal", metadata={
        "help": "the verifiers' head on the frozen body (prmkit train prm --head)"})
    epochs: int = field(default=16, metadata={"help": "each verifier's passes over its labels"})
    lr: float = field(default=1e-3, metadata={"help": "each verifier's peak learning rate"})
    batch_tokens: int = field(default=4096, metadata={"help": "training batch, in tokens"})
    select: str = field(default="prm-prod", metadata={
        "help": "how the PRMs pick a candidate (prm-prod, prm-min, prm-last), fixed before the "
                "run; the ORM picks by its last step's score"})
    margin: float = field(default=5.0, metadata={
        "help": "final_error_similar holds when the 90%% interval of the final-error "
                "difference lies within this many points of 0"})
    draws: int = field(default=200, metadata={"help": "random draws of N candidates per problem"})

    def __post_init__(self) -> None:
        if self.select not in SELECT:
            raise PrmkitError(f"--select {self.select!r} is not one of {', '.join(SELECT)}")
        sizes = self.split
        if min(sizes.train_problems, sizes.train_n, sizes.test_problems, sizes.n, self.claim_n,
               self.rollouts, self.epochs, self.draws) < 1:
            raise PrmkitError("--train-problems, --train-n, --test-problems, --n, --claim-n, "
                              "--rollouts, --epochs and --draws must be at least 1")
        if self.claim_n > self.split.n:
            raise PrmkitError(f"--claim-n {self.claim_n} is more than --n {self.split.n}")
        if self.margin <= 0:
            raise PrmkitError(f"--margin must be positive, got {self.margin}")

    @property
    def policy(self) -> str:
        return f"{self.world.policy}:{self.recover}"


def run(config: TraceErrorConfig) -> int:
    out = config.output
    say = begin("lab trace-error", config, STAGES_VERSION,
                f"seed {config.world.seed}, policy {config.policy}")
    train, test, mc = world_stage(config, out, say)
    scores = {}
    for k, setting in enumerate(SETTINGS):
        scores[setting] = stage_json(out, f"scores_{setting}.json", lambda: verifiers_stage(
            config, setting, train, test, mc))
        say.stage(3 + k, f"three verifiers trained and scored, {setting}")
    doc = tracereport.figures(config, test, scores)
    tracereport.finish(config, doc, out, say, say.elapsed)
    return 0


def world_stage(config: TraceErrorConfig, out: str, say: Any) -> tuple[list, list, list]:
    """1. problems and candidates (gold-labelled), 2. Monte Carlo labels of the training set."""
    from prmkit.lab import gold_record
    from prmkit.lab.candidates import split_of
    from prmkit.world.problems import trace_error
    from prmkit.label.mc import MCConfig, label_mc

    split = split_of(config.world, config.split.train_problems, config.split.test_problems,
                     config.policy)
    policy, prompter = split.policy, split.prompter
    train = stage(out, "train_candidates.jsonl",
                  lambda: [gold_record(r) for r in split.train(config.split.train_n)])
    test = stage(out, "test_candidates.jsonl",
                 lambda: [gold_record(r) for r in split.test(config.split.n)])
    right = sum(bool(r.is_correct) for r in train + test)
    te = trace_error(train + test)
    say.stage(1, f"{len(train)} training and {len(test)} test candidates, policy "
                 f"{config.policy}: {100 * right / len(train + test):.1f}% right answers, "
                 f"{'-' if te is None else f'{100 * te:.1f}%'} of them with a wrong step")
    mc = stage(out, "train_mc.jsonl", lambda: list(label_mc(
        train, policy, prompter, MCConfig(rollouts=config.rollouts, mode="hard",
                                          seed=config.world.seed), config.policy)))
    agree = [(a >= 0.5) == (b >= 0.5) for m in mc for g in [gold_of(train, m.id)]
             for a, b in zip(m.labels or [], g.labels or []) if a is not None and b is not None]
    missed = recovered_slips_called_right(train, mc)
    say.stage(2, f"Monte Carlo labels (hard, K={config.rollouts}): step agreement with gold "
                 f"{100 * sum(agree) / max(1, len(agree)):.1f}%; the wrong steps of right-answer "
                 f"solutions labelled right: {missed}")
    return train, test, mc


def gold_of(records: list, rid: str) -> Any:
    return next(r for r in records if r.id == rid)


def recovered_slips_called_right(train: list, mc: list) -> str:
    """How many of the gold-wrong steps of right-answer training solutions the MC labels call
    right, as "k of m"."""
    by_id = {r.id: r for r in mc}
    wrong = called = 0
    for g in train:
        if not g.is_correct or g.id not in by_id:
            continue
        for y, m in zip(g.labels or [], by_id[g.id].labels or []):
            if y is not None and y < 0.5 and m is not None:
                wrong += 1
                called += m >= 0.5
    return f"{called} of {wrong}"


def verifiers_stage(config: TraceErrorConfig, setting: str, train: list, test: list,
                    mc: list) -> dict[str, dict[str, list]]:
    """3, 4. the three verifiers of one setting, each trained and scored on the stored states;
    a finished verifier's scores are kept in its own file, so a killed stage resumes."""
    from prmkit.lab.verifiers.heads import HeadSpec, outcome_labelled, train_and_score

    spec = HeadSpec(base=config.base, head=config.head, calculator=setting == "calculator",
                    epochs=config.epochs, lr=config.lr, batch_tokens=config.batch_tokens,
                    seed=config.world.seed)
    labelled = {"orm": outcome_labelled(train), "prm-mc": mc, "prm-exact": train}
    store = os.path.join(config.output, "frozen")
    scores = {}
    for name in VERIFIERS:
        path = os.path.join(config.output, "heads", f"{setting}-{name}")
        scores[name] = stage_json(config.output, f"scores_{setting}_{name}.json", lambda: {
            r.id: s for r, s in zip(test, train_and_score(labelled[name], test, path, spec,
                                                           store))})
    return scores
