"""ProcessBench: model solutions with the index of the first wrong step.

Source: Zheng et al., "ProcessBench: Identifying Process Errors in Mathematical Reasoning"
(2024), github.com/QwenLM/ProcessBench, HF ``Qwen/ProcessBench``.

A JSON list as the benchmark ships it (``dataset/gsm8k.json``, indent 2), or JSONL::

    {"id": "gsm8k-0", "generator": "Qwen2-7B-Instruct", "problem": "...",
     "steps": ["...", "..."], "final_answer_correct": false, "label": 1}

``label`` is the 0-based index of the first wrong step, -1 when every step is correct.

Reading: ``first_error = label``; ``labels`` follow ProcessBench's rule
(:func:`prmkit.records.labels_from_first_error`): steps before the first error 1, the error 0,
later steps unlabelled (null), because the benchmark does not judge them.
``is_correct = final_answer_correct``; ``generator`` and any other field go to ``meta``.

Writing: a JSON list (indent 2, byte-identical to the original for records read from it) when
the output ends in ``.json``, else JSONL. ``label`` is ``first_error``, or derived from the
labels (the first label below ``soft_threshold``); a record whose first error is unknown (an
unlabelled step before any wrong one) is an error.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from prmkit.errors import RecordError
from prmkit.formats.common import build, extras, get, string_list, where_in_list
from prmkit.records import (Record, atomic_output, first_error_from_labels, iter_jsonl,
                            labels_from_first_error, write_jsonl)
from prmkit.tables import is_json_list, iter_json_list

if TYPE_CHECKING:
    from prmkit.formats.options import ConvertOptions

HELP = ("ProcessBench, a JSON list (as shipped) or JSONL: id, generator, problem, steps, "
        "final_answer_correct, label (0-based index of the first wrong step, -1 = all "
        "correct). first_error = label; labels: steps before it 1, the error 0, later steps "
        "null. Write: a JSON list if the output ends in .json, else JSONL; label = first_error "
        "or the first label below --soft-threshold.")

_USED = {"id", "problem", "steps", "label", "final_answer_correct"}
_RENAME = {"first_error": "label", "is_correct": "final_answer_correct"}


def read(path: str, options: ConvertOptions) -> Iterator[Record]:
    if is_json_list(path):
        for index, obj in iter_json_list(path):
            where = where_in_list(path, index, obj)
            try:
                yield _record(obj, where, None, f"processbench-{index}")
            except RecordError as e:
                raise e.at(where) from None
    else:
        for lineno, obj in iter_jsonl(path):
            try:
                yield _record(obj, path, lineno, f"processbench-{lineno - 1}")
            except RecordError as e:
                raise e.at(path, lineno) from None


def _record(obj: Any, where: str, line: int | None, default_id: str) -> Record:
    rec_id = get(obj, "id", (str, int), required=False)
    problem = get(obj, "problem", str)
    steps = string_list(obj, "steps")
    label = get(obj, "label", int)
    if not steps:
        raise RecordError("empty list: a solution needs at least one step", field="steps")
    if not -1 <= label < len(steps):
        raise RecordError(f"{label} is out of range for {len(steps)} steps (-1 = all correct)",
                          field="label")
    return build(where, line, _RENAME,
                 id=str(rec_id) if rec_id is not None else default_id,
                 problem=problem, steps=steps, first_error=label,
                 labels=labels_from_first_error(len(steps), label),
                 is_correct=get(obj, "final_answer_correct", bool, required=False),
                 meta=extras(obj, _USED))


def _row(rec: Record, path: str, threshold: float) -> dict[str, Any]:
    label = rec.first_error
    if label is None and rec.labels is not None:
        label = first_error_from_labels(rec.labels, threshold)
    if label is None:
        raise RecordError("the first wrong step is unknown (no first_error, and an unlabelled "
                          "step comes before any wrong one)", f"{path}: record {rec.id!r}",
                          None, "first_error")
    row: dict[str, Any] = {"id": rec.id}
    if "generator" in rec.meta:
        row["generator"] = rec.meta["generator"]
    row["problem"] = rec.problem
    row["steps"] = rec.steps
    if rec.is_correct is not None:
        row["final_answer_correct"] = rec.is_correct
    row["label"] = label
    return row


def write(path: str, records: Iterable[Record], options: ConvertOptions) -> int:
    rows = (_row(rec, path, options.soft_threshold) for rec in records)
    if not path.endswith(".json"):
        return write_jsonl(path, rows)
    data = list(rows)
    with atomic_output(path) as f:
        f.write(json.dumps(data, indent=2, ensure_ascii=False))
    return len(data)
