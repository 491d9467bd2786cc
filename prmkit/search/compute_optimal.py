"""Compute-optimal test-time search: choose the method and its width by problem difficulty
(Snell et al. 2024, "Scaling LLM Test-Time Compute Optimally can be More Effective than Scaling
Model Parameters", section 5: no search method is best everywhere, and choosing per problem by
estimated difficulty matches best-of-N with up to 4x less compute). The recipe:

1. **Estimate difficulty** without a reference: 1 - the mean aggregated PRM score of
   ``probe_n`` sampled solutions (:func:`estimate_difficulty`), or 1 - the share of the most
   common answer (``by="agreement"``).
2. **Bin** the problems into ``n_bins`` quantiles (bin 0: the easiest).
3. **Choose per bin** the most accurate strategy (method, width ``n``, beam width ``m``) at the
   same budget; ties to fewer generated tokens, then the earlier strategy.
4. **Report** accuracy at matched budgets, cross-validated (two folds, as Snell et al.;
   stratified by bin: a problem's fold is its position in its bin modulo ``folds``).

The probe's tokens are reported beside the search's (``probe_tokens``): at small budgets it can
cost as much as the search.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from prmkit.aggregate import aggregate
from prmkit.errors import PrmkitError
from prmkit.records import Record
from prmkit.models.base import PRM


@dataclass(frozen=True)
class Strategy:
    """One way to spend a budget: a search method with its width ``n`` and beam width ``m``."""

    method: str
    n: int
    m: int = 4

    @property
    def name(self) -> str:
        return self.method if self.method == "best-of-n" else f"{self.method}(m={self.m})"


@dataclass
class Outcome:
    """One problem under one strategy: was the selected answer right, and what it cost."""

    correct: bool
    tokens: int


@dataclass
class Report:
    """Compute-optimal results at one budget."""

    accuracy: float                               # cross-validated
    tokens: float                                 # mean generated tokens per problem (search only)
    choice: dict[int, str] = field(default_factory=dict)   # per bin, chosen on all problems
    per_strategy: dict[str, tuple[float, float]] = field(default_factory=dict)  # accuracy, tokens
    per_bin: dict[int, dict[str, float]] = field(default_factory=dict)          # bin -> name -> accuracy


def difficulty(records: Sequence[Record], by: str = "prm", how: str = "last") -> dict[str, float]:
    """Estimated difficulty per group (problem id) in [0, 1] from scored candidates.

    ``by="prm"``: 1 - the mean over candidates of the PRM score aggregated with ``how``;
    ``by="agreement"``: 1 - the share of candidates that give the most common answer.
    """
    from prmkit.select import groups, vote_key

    out: dict[str, float] = {}
    for group in groups(list(records)):
        key = group[0].group or group[0].id
        if by == "prm":
            values = [aggregate(r.step_scores, how) for r in group
                      if r.step_scores and any(s is not None for s in r.step_scores)]
            out[key] = 1.0 - sum(values) / len(values) if values else 1.0
        elif by == "agreement":
            votes: dict[str, int] = {}
            for r in group:
                k = vote_key(r)
                if k is not None:
                    votes[k] = votes.get(k, 0) + 1
            out[key] = 1.0 - (max(votes.values()) / len(group) if votes else 0.0)
        else:
            raise PrmkitError(f"difficulty by {by!r}: use prm or agreement")
    return out


def difficulty_bins(values: dict[str, float], n_bins: int) -> dict[str, int]:
    """Quantile bins of the estimates: the easiest ``1/n_bins`` of the problems in bin 0, and
    so on (ties in order of the problem ids, so the split is deterministic)."""
    if n_bins < 1:
        raise PrmkitError(f"n_bins must be positive, got {n_bins}")
    order = sorted(values, key=lambda pid: (values[pid], pid))
    return {pid: min(n_bins - 1, rank * n_bins // len(order)) for rank, pid in enumerate(order)}


def choose(outcomes: dict[str, dict[str, Outcome]], bins: dict[str, int],
           pids: Sequence[str]) -> dict[int, str]:
    """Per bin, the strategy (key of ``outcomes``) most accurate on ``pids`` of that bin; ties
    go to fewer tokens, then to the strategy listed first."""
    names = list(outcomes)
    chosen: dict[int, str] = {}
    for b in sorted(set(bins.values())):
        mine = [p for p in pids if bins[p] == b]
        if not mine:
            continue

        def key(i: int) -> tuple[float, float, int]:
            rows = [outcomes[names[i]][p] for p in mine]
            return (-sum(r.correct for r in rows) / len(rows), sum(r.tokens for r in rows) / len(rows), i)

        chosen[b] = names[min(range(len(names)), key=key)]
    return chosen


def compute_optimal(outcomes: dict[str, dict[str, Outcome]], bins: dict[str, int],
                    folds: int = 2) -> Report:
    """Cross-validated accuracy of choosing the strategy per difficulty bin (see the module
    docstring). ``outcomes[strategy][problem id]``; every strategy must cover every problem."""
    if not outcomes:
        raise PrmkitError("compute-optimal selection needs at least one strategy")
    pids = list(bins)
    for name, rows in outcomes.items():
        missing = [p for p in pids if p not in rows]
        if missing:
            raise PrmkitError(f"strategy {name!r} has no outcome for problem {missing[0]!r}")
    if folds < 2:
        raise PrmkitError(f"folds must be at least 2, got {folds}")
    fold_of: dict[str, int] = {}
    for b in sorted(set(bins.values())):
        for i, p in enumerate(p for p in pids if bins[p] == b):
            fold_of[p] = i % folds
    correct, tokens = 0, 0
    for f in range(folds):
        train = [p for p in pids if fold_of[p] != f]
        chosen = choose(outcomes, bins, train)
        fallback = choose(outcomes, {p: 0 for p in pids}, train).get(0, next(iter(outcomes)))
        for p in (p for p in pids if fold_of[p] == f):
            row = outcomes[chosen.get(bins[p], fallback)][p]
            correct += row.correct
            tokens += row.tokens
    report = Report(correct / len(pids), tokens / len(pids), choose(outcomes, bins, pids))
    for name, rows in outcomes.items():
        report.per_strategy[name] = (sum(rows[p].correct for p in pids) / len(pids),
                                     sum(rows[p].tokens for p in pids) / len(pids))
        for b in sorted(set(bins.values())):
            mine = [p for p in pids if bins[p] == b]
            report.per_bin.setdefault(b, {})[name] = sum(rows[p].correct for p in mine) / len(mine)
    return report


def outcomes_of(records: Sequence[Record]) -> dict[str, Outcome]:
    """Per problem: the selected candidate's correctness and the problem's generated tokens
    (from a search's records: ``meta.selected`` and ``meta.compute``)."""
    out: dict[str, Outcome] = {}
    for r in records:
        if r.meta.get("selected"):
            out[r.group or r.id] = Outcome(bool(r.is_correct),
                                           int(r.meta.get("compute", {}).get("tokens_generated", 0)))
    return out


def estimate_difficulty(problems: Sequence[Any], generator: Any, prompter: Any, prm: PRM,
                        probe_n: int = 4, by: str = "prm", config: Any = None
                        ) -> tuple[dict[str, float], dict[str, int]]:
    """Difficulty per problem from ``probe_n`` sampled solutions scored by ``prm``, and the
    tokens the probe generated per problem."""
    from dataclasses import replace

    from prmkit.search.base import SearchConfig
    from prmkit.search.best_of_n import best_of_n

    config = replace(config or SearchConfig(), n=probe_n)
    result = best_of_n(problems, generator, prompter, prm, config)
    tokens = {pid: c.tokens_generated for pid, c in result.account.per_problem.items()}
    return difficulty(result.records, by=by, how=config.aggregate), tokens
