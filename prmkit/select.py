"""Choose one candidate solution per problem (best-of-N), and measure how often it is right.

Candidates for the same problem share ``Record.group``; a record whose group is None is a group
of its own. :func:`select` returns one chosen record per group, in order of first appearance.

Methods:

``prm-prod``, ``prm-min``, ``prm-last``, ``prm-mean``, ``prm-geomean``
    The candidate whose ``step_scores``, aggregated (:func:`prmkit.aggregate.aggregate`), score
    highest (Lightman et al. 2023, "Let's Verify Step by Step": product and minimum;
    Math-Shepherd, Wang et al. 2023: minimum). Needs ``step_scores``.
``orm``
    The highest ``meta["outcome_score"]``, an outcome reward model's score (Cobbe et al. 2021).
``majority``
    Self-consistency (Wang et al. 2022): the most frequent final answer, grouped by their
    normalised form (``1,600`` and ``1600`` are one answer); ``Record.answer``, else extracted
    from the last step; candidates without an answer do not vote. The first candidate with
    that answer is chosen.
``weighted-majority``
    Verifier-weighted voting (Uesato et al. 2022; Li et al. 2023): each answer scores the sum of
    its candidates' PRM scores aggregated by ``weight_by``; its highest-scoring candidate is
    chosen. Needs ``step_scores``.
``filtered-majority``
    Majority voting among the candidates with no step scored below ``threshold`` (the PRM
    predicts no error in them); a group where every candidate has such a step votes whole.
    Needs ``step_scores``; the threshold is the one saved with the PRM (``prmkit select``).
``oracle``
    Pass@N: the first correct candidate, else the first. Needs ``is_correct``.

Ties: best-of-N goes to the earlier candidate; ``majority`` to the answer that appears first;
``weighted-majority`` to the larger total, then more votes, then first appearance. A group with
no answer at all gets its first (``majority``) or highest-scoring (``weighted-majority``)
candidate. ``prmkit eval bestofn`` breaks ties in each draw's random order instead.
"""

from __future__ import annotations

import math
from typing import Callable

from prmkit import answers
from prmkit.aggregate import AGGREGATES, aggregate
from prmkit.errors import PrmkitError
from prmkit.records import Record

METHODS = ("prm-prod", "prm-min", "prm-last", "prm-mean", "prm-geomean", "orm",
           "majority", "weighted-majority", "oracle")
# methods that read a first-error threshold (not in METHODS: `eval bestofn` tries METHODS)
THRESHOLD_METHODS = ("filtered-majority",)


def select(records: list[Record], method: str, weight_by: str = "prod",
           threshold: float = 0.5) -> list[Record]:
    """One chosen record per group, in order of each group's first appearance.

    ``method`` is one of :data:`METHODS` or :data:`THRESHOLD_METHODS`; ``weight_by`` (one of
    :data:`prmkit.aggregate.AGGREGATES`) is the PRM aggregate that weights the votes of
    ``weighted-majority``; ``threshold`` is the step score below which ``filtered-majority``
    drops a candidate. Raises :class:`~prmkit.errors.PrmkitError`, naming the record, when
    a candidate lacks what the method needs.
    """
    if method in THRESHOLD_METHODS:
        return [_choose_filtered_majority(group, threshold) for group in groups(records)]
    if method not in METHODS:
        raise PrmkitError(f"unknown selection method {method!r} "
                          f"(known: {', '.join(METHODS + THRESHOLD_METHODS)})")
    if weight_by not in AGGREGATES:
        raise PrmkitError(f"unknown weight_by aggregate {weight_by!r} "
                          f"(known: {', '.join(AGGREGATES)})")
    choose = _CHOOSERS[method]
    return [choose(group, weight_by) for group in groups(records)]


def groups(records: list[Record]) -> list[list[Record]]:
    """Records grouped by ``group`` (None: a group of one), in order of first appearance."""
    by_key: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        key = ("group", r.group) if r.group is not None else ("id", r.id)
        by_key.setdefault(key, []).append(r)
    return list(by_key.values())


def accuracy(chosen: list[Record]) -> float | None:
    """The fraction of chosen records with ``is_correct`` True.

    None when it cannot be told: a chosen record lacks ``is_correct``, or the list is empty.
    """
    if not chosen or any(r.is_correct is None for r in chosen):
        return None
    return sum(r.is_correct is True for r in chosen) / len(chosen)


