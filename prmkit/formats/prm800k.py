"""PRM800K: human step labels from "Let's Verify Step by Step".

Source: Lightman et al., "Let's Verify Step by Step" (2023), github.com/openai/prm800k
(``prm800k/data/phase{1,2}_{train,test}.jsonl``). :func:`read` tells the two layouts apart by the
columns: the one-row-per-step parquet (a table without ``label``) is
:mod:`prmkit.formats.prm800k_stepwise`; the raw nested JSONL (or the same rows as a table) is
read here, one labelling session per line::

    {"labeler": "...", "timestamp": "...", "generation": null,
     "is_quality_control_question": false, "is_initial_screening_question": false,
     "question": {"problem": "...", "ground_truth_answer": "29"},
     "label": {"steps": [{"completions": [{"text": "...", "rating": 1, "flagged": false}],
                          "human_completion": null, "chosen_completion": 0}, ...],
               "total_time": 293250, "finish_reason": "solution"}}

The record is the path the labeller followed: each step's chosen completion, else the human
one. At a step with neither, labelling stopped: its first completion rated -1 becomes the final,
wrong step, else the path ends before it; a step with no completions ends it too. Steps after
the end must be empty. A session with no step is an error, or skipped with a warning under
``skip_empty``. With ``prm800k_alternatives``, also one record per rated completion off the
path (the path up to it, then it; id ``ID-s{step}c{completion}``, ``meta.alternative``), as
TRL's ``trl-lib/prm800k``; in phase 1 the wrong steps are almost all among these.

Labels: -1 -> 0.0, +1 -> 1.0, 0 -> ``prm800k_neutral`` (default 1.0, as Let's Verify), unrated
(human) -> null. reference = ``ground_truth_answer``; answer = the text after ``# Answer`` in
the last step. ``meta``: the labelling session's other fields. Id: ``id``, else ``prm800k-N`` (N = line
number - 1). Writing: the raw layout, one completion per step, rating 1 for a label >=
``soft_threshold``, -1 below, null unlabelled.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from prmkit.errors import PrmkitError, RecordError
from prmkit.formats import prm800k_stepwise
from prmkit.formats.common import build, extras, get, warn_skipped
from prmkit.tables import column_names, is_table
from prmkit.records import Record, iter_jsonl, write_jsonl

if TYPE_CHECKING:
    from prmkit.formats.options import ConvertOptions

HELP = ("PRM800K, raw nested JSONL (question{problem, ground_truth_answer}, label{steps["
        "{completions[{text, rating}], human_completion, chosen_completion}], finish_reason}) "
        "or the one-row-per-step parquet (instruction, responses, next_response, "
        "is_preferred_response, rating; needs prmkit[data]). One record per labelling session: "
        "the chosen (preferred) completion at each step, the human one when none was chosen, "
        "and where labelling stopped the first -1 completion as the final wrong step. Ratings: "
        "-1 -> 0, +1 -> 1, 0 -> --prm800k-neutral (default 1), human -> null. Phase-1 paths "
        "hold almost no wrong step: --prm800k-alternatives adds one record per rated "
        "alternative (path prefix + that step). Write: raw JSONL.")

_ANSWER = re.compile(r"#\s*Answer\s*\n(.*)$", re.DOTALL)
_AUTO_ID = re.compile(r"prm800k-\d+")
_META = ("labeler", "timestamp", "generation", "is_quality_control_question",
         "is_initial_screening_question")
_QUESTION = ("ground_truth_solution", "pre_generated_steps", "pre_generated_answer",
             "pre_generated_verifier_score")


def read(path: str, options: ConvertOptions) -> Iterator[Record]:
    if is_table(path) and "label" not in column_names(path):
        return prm800k_stepwise.read(path, options)  # the one-row-per-step layout
    return _read_raw(path, options)


def rating_label(rating: Any, neutral: float | None, field: str) -> float | None:
    """A PRM800K rating as a label: -1 -> 0, +1 -> 1, 0 -> ``neutral``, null -> null."""
    if rating is None:
        return None
    if isinstance(rating, bool) or rating not in (-1, 0, 1):
        raise RecordError(f"rating {rating!r}, expected -1, 0, 1 or null", field=field)
    return {-1: 0.0, 1: 1.0}.get(int(rating), neutral)


def _read_raw(path: str, options: ConvertOptions) -> Iterator[Record]:
    skipped: list[str] = []
    for lineno, obj in iter_jsonl(path):
        try:
            records = _records(obj, path, lineno, options)
        except RecordError as e:
            raise e.at(path, lineno) from None
        if not records or "alternative" in records[0].meta:  # the path itself was left out
            skipped.append(f"line {lineno}")
        yield from records
    warn_skipped(path, "labelling sessions", skipped)


Step = tuple[str, "float | None"]  # (text, label)


def _completion(obj: Any, field: str, neutral: float | None) -> Step:
    text = get(obj, "text", str, what=f"{field}.")
    return text, rating_label(obj.get("rating"), neutral, f"{field}.rating")


def solution_path(steps: list[Any], neutral: float | None
                  ) -> tuple[list[Step], list[tuple[int, int, Step]]]:
    """The path a labeller followed (see the module docstring), and the rated completions off
    it as ``(step index, completion index, step)``."""
    path: list[Step] = []
    alternatives: list[tuple[int, int, Step]] = []
    for i, step in enumerate(steps):
        field = f"label.steps[{i}]"
        completions = get(step, "completions", list, required=False, what=f"{field}.") or []
        chosen = get(step, "chosen_completion", int, required=False, what=f"{field}.")
        human = get(step, "human_completion", dict, required=False, what=f"{field}.")
        stop = chosen is None and human is None
        if chosen is not None and not 0 <= chosen < len(completions):
            raise RecordError(f"{chosen} is out of range for {len(completions)} completions",
                              field=f"{field}.chosen_completion")
        if stop:  # labelling stopped here: keep the error the labeller found, then end
            wrong = [j for j, c in enumerate(completions)
                     if isinstance(c, dict) and c.get("rating") == -1]
            chosen = wrong[0] if wrong else None
        for j, c in enumerate(completions):
            if j != chosen and (not isinstance(c, dict) or c.get("rating") is not None):
                alternatives.append((i, j, _completion(c, f"{field}.completions[{j}]", neutral)))
        if chosen is not None:
            path.append(_completion(completions[chosen], f"{field}.completions[{chosen}]",
                                    neutral))
        elif human is not None:
            path.append(_completion(human, f"{field}.human_completion", neutral))
        if stop:
            _check_nothing_after(steps, i)
            break
    return path, alternatives


def _check_nothing_after(steps: list[Any], stop: int) -> None:
    for j in range(stop + 1, len(steps)):
        later = steps[j]
        if isinstance(later, dict) and (later.get("completions") or later.get("human_completion")):
            raise RecordError(f"has completions, but labelling stopped at step {stop} (no "
                              f"chosen or human completion there)", field=f"label.steps[{j}]")


def _records(obj: Any, path: str, lineno: int, options: ConvertOptions) -> list[Record]:
    """The labelling session's record, then (with ``prm800k_alternatives``) one per rated alternative."""
    question = get(obj, "question", dict)
    problem = get(question, "problem", str, what="question.")
    reference = get(question, "ground_truth_answer", (str, int, float), required=False,
                    what="question.")
    label = get(obj, "label", dict)
    steps, alternatives = solution_path(get(label, "steps", list, what="label."),
                                        options.prm800k_neutral)
    if not steps and not options.skip_empty:
        raise RecordError("no step on the solution path (nothing chosen, written or rated -1 "
                          "at the first step); use the option skip_empty to leave such "
                          "sessions out", field="label.steps")
    rec_id = get(obj, "id", (str, int), required=False)
    base = str(rec_id) if rec_id is not None else f"prm800k-{lineno - 1}"
    meta = extras(obj, {"question", "label", "id"})
    meta["finish_reason"] = label.get("finish_reason")
    meta["total_time"] = label.get("total_time")
    meta.update(extras(question, {"problem", "ground_truth_answer"}))
    paths = [(base, steps, meta)] if steps else []
    if options.prm800k_alternatives:
        paths += [(f"{base}-s{i}c{j}", steps[:i] + [alt], {**meta, "alternative": [i, j]})
                  for i, j, alt in alternatives]
    records = []
    for rid, chain, rmeta in paths:
        found = _ANSWER.search(chain[-1][0])
        records.append(build(path, lineno, {"problem": "question.problem", "steps": "label.steps",
                                            "reference": "question.ground_truth_answer"},
                             id=rid, problem=problem, steps=[t for t, _ in chain],
                             labels=[v for _, v in chain],
                             reference=str(reference) if reference is not None else None,
                             answer=found.group(1).strip() if found else None, meta=rmeta))
    return records


