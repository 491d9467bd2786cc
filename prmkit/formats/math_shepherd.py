"""Math-Shepherd tagged text, and the OpenRLHF variant with label lists.

Source: Wang et al., "Math-Shepherd: Verify and Reinforce LLMs Step-by-step without Human
Annotations" (2023), dataset ``peiyi9979/Math-Shepherd``; OpenRLHF's ``ProcessRewardDataset``
(``--placeholder_token ки --reward_tokens + -``). JSONL, one solution per line::

    {"input": "QUESTION Step 1: ... ки\\nStep 2: ... The answer is: 13520 ки",
     "label": "QUESTION Step 1: ... +\\nStep 2: ... The answer is: 13520 -",
     "task": "GSM8K"}

``label`` is ``input`` with each tag ``ки`` replaced by ``+`` or ``-``; in the OpenRLHF variant
``label`` (or ``value``) is a list with one ``"+"``/``"-"`` or float in [0, 1] per tag.

Reading: one step per tag, stripped, keeping its ``Step k:`` prefix (so writing the record back
gives the original bytes); the problem is cut from the first chunk at its last ``Step 1:``, else
at its first line (a one-line chunk without a marker is an error). ``+`` -> 1.0, ``-`` -> 0.0,
floats kept. ``answer``: what follows ``The answer is:`` in the last step. Other fields go to
``meta``. Id: ``id``, else ``math-shepherd-N`` (N = line number - 1).

Writing: ``input = problem + " " + " ки\\n".join(steps) + " ки"``, a ``Step k:`` marker added to a
step without one; labels as ``math_shepherd_labels`` says: ``text`` (``label >= soft_threshold``
-> ``+``), ``tokens`` (a list of ``+``/``-``) or ``floats``. An unlabelled step is an error.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from prmkit.errors import RecordError
from prmkit.formats.common import build, extras, get, hard_label
from prmkit.records import Record, kind_name, iter_jsonl, write_jsonl

if TYPE_CHECKING:
    from prmkit.formats.options import ConvertOptions

HELP = ("Math-Shepherd / OpenRLHF, JSONL: input (question, then steps each ending in the tag "
        "' ки', one per line), label (the same text with each tag replaced by + or -, or a list "
        "with one '+'/'-' or float per tag), task. Steps keep their 'Step k:' prefix; the "
        "question is the text before 'Step 1:' (else the first line). + is 1, - is 0, in tag "
        "order. Write: --math-shepherd-labels text|tokens|floats; + when label >= "
        "--soft-threshold.")

TAG = "ки"
_STEP1 = "Step 1:"
_ANSWER = re.compile(r"The answer is:\s*(.+?)\s*$", re.DOTALL)
_HARD = {"+": 1.0, "-": 0.0}
_AUTO_ID = re.compile(r"math-shepherd-\d+")


def read(path: str, options: ConvertOptions) -> Iterator[Record]:
    for lineno, obj in iter_jsonl(path):
        try:
            yield _record(obj, lineno, path)
        except RecordError as e:
            raise e.at(path, lineno) from None


def _record(obj: Any, lineno: int, path: str) -> Record:
    text = get(obj, "input", str)
    label_key = "label" if "label" in obj or "value" not in obj else "value"
    label = get(obj, label_key, (str, list))
    rec_id = get(obj, "id", (str, int), required=False)
    problem, steps = split_input(text)
    if isinstance(label, str):
        labels = labels_from_text(text, label)
    else:
        labels = labels_from_list(label, len(steps), label_key)
    match = _ANSWER.search(steps[-1])
    meta = extras(obj, {"input", label_key, "id"})
    return build(path, lineno, {"problem": "input", "steps": "input", "labels": label_key},
                 id=str(rec_id) if rec_id is not None else f"math-shepherd-{lineno - 1}",
                 problem=problem, steps=steps, labels=labels,
                 answer=match.group(1) if match else None, meta=meta)


def split_input(text: str) -> tuple[str, list[str]]:
    """(problem, steps) of a tagged ``input``; one step per tag, steps keep ``Step k:``."""
    chunks = text.split(TAG)
    if len(chunks) == 1:
        raise RecordError(f"no step tag {TAG!r} in the text", field="input")
    if chunks[-1].strip():
        raise RecordError(f"text after the last tag {TAG!r}: {chunks[-1].strip()[:40]!r}",
                          field="input")
    first = chunks[0]
    at = first.rfind(_STEP1)
    if at >= 0:
        problem, step1 = first[:at], first[at:]
    else:
        head = first.strip()
        if "\n" not in head:
            raise RecordError(f"cannot tell the question from step 1: no {_STEP1!r} marker and "
                              f"no line break before the first tag", field="input")
        problem, step1 = head.split("\n", 1)
    steps = [step1.strip()] + [c.strip() for c in chunks[1:-1]]
    for i, step in enumerate(steps):
        if not step:
            raise RecordError(f"step {i} (before tag {i + 1}) is empty", field="input")
    return problem.strip(), steps


def labels_from_text(text: str, label: str) -> list[float]:
    """The ``+``/``-`` that ``label`` has where ``text`` has a tag, in order."""
    chunks = text.split(TAG)
    n_tags = len(chunks) - 1
    if len(label) != len(text) - n_tags * (len(TAG) - 1):
        raise RecordError(f"is {len(label)} characters long; the input with each tag replaced "
                          f"by one character would be {len(text) - n_tags * (len(TAG) - 1)}",
                          field="label")
    labels, pos = [], 0
    for i, chunk in enumerate(chunks):
        if label[pos:pos + len(chunk)] != chunk:
            raise RecordError(f"differs from the input outside the tags (near step {i})",
                              field="label")
        pos += len(chunk)
        if i < n_tags:
            mark = label[pos]
            if mark not in _HARD:
                raise RecordError(f"has {mark!r} at tag {i + 1}, expected '+' or '-'",
                                  field="label")
            labels.append(_HARD[mark])
            pos += 1
    return labels


def labels_from_list(values: list[Any], n_steps: int, key: str) -> list[float | None]:
    """OpenRLHF labels: one ``+``/``-`` or float (or null) per tag."""
    if len(values) != n_steps:
        raise RecordError(f"has {len(values)} entries but the input has {n_steps} tags",
                          field=key)
    labels: list[float | None] = []
    for i, v in enumerate(values):
        if isinstance(v, str) and v in _HARD:
            labels.append(_HARD[v])
        elif v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)):
            labels.append(None if v is None else float(v))
        else:
            raise RecordError(f"entry {i} is {kind_name(v)} {v!r}, expected '+', '-' or a number "
                              f"in [0, 1]", field=key)
    return labels


def join_input(problem: str, steps: list[str], marks: list[str] | None = None) -> str:
    """The tagged text: ``marks[i]`` (``+``/``-``) in place of each tag when given."""
    ends = marks if marks is not None else [TAG] * len(steps)
    body = "\n".join(f"{_numbered(step, k)} {end}"
                     for k, (step, end) in enumerate(zip(steps, ends)))
    return f"{problem} {body}"


def _numbered(step: str, k: int) -> str:
    marker = f"Step {k + 1}:"
    return step if step.startswith(marker) else f"{marker} {step}"


def write(path: str, records: Iterable[Record], options: ConvertOptions) -> int:
    style = options.math_shepherd_labels

    def rows() -> Iterator[dict[str, Any]]:
        for rec in records:
            for where, text in (("problem", rec.problem), *((f"step {i}", s)
                                                           for i, s in enumerate(rec.steps))):
                if TAG in text:
                    raise RecordError(f"the {where} contains the tag {TAG!r}",
                                      f"{path}: record {rec.id!r}", None,
                                      "problem" if where == "problem" else "steps")
            labels = rec.labels_or_first_error()
            if labels is None:
                raise RecordError("the record has no labels and no first_error",
                                  f"{path}: record {rec.id!r}", None, "labels")
            row: dict[str, Any] = {"input": join_input(rec.problem, rec.steps)}
            # hard_label also rejects an unlabelled step, which no style can hold
            marks = ["+" if hard_label(v, options.soft_threshold, path, rec.id,
                                       "Math-Shepherd", i) else "-"
                     for i, v in enumerate(labels)]
            if style == "text":
                row["label"] = join_input(rec.problem, rec.steps, marks)
            else:
                row["label"] = marks if style == "tokens" else list(labels)
            if "task" in rec.meta:
                row["task"] = rec.meta["task"]
            if not _AUTO_ID.fullmatch(rec.id):  # an id the reader made up is not written
                row["id"] = rec.id
            yield row
    return write_jsonl(path, rows())
