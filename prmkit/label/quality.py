"""How good automatic step labels are: a comparison with gold labels where they exist.

Gold labels come from people or from exact checking: ProcessBench's first errors (``prmkit
convert --from processbench``), PRM800K's human step ratings (``--from prm800k``), or the lab
world's exact step check (:func:`prmkit.world.gold_labels`, ``gold="lab"``). Records are matched
by ``id``; one report row per labeling method, read from the records' ``meta``: Monte Carlo
(strategy, mode, rollouts K, threshold) or the judge (model, samples).

Figures per method (percentages; ``None`` where there is nothing to take them over):

records
    labelled records that have gold (``no_gold`` counts those without).
first_error_agreement
    the share of records whose first error equals the gold first error (records where either is
    unknown are left out and counted in ``unknown``).
error_acc / correct_acc / f1
    ProcessBench's figures for the labels as predictions (:func:`prmkit.evaluate.processbench.
    split_metrics`): accuracy on solutions with a gold error, on solutions without, and their
    harmonic mean.
step_agreement
    the share of steps, labelled in both, whose verdict agrees: a gold step is right when its
    label is at least 0.5; a Monte Carlo label is right when it is above the record's
    threshold (``meta["mc"]``), any other label when it is at least 0.5.
rollouts_per_record
    completions sampled per record (``meta["mc"]["rollouts_spent"]``; Monte Carlo only).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from prmkit.evaluate.common import mean_or_none, pct, print_table
from prmkit.evaluate.processbench import split_metrics
from prmkit.records import Record, first_error_from_labels


@dataclass
class LabelQuality:
    method: str
    records: int
    no_gold: int
    unknown: int
    first_error_agreement: float | None
    error_acc: float | None
    correct_acc: float | None
    f1: float | None
    steps: int
    step_agreement: float | None
    rollouts_per_record: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def method_of(rec: Record) -> str:
    """The labeling method a record's ``meta`` names (``labels`` when it names none)."""
    mc = rec.meta.get("mc")
    if isinstance(mc, dict):
        extra = f" t={mc.get('threshold')}" if mc.get("threshold") else ""
        return f"mc {mc.get('strategy')} {mc.get('mode')} K={mc.get('rollouts')}{extra}"
    judge = rec.meta.get("judge")
    if isinstance(judge, dict):
        return f"judge {judge.get('model') or ''} x{judge.get('samples')}".replace("  ", " ")
    return "labels"


def gold_first_error(rec: Record) -> int | None:
    if rec.first_error is not None:
        return rec.first_error
    return None if rec.labels is None else first_error_from_labels(rec.labels)


def _right(label: float, rec: Record) -> bool:
    mc = rec.meta.get("mc")
    if isinstance(mc, dict) and mc.get("threshold") is not None:
        return label > mc["threshold"]
    return label >= 0.5


def label_quality(labelled: Sequence[Record], gold: Mapping[str, Record]) -> list[LabelQuality]:
    """One :class:`LabelQuality` per method in ``labelled``, against ``gold`` (by id)."""
    groups: dict[str, list[Record]] = {}
    for rec in labelled:
        groups.setdefault(method_of(rec), []).append(rec)
    return [_quality(method, recs, gold) for method, recs in groups.items()]


def _quality(method: str, records: Sequence[Record], gold: Mapping[str, Record]) -> LabelQuality:
    with_gold = [(r, gold[r.id]) for r in records if r.id in gold]
    pairs = [(gold_first_error(g), r.first_error) for r, g in with_gold]
    known = [(y, p) for y, p in pairs if y is not None and p is not None]
    metrics = split_metrics([y for y, _ in known], [p for _, p in known])
    agree: list[bool] = []
    for r, g in with_gold:
        ours, theirs = r.labels_or_first_error(), g.labels_or_first_error()
        if ours is None or theirs is None:
            continue
        agree += [_right(a, r) == (b >= 0.5) for a, b in zip(ours, theirs)
                  if a is not None and b is not None]
    spent = [r.meta["mc"]["rollouts_spent"] for r, _ in with_gold
             if isinstance(r.meta.get("mc"), dict) and "rollouts_spent" in r.meta["mc"]]
    return LabelQuality(
        method=method, records=len(with_gold), no_gold=len(records) - len(with_gold),
        unknown=len(pairs) - len(known),
        first_error_agreement=100.0 * sum(y == p for y, p in known) / len(known) if known else None,
        error_acc=metrics.error_acc, correct_acc=metrics.correct_acc, f1=metrics.f1,
        steps=len(agree), step_agreement=100.0 * sum(agree) / len(agree) if agree else None,
        rollouts_per_record=mean_or_none(spent))


def print_quality(rows: Sequence[LabelQuality], file: Any = None) -> None:
    """The report as a table (percentages with one decimal)."""
    print_table(["method", "records", "first err agree", "err acc", "correct acc", "F1",
                 "step agree", "rollouts/rec", "unknown", "no gold"],
                [[q.method, q.records, pct(q.first_error_agreement), pct(q.error_acc),
                  pct(q.correct_acc), pct(q.f1), pct(q.step_agreement),
                  "-" if q.rollouts_per_record is None else f"{q.rollouts_per_record:.1f}",
                  q.unknown, q.no_gold] for q in rows], file=file)
