"""MATH (and its 500-problem subset MATH-500): competition problems with written solutions.

Source: Hendrycks et al., "Measuring Mathematical Problem Solving With the MATH Dataset"
(2021); MATH-500 is the test subset of Lightman et al., "Let's Verify Step by Step" (2023),
``prm800k/math_splits/test.jsonl`` (e.g. the copy in github.com/openreasoner/openr).

JSONL, one problem per line::

    {"problem": "...", "solution": "... $\\\\boxed{3}$.", "answer": "3",
     "subject": "Precalculus", "level": 2, "unique_id": "test/precalculus/807.json"}

Reading: problem = ``problem``; steps = ``solution`` split into paragraphs (by blank lines) if
it has a blank line, else into lines (a one-line solution is one step), with
:func:`prmkit.steps.split_steps`. reference = ``answer`` (none when the field is absent, as in
the original MATH release). The solution is the reference solution, so every step is labelled
1, answer = reference and is_correct = true (when there is a reference). Id: ``unique_id`` if
present, else ``id``, else ``math-N`` (N = line number - 1). ``level``, ``subject``,
``unique_id`` and any other field go to ``meta``.

Writing: ``solution`` = the steps joined by blank lines; ``answer`` = the record's answer (or
reference); ``level``, ``subject`` and ``unique_id`` from ``meta`` when present.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator

from prmkit.errors import RecordError
from prmkit.formats.common import build, extras, get
from prmkit.records import Record, iter_jsonl, write_jsonl
from prmkit.steps import join_steps, split_steps

if TYPE_CHECKING:
    from prmkit.formats.options import ConvertOptions

HELP = ("MATH / MATH-500, JSONL: problem, solution, answer, and level, subject, unique_id "
        "(kept in meta). Steps = the solution's paragraphs (blank-line separated) if it has "
        "any, else its lines. reference = answer; a reference solution, so every label is 1. "
        "Id = unique_id if present. Write: solution = steps joined by blank lines.")


def read(path: str, options: ConvertOptions) -> Iterator[Record]:
    for lineno, obj in iter_jsonl(path):
        try:
            yield _record(obj, path, lineno)
        except RecordError as e:
            raise e.at(path, lineno) from None


def solution_steps(solution: str) -> list[str]:
    """The steps of a written solution: paragraphs if there is a blank line, else lines."""
    text = solution.strip()
    rule = "blank-lines" if "\n\n" in text else "lines"
    return [s.strip() for s in split_steps(text, rule)]


def _record(obj: Any, path: str, lineno: int) -> Record:
    problem = get(obj, "problem", str)
    steps = solution_steps(get(obj, "solution", str))
    if not steps:
        raise RecordError("empty: a solution needs at least one step", field="solution")
    reference = get(obj, "answer", (str, int, float), required=False)
    reference = str(reference) if reference is not None else None
    used = {"problem", "solution", "answer"}
    rec_id = get(obj, "unique_id", (str, int), required=False)
    if rec_id is None:
        rec_id = get(obj, "id", (str, int), required=False)
        used.add("id")
    return build(path, lineno, {"steps": "solution", "reference": "answer"},
                 id=str(rec_id) if rec_id is not None else f"math-{lineno - 1}",
                 problem=problem, steps=steps, labels=[1.0] * len(steps),
                 answer=reference, reference=reference,
                 is_correct=True if reference is not None else None,
                 meta=extras(obj, used))


def write(path: str, records: Iterable[Record], options: ConvertOptions) -> int:
    def rows() -> Iterator[dict[str, Any]]:
        for rec in records:
            row: dict[str, Any] = {"problem": rec.problem}
            for name in ("level", "subject"):
                if name in rec.meta:
                    row[name] = rec.meta[name]
            row["solution"] = join_steps(rec.steps, "blank-lines")
            row["unique_id"] = rec.meta.get("unique_id", rec.id)
            final = rec.answer if rec.answer is not None else rec.reference
            if final is not None:
                row["answer"] = final
            yield row
    return write_jsonl(path, rows())
