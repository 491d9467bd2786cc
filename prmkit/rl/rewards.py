"""Rewards for RL trainers: the verifiable outcome, a PRM's judgement of the steps, or both.

:class:`ProcessReward` turns completions into rewards; it is itself TRL's reward function
(``GRPOTrainer``, ``RLOOTrainer``: ``reward(prompts, completions, **columns) -> list[float]``,
every dataset column but ``prompt`` passed as a keyword list; completions are strings or lists
of messages; as trl 1.13.0's ``GRPOTrainer._calculate_rewards`` calls it). verl's adapter is
:mod:`prmkit.rl.verl`; per-token rewards for PPO come from :mod:`prmkit.rl.shaping`, on the
step scores kept in :attr:`ProcessReward.last`.

Modes (``RewardConfig.mode``): ``outcome`` (1 if the final answer equals the reference, else 0),
``prm`` (the step scores aggregated, :mod:`prmkit.aggregate`), ``outcome+prm``
(``outcome_weight * outcome + prm_weight * prm``).

The problem is the ``problem`` column, else the last user message of a conversational prompt,
else the prompt; the reference is the first of the columns ``reference``, ``answer``,
``solution``, ``ground_truth`` (``#### 42`` or ``\\boxed{}`` extracted). The completion is cut by
``step_rule``. No steps, or no step the PRM could read, gives PRM score 0, so a policy cannot
escape the PRM by writing past its context. The PRM is any :class:`prmkit.models.base.PRM`;
:class:`prmkit.models.backends.remote.RemotePRM` lets several trainer processes share one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from prmkit.errors import PrmkitError

MODES = ("outcome", "prm", "outcome+prm")
REFERENCE_COLUMNS = ("reference", "answer", "solution", "ground_truth")


@dataclass
class RewardConfig:
    """How a completion becomes a reward."""

    mode: str = field(default="outcome+prm", metadata={
        "help": "outcome (1 if the answer is right), prm (aggregated step scores), or "
                "outcome+prm (weighted sum)"})
    aggregate: str = field(default="min", metadata={
        "help": "how step scores become one PRM score: min, prod, mean, last, geomean"})
    outcome_weight: float = field(default=1.0, metadata={"help": "weight of the outcome reward"})
    prm_weight: float = field(default=1.0, metadata={"help": "weight of the PRM reward"})
    step_rule: str = field(default="lines", metadata={
        "help": "how a completion is cut into steps: lines, blank-lines, step-markers, auto"})

    def __post_init__(self) -> None:
        from prmkit.aggregate import AGGREGATES
        from prmkit.steps import RULES

        if self.mode not in MODES:
            raise PrmkitError(f"reward mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.aggregate not in AGGREGATES:
            raise PrmkitError(f"aggregate {self.aggregate!r} is not one of {', '.join(AGGREGATES)}")
        if self.step_rule not in RULES:
            raise PrmkitError(f"step rule {self.step_rule!r} is not one of {', '.join(RULES)}")

    @property
    def uses_prm(self) -> bool:
        return self.mode != "outcome"

    @property
    def uses_outcome(self) -> bool:
        return self.mode != "prm"


@dataclass
class Scored:
    """One completion as the reward saw it."""

    text: str
    steps: list[str]
    spans: list[tuple[int, int]]           # character spans of the steps in ``text``
    step_scores: list[float | None] | None  # None when the mode uses no PRM
    correct: bool | None                   # None when there is no reference
    prm: float | None
    reward: float


def completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string, or a list of messages (the assistant's)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        contents = [m.get("content") for m in completion
                    if isinstance(m, dict) and m.get("role", "assistant") == "assistant"]
        return "".join(c for c in contents if isinstance(c, str))
    raise PrmkitError(f"a completion must be a string or a list of messages, got "
                      f"{type(completion).__name__}")


def problem_text(prompt: Any) -> str:
    """The problem in a prompt: the last user message of a conversation, else the string."""
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if users and isinstance(users[-1], str):
            return users[-1]
        raise PrmkitError("a conversational prompt has no user message to take the problem from")
    if isinstance(prompt, str):
        return prompt
    raise PrmkitError(f"a prompt must be a string or a list of messages, got {type(prompt).__name__}")


def reference_answer(reference: Any) -> str | None:
    """The final answer inside a reference (``#### 42``, ``\\boxed{42}``), else the text."""
    from prmkit.answers import extract_answer

    if reference is None:
        return None
    text = str(reference)
    return extract_answer(text) or text.strip() or None


class ProcessReward:
    """Completions -> rewards with a PRM and/or the reference answer (see the module docstring).

    ``last`` holds the :class:`Scored` completions of the latest call, in order, for step-level
    shaping and diagnostics. ``on_score`` (optional) is called with each batch of them.
    """

    def __init__(self, prm: Any = None, config: RewardConfig | None = None,
                 on_score: Callable[[list[Scored], dict[str, Any]], None] | None = None):
        self.config = config or RewardConfig()
        if self.config.uses_prm and prm is None:
            raise PrmkitError(f"reward mode {self.config.mode!r} needs a PRM")
        self.prm = prm
        self.on_score = on_score
        self.last: list[Scored] = []
        self._key: tuple[Any, ...] | None = None  # the inputs of ``last``
        # TRL logs each reward function under its __name__
        self.__name__ = "prmkit_" + self.config.mode.replace("+", "_")

    # -- TRL ------------------------------------------------------------------------------------
    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        problems = kwargs.get("problem") or [problem_text(p) for p in prompts]
        refs = next((kwargs[c] for c in REFERENCE_COLUMNS if c in kwargs), None)
        if refs is None and self.config.uses_outcome:
            raise PrmkitError(f"reward mode {self.config.mode!r} needs the reference answer: the "
                              f"dataset needs a column named one of {', '.join(REFERENCE_COLUMNS)}")
        texts = [completion_text(c) for c in completions]
        key = (tuple(str(p) for p in problems), tuple(texts),
               None if refs is None else tuple(str(r) for r in refs))
        if key != self._key:  # a second reward part of the same batch reuses the scores
            self.score(list(key[0]), texts, refs)
            log_metric = kwargs.get("log_metric")
            if callable(log_metric):
                for name, value in batch_metrics(self.last).items():
                    log_metric(f"prmkit/{name}", value)
            if self.on_score is not None:
                self.on_score(self.last, kwargs)
        self._key = key
        return [s.reward for s in self.last]

    # -- the scorer -----------------------------------------------------------------------------
    def score(self, problems: Sequence[str], texts: Sequence[str],
              references: Sequence[Any] | None = None) -> list[Scored]:
        """Score completions of ``problems``; ``references`` are the known answers (or None)."""
        from prmkit.aggregate import aggregate
        from prmkit.answers import extract_answer, is_equivalent
        from prmkit.rl.shaping import step_spans

        if len(problems) != len(texts) or (references is not None and len(references) != len(texts)):
            raise PrmkitError(f"{len(problems)} problems, {len(texts)} completions and "
                              f"{len(references) if references is not None else 0} references")
        cfg = self.config
        spans = [step_spans(t, cfg.step_rule) for t in texts]
        steps = [[t[a:b] for a, b in sp] for t, sp in zip(texts, spans)]
        step_scores: list[list[float | None] | None] = [None] * len(texts)
        if cfg.uses_prm:
            todo = [i for i, s in enumerate(steps) if s]
            got = self.prm.score([problems[i] for i in todo], [steps[i] for i in todo]) if todo else []
            for i, s in zip(todo, got):
                step_scores[i] = s
            for i, s in enumerate(steps):
                if not s:
                    step_scores[i] = []
        out = []
        for i, text in enumerate(texts):
            ref = reference_answer(references[i]) if references is not None else None
            correct = None if ref is None else is_equivalent(extract_answer(text), ref)
            prm = None
            if cfg.uses_prm:
                kept = [x for x in step_scores[i] or [] if x is not None]
                prm = aggregate(kept, cfg.aggregate) if kept else 0.0
            reward = 0.0
            if cfg.uses_outcome:
                reward += cfg.outcome_weight * float(bool(correct))
            if cfg.uses_prm:
                reward += cfg.prm_weight * float(prm)  # type: ignore[arg-type]
            out.append(Scored(text, steps[i], spans[i], step_scores[i], correct, prm, reward))
        self.last, self._key = out, None
        return out


class RewardPart:
    """One term of a :class:`ProcessReward` as its own TRL reward function: ``outcome`` (0/1)
    or ``prm`` (the aggregated PRM score). Give TRL several parts with ``reward_weights``; the
    PRM scores each batch once, and TRL logs every part under its own name (a part with weight
    0 is logged but does not train)."""

    def __init__(self, reward: ProcessReward, part: str):
        if part not in ("outcome", "prm"):
            raise PrmkitError(f"reward part {part!r} is not outcome or prm")
        if part == "prm" and not reward.config.uses_prm:
            raise PrmkitError("reward part 'prm' needs a ProcessReward that uses a PRM")
        self.reward, self.part = reward, part
        self.__name__ = f"prmkit_{part}"

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        self.reward(prompts, completions, **kwargs)
        if self.part == "outcome":
            return [float(bool(s.correct)) for s in self.reward.last]
        return [float(s.prm) if s.prm is not None else 0.0 for s in self.reward.last]


def open_prm(model: str, token: str | None = None) -> Any:
    """A PRM by name: ``lab-gold`` (the lab world's exact step labels, for lab problems), the
    URL of a running ``prmkit serve``, or a local model folder / default model name."""
    if model == "lab-gold":
        from prmkit.world import GoldPRM

        return GoldPRM()
    from prmkit.models.load import open_prm as open_model

    return open_model(model, token)  # no token: $PRMKIT_TOKEN (models/backends/remote.py)


def batch_metrics(scored: Sequence[Scored]) -> dict[str, float]:
    """Means over a batch: reward, PRM score, accuracy, length in characters, steps."""
    def mean(xs: list[float]) -> float:
        return math.fsum(xs) / len(xs) if xs else float("nan")

    out = {"reward": mean([s.reward for s in scored]),
           "length_chars": mean([float(len(s.text)) for s in scored]),
           "steps": mean([float(len(s.steps)) for s in scored])}
    prm = [s.prm for s in scored if s.prm is not None]
    acc = [float(s.correct) for s in scored if s.correct is not None]
    if prm:
        out["prm"] = mean(prm)
    if acc:
        out["accuracy"] = mean(acc)
    return out
