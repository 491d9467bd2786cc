"""Reward-hacking diagnostics for RL with a PRM.

DeepSeek-R1 (DeepSeek-AI 2025) gave reward hacking as one reason to drop PRMs from RL: a
policy learns what the PRM likes instead of solving the problem. The signature is a PRM reward
that keeps rising while the outcome accuracy falls, often with solutions getting longer or
gaining steps (a summed step reward pays for more steps; see :mod:`prmkit.rl.shaping`).

:class:`RewardLog` keeps, per training step, the mean PRM reward, the outcome accuracy, the
mean solution length and the mean number of steps, side by side (``rows``, written as JSONL).
:func:`hacking_flags` compares each window of ``window`` steps with the window before it and
flags the steps where the PRM reward rose by more than ``prm_rise`` while accuracy fell by more
than ``accuracy_drop``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from typing import Any, Sequence


@dataclass
class StepStats:
    """Means over the completions of one training step (None: not measured)."""

    step: int
    prm: float | None
    accuracy: float | None
    length: float
    n_steps: float
    n: int


@dataclass
class Flag:
    """A step where PRM reward rose while accuracy fell (window means, this window - previous)."""

    step: int
    prm_change: float
    accuracy_change: float

    def __str__(self) -> str:
        return (f"step {self.step}: PRM reward {self.prm_change:+.3f} while accuracy "
                f"{self.accuracy_change:+.3f} (possible reward hacking)")


def _mean(xs: Sequence[float]) -> float | None:
    return math.fsum(xs) / len(xs) if xs else None


class RewardLog:
    """Per-step statistics of scored completions (:class:`prmkit.rl.rewards.Scored`).

    ``length`` is measured in ``tokenizer`` tokens when a tokenizer is given, else in characters.
    Written line by line to ``path`` when one is given.
    """

    def __init__(self, path: str | None = None, tokenizer: Any = None):
        self.rows: list[StepStats] = []
        self.path, self.tokenizer = path, tokenizer

    def restart(self, step: int) -> None:
        """Start at ``step``: keep the rows of earlier steps in ``path`` (the steps a resumed
        trainer does not redo), drop the rest; ``step`` 0 starts a new log."""
        kept: dict[int, StepStats] = {}
        if step > 0 and self.path and os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                for line in f:
                    try:
                        row = StepStats(**json.loads(line))
                    except (ValueError, TypeError):
                        break  # a torn last line: that step is redone
                    if row.step < step:
                        kept[row.step] = row  # a merged step's later line replaces its earlier
        self.rows = [kept[s] for s in sorted(kept)]
        if self.path:
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(asdict(r)) + "\n" for r in self.rows)
            os.replace(tmp, self.path)

    def add(self, step: int, scored: Sequence[Any]) -> StepStats:
        def length(text: str) -> float:
            if self.tokenizer is None:
                return float(len(text))
            return float(len(self.tokenizer(text, add_special_tokens=False)["input_ids"]))

        row = StepStats(step=step,
                        prm=_mean([s.prm for s in scored if s.prm is not None]),
                        accuracy=_mean([float(bool(s.correct)) for s in scored
                                        if s.correct is not None]),
                        length=_mean([length(s.text) for s in scored]) or 0.0,
                        n_steps=_mean([float(len(s.steps)) for s in scored]) or 0.0,
                        n=len(scored))
        if self.rows and self.rows[-1].step == step:  # several reward calls in one step: merge
            prev = self.rows.pop()
            row = merge(prev, row)
        self.rows.append(row)
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(asdict(row)) + "\n")
        return row

    def flags(self, window: int = 5, prm_rise: float = 0.02,
              accuracy_drop: float = 0.02) -> list[Flag]:
        return hacking_flags(self.rows, window, prm_rise, accuracy_drop)


def merge(a: StepStats, b: StepStats) -> StepStats:
    """Two partial statistics of the same step, weighted by their counts."""
    def w(x: float | None, y: float | None) -> float | None:
        if x is None or y is None:
            return x if y is None else y
        return (x * a.n + y * b.n) / (a.n + b.n)

    return StepStats(a.step, w(a.prm, b.prm), w(a.accuracy, b.accuracy),
                     w(a.length, b.length) or 0.0, w(a.n_steps, b.n_steps) or 0.0, a.n + b.n)


def hacking_flags(rows: Sequence[StepStats], window: int = 5, prm_rise: float = 0.02,
                  accuracy_drop: float = 0.02) -> list[Flag]:
    """Steps whose window (this row and the ``window - 1`` before it) has a mean PRM reward more
    than ``prm_rise`` above the previous window's, and a mean accuracy more than
    ``accuracy_drop`` below it. Rows without a PRM reward or an accuracy are skipped."""
    if window < 1:
        raise ValueError("window must be at least 1")
    usable = [r for r in rows if r.prm is not None and r.accuracy is not None]
    flags = []
    for i in range(2 * window - 1, len(usable)):
        now, before = usable[i - window + 1:i + 1], usable[i - 2 * window + 1:i - window + 1]
        d_prm = _mean([r.prm for r in now]) - _mean([r.prm for r in before])  # type: ignore[operator,misc]
        d_acc = _mean([r.accuracy for r in now]) - _mean([r.accuracy for r in before])  # type: ignore[operator,misc]
        if d_prm > prm_rise and d_acc < -accuracy_drop:
            flags.append(Flag(usable[i].step, d_prm, d_acc))
    return flags


def table(rows: Sequence[StepStats]) -> str:
    """The log side by side, one line per step."""
    def f(x: float | None) -> str:
        return "   -  " if x is None else f"{x:6.3f}"

    lines = ["  step   prm reward  accuracy  length  steps"]
    for r in rows:
        lines.append(f"{r.step:6d}  {f(r.prm)}      {f(r.accuracy)}  {r.length:6.1f}  {r.n_steps:5.2f}")
    return "\n".join(lines)
