"""The lab policy: a fast synthetic solver of lab problems, behind the ordinary Generator seam.

It reads a lab problem and the steps written so far from its prompt (the ``lab`` style; a
prompt without a lab problem is an error) and writes the rest, one calculation per line. Later
steps carry a wrong value on. Errors:

* **slips**: a result off by 1, 2 or 10, with chance ``slip`` per add/sub step and
  ``hard_factor`` times that for mul/div;
* **recoveries** (``recover``): after a slip, the next step carries on from the true result
  with this chance (Uesato et al. 2022's trace errors); gold labels still call the slip and
  every later step wrong;
* **confusions**: each problem has one trap operation, from a hash of its text, confused with
  a problem-specific chance between 0 and ``confuse``.

Loaded as ``--policy lab``, ``lab:SLIP``, ``lab:SLIP:CONFUSE`` or ``lab:SLIP:CONFUSE:RECOVER``.
Sample ``k`` draws from its own stream (:func:`prmkit.generate.base.sample_seed`);
``temperature`` scales the slip chance (``slip * temperature / 0.7``, capped at 0.9). A token
is a word (:func:`prmkit.generate.fake.count_tokens`).
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Sequence

from prmkit.errors import PrmkitError
from prmkit.generate.base import Completion, check_sampling, check_stop, sample_seed
from prmkit.generate.fake import FakeGenerator
from prmkit.generate.prompts import INSTRUCTION, PromptStyle, Prompter
from prmkit.world.problems import Problem, answer_text, apply, evaluate, load_problem, step_text

LAB_STYLE = PromptStyle(
    name="lab", description="lab world: the instruction, Question: / Answer:, one step per line",
    instruction=INSTRUCTION, end_strings=("\n\n", "\nQuestion:"))

NOMINAL_TEMPERATURE = 0.7
CONFUSED = {"add": "sub", "sub": "add", "mul": "div", "div": "mul"}
_NUMBER = r"-?\d+(?:\.\d+)?"


@dataclass
class LabPolicyConfig:
    """How often the lab policy slips."""

    slip: float = field(default=0.12, metadata={
        "help": "chance that one add/sub calculation is wrong at temperature 0.7"})
    hard_factor: float = field(default=2.0, metadata={
        "help": "mul/div calculations slip this many times as often"})
    confuse: float = field(default=0.6, metadata={
        "help": "the largest chance of confusing a problem's trap operation (each problem gets "
                "its own chance, uniform in [0, confuse), at temperature 0.7)"})
    recover: float = field(default=0.0, metadata={
        "help": "chance that the step after a slip carries on from the slipped calculation's "
                "true result, so the slip leaves the answer right (0: never)"})

    def __post_init__(self) -> None:
        if not 0.0 <= self.slip < 1.0 or self.hard_factor < 0 or not 0.0 <= self.confuse <= 1.0 \
                or not 0.0 <= self.recover <= 1.0:
            raise PrmkitError(f"lab policy: slip must be in [0, 1), hard_factor >= 0, confuse "
                              f"and recover in [0, 1], got {self.slip}, {self.hard_factor}, "
                              f"{self.confuse}, {self.recover}")


class LabPolicy:
    """A :class:`prmkit.generate.base.Generator` for lab problems (see the module docstring)."""

    def __init__(self, config: LabPolicyConfig | None = None):
        self.config = config or LabPolicyConfig()
        self.prompter = Prompter(LAB_STYLE)
        self.tokens_generated = 0
        self._fake = FakeGenerator(self._script)
        self._seed: int | None = 0
        self._temperature = NOMINAL_TEMPERATURE

    def generate(self, prompts: Sequence[str], n: int = 1, stop: Sequence[str] = (),
                 max_tokens: int = 256, temperature: float = 1.0, top_p: float = 1.0,
                 seed: int | None = None) -> list[list[Completion]]:
        check_sampling(n, max_tokens, temperature, top_p, seed)
        check_stop(stop)
        self._seed, self._temperature = seed, temperature
        out = self._fake.generate(prompts, n=n, stop=stop, max_tokens=max_tokens,
                                  temperature=temperature, top_p=top_p, seed=seed)
        self.tokens_generated += sum(c.n_tokens for row in out for c in row)
        return out

    def slip_chance(self, kind: str) -> float:
        base = self.config.slip * (self.config.hard_factor if kind in ("mul", "div") else 1.0)
        return min(0.9, base * self._temperature / NOMINAL_TEMPERATURE)

    def trap(self, problem: Problem) -> tuple[int, float]:
        """The problem's trap operation and the chance (at this temperature) of confusing it."""
        digest = hashlib.sha256(problem.text().encode("utf-8")).digest()
        index = int.from_bytes(digest[:4], "little") % len(problem.ops)
        share = int.from_bytes(digest[4:8], "little") / 2 ** 32
        chance = self.config.confuse * share * self._temperature / NOMINAL_TEMPERATURE
        return index, min(0.95, chance)

    def _script(self, prompt: str, k: int) -> str:
        """The rest of the solution after ``prompt``, as sample ``k`` would write it."""
        problem, written = self._read_prompt(prompt)
        if self._temperature == 0:
            k = 0
        rng = random.Random(sample_seed(self._seed, prompt, k))
        done = [line for line in written.split("\n") if line.strip()]
        if written and not written.endswith("\n"):
            raise PrmkitError("lab policy: a partial solution must end with a complete line")
        if len(done) > len(problem.ops):
            return ""                     # the answer line is written: the solution is over
        x = carried_value(problem, done)
        true = slipped_from(done)
        if true is not None and self.recovers(rng):      # the prefix ends in a slip
            x = true
        trap, confuse = self.trap(problem)
        lines = []
        for i in range(len(done), len(problem.ops)):
            op = problem.ops[i]
            kind = op.kind
            if i == trap and rng.random() < confuse:
                kind = CONFUSED[kind]
            y = apply(kind, x, op.k)
            if rng.random() < self.slip_chance(kind):
                wrong = slip(rng, y)
                lines.append(step_text(problem, i, x, wrong, kind))
                x = y if self.recovers(rng) else wrong
                continue
            lines.append(step_text(problem, i, x, y, kind))
            x = y
        lines.append(answer_text(x))
        return "\n".join(lines)

    def recovers(self, rng: random.Random) -> bool:
        """Whether the step after a slip carries on from the true result (no draw at 0)."""
        return bool(self.config.recover) and rng.random() < self.config.recover

    def _read_prompt(self, prompt: str) -> tuple[Problem, str]:
        head = prompt.rfind("Question: ")
        end = prompt.find("\nAnswer:\n", head)
        if head < 0 or end < 0:
            raise PrmkitError("lab policy: the prompt is not in the lab style "
                              "(Question: ... / Answer:)")
        return load_problem(prompt[head + len("Question: "):end]), prompt[end + len("\nAnswer:\n"):]


