"""Graded candidate solutions of lab problems, sampled by a lab policy: the experiments' first
stage (the lab world itself, :mod:`prmkit.world`, sits below generation; this runs it).

:func:`split_of` makes an experiment's training and test problems from its
:class:`prmkit.world.config.WorldConfig`; the training candidates are sampled from the world's
seed, the test ones from seed + 1."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.world.config import TEST_OFFSET, WorldConfig


def candidates_of(problems: Sequence[Any], n: int, policy: Any, prompter: Any, name: str,
                  seed: int) -> list[Any]:
    """``n`` graded candidate records of each lab problem record, sampled by ``policy`` (named
    ``name`` in their meta) from ``seed``, one step per line."""
    from prmkit.generate.run import Problem as Asked, candidate_record
    from prmkit.generate.stepwise import solve

    sols = solve(policy, prompter, [p.problem for p in problems], n=n, seed=seed)
    meta = {"policy": name, "seed": seed}
    return [candidate_record(Asked(p.id, p.problem, p.reference), k, s, prompter.rule, meta)
            for p, row in zip(problems, sols) for k, s in enumerate(row)]


@dataclass
class SplitConfig:
    """How many problems and candidates an experiment trains and tests on."""

    train_problems: int = field(default=100, metadata={"help": "lab problems to train on"})
    train_n: int = field(default=4, metadata={"help": "candidates per training problem"})
    test_problems: int = field(default=200, metadata={
        "help": "lab problems for best-of-N (docs/lab.md: the power its claims need)"})
    n: int = field(default=8, metadata={"help": "candidates per test problem (the largest N)"})


@dataclass
class Split:
    """An experiment's training and test problems, and the lab policy that answers them."""

    seed: int
    policy_name: str
    policy: Any
    prompter: Any
    train_problems: list[Any]
    test_problems: list[Any]

    def train(self, n: int) -> list[Any]:
        """``n`` candidates of each training problem."""
        return candidates_of(self.train_problems, n, self.policy, self.prompter,
                             self.policy_name, self.seed)

    def test(self, n: int) -> list[Any]:
        """``n`` candidates of each test problem."""
        return candidates_of(self.test_problems, n, self.policy, self.prompter,
                             self.policy_name, self.seed + 1)


def split_of(world: WorldConfig, train_problems: int, test_problems: int,
             policy: str | None = None) -> Split:
    """The split of ``world``: its training and test problems, and the lab policy ``policy``
    (default: the world's own, ``world.policy``)."""
    from prmkit.world.policy import load_lab_policy

    name = policy or world.policy
    lab_policy, prompter = load_lab_policy(name)
    return Split(world.seed, name, lab_policy, prompter, world.problems(train_problems),
                 world.problems(test_problems, TEST_OFFSET))
