"""The lab world an experiment runs in, as one config: which problems (their seed and number of
operations) and how the lab policy slips. The lab's experiments (``prmkit demo``, ``prmkit lab
trace-error``, ``prmkit lab active-learning``) compose it into their own configs, each with its
own defaults, so every world setting is declared here once; their command lines flatten it into
the same options (``--seed``, ``--min-steps``, ``--max-steps``, ``--slip``, ``--confuse``).

An experiment's training problems come from ``seed`` and its test problems from
``seed + TEST_OFFSET``, so the two never share a problem set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prmkit.world.problems import LabConfig, make_problems

TEST_OFFSET = 1000


@dataclass
class WorldConfig:
    """The lab world's problems and the lab policy's slips."""

    seed: int = field(default=0, metadata={
        "help": "seed of the problems, the sampling and training"})
    min_steps: int = field(default=2, metadata={"help": "fewest operations per problem"})
    max_steps: int = field(default=5, metadata={"help": "most operations per problem"})
    slip: float = field(default=0.1, metadata={
        "help": "the lab policy's chance of a wrong add/sub calculation (mul/div: twice it)"})
    confuse: float = field(default=0.6, metadata={
        "help": "the lab policy's largest chance of confusing a problem's trap operation"})

    @property
    def policy(self) -> str:
        """The lab policy's name (``prmkit.world.policy.load_lab_policy`` reads it)."""
        return f"lab:{self.slip}:{self.confuse}"

    def problems(self, n: int, offset: int = 0) -> list[Any]:
        """``n`` lab problem records from ``seed + offset`` (``TEST_OFFSET`` for test ones)."""
        return make_problems(LabConfig(n=n, min_steps=self.min_steps, max_steps=self.max_steps,
                                       seed=self.seed + offset))