def carried_value(problem: Problem, steps: Sequence[str]):
    """The value a solution carries after ``steps``: the result of its last calculation
    (right or wrong), or the starting quantity before any."""
    for step in reversed(steps):
        found = re.findall(r"=\s*(" + _NUMBER + ")", step)
        if found:
            value = Fraction(found[-1])
            return int(value) if value.denominator == 1 else value
    return problem.start


def slipped_from(steps: Sequence[str]):
    """The true result of the last step's calculation when that step slipped (its stated
    result differs), else None: what a recovering policy carries on from."""
    if not steps:
        return None
    found = re.findall(r"=\s*(" + _NUMBER + ")", steps[-1])
    m = re.search(r"(" + _NUMBER + r")\s*([-+*/])\s*(" + _NUMBER + r")\s*=\s*(" + _NUMBER + ")",
                  steps[-1])
    if not found or m is None:
        return None
    true = evaluate(f"{m.group(1)} {m.group(2)} {m.group(3)}")
    if true is None or abs(float(true) - float(Fraction(m.group(4)))) <= 0.006:
        return None                 # right, up to the lab's 2-decimal rounding
    return int(true) if true.denominator == 1 else true


def slip(rng: random.Random, y):
    """A plausible wrong result near ``y``: off by a little, or off by ten."""
    while True:
        wrong = y + rng.choice((-10, -2, -1, 1, 2, 10))
        if wrong != y and (wrong > 0 or y <= -10):   # y <= -10: no positive value is near
            return wrong


def load_lab_policy(name: str = "lab") -> tuple[LabPolicy, Prompter]:
    """``(LabPolicy, its prompter)`` for a policy name ``lab``, ``lab:SLIP``,
    ``lab:SLIP:CONFUSE`` or ``lab:SLIP:CONFUSE:RECOVER`` (e.g. ``lab:0.2:0``; see
    :class:`LabPolicyConfig`)."""
    parts = name.split(":")[1:]
    try:
        if len(parts) > 3:
            raise ValueError
        values = dict(zip(("slip", "confuse", "recover"), (float(x) for x in parts)))
        config = LabPolicyConfig(**values)
    except (ValueError, PrmkitError):
        raise PrmkitError(f"policy {name!r}: write lab, lab:SLIP, lab:SLIP:CONFUSE or "
                          f"lab:SLIP:CONFUSE:RECOVER, with SLIP in [0, 1) and CONFUSE and "
                          f"RECOVER in [0, 1]") from None
    policy = LabPolicy(config)
    return policy, policy.prompter