# ---------------------------------------------------------------------------------------------
# what each method reads from a candidate


def prm_score(record: Record, how: str) -> float:
    """The record's step scores aggregated with ``how``; a PrmkitError naming it if absent."""
    if record.step_scores is None:
        raise PrmkitError(f"record {record.id!r}: no step_scores to select by; "
                          f"run `prmkit score` first")
    try:
        return aggregate(record.step_scores, how)
    except PrmkitError as e:
        raise PrmkitError(f"record {record.id!r}: {e}") from None


def orm_score(record: Record) -> float:
    score = record.meta.get("outcome_score")
    if score is None:
        raise PrmkitError(f"record {record.id!r}: no meta['outcome_score'] (an outcome reward "
                          f"model's score for the whole solution) to select by")
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        raise PrmkitError(f"record {record.id!r}: meta['outcome_score'] is {score!r}, "
                          f"expected a finite number")
    return float(score)


def vote_key(record: Record) -> str | None:
    """The canonical key of the record's final answer, or None if it has none."""
    answer = record.answer
    if answer is None:
        answer = answers.extract_answer(record.steps[-1])
    if answer is None:
        return None
    return answers.answer_key(answer) or None  # an empty answer ("", "$ $") does not vote


# ---------------------------------------------------------------------------------------------
# the methods: each takes one group (non-empty, in input order) and weight_by


def _best(group: list[Record], score: Callable[[Record], float]) -> Record:
    """The highest-scoring candidate; ties go to the earliest."""
    scores = [score(r) for r in group]
    return group[_argmax(scores)]


def _argmax(scores: list[float]) -> int:
    """The index of the highest score; ties go to the earliest (``max`` keeps the first)."""
    return max(range(len(scores)), key=scores.__getitem__)


def _choose_prm(how: str) -> Callable[[list[Record], str], Record]:
    return lambda group, weight_by: _best(group, lambda r: prm_score(r, how))


def _choose_orm(group: list[Record], weight_by: str) -> Record:
    return _best(group, orm_score)


def _choose_majority(group: list[Record], weight_by: str) -> Record:
    keys = [vote_key(r) for r in group]
    counts: dict[str, int] = {}  # answer key -> votes, in order of first appearance
    for k in keys:
        if k is not None:
            counts[k] = counts.get(k, 0) + 1
    if not counts:
        return group[0]
    winner = max(counts, key=counts.__getitem__)  # ties: the first to appear (max keeps it)
    return group[keys.index(winner)]


def _choose_weighted_majority(group: list[Record], weight_by: str) -> Record:
    scores = [prm_score(r, weight_by) for r in group]
    keys = [vote_key(r) for r in group]
    weights: dict[str, list[float]] = {}  # answer key -> its candidates' scores
    for k, s in zip(keys, scores):
        if k is not None:
            weights.setdefault(k, []).append(s)
    if not weights:
        return group[_argmax(scores)]
    # ties: more votes, then the first to appear (max keeps it)
    winner = max(weights, key=lambda k: (math.fsum(weights[k]), len(weights[k])))
    members = [i for i, k in enumerate(keys) if k == winner]
    return group[max(members, key=scores.__getitem__)]


def _choose_filtered_majority(group: list[Record], threshold: float) -> Record:
    clean = [r for r in group if prm_score(r, "min") >= threshold]
    return _choose_majority(clean or group, "prod")


def _choose_oracle(group: list[Record], weight_by: str) -> Record:
    for r in group:
        if r.is_correct is None:
            raise PrmkitError(f"record {r.id!r}: no is_correct, which the oracle (pass@N) "
                              f"needs; grade the answers against the reference first")
    return next((r for r in group if r.is_correct), group[0])


_CHOOSERS: dict[str, Callable[[list[Record], str], Record]] = {
    "prm-prod": _choose_prm("prod"),
    "prm-min": _choose_prm("min"),
    "prm-last": _choose_prm("last"),
    "prm-mean": _choose_prm("mean"),
    "prm-geomean": _choose_prm("geomean"),
    "orm": _choose_orm,
    "majority": _choose_majority,
    "weighted-majority": _choose_weighted_majority,
    "oracle": _choose_oracle,
}