def _row(rec: Record, threshold: float) -> dict[str, Any]:
    labels = rec.labels_or_first_error() or [None] * len(rec.steps)
    steps = [{"completions": [{"text": text,
                               "rating": None if v is None else (1 if v >= threshold else -1),
                               "flagged": False}],
              "human_completion": None, "chosen_completion": 0}
             for text, v in zip(rec.steps, labels)]
    finish = rec.meta.get("finish_reason")
    if finish is None:
        wrong = any(v is not None and v < threshold for v in labels)
        finish = "found_error" if wrong else "solution"
    question = {"problem": rec.problem, "ground_truth_answer": rec.reference}
    question.update({k: rec.meta[k] for k in _QUESTION if k in rec.meta})
    row: dict[str, Any] = {name: rec.meta.get(name, False if name.startswith("is_") else None)
                           for name in _META}
    row["question"] = question
    row["label"] = {"steps": steps, "total_time": rec.meta.get("total_time"),
                    "finish_reason": finish}
    if not _AUTO_ID.fullmatch(rec.id):  # an id the reader made up is not written
        row["id"] = rec.id
    return row


def write(path: str, records: Iterable[Record], options: ConvertOptions) -> int:
    if path.endswith(".parquet"):
        raise PrmkitError(f"{path}: writing the one-row-per-step parquet layout is not "
                          f"supported; write the raw nested layout to a .jsonl file")
    return write_jsonl(path, (_row(rec, options.soft_threshold) for rec in records))
