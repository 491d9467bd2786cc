"""Consensus filtering: keep the records where Monte Carlo labels and an LLM judge agree.

Zhang et al. (2025, "The Lessons of Developing Process Reward Models in Mathematical
Reasoning", Qwen) found Monte Carlo step labels noisy and an LLM judge imperfect, and that a
PRM trained only on the solutions where both name the same first wrong step (or both find
none) beats one trained on either alone, with far less data.

:func:`consensus` matches records by ``id``. A record is

* **kept** when both files have it, both give a ``first_error``, and the two are equal;
* **dropped** when both give a ``first_error`` and they differ;
* **missing** when one file lacks the id, or gives no ``first_error`` (an unparseable judge
  output, an unlabelled record).

A kept record is the Monte Carlo record (its ``meta["mc"]`` counts intact) with the judge's
``meta["judge"]`` added and ``labels`` from the agreed first error (1 before, 0 at it, null
after), or with the Monte Carlo labels kept (``labels="mc"``, e.g. per-step soft values).
Output order is the Monte Carlo file's. The same id with different steps in the two files is
an error: the labels would be of different solutions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from prmkit.errors import PrmkitError
from prmkit.records import Record, labels_from_first_error

LABELS = ("first-error", "mc")


@dataclass
class ConsensusSummary:
    kept: int = 0
    dropped: int = 0
    missing_mc: int = 0          # ids only in the judge file, or without an MC first error
    missing_judge: int = 0       # ids only in the MC file, or without a judge verdict

    @property
    def missing(self) -> int:
        return self.missing_mc + self.missing_judge

    def line(self) -> str:
        agreed = self.kept + self.dropped
        rate = f" ({100 * self.kept / agreed:.1f}% of the {agreed} judged by both)" if agreed else ""
        return (f"kept {self.kept}, dropped {self.dropped} (first errors differ), missing "
                f"{self.missing} (no MC label: {self.missing_mc}, no judge verdict: "
                f"{self.missing_judge}){rate}")


def consensus(mc: Sequence[Record], judge: Sequence[Record],
              labels: str = "first-error") -> tuple[list[Record], ConsensusSummary]:
    """The records both labelers agree on, and the counts (see the module docstring)."""
    if labels not in LABELS:
        raise PrmkitError(f"labels {labels!r} is not one of {', '.join(LABELS)}")
    verdicts = {r.id: r for r in judge}
    summary = ConsensusSummary()
    kept: list[Record] = []
    mc_ids = set()
    for rec in mc:
        mc_ids.add(rec.id)
        other = verdicts.get(rec.id)
        if other is None or other.first_error is None:
            summary.missing_judge += 1
            continue
        if other.steps != rec.steps:
            raise PrmkitError(f"record {rec.id!r} has different steps in the two files")
        if rec.first_error is None:
            summary.missing_mc += 1
            continue
        if rec.first_error != other.first_error:
            summary.dropped += 1
            continue
        out = Record.from_dict(rec.to_dict())
        if labels == "first-error":
            out.labels = labels_from_first_error(len(out.steps), out.first_error)
        if "judge" in other.meta:
            out.meta["judge"] = other.meta["judge"]
        kept.append(out)
        summary.kept += 1
    summary.missing_mc += sum(1 for rid in verdicts if rid not in mc_ids)
    return kept, summary
