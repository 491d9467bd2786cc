"""PRMBench: solutions with errors injected at known steps, one file per error category.

Source: Song et al., "PRMBench: A Fine-grained and Challenging Benchmark for Process-Level
Reward Models" (2025, arXiv:2501.03124), github.com/ssmisya/PRMBench
(``mr_eval/tasks/prmtest_classified/data/*.jsonl``).

JSONL, one modified solution per line::

    {"idx": "prm_train_p1_0", "question": "...", "original_question": "...",
     "modified_question": "...", "original_process": ["..."], "modified_process": ["..."],
     "modified_steps": [1, 2], "error_steps": [1], "reason": "...",
     "classification": "step_contradiction"}

``error_steps`` and ``modified_steps`` are 1-based step numbers.

Reading: the steps are ``modified_process`` only, never ``original_process`` (that is the
correct solution the errors were injected into; it is kept in ``meta`` so nothing is lost,
but it never becomes steps). problem = ``modified_question`` (``question`` if absent).
``first_error = min(error_steps) - 1`` (-1 when there are none). Labels: every listed error
step 0, steps before the first error 1, the other steps after the first error unlabelled
(null), or ``prmbench_later_steps`` if set (PRMBench's own evaluation counts them as correct:
use 1 to match it). Id: ``{classification}-{idx}``, because the same ``idx`` appears in every
category's file. ``meta``: idx, classification, error_steps, modified_steps, reason,
original_question, original_process and any other field.

Some source records list error steps past the end of ``modified_process`` (57 of the 3,203
records in the PRM800K-train part). They are kept in ``meta.error_steps`` and also listed in
``meta.error_steps_out_of_range``; they label no step. When none is in range, the first
error is unknown (``first_error`` null) and every step is labelled 1 (all come before it).

Writing: the fields are rebuilt from the record and its ``meta``: ``modified_process`` = the
steps, ``error_steps`` = every step labelled below ``soft_threshold`` (1-based) plus the
out-of-range ones kept in meta, ``question``/``modified_question`` = the problem.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Iterator

from prmkit.errors import RecordError
from prmkit.formats.common import build, extras, get, string_list
from prmkit.records import Record, kind_name, iter_jsonl, write_jsonl

if TYPE_CHECKING:
    from prmkit.formats.options import ConvertOptions

HELP = ("PRMBench, JSONL: idx, question, modified_question, modified_process (the steps; "
        "original_process is never used as steps, only kept in meta), error_steps and "
        "modified_steps (1-based), reason, classification. Labels: error steps 0, steps before "
        "the first error 1, other later steps null (--prmbench-later-steps 1 to match "
        "PRMBench's evaluation). Id: classification-idx.")

_USED = {"modified_question", "modified_process"}


def read(path: str, options: ConvertOptions) -> Iterator[Record]:
    for lineno, obj in iter_jsonl(path):
        try:
            yield _record(obj, path, lineno, options.prmbench_later_steps)
        except RecordError as e:
            raise e.at(path, lineno) from None


def _steps_list(obj: Any, name: str) -> list[int]:
    values = get(obj, name, list, required=False) or []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int):
            raise RecordError(f"entry {i} is {kind_name(v)}, expected a step number", field=name)
    return values


def _record(obj: Any, path: str, lineno: int, later: float | None) -> Record:
    idx = get(obj, "idx", (str, int), required=False)
    problem = get(obj, "modified_question", str, required=False)
    if problem is None:
        problem = get(obj, "question", str)
    steps = string_list(obj, "modified_process")
    error_steps = _steps_list(obj, "error_steps")
    _steps_list(obj, "modified_steps")
    classification = get(obj, "classification", str, required=False)
    n = len(steps)
    inside = sorted({e - 1 for e in error_steps if 1 <= e <= n})
    outside = [e for e in error_steps if not 1 <= e <= n]
    if not error_steps:
        first_error: int | None = -1
    else:
        first_error = inside[0] if inside else None
    end = inside[0] if inside else n
    labels: list[float | None] = [1.0] * end + [later] * (n - end)
    for i in inside:
        labels[i] = 0.0
    meta = extras(obj, _USED)
    if outside:
        meta["error_steps_out_of_range"] = outside
    rec_id = f"{classification}-{idx}" if classification and idx is not None else (
        str(idx) if idx is not None else f"prmbench-{lineno - 1}")
    field = "modified_question" if "modified_question" in obj else "question"
    return build(path, lineno, {"problem": field, "steps": "modified_process"},
                 id=rec_id, problem=problem, steps=steps, labels=labels,
                 first_error=first_error, meta=meta)


def _row(rec: Record, threshold: float) -> dict[str, Any]:
    meta = rec.meta
    labels = rec.labels_or_first_error() or [None] * len(rec.steps)
    errors = [i + 1 for i, v in enumerate(labels) if v is not None and v < threshold]
    errors += [e for e in meta.get("error_steps_out_of_range", []) if e not in errors]
    if sorted(meta.get("error_steps", [])) == sorted(errors):
        errors = meta["error_steps"]  # the source's own order
    classification = meta.get("classification")
    idx = meta.get("idx")
    if idx is None:
        prefix = f"{classification}-"
        idx = rec.id[len(prefix):] if classification and rec.id.startswith(prefix) else rec.id
    row = {
        "original_question": meta.get("original_question", rec.problem),
        "modified_question": rec.problem,
        "original_process": meta.get("original_process", []),
        "modified_process": rec.steps,
        "modified_steps": meta.get("modified_steps", []),
        "error_steps": errors,
        "reason": meta.get("reason", ""),
        "idx": idx,
        "question": meta.get("question", rec.problem),
        "classification": classification,
    }
    row.update({k: v for k, v in meta.items() if k not in row and k != "error_steps_out_of_range"})
    return row


def write(path: str, records: Iterable[Record], options: ConvertOptions) -> int:
    return write_jsonl(path, (_row(rec, options.soft_threshold) for rec in records))
